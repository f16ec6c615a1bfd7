"""`python -m legorl_jax.monitor.compare`'s table: the differing config fields, final and best figures."""

from __future__ import annotations

from legorl_jax.monitor.compare import RunView, differing_fields, table


def run(name: str, lr: float, solve: list[float], harness: str = "builtin") -> RunView:
    hparams = {
        "harness.name": harness,
        "train.learning_rate": lr,
        "algo.loss": "gspo",
        "rollout.experiment": name,
        "tracking.repo": "r",
    }
    metrics = {
        s: {"rollout/solve_rate": v, "rollout/reward_mean": v, "align/prob_pearson": 0.999}
        for s, v in enumerate(solve)
    }
    return RunView(name, name, hparams, metrics)


def test_compare_lists_only_the_fields_that_differ_and_each_runs_final_and_best():
    runs = [run("a", 1e-6, [0.1, 0.5, 0.3]), run("b", 3e-6, [0.2, 0.4])]
    assert differing_fields(runs) == ["rollout.experiment", "train.learning_rate"]
    lines = table(runs).splitlines()
    assert lines[0] == (
        "| run | harness | train.learning_rate | steps | reward final / best | solve final / best "
        "| val solve final / best | Pearson mean |"
    )
    assert lines[2] == "| a | builtin | 1e-06 | 3 | 0.300 / 0.500 | 0.300 / 0.500 | - | 0.9990 |"
    assert lines[3] == "| b | builtin | 3e-06 | 2 | 0.400 / 0.400 | 0.400 / 0.400 | - | 0.9990 |"


def test_runs_through_different_harnesses_compare_side_by_side_with_the_harness_as_a_column():
    runs = [run("mini", 5e-4, [0.1, 0.5], "mini_swe_agent"), run("claude", 5e-4, [0.2, 0.3], "claude_code")]
    assert differing_fields(runs) == ["harness.name", "rollout.experiment"]
    lines = table(runs).splitlines()
    assert lines[0].startswith(
        "| run | harness | steps |"
    )  # the harness once, not again as a differing field
    assert lines[2].startswith("| mini | mini_swe_agent | 2 | 0.500 / 0.500 |")
    assert lines[3].startswith("| claude | claude_code | 2 | 0.300 / 0.300 |")
