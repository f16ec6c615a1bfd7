"""When a trial's failed attempt may be retried: after the engine side has settled, within a bounded wait.

    waited = await wait_before_retry(Outcome.ENGINE_FAILED, engine=proxy.engine, config=cfg.rollout)

An attempt that failed for the infrastructure is retried (trial.py) only where it can succeed. After
`engine_failed` the next request must not go to the engine that died: a fleet (engine/fleet.py) is waited
on until every engine its router routes to answers its own health check (`EngineFleet.settled`: the router
has taken a dead engine out, or the engine is back), a single engine until it answers `health()`; at most
`rollout.retry_wait_s`, after which the retry goes anyway (and may fail again: it is counted). Any retry
first waits `rollout.retry_delay_s`. A `node_failed` attempt needs no wait here: the Ray executor takes every
slot of a lost node out of its pool as soon as one of them reports it (rollout/ray_executor.py), so the
retry runs on another node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from legorl_jax.config import RolloutConfig
from legorl_jax.engine.base import Settles
from legorl_jax.types import Outcome

log = logging.getLogger(__name__)
POLL_S = 0.25


async def engine_settled(engine: Any) -> bool:
    """Whether a new request to `engine` goes to an engine that answers (module docstring)."""
    if isinstance(engine, Settles):
        return await engine.settled()
    return bool(await engine.health())


async def wait_before_retry(outcome: Outcome, *, engine: Any, config: RolloutConfig) -> str:
    """Waits as the module docstring says before retrying an attempt that ended `outcome`; returns what it
    waited for, for the trial's log line."""
    await asyncio.sleep(config.retry_delay_s)
    if outcome is not Outcome.ENGINE_FAILED or engine is None:
        return f"{config.retry_delay_s:g} s"
    began = time.monotonic()
    deadline = began + config.retry_wait_s
    while True:
        try:
            if await asyncio.wait_for(engine_settled(engine), timeout=max(deadline - time.monotonic(), 0.1)):
                return f"the engine side to settle ({time.monotonic() - began:.1f} s)"
        except Exception as exc:  # noqa: BLE001 - a failing probe (or its timeout) is "not settled yet"
            log.debug("engine not settled yet: %r", exc)
        if time.monotonic() >= deadline:
            log.warning(
                "the engine side did not settle within rollout.retry_wait_s=%g s: retrying anyway",
                config.retry_wait_s,
            )
            return f"rollout.retry_wait_s={config.retry_wait_s:g} s (not settled)"
        await asyncio.sleep(POLL_S)
