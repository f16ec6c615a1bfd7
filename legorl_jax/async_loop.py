"""The fully-asynchronous RL loop (`loop.mode=async`; docs/architecture.md §9): trials never wait for the
trainer, and the trainer waits only for groups to end.

    records = await run_async_loop(parts, state, start_step=0, cursor=None)  # run.run_loop picks it

Rollout side. Groups (one task's `rollout.group_size` trials, group id `<task>@g<n>`) are admitted one after
another, group n's task drawn from a seeded permutation of the train tasks per pass over them; their trials
run `rollout.concurrency` at a time, archived under `trials/group_<n>/`. A new group is admitted when a trial
slot is free and, AReaL's admission control, while fewer than `(loop.max_staleness + 1) × groups_per_step`
groups are outstanding (admitted and not yet trained-and-published-over: running, ended and waiting, or in the
update being computed), so that, taken in order, a group is trained at most `max_staleness` versions after
the one it started with.

Group buffer. A group is ready when each of its trials ended (kept or dropped); one whose trials were all
dropped (infrastructure failures) is discarded and counted (`loop/empty_groups`).

Trainer side. Loop step k (trainer version k: the weights it updates were published as `version_of(k)`) takes
the first `groups_per_step` ready groups in the order they ended, dropping and counting (`loop/stale_groups`)
any whose staleness, k − the oldest version among its sampled tokens, exceeds `max_staleness` (never silently
trained); then advantages → pack → `Trainer.update` in a worker thread (the event loop keeps serving the
proxy, so trials run on) → loop_step.finish_step, as the sync loop (checkpoint → publish `version_of(k + 1)`
under `engine.update_policy` → engine figures → this loop's figures → timings → monitor). Every step
publishes, even one whose update was skipped (no advantage): versions count trainer steps. Validation
(`loop.validate_every`) runs as its own task on the validation proxy; its figures join the step that started
it when it ends, and training never waits for it.

Figures per step, beside the sync loop's rollout figures over the trained groups: `loop/trainer_idle_share`
(time the trainer waited for groups over the step's wall time), `loop/rollout_idle_share` (1 − trial-seconds
running over `rollout.concurrency` × the step's wall time), `loop/trajectories_trained` (cumulative),
`loop/trajectories_per_hour` (since the loop started), `loop/stale_groups`, `loop/empty_groups`,
`loop/in_flight_trials`, `loop/ready_groups`, `loop/version`, `loop/stalls`, `time/*_s` and, behind an
engine fleet, its per-engine `engine/<i>/*`.

Watchdog. A loop in which no trial ended and no step finished for `loop.stall_timeout_s` is reported: an error
naming what runs and what the trainer waits for, once per period it stays so (`loop/stalls`); the fully-async
validation deadlock of the original (a closed wait cycle, no error) cannot go unnoticed.

Checkpoint and resume. The cursor (`loop_step.LoopCursor`, mode "async") holds the next step, the next group
index and the groups in flight; the groups that ended but were not trained are written beside the checkpoint
(`<checkpoints>/pending/<step>/`, rollout/store.py). A resumed run trains those first, re-runs the groups
that were in flight (their archives set aside as `group_<n>.abandoned-<time>`, as the sync loop sets aside
uncommitted steps), then admits new ones: nothing trained twice, nothing lost that had ended.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import pathlib
import random
import shutil
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from legorl_jax.loop_step import (
    LoopCursor,
    Parts,
    StepEnd,
    StepRecord,
    finish_step,
    learn,
    validate,
    validation_due,
)
from legorl_jax.monitor.offpolicy import staleness_metrics
from legorl_jax.monitor.rollout_metrics import rollout_metrics
from legorl_jax.rollout.collect import Batch
from legorl_jax.rollout.store import load_trajectories, save_trajectories
from legorl_jax.rollout.trial import run_trial
from legorl_jax.tasks.schema import Task
from legorl_jax.train.state import TrainState
from legorl_jax.types import Trajectory

log = logging.getLogger(__name__)

PENDING_DIR = "pending"


def task_for_group(tasks: Sequence[Task], index: int, seed: int) -> Task:
    """Group `index`'s task: pass `index // len(tasks)` over the tasks in a seeded order (a resume redraws
    the same)."""
    order = list(tasks)
    random.Random(f"{seed}:pass:{index // len(order)}").shuffle(order)
    return order[index % len(order)]


def groups_per_step(parts: Parts) -> int:
    """`loop.groups_per_step`, or the groups a sync step has (`tasks_per_step`, or every train task)."""
    loop = parts.settings.loop
    if loop.groups_per_step is not None:
        return loop.groups_per_step
    return loop.tasks_per_step or len(parts.train_tasks)


@dataclasses.dataclass
class Group:
    """One task's trials, admitted together, trained together."""

    index: int
    task: Task
    size: int
    started_version: int
    trajectories: dict[int, Trajectory] = dataclasses.field(default_factory=dict)

    @property
    def group_id(self) -> str:
        return f"{self.task.instance_id}@g{self.index}"

    @property
    def ended(self) -> bool:
        return len(self.trajectories) == self.size

    def all_trajectories(self) -> list[Trajectory]:
        return [self.trajectories[g] for g in sorted(self.trajectories)]

    def staleness(self, version: int) -> int:
        """Trainer `version` − the oldest version its kept trials sampled under (the version it started
        with when none sampled anything)."""
        found = [t.oldest_version for t in self.trajectories.values() if t.valid]
        known = [v for v in found if v is not None]
        return version - (min(known) if known else self.started_version)


