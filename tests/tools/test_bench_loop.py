"""tools/bench_loop.py's workload: tool times keyed by a trial's identity (the same on the sync and the async
side), lognormal as asked, and the scripted engine's replies as the loop's proxy receives them."""

import asyncio
import importlib.util
import json
import pathlib
import sys

import numpy as np
import pytest

TOOL = pathlib.Path(__file__).parents[2] / "tools" / "bench_loop.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_loop", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_loop"] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_a_trial_sleeps_the_same_whether_the_sync_or_the_async_loop_archives_it(bench):
    workload = bench.Workload(tasks=("a", "b"), tool_mean_s=10.0)
    # Sync step 3 holds the 4th group of every task; async group 7 is the 4th pass's second group (2 tasks).
    sync = bench.trial_identity("/r/x/trials/step_3/b-2/attempt_0", "b-2", "b", tasks=2)
    later = bench.trial_identity("/r/x/trials/group_7/b-2/attempt_0", "b-2", "b", tasks=2)
    assert sync == later == (3, 2)
    assert bench.tool_seconds(workload, "b", *sync) == bench.tool_seconds(workload, "b", *later)
    # Another trial of the group, the same trial of another task or another group: other draws.
    others = [("b", 3, 3), ("a", 3, 2), ("b", 4, 2)]
    assert all(bench.tool_seconds(workload, *o) != bench.tool_seconds(workload, "b", 3, 2) for o in others)


def test_an_archive_path_without_a_step_or_group_folder_is_refused_naming_it(bench):
    with pytest.raises(ValueError, match="runs/x/t-0"):
        bench.trial_identity("runs/x/t-0", "t-0", "t", tasks=1)


def test_tool_times_are_lognormal_with_the_asked_mean_split_over_the_calls(bench):
    workload = bench.Workload(tasks=("a",), tool_mean_s=10.0, tool_sigma=1.0, tool_calls=2)
    draws = [bench.tool_seconds(workload, "a", group, index) for group in range(500) for index in range(8)]
    assert all(len(d) == 2 and d[0] == d[1] for d in draws)
    totals = np.array([sum(d) for d in draws])
    assert abs(totals.mean() - 10.0) < 0.6  # 4000 draws: the mean's standard error is 0.2 s
    logs = np.log(totals)
    assert abs(logs.std() - 1.0) < 0.05 and abs(np.median(totals) - 10.0 * np.exp(-0.5)) < 0.4
    assert np.percentile(totals, 99) / np.median(totals) > 7  # exp(2.33 sigma) = 10: the heavy tail


def test_the_workload_refuses_a_trajectory_count_that_is_not_whole_steps(bench):
    with pytest.raises(ValueError, match=r"trajectories \(10\).*2 tasks x group size 4 = 8"):
        bench.Workload(tasks=("a", "b"), group_size=4, trajectories=10)


def test_the_scripted_engine_sleeps_then_fixes_only_even_trials_then_submits_under_the_published_version(
    bench, tiny_moe_dir, tmp_path
):
    from legorl_jax.config import ProxyConfig
    from legorl_jax.engine.base import SamplingParams
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.proxy import CaptureProxy
    from legorl_jax.train.batch import RoutingSpec

    workload = bench.Workload(tasks=("t",), tool_mean_s=4.0, engine_s=0.0, tool_calls=2)
    fix = bench.tool_call("str_replace", {"path": "f.py", "old": "a", "new": "b"})
    engine = bench.ScriptedLoopEngine(
        load_tokenizer(tiny_moe_dir), workload, {"t": [fix]}, RoutingSpec(2, 2, 8)
    )
    proxy = CaptureProxy.from_model_dir(engine, tiny_moe_dir, ProxyConfig(archive_dir=str(tmp_path)))
    engine.sessions = proxy.sessions

    def replies(trial: int) -> list[dict]:
        folder = tmp_path / "trials" / "step_1" / f"t-{trial}" / "attempt_0"
        sid = proxy.open_session("t", f"t-{trial}", trial_dir=folder).session_id
        out = []
        for turn in range(5):
            gen = asyncio.run(
                engine.generate([5, 6, 7], SamplingParams(max_new_tokens=512), return_routed_experts=True,
                                routed_experts_start_len=1, rid=f"{sid}-{turn}", session_id=sid)
            )  # fmt: skip
            assert gen.routed_experts.shape == (3 + len(gen.output_ids) - 1 - 1, 2, 2)
            assert all(len(set(row)) == 2 for row in gen.routed_experts.reshape(-1, 2).tolist())
            text = engine.tokenizer.decode(gen.output_ids.tolist())
            out.append({"call": json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0]), "v": gen})
        return out

    sleeps = bench.tool_seconds(workload, "t", 1, 0)
    even = replies(0)
    assert [r["call"]["name"] for r in even] == ["bash", "bash", "str_replace", "submit", "submit"]
    assert [r["call"]["arguments"]["command"] for r in even[:2]] == [f"sleep {s:.3f}" for s in sleeps]
    assert [r["call"]["name"] for r in replies(1)] == ["bash", "bash", "submit", "submit", "submit"]
    asyncio.run(engine.update_weights(None, "step-000002"))
    assert replies(2)[0]["v"].weight_version == "step-000002" and even[0]["v"].weight_version == "step-000000"


