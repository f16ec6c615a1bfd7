"""What both RL loops share (loop.py, sync; async_loop.py, async): the parts of a run, the settings they
read, the checkpoint cursor, and one tail for every loop step.

    settings = LoopSettings.of(config)                       # the sub-configs a loop reads, not the root
    parts = Parts(settings, trainer, proxy, harness, train_tasks, validation_tasks, checkpointer,
                  publisher, tracker)
    state, update, timings = train_on(parts, state, batch.trajectories)   # advantages → pack → update
    record = await finish_step(parts, state, end, cursor=LoopCursor(next_step=step + 1, ...))

`finish_step` is the one place a step ends, in this order: checkpoint (`save_checkpoint`; the async loop
writes its ended, untrained groups beside it) → publish `version_of(step + 1)` → the engine's own figures
(a fleet's per-engine `engine/<i>/*`) → the loop's figures (sync: validation; async: versions, idle shares)
→ `time/*_s` → the tracker, the alerts and the log line. A figure or a save that every step needs goes
there; a figure of the update goes in `train_on`.

`LoopCursor` is what a checkpoint records of the loop: the next loop step, the Aim run, the optimiser step
and, in async mode, the group bookkeeping; it is written as the plain dict checkpoints always held
(`to_dict`), and reads back every cursor an earlier run wrote (`from_dict`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from legorl_jax.config import LOOP_MODES, AlgoConfig, Config, HarnessConfig, LoopConfig, TrainConfig
from legorl_jax.engine.base import EngineError, ReportsFigures
from legorl_jax.harness.base import Harness
from legorl_jax.monitor.rollout_metrics import alerts, rollout_metrics, trial_text
from legorl_jax.monitor.tracker import Tracker
from legorl_jax.proxy.base import Proxy
from legorl_jax.rollout.collect import Batch, collect
from legorl_jax.rollout.executor import TrialExecutor
from legorl_jax.rollout.settings import TrialSettings
from legorl_jax.tasks.schema import Task
from legorl_jax.train.advantages import trajectory_advantages
from legorl_jax.train.batch import pack_trajectories
from legorl_jax.train.checkpoint import Checkpointer
from legorl_jax.train.publish import Publisher
from legorl_jax.train.state import TrainState
from legorl_jax.train.step import Trainer, UpdateResult
from legorl_jax.types import Trajectory
from legorl_jax.validate import is_int
from legorl_jax.versions import version_of

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """The sub-configs the loops read (`LoopSettings.of(config)`): the loop's own, the update's (algo,
    train), the trials' (`TrialSettings`), the harness's and the seed; nothing else of the root config."""

    loop: LoopConfig
    algo: AlgoConfig
    train: TrainConfig
    harness: HarnessConfig
    trials: TrialSettings
    seed: int = 0
    eval_split: str | None = None
    """`tasks.eval_split`: validation runs only where a run has one."""

    @classmethod
    def of(cls, config: Config) -> LoopSettings:
        return cls(
            loop=config.loop,
            algo=config.algo,
            train=config.train,
            harness=config.harness,
            trials=TrialSettings.of(config),
            seed=config.seed,
            eval_split=config.tasks.eval_split,
        )


@dataclasses.dataclass
class Parts:
    """What one run is made of (built by `legorl_jax.run.build_parts`)."""

    settings: LoopSettings
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


@dataclasses.dataclass(frozen=True)
class LoopCursor:
    """Where a checkpointed run continues (module docstring). Sync runs use the first three fields."""

    next_step: int
    run_id: str = ""
    optimiser_step: int = 0
    mode: str = "sync"
    next_group: int = 0
    """async: the index the next new group gets."""
    in_flight: tuple[int, ...] = ()
    """async: groups admitted but not ended at the checkpoint (re-run on resume)."""
    pending: tuple[int, ...] = ()
    """async: groups ended but not trained at the checkpoint (saved in `pending_dir`)."""
    pending_dir: str = ""

    def __post_init__(self) -> None:
        for name in ("next_step", "optimiser_step", "next_group"):
            value = getattr(self, name)
            if not is_int(value) or value < 0:
                raise ValueError(f"loop cursor {name} must be an int >= 0, got {value!r}")
        if self.mode not in LOOP_MODES:
            raise ValueError(f"loop cursor mode must be one of {LOOP_MODES}, got {self.mode!r}")

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's `cursor` entry: a sync cursor as it always was (3 keys), an async one with its
        group bookkeeping."""
        plain = {"next_step": self.next_step, "run_id": self.run_id, "optimiser_step": self.optimiser_step}
        if self.mode == "async":
            plain.update(
                mode="async",
                next_group=self.next_group,
                in_flight=list(self.in_flight),
                pending=list(self.pending),
                pending_dir=self.pending_dir,
            )
        return plain

    @classmethod
    def from_dict(cls, plain: Mapping[str, Any]) -> LoopCursor:
        """A checkpoint's cursor, of any run so far: a sync one (no "mode"), an async one, a fresh start
        (`{"next_step": 0}`)."""
        if not isinstance(plain, Mapping) or "next_step" not in plain:
            raise ValueError(f"a loop cursor is a mapping with a next_step, got {plain!r}")
        return cls(
            next_step=plain["next_step"],
            run_id=str(plain.get("run_id", "")),
            optimiser_step=plain.get("optimiser_step", 0),
            mode=plain.get("mode", "sync"),
            next_group=plain.get("next_group", 0),
            in_flight=tuple(int(i) for i in plain.get("in_flight", ())),
            pending=tuple(int(i) for i in plain.get("pending", ())),
            pending_dir=str(plain.get("pending_dir") or ""),
        )


