"""Harnesses: unmodified coding agents configured to work on a task against a capture-proxy session.

    from legorl_jax.harness import get_harness
    # builtin | mini_swe_agent | swe_agent | claude_code | opencode | terminus_2 | openhands | codex
    harness = get_harness("builtin")
    result = await harness.run(task, sandbox, llm)

`names.py` holds the registry (`HARNESSES`, name -> "module:class", a leaf module the config reads too);
`base.py` holds the `Harness` protocol, `LLMEndpoint`, `HarnessResult` and the two errors; each adapter is
its own module, imported when selected (a harness that is not installed stops at once with the command
that installs it).
"""

from __future__ import annotations

import importlib
from typing import Any

from legorl_jax.harness.base import Harness, HarnessCrashed, HarnessNotInstalled, HarnessResult, LLMEndpoint
from legorl_jax.harness.names import HARNESSES

__all__ = [
    "HARNESSES",
    "Harness",
    "HarnessCrashed",
    "HarnessNotInstalled",
    "HarnessResult",
    "LLMEndpoint",
    "get_harness",
]


def get_harness(name: str, **options: Any) -> Harness:
    """The harness registered as `name`, built with `options` (its preset's settings)."""
    if name not in HARNESSES:
        raise ValueError(f"harness must be one of {sorted(HARNESSES)}, got {name!r}")
    module, cls = HARNESSES[name].split(":")
    return getattr(importlib.import_module(module), cls)(**options)