def test_a_runs_figures_count_trained_trajectories_and_leave_the_first_steps_wait_out_of_the_steady_idle(
    bench, tmp_path
):
    from legorl_jax.loop_step import StepRecord

    for group, trial, seconds, outcome, reward in [
        (0, "t-0", 6.0, "submitted", 1.0),
        (0, "t-1", 8.0, "submitted", 0.0),
        (1, "t-0", 5.0, "sandbox_failed", 0.0),  # an infrastructure failure: in the slots' time, not the rate
    ]:
        folder = tmp_path / "trials" / f"group_{group}" / trial
        folder.mkdir(parents=True)
        record = {"outcome": outcome, "reward": reward, "timings": {"trial_s": seconds}}
        (folder / "trial.json").write_text(json.dumps(record))
    first = {"time/train_step_s": 2.0, "time/total_s": 12.0, "loop/trajectories_trained": 2.0}
    second = {"time/train_step_s": 3.0, "time/total_s": 4.0, "loop/trajectories_trained": 4.0,
              "loop/trainer_idle_share": 0.25, "loop/stale_groups_total": 1.0}  # fmt: skip
    records = [StepRecord(0, first, True), StepRecord(1, second, True)]
    workload = bench.Workload(tasks=("t",), group_size=2, concurrency=2, trajectories=4)
    result = bench.summarise("async", workload, records, tmp_path, wall=16.0, foreign=0.0)
    assert result.trained == 4 and result.per_hour == 900.0  # the loop's cumulative count, per hour of wall
    assert result.steady_trained == 2 and result.steady_s == (3.0, 4.0)  # what steps after the first did
    assert result.stale_groups == 1 and result.solve_rate == 0.5
    assert bench.trainer_idle([result]) == pytest.approx(1 - 5 / 16)
    assert bench.steady_trainer_idle([result]) == pytest.approx(1 - 3 / 4)  # step 1 only: the fill left out
    assert bench.rollout_idle([result], concurrency=2) == pytest.approx(1 - 19 / 32)


def test_a_figure_the_run_could_not_compute_is_n_a_not_a_missed_target(bench):
    assert bench.verdict(float("nan"), False) == "n/a"  # "after step 0" of a one-step --quick run
    assert bench.verdict(2.5, True) == "met" and bench.verdict(1.2, False) == "NOT met"


def test_the_loops_pearson_alert_about_the_scripted_engine_is_filtered_and_others_pass(bench):
    import logging

    record = logging.LogRecord(
        "legorl_jax.loop",
        logging.WARNING,
        "",
        0,
        "step %d: %s",
        (0, "alignment: trainer/engine probability Pearson 0.0900 < 0.99 (replay or numerics broken?)"),
        None,
    )
    other = logging.LogRecord("legorl_jax.loop", logging.WARNING, "", 0, "step 0: update skipped", (), None)
    keep = bench.ScriptedPearsonFilter()
    assert not keep.filter(record) and keep.filter(other)
