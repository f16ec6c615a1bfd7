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


def test_the_evaluation_command_prints_a_per_task_table_and_keeps_the_archive(rollout_model_dir, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "legorl_jax.rollout",
            "--harness",
            "builtin",
            "--tasks",
            "builtin",
            "--task-ids",
            TASK_IDS[0],
            "--model",
            str(rollout_model_dir),
            "--group-size",
            "2",
            "--concurrency",
            "2",
            "--max-len",
            "2048",
            "--max-response-tokens",
            "8",
            "--step-limit",
            "2",
            "--runs-dir",
            str(tmp_path),
            "--experiment",
            "ev",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )
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
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "legorl_jax.rollout",
            "--tasks",
            "builtin",
            "--task-ids",
            "no-such-task",
            "--model",
            str(rollout_model_dir),
            "--runs-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert out.returncode == 2 and "no-such-task" in out.stderr and "Traceback" not in out.stderr
