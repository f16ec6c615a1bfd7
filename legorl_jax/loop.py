"""The synchronous RL loop (docs/architecture.md §3), top to bottom: collect → advantages → pack → update →
checkpoint → publish → monitor, with validation every `loop.validate_every` steps.

    parts = Parts(LoopSettings.of(config), trainer, proxy, harness, train_tasks, validation_tasks,
                  checkpointer, publisher, tracker)
    records = await run_sync_loop(parts, state, start_step=0)   # legorl_jax.run.run_loop picks the mode

`legorl_jax.run` builds the parts (engine, proxy, harness, trainer, checkpointer, publisher, tracker) from the
config and resumes; this module only orders them, and loop_step.py holds what it shares with the async loop
(the update, validation, and `finish_step`: checkpoint → publish → engine figures → timings → monitor).
A loop step `s` collects with the weights published as `version_of(s)` and, after its update, publishes
`version_of(s + 1)`. A step whose trials were all dropped (infrastructure failures) skips the update and says
why; so does a step whose every group had one reward (no advantage, nothing to learn); neither publishes.
The checkpoint's cursor is the next loop step and the Aim run, so a resumed run continues the same Aim run at
the step after the last one saved, and the trial archive of steps after it (trials of a step that was never
trained on) is set aside, not reused: nothing lost, nothing trained twice.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence

from legorl_jax.loop_step import (
    LoopCursor,
    Parts,
    StepEnd,
    StepRecord,
    collect_trials,
    finish_step,
    learn,
    validate,
    validation_due,
)
from legorl_jax.monitor.rollout_metrics import rollout_metrics
from legorl_jax.tasks.schema import Task
from legorl_jax.train.state import TrainState

log = logging.getLogger(__name__)


def tasks_for_step(tasks: Sequence[Task], step: int, per_step: int | None, seed: int) -> list[Task]:
    """The tasks of loop step `step`: all, or `per_step` drawn by (seed, step) so a resume redraws them."""
    if per_step is None or per_step >= len(tasks):
        return list(tasks)
    return random.Random(f"{seed}:{step}").sample(list(tasks), per_step)


async def run_sync_loop(parts: Parts, state: TrainState, *, start_step: int = 0) -> list[StepRecord]:
    """Runs loop steps `start_step .. loop.steps - 1` (module docstring); returns one record per step run."""
    records = []
    for step in range(start_step, parts.settings.loop.steps):
        state, record = await run_step(parts, state, step)
        records.append(record)
    parts.checkpointer.wait()
    return records


async def run_step(parts: Parts, state: TrainState, step: int) -> tuple[TrainState, StepRecord]:
    """One loop step: its trials, the update on them (unless there is nothing to learn), then the shared
    tail (`finish_step`, with this step's validation when one is due)."""
    settings = parts.settings
    started = time.monotonic()
    tasks = tasks_for_step(parts.train_tasks, step, settings.loop.tasks_per_step, settings.seed)
    batch = await collect_trials(parts, tasks, step)
    metrics = rollout_metrics(batch)
    timings = {"rollout": time.monotonic() - started}
    learned = await learn(parts, state, step, batch)
    state, reason = learned.state, learned.skipped_because
    metrics.update(learned.metrics)
    timings.update(learned.timings)

    async def validation() -> dict[str, float]:
        return await validate(parts, step) if validation_due(settings, step) else {}

    end = StepEnd(step, batch, metrics, timings, started, skipped_because=reason, publish=not reason)
    cursor = LoopCursor(step + 1, run_id=parts.run_id, optimiser_step=int(state.step))
    return state, await finish_step(parts, state, end, cursor=cursor, loop_figures=validation)
