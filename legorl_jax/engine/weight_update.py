"""Weight updates while requests are in flight: the three update policies (`engine.update_policy`).

    await update_weights(engine, source, version, "abort_resume")      # what `train.publish.Publisher` calls

A policy is a pause mode put around the engine's own `update_weights`: `engine.pause(mode)`, then
`engine.update_weights(source, version)`, then `engine.resume()` (also when the update fails, so a failed
publish never leaves the engine paused). What happens to a request in flight when the update lands:

| policy         | pause mode | a request decoding                           | a request arriving meanwhile |
|----------------|------------|----------------------------------------------|------------------------------|
| `drain`        | "drain"    | finishes on the old weights; the update      | waits (queued), then runs    |
|                |            | waits for it                                 | on the new weights           |
| `abort_resume` | "abort"    | ends with finish_reason "abort" and its      | waits, then runs on the new  |
|                |            | tokens so far; the caller re-issues it with  | weights                      |
|                |            | them appended (resume.py, the proxy does)    |                              |
| `in_place`     | "in_place" | keeps its slot and KV cache and continues on | waits, then runs on the new  |
|                |            | the new weights (`Generation.token_stale_kv` | weights                      |
|                |            | flags its tokens sampled over old K/V)       |                              |

Every output token carries the version that sampled it (`Generation.token_weight_versions`), under any
policy. What each costs: `drain` delays the update by the longest request in flight (a heavy tail of agent
replies makes that long) but keeps every request on one version; `abort_resume` updates at once and pays a
re-prefill of each request in flight (prompt and tokens so far, on the new weights: no old K/V is ever
attended to); `in_place` updates at once for free, but the tokens after it attend to K/V of the old
weights, which neither the old nor the new policy would have computed (PipelineRL's choice; the
trainer's recompute uses the new weights throughout, and its alignment gate leaves those tokens to
`offpolicy/*_stale_kv`, docs/alignment.md §3). `tools/bench_update.py` measures the first two costs.

Engines: `JaxEngine` (drain is one of its pause modes), `SGLangEngine` (SGLang's `pause_generation`
modes abort and in_place; drain is done client side, see its docstring) and `EngineFleet` (every engine
behind the router, one version). An engine without `pause`/`resume` (a test double, another `Engine`) can
only take `in_place`, where the update itself lands between decode steps.
"""

from __future__ import annotations

from typing import Any

from legorl_jax.config import UPDATE_POLICIES
from legorl_jax.engine.base import Pausable, WeightSource, updates_between_steps

PAUSE_MODE = {"drain": "drain", "abort_resume": "abort", "in_place": "in_place"}


def check_update_policy(policy: Any, engine: Any = None) -> str:
    """`policy` if it names an update policy the engine (when given) can follow; else a ValueError or
    TypeError naming it."""
    if policy not in UPDATE_POLICIES:
        raise ValueError(f"update_policy must be one of {UPDATE_POLICIES}, got {policy!r}")
    if engine is not None and policy != "in_place" and not isinstance(engine, Pausable):
        raise TypeError(
            f"update_policy {policy!r} needs an engine with pause(mode) and resume(); "
            f"{type(engine).__name__} has none (only 'in_place' works without them)"
        )
    return policy


async def update_weights(engine: Any, source: WeightSource, version: str, policy: str = "in_place") -> None:
    """Makes `engine` serve `source` as `version`, requests in flight following `policy` (module
    docstring)."""
    check_update_policy(policy, engine)
    lands_between_steps = policy == "in_place" and updates_between_steps(engine)
    pausable = engine if isinstance(engine, Pausable) else None
    # JaxEngine loads a directory while it keeps decoding
    if pausable is None or lands_between_steps:
        await engine.update_weights(source, version)
        return
    await pausable.pause(PAUSE_MODE[policy])
    try:
        await engine.update_weights(source, version)
    finally:
        await pausable.resume()
