"""Tracking: metric names, rollout figures and alerts from a batch of trials, and the trial text."""

import dataclasses

import pytest

from legorl_jax.monitor.rollout_metrics import alerts, rollout_metrics, trial_text
from legorl_jax.monitor.tracker import check_metric_name, finite_metrics
from legorl_jax.rollout.collect import Batch
from legorl_jax.types import Outcome, Trajectory


def test_non_finite_metrics_are_left_out_and_named():
    kept, dropped = finite_metrics(
        {"train/loss": float("nan"), "train/lr": 1e-6, "rollout/x": "n/a", "rollout/y": 2}
    )
    assert kept == {"train/lr": 1e-6, "rollout/y": 2.0} and dropped == ["train/loss", "rollout/x"]


@pytest.mark.parametrize("name", ["reward", "Rollout/reward", "rollout/", "rollout reward/x", 3])
def test_metric_names_that_do_not_read_stage_slash_name_are_refused(name):
    with pytest.raises(ValueError, match="stage/name"):
        check_metric_name(name)


def trial(i, reward, outcome, **features):
    return Trajectory(
        trial_id=f"t-{i}",
        task_id="calc",
        group_id="calc@0",
        sequences=(),
        reward=reward,
        outcome=outcome,
        messages=(
            {"role": "user", "content": "fix"},
            {
                "role": "assistant",
                "content": "ok",
                "tool_calls": [{"function": {"name": "bash", "arguments": '{"command": "ls"}'}}],
            },
        ),
        features=features,
    )


def test_tokens_per_trial_are_the_mean_and_longest_of_the_scored_trials_sequences():
    import numpy as np

    from legorl_jax.types import Sequence

    def seq(n):
        return Sequence(np.zeros(n, np.int32), np.zeros(n, np.int8), np.zeros(n, np.float32), None)

    two_branches = dataclasses.replace(trial(0, 1.0, Outcome.SUBMITTED), sequences=(seq(2000), seq(300)))
    one = dataclasses.replace(trial(1, 0.0, Outcome.STEP_LIMIT), sequences=(seq(1000),))
    dropped = dataclasses.replace(trial(2, 0.0, Outcome.TIMEOUT), sequences=(seq(9000),))
    m = rollout_metrics(Batch((two_branches, one, dropped), seconds=1.0))
    assert m["behaviour/tokens_per_trial"] == 1650 and m["behaviour/tokens_per_trial_max"] == 2300


def test_rollout_metrics_average_behaviour_over_scored_trials_and_count_drops():
    batch = Batch(
        (
            trial(
                0,
                1.0,
                Outcome.SUBMITTED,
                turns=4,
                tool_calls=4,
                no_tool_replies=0,
                edits=2,
                rereads_after_edit=1,
                test_runs=1,
                response_tokens=400,
            ),
            trial(
                1,
                0.0,
                Outcome.STEP_LIMIT,
                turns=6,
                tool_calls=4,
                no_tool_replies=2,
                edits=0,
                rereads_after_edit=0,
                test_runs=0,
                response_tokens=200,
            ),
            trial(2, 0.0, Outcome.TIMEOUT, turns=50, tool_calls=0, response_tokens=9999),
        ),
        seconds=60.0,
    )
    m = rollout_metrics(batch)
    assert (
        m["rollout/trials"] == 3
        and m["rollout/scored"] == 2
        and m["rollout/coverage"] == pytest.approx(2 / 3)
    )
    assert m["rollout/reward_mean"] == 0.5 and m["rollout/solve_rate"] == 0.5
    assert (
        m["rollout/outcome/timeout"] == 1
        and m["rollout/dropped/timeout"] == 1
        and "rollout/dropped/step_limit" not in m
    )
    assert m["behaviour/turns_per_trial"] == 5 and m["behaviour/tool_calls_per_turn"] == 0.8
    assert (
        m["behaviour/no_tool_rate"] == 0.2
        and m["behaviour/reread_rate"] == 0.5
        and m["behaviour/test_run_rate"] == 0.5
    )
    assert m["behaviour/response_tokens_per_trial"] == 300 and m["behaviour/response_tokens_per_turn"] == 60
    assert m["throughput/trials_per_minute"] == 3.0
    assert m["throughput/response_tokens_per_s"] == pytest.approx(
        (600 + 9999) / 60.0
    )  # dropped trials sampled too


def test_infra_failures_are_counted_per_reason_whether_or_not_the_retry_made_the_trial_good():
    good_after_retry = dataclasses.replace(
        trial(0, 1.0, Outcome.SUBMITTED), attempts=("engine_failed", "submitted")
    )
    dropped_after_retry = dataclasses.replace(
        trial(1, 0.0, Outcome.NODE_FAILED), attempts=("engine_failed", "node_failed")
    )
    clean = trial(2, 0.0, Outcome.STEP_LIMIT)  # no attempts recorded: its one outcome counts
    m = rollout_metrics(Batch((good_after_retry, dropped_after_retry, clean), seconds=1.0))
    assert m["rollout/infra_failures/engine_failed"] == 2 and m["rollout/infra_failures/node_failed"] == 1
    assert m["rollout/infra_failures/timeout"] == 0  # every reason present, 0 on a clean step
    assert m["rollout/retried"] == 2 and m["rollout/dropped/node_failed"] == 1
    assert "rollout/dropped/engine_failed" not in m  # the retry made that trial good


def test_trial_text_shows_the_conversation_and_its_verdict():
    text = trial_text(trial(0, 1.0, Outcome.SUBMITTED))
    assert text.startswith("# t-0  task calc  outcome submitted  reward 1.00")
    assert '## assistant\nok\n-> bash({"command": "ls"})' in text


def test_alerts_name_each_unhealthy_figure_and_stay_quiet_when_healthy():
    healthy = {
        "align/prob_pearson": 0.999,
        "rollout/scored": 4,
        "behaviour/tool_calls_per_turn": 1.2,
        "align/routing_coverage": 1.0,
        "train/lr": 1e-6,
    }
    assert alerts(healthy, moe=True) == []
    sick = {
        "align/prob_pearson": 0.75,
        "rollout/scored": 4,
        "behaviour/tool_calls_per_turn": 0.0,
        "align/routing_coverage": 0.9,
        "train/lr": 0.0,
    }
    found = alerts(sick, moe=True)
    assert len(found) == 4 and "0.7500 < 0.99" in found[0] and "no tool call" in found[1]
    assert "0.9000 < 1" in found[2] and "learning rate is 0" in found[3]
