"""The pieces both loops share (legorl_jax/loop_step.py): the checkpoint cursor, the settings a loop reads,
the mode dispatch in run.py, and the reasons a step skips its update."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from legorl_jax.config import Config, LoopConfig, TasksConfig
from legorl_jax.engine.base import EngineUnavailableError
from legorl_jax.loop_step import (
    LoopCursor,
    LoopSettings,
    Parts,
    engine_figures,
    nothing_to_learn,
    validation_due,
)
from legorl_jax.rollout.collect import Batch
from legorl_jax.run import run_loop
from legorl_jax.train.publish import Publisher
from legorl_jax.types import Outcome, Sequence, Trajectory

# Cursors exactly as checkpoints written before LoopCursor hold them (loop.py and async_loop.py wrote dicts).
OLD_SYNC = {"next_step": 3, "run_id": "a1b2", "optimiser_step": 2}
OLD_ASYNC = {
    "next_step": 2,
    "run_id": "",
    "optimiser_step": 2,
    "mode": "async",
    "next_group": 7,
    "in_flight": [5, 6],
    "pending": [4],
    "pending_dir": "/runs/x/checkpoints/pending/2",
}


def test_an_old_sync_cursor_reads_back_and_writes_the_same_dict():
    cursor = LoopCursor.from_dict(OLD_SYNC)
    assert (cursor.next_step, cursor.run_id, cursor.optimiser_step, cursor.mode) == (3, "a1b2", 2, "sync")
    assert cursor.to_dict() == OLD_SYNC


def test_an_old_async_cursor_reads_back_its_groups_and_writes_the_same_dict():
    cursor = LoopCursor.from_dict(OLD_ASYNC)
    assert cursor.mode == "async" and cursor.next_group == 7
    assert cursor.in_flight == (5, 6) and cursor.pending == (4,) and cursor.pending_dir.endswith("pending/2")
    assert cursor.to_dict() == OLD_ASYNC


def test_a_fresh_start_cursor_has_only_the_next_step():
    assert LoopCursor.from_dict({"next_step": 0}) == LoopCursor(0)


@pytest.mark.parametrize(
    "plain, message",
    [
        ({"run_id": "x"}, "a loop cursor is a mapping with a next_step, got {'run_id': 'x'}"),
        ([3], r"a loop cursor is a mapping with a next_step, got \[3\]"),
        ({"next_step": -1}, "loop cursor next_step must be an int >= 0, got -1"),
        ({"next_step": "3"}, "loop cursor next_step must be an int >= 0, got '3'"),
        (
            {"next_step": 1, "mode": "fast"},
            r"loop cursor mode must be one of \('sync', 'async'\), got 'fast'",
        ),
    ],
)
def test_a_bad_cursor_is_refused_by_value(plain, message):
    with pytest.raises(ValueError, match=message):
        LoopCursor.from_dict(plain)


def _settings(**loop: object) -> LoopSettings:
    config = Config(loop=LoopConfig(**loop), tasks=TasksConfig(eval_split="test"))
    return LoopSettings.of(config)


def test_loop_settings_carry_the_sub_configs_a_loop_reads():
    config = Config(seed=7, tasks=TasksConfig(eval_split="test"))
    settings = LoopSettings.of(config)
    assert settings.loop is config.loop and settings.algo is config.algo and settings.train is config.train
    assert settings.trials.rollout is config.rollout and settings.trials.sandbox is config.sandbox
    assert settings.trials.step_limit == config.harness.step_limit and settings.seed == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 8  # type: ignore[misc]
    assert settings.trials.for_validation().rollout.experiment == f"{config.rollout.experiment}/validation"


@pytest.mark.parametrize(
    "mode, cursor, message",
    [
        ("sync", LoopCursor(2, mode="async"), "written by a loop.mode='async' run"),
        ("async", LoopCursor(2), "written by a loop.mode='sync' run"),
    ],
)
def test_a_cursor_of_the_other_mode_is_refused_before_anything_runs(mode, cursor, message):
    parts = Parts(_settings(mode=mode, steps=3), None, None, None, [object()], [], None, None, None)
    with pytest.raises(ValueError, match=message):
        asyncio.run(run_loop(parts, None, start_step=2, cursor=cursor))


def test_validation_is_due_every_n_steps_and_at_the_last_one_only_with_an_eval_split():
    settings = _settings(steps=5, validate_every=2)
    assert [s for s in range(5) if validation_due(settings, s)] == [1, 3, 4]
    no_split = dataclasses.replace(settings, eval_split=None)
    assert not any(validation_due(no_split, s) for s in range(5))


def _trial(group: str, reward: float, outcome: Outcome = Outcome.SUBMITTED) -> Trajectory:
    seq = Sequence(
        np.arange(1, 4, dtype=np.int32), np.array([0, 1, 1], np.int8), np.zeros(3, np.float32), None
    )
    return Trajectory(f"{group}-{reward}", "task", group, (seq,), reward, outcome)


def test_nothing_to_learn_names_a_batch_all_dropped_and_one_without_advantage():
    dropped = Batch((_trial("g", 0.0, Outcome.SANDBOX_FAILED),), 1.0)
    assert nothing_to_learn(dropped) == "all 1 trials were dropped ({'sandbox_failed': 1})"
    flat = Batch((_trial("g", 1.0), _trial("g", 1.0)), 1.0)
    assert "every advantage is 0" in nothing_to_learn(flat)
    assert nothing_to_learn(Batch((_trial("g", 1.0), _trial("g", 0.0)), 1.0)) == ""


class _FleetBoundary:
    """The engine boundary of a fleet as the loop sees it: weights in, per-engine figures out (or the
    router unreachable)."""

    def __init__(self, figures: dict[str, float] | None):
        self.figures = figures

    async def update_weights(self, source, version: str) -> None:
        return None

    async def metrics(self) -> dict[str, float]:
        if self.figures is None:
            raise EngineUnavailableError("the router at http://127.0.0.1:1 is unreachable")
        return dict(self.figures)


class _PlainEngine:
    async def update_weights(self, source, version: str) -> None:
        return None


def _parts_publishing_to(engine) -> Parts:
    publisher = Publisher(engine, mode="in_process")
    return Parts(_settings(), None, None, None, [], [], None, publisher, None)


def test_engine_figures_are_an_engines_own_and_none_for_an_engine_without_or_unreachable(caplog):
    figures = {"engine/0/healthy": 1.0, "engine/1/running": 2.0}
    assert asyncio.run(engine_figures(_parts_publishing_to(_FleetBoundary(figures)), 3)) == figures
    assert asyncio.run(engine_figures(_parts_publishing_to(_PlainEngine()), 3)) == {}
    assert asyncio.run(engine_figures(_parts_publishing_to(_FleetBoundary(None)), 3)) == {}
    assert any("step 3: no engine figures: the router" in r.getMessage() for r in caplog.records)
