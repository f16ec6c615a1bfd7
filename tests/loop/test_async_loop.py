"""The fully-asynchronous loop (legorl_jax/async_loop.py): overlap of trials and updates, admission and the
staleness bound, kill and resume, validation beside training, the watchdog.

The loop runs for real (async_run.py: built-in harness, Docker sandboxes, verifier, trainer, checkpoints);
the staleness rule is checked on the loop's own buffer with groups whose token versions are chosen.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import pathlib

import async_run
import numpy as np
import pytest

from legorl_jax.async_loop import AsyncLoop, Group, group_dir, task_for_group
from legorl_jax.loop_step import LoopSettings, Parts
from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_task
from legorl_jax.types import Outcome, Sequence, Trajectory


def _trajectory(group_id: str, g: int, versions: list[int], reward: float = 0.0) -> Trajectory:
    n = len(versions)
    tokens = np.arange(1, n + 2, dtype=np.int32)
    mask = np.array([0] + [1] * n, np.int8)
    token_versions = np.array([-1, *versions], np.int32)
    seq = Sequence(tokens, mask, np.zeros(n + 1, np.float32), None, token_versions=token_versions)
    return Trajectory(f"t-{g}", "task", group_id, (seq,), reward, Outcome.SUBMITTED)


def _buffer_loop(max_staleness: int, version: int, groups_per_step: int = 1) -> AsyncLoop:
    """An AsyncLoop whose buffer a test fills itself: only the config and the tasks are used by `take`."""
    config = async_run.config_for(
        pathlib.Path("/nonexistent/run"),
        max_staleness=max_staleness,
        groups_per_step=groups_per_step,
    )
    task = load_builtin_task(SUITE_DIR / async_run.TASK)
    parts = Parts(LoopSettings.of(config), None, None, None, [task], [], None, None, None)
    return AsyncLoop(parts, None, start_step=version, cursor=None)


def _ready(loop: AsyncLoop, index: int, versions: list[int]) -> Group:
    task = loop.parts.train_tasks[0]
    group = Group(index, task, 2, started_version=versions[0])
    group.trajectories = {g: _trajectory(group.group_id, g, versions, reward=float(g)) for g in range(2)}
    loop.ready.append(group)
    loop.outstanding.add(index)
    return group


async def test_a_group_one_version_over_the_bound_is_dropped_and_counted_one_at_the_bound_is_trained():
    loop = _buffer_loop(max_staleness=1, version=5)
    _ready(loop, 0, [3, 4])  # oldest token at 3: 5 - 3 = 2 > 1
    at_bound = _ready(loop, 1, [4, 5])  # oldest at 4: staleness 1 == bound
    taken, stale = await loop.take()
    assert taken == [at_bound] and stale == 1 and loop.stale_total == 1
    assert loop.outstanding == {1}  # the dropped group left the admission count; the taken one stays until
    # its update is published


async def test_staleness_counts_the_oldest_token_of_a_trial_that_spans_two_versions():
    loop = _buffer_loop(max_staleness=0, version=4)
    spanning = _ready(loop, 0, [3, 4, 4])  # resumed across the update to 4: oldest token still at 3
    assert spanning.trajectories[0].oldest_version == 3 and spanning.staleness(4) == 1
    fresh = _ready(loop, 1, [4, 4])
    taken, stale = await loop.take()
    assert taken == [fresh] and stale == 1


def test_admission_stops_at_max_staleness_plus_one_steps_of_outstanding_groups():
    loop = _buffer_loop(max_staleness=1, version=0, groups_per_step=2)
    assert loop.max_outstanding == 4
    loop.outstanding = {0, 1, 2}
    assert loop._may_admit()
    loop.outstanding.add(3)
    assert not loop._may_admit()  # a fifth group could only be trained 2 versions after it started
    loop.outstanding = {0}
    loop.trials_live = loop.trials.rollout.concurrency
    assert not loop._may_admit()  # no free trial slot


def test_group_tasks_follow_a_seeded_pass_over_the_tasks():
    tasks = [
        dataclasses.replace(load_builtin_task(SUITE_DIR / async_run.TASK), instance_id=f"t{i}")
        for i in range(3)
    ]
    first_pass = [task_for_group(tasks, n, seed=7).instance_id for n in range(3)]
    assert sorted(first_pass) == ["t0", "t1", "t2"]  # each task once per pass
    assert first_pass == [
        task_for_group(tasks, n, seed=7).instance_id for n in range(3)
    ]  # a resume redraws them


@pytest.mark.docker
async def test_trials_keep_running_while_the_trainer_updates(loop_model_dir, tmp_path):
    run_dir = tmp_path / "runs" / "overlap"
    result = await async_run.run(str(loop_model_dir), run_dir, steps=3, max_staleness=1)
    records = result.records
    assert [r.step for r in records] == [0, 1, 2]
    assert result.engine.updates == ["step-000001", "step-000002", "step-000003"]
    trained = [r for r in records if r.trained]
    assert trained, [r.skipped_because for r in records]
    trials = [json.loads(p.read_text()) for p in run_dir.glob("trials/group_*/*/trial.json")]
    overlapping = [
        t
        for t in trials
        for r in trained
        if t["started_at"] < r.train_window[1] and t["ended_at"] > r.train_window[0]
    ]
    assert overlapping  # a trial was running while an update was being computed
    groups = [g for r in records for g in r.groups]
    assert len(groups) == len(set(groups)) == 3  # one group per step, none twice
    for r in records:
        m = r.metrics
        assert m["loop/stale_groups"] == 0 and m["rollout/trials"] == 2
        assert m["offpolicy/staleness_max"] <= 1  # every trained token within max_staleness of the trainer
        assert 0.0 <= m["loop/trainer_idle_share"] <= 1.0 and 0.0 <= m["loop/rollout_idle_share"] <= 1.0
    assert records[-1].metrics["loop/trajectories_trained"] == 2 * len(trained)
    assert (run_dir / "trials" / "group_0" / f"{async_run.TASK}-0" / "trial.json").is_file()
    # Groups in flight when the loop ended were cancelled: none leaves an attempt without its trial.json.
    for attempt in run_dir.glob("trials/group_*/*/attempt_*"):
        assert (attempt.parent / "trial.json").is_file(), attempt


@pytest.mark.docker
async def test_a_killed_async_run_resumes_with_nothing_trained_twice_and_ended_groups_not_lost(
    loop_model_dir, tmp_path
):
    run_dir = tmp_path / "runs" / "resume"
    first = await async_run.run(str(loop_model_dir), run_dir, steps=2, max_staleness=1)
    cursor = first.cursor
    assert first.steps_saved[-1] == 2 and cursor["next_step"] == 2 and cursor["mode"] == "async"
    left = [*cursor["pending"], *cursor["in_flight"]]
    assert left  # the run ended (as a kill after its last checkpoint would) with a group ended or running
    in_flight_dirs = [group_dir(run_dir, n) for n in cursor["in_flight"] if group_dir(run_dir, n).exists()]

    second = await async_run.run(str(loop_model_dir), run_dir, steps=3, max_staleness=1, resume=True)
    first_groups = {g for r in first.records for g in r.groups}
    second_groups = {g for r in second.records for g in r.groups}
    assert not first_groups & second_groups  # nothing trained twice
    resumed_indices = {int(g.rpartition("@g")[2]) for g in second_groups}
    assert set(cursor["pending"]) <= resumed_indices  # groups that had ended are trained, not lost
    assert [r.step for r in second.records] == [2]
    for path in in_flight_dirs:  # a group in flight at the kill is re-run; its first archive set aside
        assert list(path.parent.glob(f"{path.name}.abandoned-*"))


@pytest.mark.slow  # ~32 s quiet
@pytest.mark.docker
async def test_validation_mid_run_does_not_stall_training(loop_model_dir, tmp_path):
    run_dir = tmp_path / "runs" / "val"
    run = async_run.run(
        str(loop_model_dir),
        run_dir,
        steps=2,
        validation=True,
        eval_delay_s=8.0,  # every validation call takes 8 s: step 0's validation outlasts step 1's wait
        validate_every=1,
        validation_group_size=1,
        validation_tasks=1,
        stall_timeout_s=300.0,  # a step that never comes fails wait_for below; a busy host is not a stall
    )
    # A training step that waited on a validation waiting on it (the original deadlock) never ends: fail,
    # do not hang.
    result = await asyncio.wait_for(run, timeout=900)
    first, second = result.records
    assert first.metrics["val/trials"] == 1 and second.metrics["val/trials"] == 1  # joined their steps
    assert second.metrics["loop/stalls"] == 0
    assert second.train_window is not None
    # Step 0's validation trials are archived under validation/trials/step_0. Training that waited for that
    # validation would start after its last call; step 1's own validation (always later) is left out.
    step0_eval = [at for at, kind, folder in result.script.log if kind == "eval" and "/step_0/" in folder]
    assert step0_eval
    assert second.train_window[0] < max(step0_eval)  # step 1 trained before step 0's validation ended


@pytest.mark.docker
async def test_an_engines_own_figures_join_every_async_step_as_in_the_sync_loop(loop_model_dir, tmp_path):
    result = await async_run.run(
        str(loop_model_dir), tmp_path / "runs" / "fleet", steps=2, max_staleness=1, engine_figures=True
    )
    for k, record in enumerate(result.records):
        m = record.metrics
        assert m["engine/0/healthy"] == 1.0 and m["engine/1/healthy"] == 1.0
        assert m["engine/0/updates"] == k + 1  # read after the step's publish, as the sync loop reads them
    rows = [
        json.loads(line) for line in (tmp_path / "runs" / "fleet" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [row["step"] for row in rows] == [0, 1]
    assert all("engine/1/healthy" in row["metrics"] for row in rows)  # the tracker got them too


@pytest.mark.docker
async def test_the_watchdog_reports_a_loop_that_made_no_progress(loop_model_dir, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="legorl_jax.async_loop")
    result = await async_run.run(
        str(loop_model_dir), tmp_path / "runs" / "stall", steps=1, stall_timeout_s=0.4, delay_s=2.0
    )
    assert result.records[-1].metrics["loop/stalls"] >= 1
    assert any(
        "made no progress" in r.getMessage() and "waits for 1 ready groups" in r.getMessage()
        for r in caplog.records
    )
