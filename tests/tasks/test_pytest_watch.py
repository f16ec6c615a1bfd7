"""The watch plugin (`pytest_watch`) run by the host's pytest through the verifier's own bootstrap
(`pytest_argv`): module code of a test file stands in for the agent's package, imported during collection.
Wrapping any watched function is caught and named; importing pytest alone is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from legorl_jax.tasks.verifier import pytest_argv, swebench_watched_command, watch_problems

TESTS = """
import pytest


def test_passes():
    assert 1 + 1 == 2


def test_fails():
    assert 1 + 1 == 3
"""

# (watched name, module code that wraps it, keeping it working)
WRAPS = {
    "hook pytest_runtest_logfinish implemented in": "import pytest, gc\n"
    "class _P:\n    @pytest.hookimpl(trylast=True)\n"
    "    def pytest_runtest_logfinish(self, nodeid, location):\n        pass\n"
    "_c = [o for o in gc.get_objects() if type(o).__name__ == 'Config'][0]\n"
    "_c.pluginmanager.register(_P())\n",
    "_pytest.runner.call_and_report": "import _pytest.runner as m\n_f = m.call_and_report\n"
    "m.call_and_report = lambda *a, **k: _f(*a, **k)\n",
    "_pytest.runner.runtestprotocol": "import _pytest.runner as m\n_f = m.runtestprotocol\n"
    "m.runtestprotocol = lambda *a, **k: _f(*a, **k)\n",
    "_pytest.runner.CallInfo.from_call": "import _pytest.runner as m\n_f = m.CallInfo.from_call.__func__\n"
    "m.CallInfo.from_call = classmethod(lambda cls, *a, **k: _f(cls, *a, **k))\n",
    "_pytest.reports.TestReport.from_item_and_call": "import _pytest.reports as m\n"
    "_f = m.TestReport.from_item_and_call.__func__\n"
    "m.TestReport.from_item_and_call = classmethod(lambda cls, *a, **k: _f(cls, *a, **k))\n",
    "_pytest.python.Function.runtest": "import _pytest.python as m\n_f = m.Function.runtest\n"
    "m.Function.runtest = lambda self: _f(self)\n",
    "_pytest.python.pytest_pyfunc_call": "import _pytest.python as m\n"
    "m.pytest_pyfunc_call.__code__ = (lambda pyfuncitem: None).__code__\n",
    "_pytest.skipping.pytest_runtest_makereport": "import _pytest.skipping as m\n"
    "m.pytest_runtest_makereport.__code__ = (lambda item, call: (yield)).__code__\n",
    "_pytest.outcomes.Failed": "import _pytest.outcomes as m\nm.Failed = type('F', (m.Failed,), {})\n",
    "_pytest.outcomes.Skipped": "import _pytest.outcomes as m\nm.Skipped = type('S', (m.Skipped,), {})\n",
    "pluggy._callers._multicall": "import pluggy._callers as m\n_f = m._multicall\n"
    "m._multicall = lambda *a, **k: _f(*a, **k)\n",
    "sys.settrace/sys.setprofile": "import sys\nsys.setprofile(lambda *a: None)\n",
    "hook pytest_runtest_makereport implemented in": "import pytest, sys\n"
    "class _P:\n    @pytest.hookimpl(hookwrapper=True)\n"
    "    def pytest_runtest_makereport(self, item, call):\n        yield\n"
    "import gc\n_c = [o for o in gc.get_objects() if type(o).__name__ == 'Config'][0]\n"
    "_c.pluginmanager.register(_P())\n",
}


def _run(tmp_path: Path, module_code: str, autoload: bool = False) -> tuple[str, str]:
    (tmp_path / "test_watched.py").write_text(module_code + TESTS)
    nonce = "0123456789abcdef"
    (tmp_path / "nonce").write_text(nonce)
    argv = pytest_argv(f"{sys.executable} -m pytest -q", str(tmp_path), str(tmp_path / "nonce"))
    run = subprocess.run(
        [*argv, "-rA", "-p", "no:cacheprovider", "test_watched.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"}
        if autoload
        else {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"},
    )
    assert not (tmp_path / "nonce").exists()  # read and deleted before any code of the repository ran
    return run.stdout, nonce


@pytest.mark.parametrize("name", sorted(WRAPS))
def test_wrapping_a_watched_function_is_tampering_naming_it(tmp_path, name):
    out, nonce = _run(tmp_path, WRAPS[name])
    problems = watch_problems(out, nonce, passed=0)
    assert any(name in p for p in problems), (problems, out[-3000:])


def test_a_package_that_only_imports_pytest_is_not_tampering(tmp_path):
    out, nonce = _run(tmp_path, "import pytest\nimport _pytest.runner\nimport pluggy\n")
    assert "1 failed, 1 passed" in out, out[-3000:]
    assert watch_problems(out, nonce, passed=1) == []


def test_plugins_pytest_loads_from_installed_entry_points_are_not_tampering(tmp_path):
    # As in a SWE-bench image, where autoload stays on: this environment's anyio and pytest-asyncio plugins
    # implement pytest_pyfunc_call, pytest-timeout pytest_runtest_protocol.
    out, nonce = _run(tmp_path, "", autoload=True)
    assert "1 failed, 1 passed" in out, out[-3000:]
    assert watch_problems(out, nonce, passed=1) == []


def test_a_hook_registered_by_package_code_is_tampering_with_autoload_on_too(tmp_path):
    name = "hook pytest_runtest_makereport implemented in"
    out, nonce = _run(tmp_path, WRAPS[name], autoload=True)
    assert any(name in p for p in watch_problems(out, nonce, passed=0)), out[-3000:]


def test_a_watch_that_fell_silent_is_tampering(tmp_path):
    out, nonce = _run(tmp_path, "")
    assert watch_problems(out, "f" * 16, passed=1) == [
        "watch: the watch plugin inside pytest fell silent before the end of the session"
    ]
    assert watch_problems(out, nonce, passed=5)  # fewer tests seen than the report says passed


@pytest.mark.parametrize(
    "command",
    [
        "source /opt/miniconda3/bin/activate && conda activate testbed && pytest -rA tests/test_a.py",
        "python3 -m pytest -rA -p no:cacheprovider tests/test_a.py",
        "export A=1\ncd /testbed && pytest --no-header -rA --tb=no tests/test_a.py::test_x",
    ],
)
def test_a_swebench_command_ending_in_one_plain_pytest_run_gets_the_watch(command):
    watched = swebench_watched_command(command, "/tmp/nonce")
    assert watched is not None and "<legorl-watch>" in watched and "/tmp/nonce" in watched
    assert watched.split("\n")[:-1] == command.split("\n")[:-1]  # set-up lines kept as they are


@pytest.mark.parametrize(
    "command",
    [
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 admin_views.tests",
        "PYTHONWARNINGS='ignore::UserWarning' bin/test -C --verbose sympy/core/tests/test_basic.py",
        "tox --current-env -epy39 -v -- tests/test_a.py",
        "pytest -rA tests/test_a.py | tee log",
        "pytest -rA tests/test_a.py; true",
        "rm -rf build && pytest -rA tests/test_a.py",
        "pytest -rA $(cat tests.txt)",
    ],
)
def test_any_other_swebench_command_runs_as_it_is(command):
    assert swebench_watched_command(command, "/tmp/nonce") is None


def test_a_swebench_pytest_script_command_runs_the_watch_under_pytests_own_interpreter(tmp_path):
    # The rewritten `pytest ...` run by bash as the verifier runs it, the host's pytest script on PATH.
    (tmp_path / "test_watched.py").write_text(WRAPS["_pytest.runner.call_and_report"] + TESTS)
    nonce = "0123456789abcdef"
    (tmp_path / "nonce").write_text(nonce)
    command = swebench_watched_command(
        f"cd {tmp_path} && pytest -rA -p no:cacheprovider test_watched.py", str(tmp_path / "nonce")
    )
    run = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )
    assert "1 failed, 1 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    problems = watch_problems(run.stdout, nonce, passed=1)
    assert any("_pytest.runner.call_and_report" in p for p in problems), problems
