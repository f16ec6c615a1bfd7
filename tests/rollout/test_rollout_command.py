"""`python -m legorl_jax.rollout`: trials without training, a per-task table and the archive, as a user
runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rollout_fixtures import TASK_IDS

pytestmark = pytest.mark.docker
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}


def rollout(model_dir, runs_dir, *flags: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The command as a user types it, on the tiny model, archiving under `runs_dir`."""
    argv = [sys.executable, "-m", "legorl_jax.rollout", "--tasks", "builtin", "--model", str(model_dir)]
    return subprocess.run(
        [*argv, "--runs-dir", str(runs_dir), *flags], capture_output=True, text=True, env=ENV, timeout=timeout
    )


# Two trials of one task with a short budget: the tiny random model solves nothing, so reward 0 each.
TWO_SHORT_TRIALS = (
    *("--task-ids", TASK_IDS[0], "--group-size", "2", "--concurrency", "2", "--max-len", "2048"),
    *("--max-response-tokens", "8", "--step-limit", "2", "--experiment", "ev"),
)


def test_the_evaluation_command_prints_a_per_task_table_and_keeps_the_archive(rollout_model_dir, tmp_path):
    out = rollout(rollout_model_dir, tmp_path, "--harness", "builtin", *TWO_SHORT_TRIALS)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| task | trials | solved | mean reward | outcomes | turns | response tokens |" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith(f"| {TASK_IDS[0]} |"))
    assert row.split("|")[2].strip() == "2" and row.split("|")[3].strip() == "0/2"
    assert "solve rate 0/2 scored trials (coverage 2/2); dropped: none" in out.stdout
    for g in range(2):
        summary = json.loads(
            (tmp_path / "ev" / "trials" / "step_0" / f"{TASK_IDS[0]}-{g}" / "trial.json").read_text()
        )
        assert summary["outcome"] in ("step_limit", "no_tool_collapse") and summary["reward"] == 0.0


def test_an_unknown_task_id_stops_the_command_with_its_name(rollout_model_dir, tmp_path):
    out = rollout(rollout_model_dir, tmp_path, "--task-ids", "no-such-task", timeout=300)
    assert out.returncode == 2 and "no-such-task" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow  # ~23 s; tests/rollout/test_ray_executor.py runs trials on Ray nodes in the default suite
def test_the_evaluation_command_runs_its_trials_on_a_ray_node(rollout_model_dir, tmp_path):
    # --executor ray without an address: a one-node Ray on this machine, as `train.py rollout=ray` starts it.
    pytest.importorskip("ray")
    out = rollout(
        rollout_model_dir, tmp_path, *TWO_SHORT_TRIALS, "--executor", "ray", "--trials-per-node", "2"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "solve rate 0/2 scored trials (coverage 2/2); dropped: none" in out.stdout
    for g in range(2):
        folder = tmp_path / "ev" / "trials" / "step_0" / f"{TASK_IDS[0]}-{g}"
        attempt = json.loads((folder / "attempt_0" / "attempt.json").read_text())
        assert attempt["where"] and attempt["where"] != "local", attempt  # a Ray node ran it
        assert json.loads((folder / "trial.json").read_text())["reward"] == 0.0


def test_a_bad_executor_setting_stops_the_command_naming_the_value(rollout_model_dir, tmp_path):
    out = rollout(rollout_model_dir, tmp_path, "--executor", "ray", "--trials-per-node", "0", timeout=300)
    assert out.returncode == 2 and "rollout.trials_per_node must be" in out.stderr and "got 0" in out.stderr
    assert "Traceback" not in out.stderr
