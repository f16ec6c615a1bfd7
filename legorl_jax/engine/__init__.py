"""Rollout engines: the `Engine` protocol, the embedded JAX engine, its SGLang-compatible server, the
SGLang client and launcher (docs/architecture.md §5).

    from legorl_jax.engine import SamplingParams, open_engine
    async with open_engine(cfg.engine, cfg.model.path) as engine:      # JaxEngine or SGLangEngine
        gen = await engine.generate(
            prompt_ids, SamplingParams(max_new_tokens=256), return_routed_experts=True
        )

Weight updates with requests in flight follow an update policy (drain | abort_resume | in_place,
weight_update.py); a request cut by one is re-issued and merged by resume.py.

Importing this package loads the protocol only (no jax, no device); `open_engine` imports the backend
it needs when called.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from legorl_jax.engine.base import (
    BadRequestError,
    ContextOverflowError,
    Engine,
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    SamplingParams,
)

if TYPE_CHECKING:
    from legorl_jax.config import EngineConfig

__all__ = [
    "BadRequestError",
    "ContextOverflowError",
    "Engine",
    "EngineError",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "SamplingParams",
    "open_engine",
]


@contextlib.asynccontextmanager
async def open_engine(
    config: EngineConfig,
    model_path: str | os.PathLike,
    *,
    policy: Any = None,
) -> AsyncIterator[Engine]:
    """The engine `config` (an `EngineConfig`) describes, closed (and its server stopped) on exit.

    jax: a `JaxEngine` on `policy` when given (the trainer's own module; only the tokenizer is read from
    `model_path`), else on the HF directory `model_path`. sglang: an `SGLangEngine` on `config.url`, or on a
    server that `SGLangLauncher` starts from `config.sglang` on `model_path` (passing it
    `config.weight_version`) and stops afterwards; a server at `config.url` reports its own version. The
    client decodes routed experts with the layout of `model_path`'s config.json when there is one (else it
    asks the server). With `config.servers`, `config.launch` or `config.router_url`: an `EngineFleet`
    behind sglang-router (engine/fleet.py), its launched servers and router stopped on exit.
    """
    from legorl_jax.config import EngineConfig

    if not isinstance(config, EngineConfig):
        raise TypeError(f"config must be an EngineConfig, got {type(config).__name__}")
    if config.backend == "jax":
        from legorl_jax.engine.jax_engine import JaxEngine, tokenizer_of

        options: dict[str, Any] = dict(max_running=config.max_running, max_len=config.max_len,
                       min_bucket=config.min_prefill_bucket, prefill_chunk=config.chunked_prefill_size,
                       weight_version=config.weight_version, cache_slots=config.prefix_cache_slots,
                       cache_tokens=config.prefix_cache_tokens, mem_fraction=config.mem_fraction,
                       kv_gib=config.kv_gib)  # fmt: skip
        if config.device is not None:  # apart from the trainer's mesh.devices (async training on one host)
            import jax

            devices = jax.devices()
            if config.device >= len(devices):
                raise ValueError(f"engine.device={config.device}, but there are {len(devices)} devices")
            options["device"] = devices[config.device]
        if policy is None:
            engine = JaxEngine.from_dir(model_path, dtype=config.dtype, **options)
        else:
            engine = JaxEngine(
                policy,
                tokenizer=tokenizer_of(model_path),
                model_path=str(model_path),
                dtype=config.dtype,
                **options,
            )
        try:
            yield engine
        finally:
            engine.close()
        return
    if config.fleet:
        async with _open_fleet(config, model_path) as fleet:
            yield fleet
        return
    from legorl_jax.engine.sglang_client import SGLangEngine, routing_of
    from legorl_jax.engine.sglang_launcher import SGLangLauncher

    async with contextlib.AsyncExitStack() as stack:
        url = config.url
        if url is None:
            url = await stack.enter_async_context(
                SGLangLauncher(config.sglang, model_path, weight_version=config.weight_version)
            )
        has_config = (pathlib.Path(model_path) / "config.json").is_file()
        client = SGLangEngine(
            url,
            routing=routing_of(model_path) if has_config else None,
            timeout_s=config.request_timeout_s,
            retries=config.connect_retries,
            backoff_s=config.retry_backoff_s,
        )
        yield await stack.enter_async_context(client)


@contextlib.asynccontextmanager
async def _open_fleet(config: EngineConfig, model_path: str | os.PathLike) -> AsyncIterator[Engine]:
    """engine.servers / launch / router_url: an `EngineFleet` behind sglang-router (engine/fleet.py)."""
    import asyncio

    from legorl_jax.engine.fleet import EngineFleet, RouterLauncher, launched_sglang, router_workers
    from legorl_jax.engine.sglang_client import SGLangEngine
    from legorl_jax.engine.sglang_launcher import SGLangLauncher

    async with contextlib.AsyncExitStack() as stack:
        if config.router_url is not None:
            router_url = config.router_url
            urls = [w["url"] for w in await router_workers(router_url)]
            if not urls:
                raise ValueError(f"the router at engine.router_url={router_url!r} lists no engine server")
        else:
            urls = list(config.servers)
            for url in urls:
                async with SGLangEngine(url, retries=0, timeout_s=10.0) as probe:
                    if not await probe.health():
                        raise EngineUnavailableError(f"engine.servers: {url!r} does not answer GET /health")
            launchers = [
                SGLangLauncher(
                    launched_sglang(config.sglang, i), model_path, weight_version=config.weight_version
                )
                for i in range(config.launch)
            ]
            started = await asyncio.gather(
                *(launcher.start() for launcher in launchers), return_exceptions=True
            )
            for launcher, result in zip(launchers, started, strict=True):
                if not isinstance(result, BaseException):
                    stack.push_async_callback(launcher.stop)
            for result in started:
                if isinstance(result, BaseException):
                    raise result
            urls += [str(url) for url in started]
            router_url = await stack.enter_async_context(RouterLauncher(config.router, urls))
        fleet = EngineFleet(
            router_url,
            urls,
            timeout_s=config.request_timeout_s,
            retries=config.connect_retries,
            backoff_s=config.retry_backoff_s,
        )
        stack.push_async_callback(fleet.close)
        await fleet.check_routing()
        yield fleet
