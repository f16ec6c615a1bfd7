"""tools/profile_grade.py on a real bubblewrap grade: every command the verifier starts lands in its phase,
and the test process's CPU time is read back without disturbing the grade."""

import asyncio
import importlib.util
import pathlib
import shutil

import pytest

from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_task
from legorl_jax.tasks.task_image import ensure_task_image


@pytest.fixture(scope="module")
def tool():
    path = pathlib.Path(__file__).parents[2] / "tools" / "profile_grade.py"
    spec = importlib.util.spec_from_file_location("profile_grade", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed on this host")
def test_a_profiled_grade_puts_each_of_its_thirteen_commands_in_its_phase(tool):
    ensure_task_image(load_builtin_task(SUITE_DIR / "autocomplete-casefold-prefix"))
    (row,) = asyncio.run(tool.profile("autocomplete-casefold-prefix", "bwrap", 1))
    counts = {phase: n for phase, (n, _) in row["phases_ms"].items()}
    assert counts == {
        "start/close": 2,
        "set-up": 1,
        "apply": 5,
        "hidden": 2,
        "clear": 1,
        "plant": 1,
        "pytest": 1,
        "after": 2,
        "host": 0,
    }, row
    assert row["commands"] == 13 and row["pytest_cpu_ms"] > 0, row
