"""Collecting a batch of trials: G per task, a bounded number at a time, with the outcome taxonomy applied.

    batch = await collect(tasks, group_size=4, harness=harness, proxy=proxy, config=cfg.rollout, step=3)
    batch.trajectories        # every trial, dropped ones included (their `valid` is False)
    batch.kept                # what the trainer may use: infrastructure failures left out
    batch.dropped             # {reason: count}, e.g. {"sandbox_failed": 1}

Trials of task t in step s share the group id `t@s` and are archived under
`<runs_dir>/<experiment>/trials/step_<s>/<task>-<g>/` (trial.py). Policy failures stay in the batch with
reward 0; infrastructure failures leave it (after their retries) and are counted per reason, so one broken
container never teaches the policy anything. A live progress line shows done / running / dropped / reward.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import pathlib
import time
from collections.abc import Callable, Sequence

from legorl_jax.config import RolloutConfig
from legorl_jax.harness.base import Harness
from legorl_jax.proxy.base import Proxy
from legorl_jax.rollout.executor import TrialExecutor
from legorl_jax.rollout.progress import Progress
from legorl_jax.rollout.settings import TrialSettings
from legorl_jax.rollout.trial import run_trial
from legorl_jax.tasks.schema import Task
from legorl_jax.types import Trajectory
from legorl_jax.validate import positive_int


@dataclasses.dataclass(frozen=True)
class Batch:
    """The trials of one collection."""

    trajectories: tuple[Trajectory, ...]
    seconds: float

    @property
    def kept(self) -> tuple[Trajectory, ...]:
        return tuple(t for t in self.trajectories if t.valid)

    @property
    def dropped(self) -> dict[str, int]:
        return dict(collections.Counter(t.outcome.value for t in self.trajectories if not t.valid))

    @property
    def outcomes(self) -> dict[str, int]:
        return dict(collections.Counter(t.outcome.value for t in self.trajectories))

    @property
    def trials_per_minute(self) -> float:
        return 60.0 * len(self.trajectories) / self.seconds if self.seconds > 0 else 0.0


def trial_dir(config: RolloutConfig, step: int, trial_id: str) -> pathlib.Path:
    return pathlib.Path(config.runs_dir) / config.experiment / "trials" / f"step_{step}" / trial_id


async def collect(
    tasks: Sequence[Task],
    *,
    group_size: int,
    harness: Harness,
    proxy: Proxy,
    trials: TrialSettings | None = None,
    step: int = 0,
    sandbox_factory: Callable | None = None,
    progress: Progress | None = None,
    executor: TrialExecutor | None = None,
) -> Batch:
    """Runs `group_size` trials of every task, `config.concurrency` at a time (module docstring), each
    attempt in a slot of `executor` (this process when None; `ray_executor.RayExecutor` for Ray nodes)."""
    trials = trials or TrialSettings()
    config = trials.rollout
    positive_int("group_size", group_size)
    ids = [t.instance_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(
            "tasks must have distinct instance ids, got duplicates "
            f"{sorted({i for i in ids if ids.count(i) > 1})}"
        )
    limit = asyncio.Semaphore(config.concurrency)
    progress = progress or Progress(len(tasks) * group_size, label=f"step {step} trials")
    started = time.monotonic()

    async def one(task: Task, g: int) -> Trajectory:
        trial_id = f"{task.instance_id}-{g}"
        async with limit:
            progress.start()
            trajectory = await run_trial(
                task,
                harness=harness,
                proxy=proxy,
                trial_id=trial_id,
                group_id=f"{task.instance_id}@{step}",
                trial_dir=trial_dir(config, step, trial_id),
                trials=trials,
                sandbox_factory=sandbox_factory,
                executor=executor,
            )
            progress.finish(trial_id, trajectory.outcome.value, trajectory.reward, not trajectory.valid)
            return trajectory

    try:
        trajectories = await asyncio.gather(*(one(task, g) for task in tasks for g in range(group_size)))
    finally:
        progress.close()
    return Batch(tuple(trajectories), time.monotonic() - started)