class AsyncLoop:
    """The state of one fully-asynchronous run (module docstring)."""

    def __init__(self, parts: Parts, state: TrainState, *, start_step: int, cursor: LoopCursor | None):
        settings = parts.settings
        self.parts, self.state, self.loop = parts, state, settings.loop
        self.trials = settings.trials
        self.per_step = groups_per_step(parts)
        self.max_outstanding = (self.loop.max_staleness + 1) * self.per_step
        self.version = start_step
        self.folder = pathlib.Path(self.trials.rollout.runs_dir) / self.trials.rollout.experiment
        cursor = cursor or LoopCursor(start_step, mode="async")
        self.next_group = cursor.next_group
        self.rerun: collections.deque[int] = collections.deque(sorted(cursor.in_flight))
        self.ready: collections.deque[Group] = collections.deque()
        self.running: dict[int, Group] = {}
        self.outstanding: set[int] = set()
        self.trials_live = 0  # admitted trials that have not ended (running or waiting for a slot)
        self.trials_running = 0
        self.slots = asyncio.Semaphore(self.trials.rollout.concurrency)
        self.changed = asyncio.Condition()
        self.failure: BaseException | None = None
        self.tasks: set[asyncio.Task] = set()
        self.validations: list[asyncio.Task] = []
        # accounting
        self.started = time.monotonic()
        self.last_progress = self.last_end = self.started
        self.busy_s = 0.0  # trial-seconds running
        self._busy_mark = self.started
        self.busy_at_last = 0.0  # busy_s at the end of the last step
        self.trained_trajectories = 0
        self.stale_total = 0
        self.empty_total = 0
        self.stalls = 0
        if cursor.pending_dir:
            self._restore_pending(pathlib.Path(cursor.pending_dir))

    # ------------------------------------------------------------------------------------------------
    # rollout side

    async def admit_forever(self) -> None:
        """Admits groups while a slot is free and the staleness bound allows (module docstring)."""
        while True:
            async with self.changed:
                await self.changed.wait_for(self._may_admit)
                index = self.rerun.popleft() if self.rerun else self._new_index()
                task = task_for_group(self.parts.train_tasks, index, self.parts.settings.seed)
                group = Group(index, task, self.trials.rollout.group_size, self.version)
                self.running[index] = group
                self.outstanding.add(index)
                self.trials_live += group.size
            for g in range(group.size):
                self._spawn(self._trial(group, g))

    def _may_admit(self) -> bool:
        slot_free = self.trials_live < self.trials.rollout.concurrency
        return slot_free and len(self.outstanding) < self.max_outstanding

    def _new_index(self) -> int:
        index = self.next_group
        self.next_group += 1
        return index

    async def _trial(self, group: Group, g: int) -> None:
        trial_id = f"{group.task.instance_id}-{g}"
        trials = self.trials
        async with self.slots:
            self._count_running(+1)
            try:
                trajectory = await run_trial(
                    group.task,
                    harness=self.parts.harness,
                    proxy=self.parts.proxy,
                    trial_id=trial_id,
                    group_id=group.group_id,
                    trial_dir=group_dir(self.folder, group.index) / trial_id,
                    trials=trials,
                    executor=self.parts.executor,
                )
            finally:
                self._count_running(-1)
        await self._ended(group, g, trajectory)

    async def _ended(self, group: Group, g: int, trajectory: Trajectory) -> None:
        """Files trial `g`'s trajectory in its group; a group whose trials all ended is ready, or discarded
        when every one was dropped."""
        log.info(
            "trial %s of group %d: %s reward %.2f (version %d, %d trials running, %d groups ready)",
            trajectory.trial_id,
            group.index,
            trajectory.outcome.value,
            trajectory.reward,
            self.version,
            self.trials_running,
            len(self.ready),
        )
        async with self.changed:
            group.trajectories[g] = trajectory
            self.trials_live -= 1
            self.last_progress = time.monotonic()
            if group.ended:
                del self.running[group.index]
                if any(t.valid for t in group.trajectories.values()):
                    self.ready.append(group)
                else:
                    self.empty_total += 1
                    self.outstanding.discard(group.index)
                    log.warning("group %s: every trial was dropped; discarded", group.group_id)
            self.changed.notify_all()

    def _count_running(self, delta: int) -> None:
        now = time.monotonic()
        self.busy_s += self.trials_running * (now - self._busy_mark)
        self._busy_mark = now
        self.trials_running += delta

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self.failure is None:
            self.failure = task.exception()
            asyncio.get_running_loop().create_task(self._wake())

    async def _wake(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    # ------------------------------------------------------------------------------------------------
    # trainer side

    async def take(self) -> tuple[list[Group], int]:
        """The next `groups_per_step` ready groups at the current version, and how many stale ones were
        dropped on the way."""
        taken: list[Group] = []
        stale = 0
        async with self.changed:
            while len(taken) < self.per_step:
                await self.changed.wait_for(lambda: bool(self.ready) or self.failure is not None)
                if self.failure is not None:
                    raise RuntimeError(f"a trial task failed: {self.failure!r}") from self.failure
                group = self.ready.popleft()
                lag = group.staleness(self.version)
                if lag > self.loop.max_staleness:
                    stale += 1
                    self.outstanding.discard(group.index)
                    log.warning(
                        "group %s dropped as stale: %d versions behind the trainer (loop.max_staleness=%d)",
                        group.group_id,
                        lag,
                        self.loop.max_staleness,
                    )
                    self.changed.notify_all()
                    continue
                taken.append(group)
        self.stale_total += stale
        return taken, stale

    async def run(self, start_step: int) -> list[StepRecord]:
        """Trainer steps `start_step .. loop.steps - 1` while the admission and the watchdog run beside;
        waits for the validations still running, then stops what runs."""
        records: list[StepRecord] = []
        self._spawn(self.admit_forever())
        self._spawn(self.watchdog())
        self.last_end, self.busy_at_last = time.monotonic(), self._busy_now()
        try:
            for step in range(start_step, self.loop.steps):
                record = await self.step(step)
                records.append(record)
                if validation_due(self.parts.settings, step):
                    self.validations.append(asyncio.create_task(self._validate(step, record)))
            if self.validations:
                await asyncio.gather(*self.validations)
        finally:
            await self._stop()
        self.parts.checkpointer.wait()
        return records

    async def step(self, step: int) -> StepRecord:
        """Trainer step `step`: the next ready groups, the update on them in a worker thread, then the shared
        tail (`finish_step`) with this loop's pending groups beside the checkpoint and its figures."""
        began = time.monotonic()
        groups, stale = await self.take()
        waited = time.monotonic() - began
        trajectories = [t for g in groups for t in g.all_trajectories()]
        batch = Batch(tuple(trajectories), time.monotonic() - self.last_end)
        metrics = rollout_metrics(batch)
        metrics.update(staleness_metrics(batch.kept, step))
        learned = await learn(self.parts, self.state, step, batch, trainer_version=step, in_thread=True)
        self.state = learned.state
        metrics.update(learned.metrics)
        if not learned.skipped_because:
            self.trained_trajectories += len(batch.kept)
        end = StepEnd(
            step,
            batch,
            metrics,
            {"wait_for_groups": waited, **learned.timings},
            self.last_end,
            skipped_because=learned.skipped_because,
            groups=tuple(g.group_id for g in groups),
            train_window=learned.window,
        )

        async def figures() -> dict[str, float]:
            return await self._published(step, groups, stale, waited)

        return await finish_step(
            self.parts,
            self.state,
            end,
            cursor=self.cursor(step + 1),
            beside_checkpoint=self._save_pending,
            loop_figures=figures,
            in_thread=True,
        )

    async def _published(self, step: int, groups: list[Group], stale: int, waited: float) -> dict[str, float]:
        """After step `step`'s publish: the trainer is at version step + 1, its groups are no longer
        outstanding (admission may go on); returns the step's `loop/*` figures (module docstring)."""
        async with self.changed:
            self.version = step + 1
            self.outstanding.difference_update(g.index for g in groups)
            self.last_progress = time.monotonic()
            self.changed.notify_all()
        now, busy = time.monotonic(), self._busy_now()
        wall = now - self.last_end
        concurrency = self.trials.rollout.concurrency
        rollout_idle = 1.0 - (busy - self.busy_at_last) / (concurrency * wall) if wall else 0.0
        self.last_end, self.busy_at_last = now, busy
        return {
            "loop/trainer_idle_share": waited / wall if wall > 0 else 0.0,
            "loop/rollout_idle_share": rollout_idle,
            "loop/trajectories_trained": float(self.trained_trajectories),
            "loop/trajectories_per_hour": self.trained_trajectories / ((now - self.started) / 3600),
            "loop/stale_groups": float(stale),
            "loop/stale_groups_total": float(self.stale_total),
            "loop/empty_groups_total": float(self.empty_total),
            "loop/in_flight_trials": float(self.trials_live),
            "loop/ready_groups": float(len(self.ready)),
            "loop/version": float(step + 1),
            "loop/stalls": float(self.stalls),
        }

    def _busy_now(self) -> float:
        return self.busy_s + self.trials_running * (time.monotonic() - self._busy_mark)

    async def _validate(self, step: int, record: StepRecord) -> None:
        """Validation on its own trials; its figures join step `step`'s record and row when it ends."""
        figures = await validate(self.parts, step)
        record.metrics.update(figures)
        self.parts.tracker.log(record.metrics, step=step)
        log.info("step %d: validation solve rate %.3f", step, figures["val/solve_rate"])

    async def _stop(self) -> None:
        """Cancels what still runs: the admission, the watchdog, trials in flight, validations."""
        leftover = [*self.tasks, *(v for v in self.validations if not v.done())]
        for task in leftover:
            task.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)
        if self.running:
            log.info(
                "loop ended with %d groups in flight (cancelled, not trained): %s",
                len(self.running),
                sorted(self.running),
            )

    # ------------------------------------------------------------------------------------------------
    # checkpoints

    def cursor(self, next_step: int) -> LoopCursor:
        """The checkpoint cursor of this moment, before trainer step `next_step` (module docstring)."""
        return LoopCursor(
            next_step,
            run_id=self.parts.run_id,
            optimiser_step=int(self.state.step),
            mode="async",
            next_group=self.next_group,
            in_flight=tuple(sorted([*self.running, *self.rerun])),
            pending=tuple(g.index for g in self.ready),
            pending_dir=str(self.parts.checkpointer.directory / PENDING_DIR / str(next_step)),
        )

    def _save_pending(self, cursor: LoopCursor) -> None:
        """Writes the ended, untrained groups of `cursor.pending` beside checkpoint `cursor.next_step` and
        prunes the folders of checkpoints no longer kept. The checkpointer runs it just before a save that
        happens (in the saving thread; groups that end meanwhile are not in the cursor and not written)."""
        pending = set(cursor.pending)
        ready = [t for g in list(self.ready) if g.index in pending for t in g.all_trajectories()]
        save_trajectories(pathlib.Path(cursor.pending_dir), ready)
        ckpt = self.parts.checkpointer
        kept = set(ckpt.all_steps()) | {cursor.next_step}
        for old in (ckpt.directory / PENDING_DIR).iterdir():
            if old.name.isdigit() and int(old.name) not in kept and int(old.name) < min(kept):
                shutil.rmtree(old, ignore_errors=True)

    def _restore_pending(self, folder: pathlib.Path) -> None:
        """The groups a checkpoint saved as ended but untrained, ready again (in the order they ended)."""
        by_group: dict[str, list[Trajectory]] = {}
        for t in load_trajectories(folder):
            by_group.setdefault(t.group_id, []).append(t)
        for group_id, trajectories in by_group.items():
            task_id, _, index = group_id.rpartition("@g")
            task = next(t for t in self.parts.train_tasks if t.instance_id == task_id)
            group = Group(int(index), task, len(trajectories), self.version)
            group.trajectories = dict(enumerate(trajectories))
            self.ready.append(group)
            self.outstanding.add(group.index)
        log.info("resumed %d ended, untrained groups from %s", len(self.ready), folder)

    # ------------------------------------------------------------------------------------------------
    # watchdog

    async def watchdog(self) -> None:
        """Reports a loop that made no progress for `loop.stall_timeout_s` (module docstring)."""
        timeout = self.loop.stall_timeout_s
        reported_at = 0.0
        while True:
            await asyncio.sleep(min(timeout / 4, 30.0))
            idle = time.monotonic() - self.last_progress
            if idle >= timeout and self.last_progress != reported_at:
                reported_at = self.last_progress
                self.stalls += 1
                log.error("%s", self.stall_report(idle))

    def stall_report(self, idle: float) -> str:
        return (
            f"the async loop made no progress for {idle:.0f} s (loop.stall_timeout_s="
            f"{self.loop.stall_timeout_s:g}): no trial ended and no update finished. Trainer at version "
            f"{self.version} waits for {self.per_step} ready groups and has {len(self.ready)}; "
            f"{self.trials_running} trials running, {self.trials_live - self.trials_running} waiting for a "
            f"slot; groups in flight {sorted(self.running)}; outstanding {len(self.outstanding)} of "
            f"{self.max_outstanding} allowed"
        )