@dataclasses.dataclass
class StepEnd:
    """What a loop step hands to `finish_step`: its batch and figures so far, and how it went."""

    step: int
    batch: Batch
    metrics: dict[str, float]
    timings: dict[str, float]
    started: float
    """`time.monotonic()` at the start of the step's wall time (`time/total_s`)."""
    skipped_because: str = ""
    publish: bool = True
    groups: tuple[str, ...] = ()
    train_window: tuple[float, float] | None = None


def nothing_to_learn(batch: Batch) -> str:
    """Why this batch cannot change the policy, or '' when it can."""
    if not batch.kept:
        return f"all {len(batch.trajectories)} trials were dropped ({batch.dropped})"
    groups: dict[str, set[float]] = {}
    for t in batch.kept:
        groups.setdefault(t.group_id, set()).add(t.reward)
    if all(len(rewards) == 1 for rewards in groups.values()):
        return "every group's rewards were equal: nothing to learn (every advantage is 0)"
    return ""


def validation_due(settings: LoopSettings, step: int) -> bool:
    """Whether loop step `step` ends with a validation (`loop.validate_every`, and the last step)."""
    every = settings.loop.validate_every
    last = step == settings.loop.steps - 1
    return every > 0 and bool(settings.eval_split) and ((step + 1) % every == 0 or last)


def train_on(
    parts: Parts, state: TrainState, trajectories: Sequence[Trajectory], *, trainer_version: int | None = None
) -> tuple[TrainState, UpdateResult, dict[str, float]]:
    """advantages → pack → `Trainer.update` on `trajectories`; returns the new state, the update's result and
    the seconds of `packing` and `train_step`. `trainer_version` (async): the version `state` holds, for the
    update's per-version-gap figures."""
    algo, train = parts.settings.algo, parts.settings.train
    t = time.monotonic()
    advantages = trajectory_advantages(
        trajectories, std=algo.advantage_std, negative_weight=algo.negative_weight
    )
    packed, stats = pack_trajectories(
        trajectories,
        advantages,
        max_tokens=train.max_tokens,
        row_multiple=parts.trainer.row_multiple,
        routing=parts.trainer.routing,
    )
    timings = {"packing": time.monotonic() - t}
    t = time.monotonic()
    state, update = parts.trainer.update(state, packed, stats, trainer_version=trainer_version)
    timings["train_step"] = time.monotonic() - t
    return state, update, timings


@dataclasses.dataclass
class Learned:
    """What `learn` did with a step's batch."""

    state: TrainState
    skipped_because: str
    metrics: dict[str, float]
    timings: dict[str, float]
    window: tuple[float, float] | None
    """Unix seconds the update began and ended; None when skipped."""


async def learn(
    parts: Parts,
    state: TrainState,
    step: int,
    batch: Batch,
    *,
    trainer_version: int | None = None,
    in_thread: bool = False,
) -> Learned:
    """`train_on` the batch unless there is nothing to learn (`nothing_to_learn`, logged): all its trials,
    so the packer counts the dropped ones (`batch/dropped_trials`) and leaves them out;
    `in_thread` (async) runs the update in a worker thread so the event loop keeps serving the proxy."""
    reason = nothing_to_learn(batch)
    if reason:
        log.warning("step %d: update skipped: %s", step, reason)
        return Learned(state, reason, {}, {}, None)
    began = time.time()
    if in_thread:
        state, update, timings = await asyncio.to_thread(
            train_on, parts, state, batch.trajectories, trainer_version=trainer_version
        )
    else:
        state, update, timings = train_on(parts, state, batch.trajectories, trainer_version=trainer_version)
    window = (began, time.time())
    parts.tracker.log_distribution("align/logprob_diff", update.logprob_diffs, step=step)
    return Learned(state, "", dict(update.metrics), timings, window)


