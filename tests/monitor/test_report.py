"""The run's summary pieces: the per-step table, the time per phase with its shares, the curves PNG."""

from __future__ import annotations

import pytest

from legorl_jax.monitor.report import (
    PEARSON_FLOOR,
    curves_figure,
    nothing_trained,
    phase_line,
    plot_curves,
    step_table,
)

STEPS = {
    0: {
        "rollout/trials": 8,
        "rollout/scored": 7,
        "rollout/reward_mean": 0.25,
        "rollout/solve_rate": 0.25,
        "align/prob_pearson": 0.9991,
        "rollout/dropped/sandbox_failed": 1,
        "batch/overlong": 2,
        "behaviour/turns_per_trial": 1.5,
        "behaviour/tokens_per_trial": 2310.4,
        "behaviour/tokens_per_trial_max": 2544,
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


def test_the_step_table_has_one_row_per_step_with_its_figures_turns_tokens_and_drops():
    rows = step_table(STEPS).splitlines()
    assert rows[2] == (
        "| 0 | 8 (7) | 0.250 | 0.250 | - | 1.5 | 2310 (2544) | 0.9991 | sandbox_failed 1, overlong 2 | none "
        "| yes | 100 |"
    )
    assert rows[3] == "| 1 | 8 (0) | - | - | - | - | - | - | engine_failed 8 | none | no | 100 |"


def test_the_step_table_counts_infra_failures_that_a_retry_made_good():
    steps = {
        0: {
            "rollout/trials": 4,
            "rollout/scored": 4,
            "rollout/infra_failures/engine_failed": 2,
            "rollout/infra_failures/node_failed": 1,
            "rollout/infra_failures/timeout": 0,
            "rollout/retried": 3,
        }
    }
    row = step_table(steps).splitlines()[2]
    assert "| none | engine_failed 2, node_failed 1 (retried 3) |" in row  # nothing dropped, all counted


def test_the_summary_says_why_nothing_was_trained_when_every_groups_rewards_were_equal():
    equal = {s: {"rollout/scored": 2.0, "loop/skipped_update": 1.0} for s in (0, 1)}
    assert "every group's rewards were equal: nothing to learn" in nothing_trained(equal)
    assert "make demo" in nothing_trained(equal)
    dropped = {0: {"rollout/scored": 0.0, "loop/skipped_update": 1.0}}
    assert "every trial of every step was dropped" in nothing_trained(dropped)
    assert nothing_trained({**equal, 2: {"rollout/scored": 2.0, "loop/skipped_update": 0.0}}) == ""


def test_the_phase_line_gives_each_phase_its_seconds_and_share_of_the_total():
    line = phase_line(STEPS)
    assert line.startswith("time per phase over 2 steps (200 s): rollout 180.0 s (90%), packing 0.0 s (0%)")
    assert "train_step 15.0 s (8%)" in line and "checkpoint 5.0 s (2%)" in line


def test_the_curves_png_is_written_and_an_empty_run_is_refused(tmp_path):
    out = plot_curves({"a": STEPS}, tmp_path / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="none of the runs \\['b'\\]"):
        plot_curves({"b": {0: {"other/x": 1.0}}}, tmp_path / "d.png")


def test_the_pearson_panel_draws_1_minus_pearson_on_a_fixed_log_axis_whatever_the_noise():
    # A run whose Pearson only wobbles in float noise (issue 32: an autoscaled axis of 1e-7 + 1.0000001 read
    # as movement), one at exactly 1, one with a real mismatch of 1e-3.
    runs = {
        "noise": {0: {"align/prob_pearson": 0.9999999}, 1: {"align/prob_pearson": 0.99999988}},
        "exact": {0: {"align/prob_pearson": 1.0}},
        "off": {0: {"align/prob_pearson": 0.999}},
    }
    (ax,) = [a for a in curves_figure(runs).axes if "Pearson" in a.get_title()]
    assert ax.get_title().startswith("1 - ") and ax.get_yscale() == "log"
    assert ax.get_ylim() == pytest.approx((PEARSON_FLOOR, 2.0))
    drawn = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert drawn["noise"] == pytest.approx([1e-7, 1.2e-7], rel=1e-6)
    assert drawn["exact"] == [PEARSON_FLOOR] and drawn["off"] == pytest.approx([1e-3])


@pytest.mark.parametrize(
    ("weight", "said"),
    [
        (0.0, "trials worse than their group's mean are not pushed down at all (algo.negative_weight 0)"),
        (0.25, "trials worse than their group's mean are pushed down at 0.25 of their weight"),
        (1.0, None),
    ],
)
def test_the_run_summary_says_how_negative_advantages_were_weighted_and_first_vs_last(tmp_path, weight, said):
    import dataclasses
    import json

    from legorl_jax.config import AlgoConfig, Config
    from legorl_jax.monitor.report import run_summary
    from legorl_jax.run import RunSummary

    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "metrics": m}) + "\n" for s, m in STEPS.items())
    )
    config = dataclasses.replace(Config(), algo=AlgoConfig(negative_weight=weight))
    text = run_summary(config, RunSummary(tmp_path, [], "", None, "run", 0))
    assert (said in text) if said else ("negative_weight" not in text)
    assert "solve rate: step 0 0.250 over 7 trials -> step 1 0.000 over 0 trials" in text


def test_an_async_runs_phase_line_shows_the_trainers_wait_and_both_idle_shares():
    steps = {
        k: {
            "time/total_s": 100.0,
            "time/wait_for_groups_s": wait,
            "time/train_step_s": 100.0 - wait,
            "loop/trainer_idle_share": wait / 100.0,
            "loop/rollout_idle_share": 0.1,
            "loop/trajectories_per_hour": 360.0,
            "loop/stale_groups_total": 2.0,
        }
        for k, wait in ((0, 60.0), (1, 20.0))
    }
    line = phase_line(steps)
    assert line.startswith("time per phase over 2 steps (200 s): wait_for_groups 80.0 s (40%), packing 0.0 s")
    assert "rollout " not in line.splitlines()[0]
    assert line.splitlines()[1] == (
        "async: trainer idle 40%, rollout slots idle 10%, 360 trajectories trained per hour, "
        "2 stale groups dropped"
    )