def group_dir(folder: pathlib.Path, index: int) -> pathlib.Path:
    """Where group `index`'s trials are archived."""
    return folder / "trials" / f"group_{index}"


def set_aside_unfinished_groups(folder: pathlib.Path, cursor: LoopCursor) -> list[pathlib.Path]:
    """Moves the archives of groups that were in flight at the checkpoint, or admitted after it, aside
    (`group_<n>.abandoned-<time>`): they are re-run or never trained. Returns the new paths."""
    moved = []
    stamp = time.strftime("%Y%m%dT%H%M%S")
    in_flight, next_group = set(cursor.in_flight), cursor.next_group
    root = folder / "trials"
    if root.is_dir():
        for path in sorted(root.glob("group_*")):
            suffix = path.name.removeprefix("group_")
            if suffix.isdigit() and (int(suffix) in in_flight or int(suffix) >= next_group):
                target = path.with_name(f"{path.name}.abandoned-{stamp}")
                path.rename(target)
                moved.append(target)
    return moved


async def run_async_loop(
    parts: Parts, state: TrainState, *, start_step: int = 0, cursor: LoopCursor | None = None
) -> list[StepRecord]:
    """Runs trainer steps `start_step .. loop.steps - 1` fully asynchronously (module docstring), continuing
    from a checkpoint's `cursor` when resumed; returns one record per step."""
    if cursor is not None and cursor.mode != "async":
        raise ValueError(
            f"the checkpoint was written by a loop.mode={cursor.mode!r} run: resume it in that mode (its "
            "cursor holds no async group state)"
        )
    if not parts.train_tasks:
        raise ValueError("loop.mode=async needs at least one train task, got none")
    loop = AsyncLoop(parts, state, start_step=start_step, cursor=cursor)
    return await loop.run(start_step)
