"""An engine fleet: several SGLang-API servers (ours or SGLang) behind the real sglang-router.

    async with open_engine(cfg.engine, model_path) as fleet:      # engine.servers / launch / router_url
        gen = await fleet.generate(ids, sampling, session_id="trial-3")   # one session, one engine
        await fleet.update_weights("weights/step-000010", "step-000010")  # every engine, one version
        fleet.serving["step-000010"]                                      # {engine url: time it served it}

What runs where: each engine is its own server process (`engine.launch: N` starts N of
`engine.sglang`'s command on ports sglang.port + i; `engine.servers` names running ones); the router is
`python -m sglang_router.launch_router` (its own process, started and stopped by `RouterLauncher`, or one
that already runs at `engine.router_url`, whose worker list is then the fleet). Every /generate goes
through the router; weight updates, pauses and load figures go to each engine directly.

- Affinity: `generate(..., session_id=S)` sends S as the `x-smg-routing-key` header. With the router's
  `manual` policy (the default here) the first request of a key picks an engine and every later one
  goes to the same engine while it is healthy, so a conversation's prefix stays in that engine's cache;
  a new session goes to the engine with the fewest sessions that have a request in flight
  (`assignment_mode: min_group`; the router counts a routing key only while one of its requests runs,
  and breaks ties at random, so sessions started one after another on an idle fleet land at random).
  `cache_aware` routes by prompt prefix instead; `round_robin` has no affinity (the benchmark's baseline).
- Failures: the router is started with `--disable-retries`, so a request whose engine dies fails (the
  router answers 5xx, the client raises `EngineError`) and is never sampled a second time behind our
  back; the capture proxy marks the trial `engine_failed` and the orchestrator retries the trial. The
  router's health checks (`health_check_interval_s`, `health_failure_threshold`) take the dead engine
  out; the session's next request gets a healthy one.
- Weights: `update_weights(source, version)` pauses every healthy engine (in place: requests in flight
  keep their KV), loads the same HF directory on each (`/update_weights_from_disk`; in-process params
  cannot cross HTTP: the publisher writes the directory), records in `serving[version]` when each engine
  served it, and resumes all only once all serve it. While paused no engine decodes, so no token is
  sampled on the old version after any engine serves the new one.
- Update policies (engine/weight_update.py): `pause(mode)` pauses every healthy engine with that mode,
  `resume()` resumes them; `update_weights` between the two loads on the engines paused and leaves
  resuming to `resume()`. Drain is client side, on the router's client (the fleet's requests all go
  through it): new requests are held back until `resume()` and the pause returns once none is in flight;
  the engines are then paused in place.
- MoE models (routed experts): sglang-router 0.3.2 re-serializes /generate bodies into its own request
  type, which has no `return_routed_experts`, `routed_experts_start_len` or `session_id`, forwards only a
  few request headers, and passes the engine's response through unchanged. So a fleet serves a MoE model
  only when every engine returns the routing unasked: our server with `--return-routed-experts always`
  answers every /generate with routing rows, from the start the client names in its own member of the
  `tracestate` header, which the router forwards (wire.py), or from 0 (the whole sequence) without one;
  `meta_info.routed_experts_start_len` says which. The client cuts whatever arrives to the asked
  `[S, P + N - 1)`, so callers (the capture proxy, resume.py) read exactly what one engine returns, and a
  response carries the rows asked (N on a continuing turn, as from one engine; BENCHMARKS.md, "Engine
  fleet"). When it opens on a MoE model the fleet asks each engine's `/get_server_info` directly and
  refuses (ValueError naming every engine that lacks it, and the flag) unless all say
  `"return_routed_experts": "always"`; `engine.launch` starts our servers with the flag. Real SGLang
  returns routing only for the request-level field, so an SGLang fleet refuses a MoE model (use one
  engine, `engine.url`); it is never recorded without routing.
- The session hint: sglang-router 0.3.2 drops the body's `session_id` (our engines' prefix-cache hint to
  keep a conversation resident) but forwards the `x-smg-routing-key` header, which carries the same id;
  our server takes the hint from that header when the body has none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

import aiohttp
import numpy as np

from legorl_jax.config import RouterConfig, SGLangConfig
from legorl_jax.engine.base import (
    PAUSE_MODES,
    EngineError,
    EngineUnavailableError,
    SamplingParams,
    WeightSource,
)
from legorl_jax.engine.sglang_client import SGLangEngine
from legorl_jax.engine.sglang_launcher import ServerProcess, check_module
from legorl_jax.engine.wire import ROUTING_KEY_HEADER
from legorl_jax.types import Generation

log = logging.getLogger(__name__)

ROUTER_MODULE = "sglang_router.launch_router"
OUR_SERVER_MODULE = "legorl_jax.engine.serve"
ROUTED_EXPERTS_FLAG = "--return-routed-experts"
ROUTER_HINT = (
    "pip install 'legorl_jax[fleet]' (sglang-router), or set engine.router.python to an interpreter that "
    "has it"
)


def router_argv(config: RouterConfig, worker_urls: list[str]) -> list[str]:
    """The router's launch command for `worker_urls` (module docstring)."""
    if not isinstance(config, RouterConfig):
        raise TypeError(f"config must be a RouterConfig, got {type(config).__name__}")
    if not worker_urls:
        raise ValueError(f"a router needs at least one engine server, got worker_urls={worker_urls!r}")
    return [
        config.python or sys.executable, "-m", ROUTER_MODULE,
        "--host", config.host,
        "--port", str(config.port),
        "--prometheus-port", str(config.prometheus_port),
        "--policy", config.policy,
        "--assignment-mode", config.assignment_mode,
        "--worker-urls", *worker_urls,
        "--health-check-interval-secs", str(config.health_check_interval_s),
        "--health-failure-threshold", str(config.health_failure_threshold),
        "--disable-retries",
        "--log-level", "warn",
        *config.extra_args,
    ]  # fmt: skip


