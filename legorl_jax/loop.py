"""The synchronous RL loop (docs/architecture.md §3), top to bottom: collect → advantages → pack → update →
checkpoint → publish → monitor, with validation every `loop.validate_every` steps.

    parts = Parts(config, trainer, proxy, harness, train_tasks, validation_tasks, checkpointer, publisher,
                  tracker)
    summary = await run_loop(parts, state, start_step=0)

`legorl_jax.run` builds the parts (engine, proxy, harness, trainer, checkpointer, publisher, tracker) from the
config and resumes; this module only orders them. A loop step `s` collects with the weights published as
`version_of(s)` and, after its update, publishes `version_of(s + 1)`. A step whose trials were all dropped
(infrastructure failures) skips the update and says why; so does a step whose every group had one reward
(no advantage, nothing to learn). The checkpoint's cursor is the next loop step and the Aim run, so a resumed
run continues the same Aim run at the step after the last one saved, and the trial archive of steps after
it (trials of a step that was never trained on) is set aside, not reused: nothing lost, nothing trained twice.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

from legorl_jax.config import Config
from legorl_jax.engine.base import EngineError
from legorl_jax.engine.fleet import EngineFleet
from legorl_jax.harness.base import Harness
from legorl_jax.monitor.rollout_metrics import alerts, rollout_metrics, trial_text
from legorl_jax.monitor.tracker import Tracker
from legorl_jax.proxy.base import Proxy
from legorl_jax.rollout.collect import Batch, collect
from legorl_jax.rollout.executor import TrialExecutor
from legorl_jax.tasks.schema import Task
from legorl_jax.train.advantages import trajectory_advantages
from legorl_jax.train.batch import pack_trajectories
from legorl_jax.train.checkpoint import Checkpointer
from legorl_jax.train.publish import Publisher, version_of
from legorl_jax.train.state import TrainState
from legorl_jax.train.step import Trainer, UpdateResult
from legorl_jax.types import Trajectory

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Parts:
    """What one run is made of (built by `legorl_jax.run`)."""

    config: Config
    trainer: Trainer
    proxy: Proxy
    harness: Harness
    train_tasks: Sequence[Task]
    validation_tasks: Sequence[Task]
    checkpointer: Checkpointer
    publisher: Publisher
    tracker: Tracker
    validation_proxy: Proxy | None = None
    run_id: str = ""
    executor: TrialExecutor | None = None
    """Where trials run (`rollout.executor`); None: in this process."""


@dataclasses.dataclass
class StepRecord:
    """One loop step as the summary table shows it."""

    step: int
    metrics: dict[str, float]
    trained: bool
    skipped_because: str = ""
    groups: tuple[str, ...] = ()  # async: the group ids the step trained on
    train_window: tuple[float, float] | None = None  # async: unix seconds the update began and ended


def tasks_for_step(tasks: Sequence[Task], step: int, per_step: int | None, seed: int) -> list[Task]:
    """The tasks of loop step `step`: all, or `per_step` drawn by (seed, step) so a resume redraws them."""
    if per_step is None or per_step >= len(tasks):
        return list(tasks)
    return random.Random(f"{seed}:{step}").sample(list(tasks), per_step)


async def run_loop(
    parts: Parts, state: TrainState, *, start_step: int = 0, cursor: dict[str, Any] | None = None
) -> list[StepRecord]:
    """Runs loop steps `start_step .. loop.steps - 1` (module docstring); returns one record per step run.

    With `loop.mode=async` the fully-asynchronous loop runs them instead (legorl_jax/async_loop.py),
    continuing a resumed run from the checkpoint's `cursor`."""
    cfg = parts.config
    if cfg.loop.mode == "async":
        from legorl_jax.async_loop import run_async_loop

        return await run_async_loop(parts, state, start_step=start_step, cursor=cursor)
    records = []
    for step in range(start_step, cfg.loop.steps):
        started = time.monotonic()
        tasks = tasks_for_step(parts.train_tasks, step, cfg.loop.tasks_per_step, cfg.seed)
        batch = await _collect(parts, tasks, step, parts.proxy, cfg.rollout.group_size, "trials")
        metrics = rollout_metrics(batch)
        timings = {"rollout": time.monotonic() - started}

        reason = _nothing_to_learn(batch)
        if reason:
            log.warning("step %d: update skipped: %s", step, reason)
        else:
            state, update, train_timings = train_on(parts, state, batch.trajectories)
            metrics.update(update.metrics)
            parts.tracker.log_distribution("align/logprob_diff", update.logprob_diffs, step=step)
            timings.update(train_timings)

        t = time.monotonic()
        cursor = {"next_step": step + 1, "run_id": parts.run_id, "optimiser_step": int(state.step)}
        parts.checkpointer.maybe_save(
            state, cursor=cursor, weights_version=version_of(step + 1), step=step + 1
        )
        timings["checkpoint"] = time.monotonic() - t
        if not reason:
            t = time.monotonic()
            await parts.publisher.publish(state.params, version_of(step + 1))
            timings["publish"] = time.monotonic() - t
        if isinstance(parts.publisher.engine, EngineFleet):  # per-engine load, cache and publish figures
            try:
                metrics.update(await parts.publisher.engine.metrics())
            except EngineError as exc:
                log.warning("step %d: no engine fleet figures: %s", step, exc)

        if _validation_due(cfg, step):
            metrics.update(await validate(parts, step))
        timings["total"] = time.monotonic() - started
        metrics.update({f"time/{name}_s": seconds for name, seconds in timings.items()})
        metrics["loop/skipped_update"] = float(bool(reason))
        _monitor(parts, step, batch, metrics)
        records.append(StepRecord(step, metrics, not reason, reason))
    parts.checkpointer.wait()
    return records


