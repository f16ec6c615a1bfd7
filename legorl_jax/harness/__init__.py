"""Harnesses: unmodified coding agents configured to work on a task against a capture-proxy session.

    from legorl_jax.harness import get_harness
    # builtin | mini_swe_agent | swe_agent | claude_code | opencode | terminus_2 | openhands | codex
    harness = get_harness("builtin")
    result = await harness.run(task, sandbox, llm)

`base.py` holds the `Harness` protocol, `LLMEndpoint`, `HarnessResult` and the two errors; each adapter is
its own module, imported when selected (a harness that is not installed stops at once with the command
that installs it).
"""

from __future__ import annotations

import importlib
from typing import Any

from legorl_jax.harness.base import Harness, HarnessCrashed, HarnessNotInstalled, HarnessResult, LLMEndpoint

__all__ = [
    "HARNESSES",
    "Harness",
    "HarnessCrashed",
    "HarnessNotInstalled",
    "HarnessResult",
    "LLMEndpoint",
    "get_harness",
]

# name -> "module:class"; adapters are imported only when chosen.
HARNESSES = {
    "builtin": "legorl_jax.harness.builtin:BuiltinHarness",
    "mini_swe_agent": "legorl_jax.harness.mini_swe_agent:MiniSweAgentHarness",
    "swe_agent": "legorl_jax.harness.swe_agent:SweAgentHarness",
    "claude_code": "legorl_jax.harness.claude_code:ClaudeCodeHarness",
    "opencode": "legorl_jax.harness.opencode:OpenCodeHarness",
    "terminus_2": "legorl_jax.harness.terminus_2:Terminus2Harness",
    "openhands": "legorl_jax.harness.openhands:OpenHandsHarness",
    "codex": "legorl_jax.harness.codex:CodexHarness",
}


def get_harness(name: str, **options: Any) -> Harness:
    """The harness registered as `name`, built with `options` (its preset's settings)."""
    if name not in HARNESSES:
        raise ValueError(f"harness must be one of {sorted(HARNESSES)}, got {name!r}")
    module, cls = HARNESSES[name].split(":")
    return getattr(importlib.import_module(module), cls)(**options)
