"""`make demo`'s job learns: `python train.py experiment=demo` raises the solve rate from first to last step.

Slow (about 15 minutes on 2 cores): run with `make test-all` or `pytest -m slow tests/loop/test_demo.py`.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.docker]
REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_demo_raises_the_solve_rate_from_its_first_step_to_its_last(tmp_path):
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "").replace("--xla_force_host_platform_device_count=8", "").strip()
    )
    argv = [
        *(sys.executable, str(REPO / "train.py"), "experiment=demo", f"rollout.runs_dir={tmp_path}"),
        *(f"tracking.repo={tmp_path / 'aim'}", f"loop.warm_start.cache_dir={REPO / 'runs' / 'warm_start'}"),
    ]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=3600, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    rows = [json.loads(line) for line in (tmp_path / "demo" / "metrics.jsonl").read_text().splitlines()]
    rates = [r["metrics"]["rollout/solve_rate"] for r in rows]
    assert all(r["metrics"]["rollout/scored"] >= 24 for r in rows), rows  # the rates stand on real counts
    # Measurably: the last step beats the first, and the least-squares line through every step's rate (all
    # 256 trials) rises by at least 0.1 over the run (one step's rate alone moves by +-0.09 at 32 trials).
    assert rates[-1] > rates[0], rates
    slope = np.polyfit(np.arange(len(rates)), rates, 1)[0]
    assert slope * (len(rates) - 1) >= 0.1, (slope, rates)
    summary = (tmp_path / "demo" / "summary.md").read_text()
    assert "the same tasks RL trains and is measured on" in summary  # the warm start is declared
    assert (tmp_path / "demo" / "curves.png").stat().st_size > 1000
