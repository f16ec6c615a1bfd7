"""`python -m legorl_jax.monitor.compare`'s table: the differing config fields, final and best figures."""

from __future__ import annotations

from legorl_jax.monitor.compare import RunView, differing_fields, table


def run(name: str, lr: float, solve: list[float]) -> RunView:
    hparams = {
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
        "| run | train.learning_rate | steps | reward final / best | solve final / best "
        "| val solve final / best | Pearson mean |"
    )
    assert lines[2] == "| a | 1e-06 | 3 | 0.300 / 0.500 | 0.300 / 0.500 | - | 0.9990 |"
    assert lines[3] == "| b | 3e-06 | 2 | 0.400 / 0.400 | 0.400 / 0.400 | - | 0.9990 |"
