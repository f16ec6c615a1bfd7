"""On a host where no Docker daemon answers, the built-in suite still runs: its task images become bubblewrap
tree images, the agent's sandbox and the grading sandbox are bubblewrap ones, and grading is as strict."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys

import pytest
from suite_diffs import FORCE_PASS_HOOK, make_diff

from legorl_jax.config import VerifierConfig
from legorl_jax.sandbox import daemon
from legorl_jax.tasks.agent_sandbox import agent_sandbox
from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_suite, load_builtin_task
from legorl_jax.tasks.protection import hidden_test_paths
from legorl_jax.tasks.report import VerifierError
from legorl_jax.tasks.task_image import ensure_task_image
from legorl_jax.tasks.verifier import grade_many

SAMPLE = "csvlet-embedded-quote-roundtrip"
SUITE_TASKS = sorted(d.name for d in SUITE_DIR.iterdir() if d.is_dir() and not d.name.startswith("."))


@pytest.fixture
def no_docker(monkeypatch, tmp_path) -> str:
    """DOCKER_HOST pointing at a socket nobody serves; returns it."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this host (tools/system_setup.sh installs it)")
    host = f"unix://{tmp_path}/no-daemon.sock"
    monkeypatch.setenv("DOCKER_HOST", host)
    assert not daemon.available()
    return host


async def test_without_docker_a_builtin_task_is_prepared_and_graded_on_bubblewrap(no_docker):
    task = load_builtin_task(SUITE_DIR / SAMPLE)
    assert await asyncio.to_thread(ensure_task_image, task) == task.image
    async with agent_sandbox(task) as (sandbox, workspace):
        assert sandbox.backend == "bwrap" and workspace.base_commit == task.base_commit
        assert (await sandbox.exec(["git", "rev-list", "--all", "--count"])).stdout.strip() == "1"
        for path in hidden_test_paths(task.test_patch):
            if not (SUITE_DIR / SAMPLE / "repo" / path).exists():
                assert (await sandbox.exec(["test", "-e", path])).exit_code != 0, path
        await sandbox.write_file("/tmp/gold.patch", task.patch)
        assert (await sandbox.exec(["git", "apply", "/tmp/gold.patch"])).exit_code == 0
        agent_diff = await sandbox.diff()
    hack = make_diff(task, lambda repo: (repo / "conftest.py").write_text(FORCE_PASS_HOOK))
    fixed, empty, hacked = await grade_many([(task, agent_diff), (task, ""), (task, hack)])
    assert fixed.reward == 1.0 and fixed.tests == {t: "passed" for t in task.tests}, fixed.to_dict()
    assert empty.reward == 0.0 and set(empty.failed_tests) == set(task.FAIL_TO_PASS)
    assert hacked.reward == 0.0 and [c.reason for c in hacked.removed_changes] == ["test file"]


def test_without_docker_the_cli_grades_the_gold_patch_of_a_builtin_task(no_docker):
    env = {**os.environ, "DOCKER_HOST": no_docker}
    argv = [
        sys.executable,
        "-m",
        "legorl_jax.tasks",
        "grade",
        "--suite",
        "builtin",
        "--task",
        SAMPLE,
        "--gold",
        "--json",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert '"reward": 1.0' in out.stdout


@pytest.fixture(scope="module")
def bwrap_gold_and_empty():
    """The gold patch and the empty diff of every task, graded in one batch with no Docker daemon in sight."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this host (tools/system_setup.sh installs it)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_HOST", "unix:///nonexistent/legorl-no-daemon.sock")
        tasks = load_builtin_suite()
        for task in tasks:
            ensure_task_image(task)
        pairs = [(t, t.patch) for t in tasks] + [(t, "") for t in tasks]
        results = asyncio.run(grade_many(pairs, config=VerifierConfig(backend="auto", concurrency=4)))
    return {
        (task.instance_id, "gold" if diff else "empty"): r
        for (task, diff), r in zip(pairs, results, strict=True)
    }


@pytest.mark.parametrize("task_id", SUITE_TASKS)
def test_without_docker_the_gold_patch_gets_1_and_an_empty_diff_0(bwrap_gold_and_empty, task_id):
    gold, empty = bwrap_gold_and_empty[(task_id, "gold")], bwrap_gold_and_empty[(task_id, "empty")]
    assert not isinstance(gold, VerifierError) and not isinstance(empty, VerifierError), (gold, empty)
    assert gold.reward == 1.0 and gold.tampering == (), (gold.failed_tests, gold.output[-2000:])
    assert empty.reward == 0.0 and empty.apply.status == "empty" and empty.tampering == ()