async def collect_trials(
    parts: Parts, tasks: Sequence[Task], step: int, *, validation: bool = False
) -> Batch:
    """One step's trials of `tasks` (`rollout.group_size` each), or a validation's (`loop.validation_*`,
    archived under `<experiment>/validation`, on the validation proxy)."""
    settings = parts.settings
    trials = settings.trials.for_validation() if validation else settings.trials
    return await collect(
        tasks,
        group_size=settings.loop.validation_group_size if validation else trials.rollout.group_size,
        harness=parts.harness,
        proxy=(parts.validation_proxy or parts.proxy) if validation else parts.proxy,
        trials=trials,
        step=step,
        executor=parts.executor,
    )


async def validate(parts: Parts, step: int) -> dict[str, float]:
    """The validation split's solve rate with the current weights: `val/solve_rate`, `val/coverage`, ..."""
    tasks = list(parts.validation_tasks)[: parts.settings.loop.validation_tasks]
    figures = rollout_metrics(await collect_trials(parts, tasks, step, validation=True))
    return {
        "val/solve_rate": figures["rollout/solve_rate"],
        "val/reward_mean": figures["rollout/reward_mean"],
        "val/coverage": figures["rollout/coverage"],
        "val/trials": figures["rollout/trials"],
    }


async def save_checkpoint(
    parts: Parts,
    state: TrainState,
    cursor: LoopCursor,
    *,
    beside: Callable[[LoopCursor], None] | None = None,
    in_thread: bool = False,
) -> None:
    """Checkpoints `state` under loop step `cursor.next_step` when one is due, and always after the run's
    last step; `beside` writes what the loop keeps next to it (async: the ended, untrained groups) just
    before a save that happens, never for one the time budget puts off (train/checkpoint.py). `in_thread`
    (async) saves from a worker thread so trials run on; the sync loop saves from this thread (on several
    processes its `LeadingCheckpointer` then makes its collectives where the update made its own)."""
    ckpt = parts.checkpointer
    last = cursor.next_step == parts.settings.loop.steps
    if not (last or ckpt.should_save(cursor.next_step)):
        return
    save = functools.partial(
        ckpt.maybe_save,
        state,
        cursor=cursor.to_dict(),
        weights_version=version_of(cursor.next_step),
        step=cursor.next_step,
        force=last,
        prepare=None if beside is None else functools.partial(beside, cursor),
    )
    if in_thread:
        await asyncio.to_thread(save)
    else:
        save()


async def engine_figures(parts: Parts, step: int) -> dict[str, float]:
    """The engine's own figures where it reports any (a fleet: per-engine load, cache and publish,
    `engine/<i>/*`); none, with a warning, when it cannot be reached."""
    engine = parts.publisher.engine
    if not isinstance(engine, ReportsFigures):
        return {}
    try:
        return await engine.metrics()
    except EngineError as exc:
        log.warning("step %d: no engine figures: %s", step, exc)
        return {}


async def finish_step(
    parts: Parts,
    state: TrainState,
    end: StepEnd,
    *,
    cursor: LoopCursor,
    beside_checkpoint: Callable[[LoopCursor], None] | None = None,
    loop_figures: Callable[[], Awaitable[dict[str, float]]] | None = None,
    in_thread: bool = False,
) -> StepRecord:
    """The tail of every loop step (module docstring): checkpoint → publish → engine figures → the loop's
    figures (`loop_figures`, after the publish) → timings → monitor; returns the step's record. `in_thread`:
    `save_checkpoint`'s."""
    step, metrics, timings = end.step, end.metrics, end.timings
    t = time.monotonic()
    await save_checkpoint(parts, state, cursor, beside=beside_checkpoint, in_thread=in_thread)
    timings["checkpoint"] = time.monotonic() - t
    if end.publish:
        t = time.monotonic()
        await parts.publisher.publish(state.params, version_of(step + 1))
        timings["publish"] = time.monotonic() - t
    metrics.update(await engine_figures(parts, step))
    if loop_figures is not None:
        metrics.update(await loop_figures())
    timings["total"] = time.monotonic() - end.started
    metrics.update({f"time/{name}_s": seconds for name, seconds in timings.items()})
    metrics["loop/skipped_update"] = float(bool(end.skipped_because))
    monitor(parts, step, end.batch, metrics)
    trained = not end.skipped_because
    return StepRecord(step, metrics, trained, end.skipped_because, end.groups, end.train_window)


def monitor(parts: Parts, step: int, batch: Batch, metrics: dict[str, float]) -> None:
    """Logs a step's figures (and, with `loop.trial_texts`, its conversations), its alerts and one line."""
    parts.tracker.log(metrics, step=step)
    if parts.settings.loop.trial_texts:
        for t in batch.trajectories:
            context = {
                "task": t.task_id,
                "reward": t.reward,
                "outcome": t.outcome.value,
                "harness": parts.settings.harness.name,
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