async def _get_json(url: str, timeout_s: float = 10.0) -> Any:
    async with aiohttp.ClientSession() as session:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                raise EngineError(f"GET {url} answered HTTP {resp.status}: {(await resp.text())[:300]}")
            return await resp.json(content_type=None)


async def router_workers(router_url: str) -> list[dict[str, Any]]:
    """The router's worker list (`GET /workers`): dicts with `url`, `is_healthy`, `load`."""
    try:
        body = await _get_json(router_url.rstrip("/") + "/workers")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise EngineUnavailableError(f"cannot reach the router at {router_url!r}: {exc!r}") from None
    workers = body.get("workers") if isinstance(body, dict) else None
    if not isinstance(workers, list):
        raise EngineError(f"the router at {router_url!r} answered /workers without a worker list: {body!r}")
    return workers


async def _answers_health(url: str, timeout_s: float) -> bool:
    """One GET /health, no retries: whether the engine at `url` answers 200 within `timeout_s`."""
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(
                url.rstrip("/") + "/health", timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                return resp.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


class RouterLauncher:
    """Starts sglang-router in front of `worker_urls`, waits until it lists all of them healthy, stops it."""

    def __init__(self, config: RouterConfig, worker_urls: list[str]):
        self.config = config
        self.worker_urls = [u.rstrip("/") for u in worker_urls]
        self.argv = router_argv(config, self.worker_urls)
        self.base_url = f"http://{config.host}:{config.port}"
        log_file = config.log_file or tempfile.mkstemp(prefix="router-", suffix=".log")[1]
        self.server = ServerProcess(self.argv, self.base_url, log_file=log_file)

    async def start(self) -> str:
        await asyncio.to_thread(check_module, self.argv[0], ROUTER_MODULE, ROUTER_HINT)
        self.server.start()
        try:
            await self.server.wait_healthy(self.config.startup_timeout_s)
            deadline = time.monotonic() + self.config.startup_timeout_s
            while True:
                healthy = {w.get("url") for w in await router_workers(self.base_url) if w.get("is_healthy")}
                if healthy >= set(self.worker_urls):
                    return self.base_url
                if time.monotonic() > deadline or not self.server.running:
                    raise EngineError(
                        f"the router at {self.base_url} lists healthy {sorted(healthy, key=str)} after "
                        f"{self.config.startup_timeout_s:.0f} s, not all of {self.worker_urls}; its log: "
                        f"{self.server.log_path}"
                    )
                await asyncio.sleep(0.2)
        except BaseException:
            await asyncio.to_thread(self.server.stop, 10.0)
            raise

    async def stop(self) -> int | None:
        return await asyncio.to_thread(self.server.stop, 10.0)

    async def __aenter__(self) -> str:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


class EngineFleet:
    """The `Engine` protocol over a fleet behind sglang-router (module docstring)."""

    def __init__(
        self,
        router_url: str,
        worker_urls: list[str],
        *,
        timeout_s: float = 1800.0,
        retries: int = 3,
        backoff_s: float = 0.5,
    ):
        if not worker_urls:
            raise ValueError(f"an engine fleet needs at least one engine, got worker_urls={worker_urls!r}")
        options: dict[str, Any] = dict(timeout_s=timeout_s, retries=retries, backoff_s=backoff_s)
        self.router_url = router_url.rstrip("/")
        self.router = SGLangEngine(self.router_url, routing_key_header=ROUTING_KEY_HEADER, **options)
        self.engines = {u.rstrip("/"): SGLangEngine(u, **options) for u in worker_urls}
        self.serving: dict[str, dict[str, float]] = {}
        """version -> {engine url: wall time (time.time()) at which it began serving that version}."""
        self.published: dict[str, float] = {}
        """version -> wall time at which its update began (engines paused)."""
        self._paused: tuple[list[str], float] | None = None  # engines `pause` paused, and when it began

    async def __aenter__(self) -> EngineFleet:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await asyncio.gather(self.router.close(), *(e.close() for e in self.engines.values()))

    async def check_routing(self) -> None:
        """Raises ValueError when the fleet serves a MoE model and an engine would not return its routed
        experts through the router (module docstring)."""
        routing = await self.router.routing_shape()
        if routing is None:
            return
        infos = await asyncio.gather(
            *(engine.server_info() for engine in self.engines.values()), return_exceptions=True
        )
        lacking = {}
        for url, info in zip(self.engines, infos, strict=True):
            if isinstance(info, BaseException):
                lacking[url] = f"its /get_server_info failed: {info}"
            elif info.get("return_routed_experts") != "always":
                lacking[url] = (
                    f"its /get_server_info says return_routed_experts={info.get('return_routed_experts')!r}"
                )
        if lacking:
            raise ValueError(
                f"the fleet at {self.router_url} serves a MoE model (routing layers, top-k, experts = "
                f"{routing}); sglang-router 0.3.2 drops return_routed_experts from the requests it forwards, "
                "so every engine must return the routed experts unasked, and "
                + "; ".join(f"{url} does not ({why})" for url, why in lacking.items())
                + f": start our server (python -m {OUR_SERVER_MODULE}) with {ROUTED_EXPERTS_FLAG} always "
                "(engine.launch passes it). Real SGLang returns routing only for the request-level field, "
                "so a fleet of SGLang servers cannot serve a MoE model: use one engine (engine.url)"
            )

    # ------------------------------------------------------------------------------------------------
    # the Engine protocol

    async def generate(
        self,
        input_ids: Any,
        sampling: SamplingParams,
        *,
        return_routed_experts: bool = False,
        routed_experts_start_len: int = 0,
        rid: str | None = None,
        top_logprobs: int = 0,
        session_id: str | None = None,
    ) -> Generation:
        return await self.router.generate(
            input_ids,
            sampling,
            return_routed_experts=return_routed_experts,
            routed_experts_start_len=routed_experts_start_len,
            rid=rid,
            top_logprobs=top_logprobs,
            session_id=session_id,
        )

    async def prompt_logprobs(self, input_ids: Any, start: int, *, temperature: float = 1.0) -> np.ndarray:
        return await self.router.prompt_logprobs(input_ids, start, temperature=temperature)

    async def healthy_engines(self) -> list[str]:
        """The engines the router currently routes to (healthy in its worker list)."""
        workers = await router_workers(self.router_url)
        urls = [str(w.get("url", "")).rstrip("/") for w in workers if w.get("is_healthy")]
        return [u for u in urls if u in self.engines]

    async def settled(self, timeout_s: float = 2.0) -> bool:
        """True when the router routes to at least one engine and every engine it routes to answers its own
        `/health` within `timeout_s`: a dead engine has been taken out (or is back). A trial whose engine
        died is retried only then (rollout/retry.py), so the retry cannot land on the dead engine."""
        urls = await self.healthy_engines()
        if not urls:
            return False
        answers = await asyncio.gather(*(_answers_health(u, timeout_s) for u in urls))
        return all(answers)

    async def pause(self, mode: str = "in_place") -> None:
        """Pauses every healthy engine with `mode` (drain: module docstring); undone by `resume()`."""
        if mode not in PAUSE_MODES:
            raise ValueError(f"mode must be one of {PAUSE_MODES} (retract is not supported), got {mode!r}")
        if self._paused is not None:
            raise EngineError("the fleet is already paused: resume() it first")
        began = time.time()
        try:
            if mode == "drain":  # first: from here on no new request of the fleet is sent
                await self.router.drain()
            urls = await self.healthy_engines()
            if not urls:
                raise EngineUnavailableError(
                    f"the router at {self.router_url} has no healthy engine to pause"
                )
        except BaseException:
            self.router.end_drain()
            raise
        results = await asyncio.gather(
            *(self.engines[u].pause("in_place" if mode == "drain" else mode) for u in urls),
            return_exceptions=True,
        )
        self._paused = (urls, began)
        refused = {u: r for u, r in zip(urls, results, strict=True) if isinstance(r, BaseException)}
        if refused:
            await self.resume()
            raise EngineError(
                f"pausing ({mode}) failed on " + "; ".join(f"{u}: {r}" for u, r in refused.items())
            )

    async def resume(self) -> None:
        """Resumes the engines `pause` paused and lets the requests held by a drain go."""
        urls = self._paused[0] if self._paused is not None else list(self.engines)
        self._paused = None
        try:
            await asyncio.gather(*(self.engines[u].resume() for u in urls), return_exceptions=True)
        finally:
            self.router.end_drain()

    async def update_weights(self, source: WeightSource, version: str) -> None:
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError(
                f"a fleet loads weights from an HF directory every engine can read, got "
                f"{type(source).__name__}; publish with loop.publish=disk"
            )
        if not isinstance(version, str) or not version:
            raise ValueError(f"weight_version must be a non-empty string, got {version!r}")
        own = self._paused is None  # nobody paused the fleet: pause it in place around the update
        if own:
            try:
                await self.pause("in_place")
            except EngineError as exc:
                raise type(exc)(f"update to {version!r} not started: {exc}") from None
        assert self._paused is not None  # paused by us or by the caller
        urls, began = self._paused
        served: dict[str, float] = {}
        self.published[version] = began

        async def load(url: str) -> None:
            await self.engines[url].update_weights(source, version)
            served[url] = time.time()

        try:
            results = await asyncio.gather(*(load(u) for u in urls), return_exceptions=True)
        finally:
            if own:
                await self.resume()
        self.serving[version] = served
        failed = {u: r for u, r in zip(urls, results, strict=True) if isinstance(r, BaseException)}
        if failed:
            raise EngineError(
                f"update to {version!r} from {os.fspath(source)!r} failed on {len(failed)} of {len(urls)} "
                f"engines: " + "; ".join(f"{u}: {r}" for u, r in failed.items())
            )

    async def health(self) -> bool:
        try:
            return bool(await self.healthy_engines())
        except EngineError:
            return False

    async def abort(self, rid: str) -> None:
        # The router does not say which engine holds `rid`; an engine ignores ids it does not know.
        await asyncio.gather(*(e.abort(rid) for e in self.engines.values()), return_exceptions=True)

    # ------------------------------------------------------------------------------------------------
    # figures

    async def server_info(self, info_timeout_s: float = 10.0) -> dict[str, dict[str, Any]]:
        """Per engine: the router's view (healthy, load) and, for an engine it routes to, the engine's own
        `/get_server_info` (asked once, within `info_timeout_s`)."""
        workers = {w["url"].rstrip("/"): w for w in await router_workers(self.router_url)}

        async def info(url: str) -> dict[str, Any]:
            # An engine the router took out is not asked: a dead one would hold the step's monitoring for
            # the client's timeout and retries (the step's other time went from 0.2 s to 14 s).
            if not workers.get(url, {}).get("is_healthy"):
                return {"error": "not routed to (unhealthy in the router's worker list)"}
            try:
                return await self.engines[url].server_info(timeout_s=info_timeout_s, retry=False)
            except EngineError as exc:
                return {"error": str(exc)}

        infos = await asyncio.gather(*(info(u) for u in self.engines))
        return {
            url: {"healthy": bool(workers.get(url, {}).get("is_healthy")),
                  "router_load": workers.get(url, {}).get("load"), **body}
            for url, body in zip(self.engines, infos, strict=True)
        }  # fmt: skip

    async def metrics(self) -> dict[str, float]:
        """Flat numbers for the run's metrics: `engine/<i>/{healthy, running, waiting, router_load,
        cache_tokens}`, and `engine/<i>/publish_s` (the latest update's start to that engine serving it)."""
        out: dict[str, float] = {}
        latest = next(reversed(self.serving), None)
        for i, (url, body) in enumerate((await self.server_info(info_timeout_s=2.0)).items()):
            if latest is not None and url in self.serving[latest]:
                out[f"engine/{i}/publish_s"] = self.serving[latest][url] - self.published[latest]
            out[f"engine/{i}/healthy"] = float(body["healthy"])
            for key in ("running", "waiting", "router_load"):
                if isinstance(body.get(key), (int, float)):
                    out[f"engine/{i}/{key}"] = float(body[key])
            cache = body.get("prefix_cache")
            if isinstance(cache, dict) and isinstance(cache.get("tokens"), (int, float)):
                out[f"engine/{i}/cache_tokens"] = float(cache["tokens"])
        return out


def launched_sglang(config: SGLangConfig, index: int) -> SGLangConfig:
    """`engine.sglang` for the fleet's engine `index` of `engine.launch`: port sglang.port + index, its own
    log (`launched_log`), and, for our server, `--return-routed-experts always` unless extra_args set it."""
    if not isinstance(config, SGLangConfig):
        raise TypeError(f"config must be an SGLangConfig, got {type(config).__name__}")
    extra = list(config.extra_args)
    # Always, not only for a MoE model: for a dense one there is no routing to return, so it costs nothing,
    # and whether a model is MoE is not known here for a Hub id (no config.json on disk).
    if config.module == OUR_SERVER_MODULE and not any(
        arg == ROUTED_EXPERTS_FLAG or arg.startswith(ROUTED_EXPERTS_FLAG + "=") for arg in extra
    ):
        extra += [ROUTED_EXPERTS_FLAG, "always"]
    return dataclasses.replace(
        config, port=config.port + index, log_file=launched_log(config.log_file, index), extra_args=extra
    )


def launched_log(config_log: str | None, index: int) -> str | None:
    """Engine `index`'s log file when `engine.sglang.log_file` names one (`<stem>-<index><suffix>`)."""
    if config_log is None:
        return None
    path = pathlib.Path(config_log)
    return str(path.with_name(f"{path.stem}-{index}{path.suffix}"))
