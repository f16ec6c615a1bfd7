"""`tools/install_harness.py`: its installers are named by the harness registry, and it refuses misuse."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from legorl_jax.harness import HARNESSES

TOOL = pathlib.Path(__file__).parents[2] / "tools" / "install_harness.py"


def _tool():
    spec = importlib.util.spec_from_file_location("install_harness", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_installer_installs_a_registered_harness_and_only_builtin_needs_none():
    installers = _tool().INSTALLERS
    assert set(installers) <= set(HARNESSES)
    assert set(HARNESSES) - set(installers) == {"builtin"}


def test_an_unknown_harness_is_refused_before_anything_is_installed(capsys):
    with pytest.raises(SystemExit) as exited:
        _tool().main(["aider"])
    assert exited.value.code == 2
    assert "invalid choice: 'aider'" in capsys.readouterr().err


def test_a_source_for_another_harness_than_swe_agent_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        _tool().main(["opencode", "--source", str(tmp_path)])
    assert exited.value.code == 2
    assert "--source applies to swe_agent only" in capsys.readouterr().err
