"""The run's summary pieces: the per-step table, the time per phase with its shares, the curves PNG."""

from __future__ import annotations

import pytest

from legorl_jax.monitor.report import phase_line, plot_curves, step_table

STEPS = {
    0: {
        "rollout/trials": 8,
        "rollout/scored": 7,
        "rollout/reward_mean": 0.25,
        "rollout/solve_rate": 0.25,
        "align/prob_pearson": 0.9991,
        "rollout/dropped/sandbox_failed": 1,
        "loop/skipped_update": 0.0,
        "time/total_s": 100.0,
        "time/rollout_s": 80.0,
        "time/train_step_s": 15.0,
        "time/checkpoint_s": 5.0,
    },
    1: {
        "rollout/trials": 8,
        "rollout/scored": 0,
        "rollout/dropped/engine_failed": 8,
        "loop/skipped_update": 1.0,
        "time/total_s": 100.0,
        "time/rollout_s": 100.0,
    },
}


def test_the_step_table_has_one_row_per_step_with_its_figures_and_drops():
    rows = step_table(STEPS).splitlines()
    assert rows[2] == "| 0 | 8 (7) | 0.250 | 0.250 | - | 0.9991 | sandbox_failed 1 | yes | 100 |"
    assert rows[3] == "| 1 | 8 (0) | - | - | - | - | engine_failed 8 | no | 100 |"


def test_the_phase_line_gives_each_phase_its_seconds_and_share_of_the_total():
    line = phase_line(STEPS)
    assert line.startswith("time per phase over 2 steps (200 s): rollout 180.0 s (90%), packing 0.0 s (0%)")
    assert "train_step 15.0 s (8%)" in line and "checkpoint 5.0 s (2%)" in line


def test_the_curves_png_is_written_and_an_empty_run_is_refused(tmp_path):
    out = plot_curves({"a": STEPS}, tmp_path / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="none of the runs \\['b'\\]"):
        plot_curves({"b": {0: {"other/x": 1.0}}}, tmp_path / "d.png")