def train_on(
    parts: Parts, state: TrainState, trajectories: Sequence[Trajectory], *, trainer_version: int | None = None
) -> tuple[TrainState, UpdateResult, dict[str, float]]:
    """advantages → pack → `Trainer.update` on `trajectories`; returns the new state, the update's result and
    the seconds of `packing` and `train_step`. `trainer_version` (async): the version `state` holds, for the
    update's per-version-gap figures."""
    cfg = parts.config
    t = time.monotonic()
    advantages = trajectory_advantages(
        trajectories, std=cfg.algo.advantage_std, negative_weight=cfg.algo.negative_weight
    )
    packed, stats = pack_trajectories(
        trajectories,
        advantages,
        max_tokens=cfg.train.max_tokens,
        row_multiple=parts.trainer.row_multiple,
        routing=parts.trainer.routing,
    )
    timings = {"packing": time.monotonic() - t}
    t = time.monotonic()
    state, update = parts.trainer.update(state, packed, stats, trainer_version=trainer_version)
    timings["train_step"] = time.monotonic() - t
    return state, update, timings


async def validate(parts: Parts, step: int) -> dict[str, float]:
    """The validation split's solve rate with the current weights: `val/solve_rate`, `val/coverage`, ..."""
    cfg = parts.config
    tasks = list(parts.validation_tasks)[: cfg.loop.validation_tasks]
    proxy = parts.validation_proxy or parts.proxy
    batch = await _collect(parts, tasks, step, proxy, cfg.loop.validation_group_size, "validation")
    figures = rollout_metrics(batch)
    return {
        "val/solve_rate": figures["rollout/solve_rate"],
        "val/reward_mean": figures["rollout/reward_mean"],
        "val/coverage": figures["rollout/coverage"],
        "val/trials": figures["rollout/trials"],
    }


async def _collect(
    parts: Parts, tasks: Sequence[Task], step: int, proxy: Proxy, group_size: int, kind: str
) -> Batch:
    cfg = parts.config
    rollout = (
        cfg.rollout
        if kind == "trials"
        else dataclasses.replace(cfg.rollout, experiment=f"{cfg.rollout.experiment}/{kind}")
    )
    return await collect(
        tasks,
        group_size=group_size,
        harness=parts.harness,
        proxy=proxy,
        config=rollout,
        step=step,
        step_limit=cfg.harness.step_limit,
        model=cfg.harness.model,
        sandbox_config=cfg.sandbox,
        verifier_config=cfg.verifier,
        executor=parts.executor,
    )


def _nothing_to_learn(batch: Batch) -> str:
    """Why this batch cannot change the policy, or '' when it can."""
    if not batch.kept:
        return f"all {len(batch.trajectories)} trials were dropped ({batch.dropped})"
    groups: dict[str, set[float]] = {}
    for t in batch.kept:
        groups.setdefault(t.group_id, set()).add(t.reward)
    if all(len(rewards) == 1 for rewards in groups.values()):
        return "every group's trials got the same reward, so every advantage is 0"
    return ""


def _validation_due(cfg: Config, step: int) -> bool:
    every = cfg.loop.validate_every
    last = step == cfg.loop.steps - 1
    return every > 0 and bool(cfg.tasks.eval_split) and ((step + 1) % every == 0 or last)


def _monitor(parts: Parts, step: int, batch: Batch, metrics: dict[str, float]) -> None:
    cfg = parts.config
    parts.tracker.log(metrics, step=step)
    if cfg.loop.trial_texts:
        for t in batch.trajectories:
            context = {
                "task": t.task_id,
                "reward": t.reward,
                "outcome": t.outcome.value,
                "harness": cfg.harness.name,
                "step": step,
            }
            parts.tracker.log_text("trials/conversation", trial_text(t), step=step, context=context)
    for line in alerts(metrics, moe=parts.trainer.routing is not None):
        log.warning("step %d: %s", step, line)
    log.info(
        "step %d: reward %.3f solve %.3f (%d scored of %d) dropped %s%s",
        step,
        metrics["rollout/reward_mean"],
        metrics["rollout/solve_rate"],
        int(metrics["rollout/scored"]),
        int(metrics["rollout/trials"]),
        batch.dropped or "none",
        f" val solve {metrics['val/solve_rate']:.3f}" if "val/solve_rate" in metrics else "",
    )
