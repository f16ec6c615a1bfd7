"""The install steps every harness installer shares (`legorl_jax.harness.install`), on temporary folders."""

from __future__ import annotations

import sys

import pytest

from legorl_jax.harness.install import clear, install_dir, install_record, run_command, write_record


def test_the_install_dir_follows_the_harness_home_else_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LEGORL_HARNESS_HOME", str(tmp_path / "home"))
    assert install_dir("swe_agent") == tmp_path / "home" / "swe_agent"
    monkeypatch.delenv("LEGORL_HARNESS_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert install_dir("openhands") == tmp_path / "cache" / "legorl_jax" / "harness" / "openhands"


def test_a_harness_is_installed_only_once_its_record_is_written(tmp_path):
    assert install_record(tmp_path) is None
    (tmp_path / "installed.json").write_text("{not json")
    assert install_record(tmp_path) is None
    write_record(tmp_path, {"version": "1.1.0"})
    assert install_record(tmp_path) == {"version": "1.1.0"}


def test_clearing_removes_what_an_earlier_install_left_and_keeps_the_rest(tmp_path):
    root = tmp_path / "harness"
    (root / "venv" / "bin").mkdir(parents=True)
    write_record(root, {"version": "old"})
    (root / "keep.txt").write_text("kept")
    clear(root, ("installed.json", "venv", "never-made"))
    assert sorted(p.name for p in root.iterdir()) == ["keep.txt"]
    clear(tmp_path / "fresh", ("installed.json",))
    assert (tmp_path / "fresh").is_dir()


def test_a_command_gives_its_output_and_a_failed_one_names_itself_and_its_output():
    assert run_command([sys.executable, "-c", "print('made')"], "making") == "made\n"
    failing = [sys.executable, "-c", "import sys; print('no wheel for cp311'); sys.exit(3)"]
    with pytest.raises(SystemExit, match=r"(?s)pip install of x failed \(exit 3\): .*no wheel for cp311"):
        run_command(failing, "pip install of x")
