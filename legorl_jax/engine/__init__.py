"""Rollout engines: the `Engine` protocol, the embedded JAX engine, its SGLang-compatible server, the
SGLang client and launcher (ARCHITECTURE §4-6).

    from legorl_jax.engine import Engine, SamplingParams
    from legorl_jax.engine.jax_engine import JaxEngine          # in process
    from legorl_jax.engine.sglang_client import SGLangEngine    # over HTTP (real SGLang or ours)

Importing this package loads the protocol only (no jax, no device).
"""

from legorl_jax.engine.base import (
    BadRequestError,
    ContextOverflowError,
    Engine,
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    SamplingParams,
)

__all__ = [
    "BadRequestError",
    "ContextOverflowError",
    "Engine",
    "EngineError",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "SamplingParams",
]
