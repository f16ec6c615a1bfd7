"""Which executor a run's trials use (`rollout.executor`), opened and closed, and where the proxies listen
for it. Above executor.py and ray_executor.py, so neither imports the other's opener.

    async with open_executor(cfg.rollout) as executor:   # None (local) or a RayExecutor
        batch = await collect(tasks, ..., executor=executor)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from legorl_jax.config import RolloutConfig
from legorl_jax.rollout.executor import TrialExecutor


@contextlib.asynccontextmanager
async def open_executor(rollout: RolloutConfig) -> AsyncIterator[TrialExecutor | None]:
    """The executor `rollout.executor` names, closed on exit: `RayExecutor` (connected to `rollout.ray`) for
    `ray`, None for `local` (the orchestrator then runs each attempt in this process)."""
    if rollout.executor != "ray":
        yield None
        return
    from legorl_jax.rollout.ray_executor import RayExecutor

    executor = await RayExecutor.start(rollout)
    try:
        yield executor
    finally:
        await executor.close()


def proxy_host(rollout: RolloutConfig) -> str:
    """Where the capture proxies listen: loopback, or `rollout.ray.proxy_host` when Ray nodes run trials."""
    return rollout.ray.proxy_host if rollout.executor == "ray" else "127.0.0.1"
