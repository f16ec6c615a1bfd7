"""`SGLangEngine`: the `Engine` protocol over SGLang's native HTTP API (a real SGLang server or ours).

    async with SGLangEngine("http://127.0.0.1:30000") as engine:
        gen = await engine.generate(ids, SamplingParams(max_new_tokens=64), return_routed_experts=True)

Requests are token in (`input_ids`), with `return_logprob: true` always (every Generation carries its
behaviour log-probs); the response is read by `wire.generation_from_json`. Routed experts arrive as
base64 int32 `[P + N - 1 - start, L, K]` (rows from before `start`, which our server sends unasked behind
a router and marks with `meta_info.routed_experts_start_len`, are cut off: wire.py); L, K and E come
from `routing=(L, K, E)` when given, else from `/get_model_info` (our server reports them; for real
SGLang its `model_path`'s config.json is read, which needs the checkpoint on this machine). Rows are
stored compactly (uint8 up to 256 experts). A Qwen3-MoE that mixes dense and MoE layers (`mlp_only_layers`,
`decoder_sparse_step`) is refused on real SGLang: 0.5.23 builds every Qwen3-MoE layer sparse (its
`Qwen3MoeDecoderLayer.stage_facts`), so it would serve another model than the checkpoint's, the dense layers'
weights unused and MoE experts in their place that the checkpoint never had (our server serves such a model,
and reports its MoE layers in `routing`).

Failures and retries:
- Connection refused / unreachable / connect timeout, before the request was sent: retried
  `retries` times with exponential backoff (`backoff_s · 2^attempt`), then `EngineUnavailableError`.
- The connection lost after the request was sent (server disconnected, reset, truncated reply): a
  `/generate` or a weight update is **not** re-sent, since the server may have processed it (a second
  generation would be a different sample; a retried update could land twice); `EngineError`. Only the
  read-only calls (`health`, `get_model_info`) retry on these.
- HTTP 4xx is never retried: 400 becomes `BadRequestError` (with the server's `field` when it names one)
  or `ContextOverflowError` (our `type: context_overflow`, or SGLang's "longer than the model's context
  length" message); 404/405 and 5xx become `EngineError` with the server's message.
- A request past `timeout_s` raises `EngineTimeoutError` after a best-effort `/abort_request` for its
  rid (every generate has one, generated when not given), so the server does not keep decoding it; a
  cancelled `generate` sends the same abort.

Session hint: `generate(..., session_id=...)` sends `session_id` only to a server whose `/get_model_info`
says `"session_hint": true` (ours); real SGLang has no such field (its `/generate` would refuse the key, and
its radix cache keeps shared prefixes without a hint), so there the hint is dropped.

Behind a router (engine/fleet.py), `routing_key_header` names the header that carries `session_id` as
the routing key, so one session's turns stay on one engine.

Weight versions: `meta_info.weight_version` is the version at the reply; when an update landed mid-request
SGLang (0.5.23, and our server likewise) adds `meta_info.weight_versions`, spans of output positions per
version, read into `Generation.token_weight_versions` (wire.py), so every token carries the version that
sampled it on either server.

Pausing (`pause(mode)`, `resume()`; the update policies of weight_update.py): `in_place` and `abort` are
SGLang's `/pause_generation` modes. SGLang has no drain mode, so `drain` is done here, client side:
`drain()` holds this client's new `generate` calls back (they wait, not sent) and returns once none of
this client's requests is in flight; `pause("drain")` is that, then a pause in place (requests of other
clients of the server, if any, stay paused in place). `resume()` continues the server and lets the held
calls go. Only this client's requests are drained: share one client per server (the proxy does).

`update_weights` takes an HF directory only (`/update_weights_from_disk`, a path the *server* can read):
in-process params cannot cross HTTP; save them with `legorl_jax.model.save_hf` first. SGLang flushes its
radix cache after an update and fails the update (`success: false`, the weights loaded all the same) when
it cannot, i.e. while a request holds its slot; so while this client has the server paused `in_place` with
requests of its own in flight the update is sent with `flush_cache: false`: the requests paused in place
keep their K/V, and the radix cache keeps the old weights' prefixes with them. With none of its own in
flight (a sync loop's update) it asks the flush, and a refusal that only says the cache was not flushed
(another client's requests held in place) is taken as loaded, unflushed. `drain` and `abort_resume` never
leave old K/V behind (nothing runs when they update, and the update flushes).

Old prefixes after an in-place update: SGLang's semantics, kept, but bounded and recorded. A request paused
in place continuing over its own old K/V is what `in_place` means (as on our engine); a *later* request
reusing an old prefix from the radix cache is not (our engine flushes its prefix cache with every update),
and on an agent workload it is no corner: every trial of a task shares the task's prompt, so without a flush
its old K/V would serve every later step. So after such an update, once it resumes, the client asks SGLang's
deferred flush (`/flush_cache?timeout=`, which runs the moment the server is idle) until one succeeds; until
then (`old_prefixes`) a reply that reused cached tokens (`cached_tokens` > 0) has all its tokens flagged in
`Generation.token_stale_kv`, since the prefix it reused may be the old weights' (conservative: a prefix
computed after the update is counted too). Its `weight_version` stays the one that computed its logits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import numpy as np
import orjson

from legorl_jax.engine.base import (
    PAUSE_MODES,
    BadRequestError,
    ContextOverflowError,
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    SamplingParams,
    WeightSource,
    check_generate_args,
    check_input_ids,
    check_logprob_args,
)
from legorl_jax.engine.wire import (
    CONTEXT_OVERFLOW,
    TRACESTATE_HEADER,
    WireError,
    generate_request_json,
    generation_from_json,
    routed_start_tracestate,
    sampling_json,
)
from legorl_jax.types import Generation

log = logging.getLogger(__name__)

_SGLANG_OVERFLOW = "longer than the model's context length"
_UNFLUSHED = "the cache was not flushed"  # SGLang 0.5.23's failed update whose weights loaded
_JSON_HEADERS = {"Content-Type": "application/json"}
KEEPALIVE_S = 2.0  # below uvicorn's 5 s keep-alive (SGLang's server), see _client
FLUSH_WAIT_S = 60.0  # one deferred flush of old prefixes waits this long for an idle server
FLUSH_RETRY_S = 1.0  # between such flushes


def routing_of(model_dir: str | os.PathLike) -> tuple[int, int, int] | None:
    """(MoE layers, experts per token, experts) of the HF directory's config.json; None for a dense model."""
    from legorl_jax.model.architecture import ArchConfig

    config = ArchConfig.from_hf_dict(json.loads((pathlib.Path(model_dir) / "config.json").read_text()))
    return (config.num_moe_layers, config.num_experts_per_tok, config.num_experts) if config.is_moe else None


def _error_message(status: int, text: str) -> tuple[str, str | None, str | None]:
    """(message, field, type) from any of the error bodies SGLang or we send."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()[:500] or f"HTTP {status}", None, None
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            message = err.get("message") or body.get("message") or text
            return str(message), err.get("field"), err.get("type")
        return str(err), None, None
    return text[:500], None, None


class SGLangEngine:
    """An `Engine` speaking to one SGLang-API server at `base_url` (module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        routing: tuple[int, int, int] | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_connections: int = 256,
        routing_key_header: str | None = None,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        for name, value in (
            ("timeout_s", timeout_s),
            ("connect_timeout_s", connect_timeout_s),
            ("backoff_s", backoff_s),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        if routing is not None and (
            len(routing) != 3 or not all(isinstance(v, int) and v > 0 for v in routing)
        ):
            raise ValueError(
                f"routing must be (num_moe_layers, top_k, num_experts) of positive ints, got {routing!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.routing = routing
        self.timeout_s, self.connect_timeout_s = float(timeout_s), float(connect_timeout_s)
        self.retries, self.backoff_s = retries, float(backoff_s)
        self.max_connections = max_connections
        # A router in front (engine/fleet.py) keeps a session on one engine by this header's value.
        self.routing_key_header = routing_key_header
        self._session: aiohttp.ClientSession | None = None
        self._model_info: dict[str, Any] | None = None
        self._background: set[asyncio.Task] = set()
        self._in_flight = 0  # this client's generate calls sent and not answered
        self._held = 0  # generate calls waiting for a drain to end
        self.bytes_received = 0
        """Response bytes this client has read (bodies of every endpoint, errors too), e.g. what a MoE
        fleet's routing costs on the wire (tools/bench_fleet.py --moe)."""
        self._open: asyncio.Event | None = None  # cleared while drained: new generate calls wait
        self._paused_in_place = False  # this client paused the server in place (no flush on update)
        self.old_prefixes = False
        """Whether the server's prefix cache may hold K/V of weights it no longer serves: an in-place update
        left it unflushed, and no flush has succeeded since (module docstring)."""
        self._stale_epoch = 0  # counts such updates, so a flush answered after a newer one does not clear it
        self._flusher: asyncio.Task | None = None
        self._ended: asyncio.Event | None = None  # set whenever one of them ends

    async def __aenter__(self) -> SGLangEngine:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------------------------------------------
    # transport

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # SGLang's uvicorn closes a connection idle for 5 s; reusing one it is closing loses the request
            # ("Server disconnected", never re-sent): connections idle longer than KEEPALIVE_S are not reused.
            connector = aiohttp.TCPConnector(limit=self.max_connections, keepalive_timeout=KEEPALIVE_S)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        idempotent: bool,
        timeout_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """(status, body) of one call, retried as the module docstring says; raises on 4xx/5xx."""
        url = self.base_url + path
        timeout = aiohttp.ClientTimeout(total=timeout_s or self.timeout_s, connect=self.connect_timeout_s)
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                async with self._client().request(
                    method,
                    url,
                    data=None if body is None else orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY),
                    headers={**(_JSON_HEADERS if body is not None else {}), **(headers or {})} or None,
                    timeout=timeout,
                ) as resp:
                    raw = await resp.read()
                    status = resp.status
                    self.bytes_received += len(raw)
            except (
                aiohttp.ClientConnectorError,
                aiohttp.ConnectionTimeoutError,
            ) as exc:  # never sent: safe to resend
                last = exc
                continue
            except (
                aiohttp.ServerDisconnectedError,
                aiohttp.ClientOSError,
                aiohttp.ClientPayloadError,
            ) as exc:
                if not idempotent:
                    raise EngineError(
                        f"{method} {url}: connection lost after the request was sent ({exc!r}); not re-sent, "
                        f"since the server may have processed it"
                    ) from exc
                last = exc
                continue
            except TimeoutError as exc:
                raise EngineTimeoutError(f"{method} {url} took longer than {timeout.total:.0f} s") from exc
            if status >= 400:
                self._raise_for(status, raw.decode("utf-8", "replace"), method, url)
            return status, raw
        raise EngineUnavailableError(
            f"{method} {url}: cannot connect after {self.retries + 1} attempts ({last!r})"
        ) from last

    @staticmethod
    def _raise_for(status: int, text: str, method: str, url: str) -> None:
        if status < 400:
            return
        message, field, kind = _error_message(status, text)
        if status == 400:
            if kind == CONTEXT_OVERFLOW or _SGLANG_OVERFLOW in message:
                raise ContextOverflowError(message)
            raise BadRequestError(message, field)
        raise EngineError(f"{method} {url} answered HTTP {status}: {message}")

    async def _json(self, method: str, path: str, body: dict[str, Any] | None = None, *, idempotent: bool,
                    timeout_s: float | None = None,
                    headers: dict[str, str] | None = None) -> Any:  # fmt: skip
        _, raw = await self._request(method, path, body, idempotent=idempotent, timeout_s=timeout_s,
                                     headers=headers)  # fmt: skip
        if not raw.strip():
            return {}
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        try:  # Python's json also reads the NaN / -Infinity a server's stdlib encoder may write
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise EngineError(f"{method} {self.base_url + path} answered non-JSON: {raw[:200]!r}") from None

    # ------------------------------------------------------------------------------------------------
    # model layout

    async def model_info(self) -> dict[str, Any]:
        """`GET /get_model_info` (cached)."""
        if self._model_info is None:
            self._model_info = await self._json("GET", "/get_model_info", idempotent=True, timeout_s=30.0)
        return self._model_info

    async def routing_shape(self) -> tuple[int, int, int] | None:
        """(MoE layers, top_k, experts) of the served model, None for a dense one: the server's `routing`
        in `/get_model_info`, else its model's config.json; cached."""
        if self.routing is not None:
            return self.routing
        info = await self.model_info()
        if isinstance(info.get("routing"), dict):
            r = info["routing"]
            self.routing = (int(r["num_layers"]), int(r["top_k"]), int(r["num_experts"]))
            return self.routing
        path = info.get("model_path")
        config = pathlib.Path(str(path)) / "config.json" if path else None
        if config is None or not config.is_file():
            raise EngineError(
                "cannot decode routed experts: the server reports no routing and its model_path "
                f"{path!r} has no config.json here; pass "
                "SGLangEngine(..., routing=(num_moe_layers, top_k, num_experts))"
            )
        from legorl_jax.model.architecture import ArchConfig

        arch = ArchConfig.from_json_file(config)
        self.routing = (
            (arch.num_moe_layers, arch.num_experts_per_tok, arch.num_experts) if arch.is_moe else None
        )
        if arch.is_moe and not all(arch.layer_is_moe):
            dense = [i for i, moe in enumerate(arch.layer_is_moe) if not moe]
            raise EngineError(
                f"{path} mixes dense and MoE layers (dense: {dense}; mlp_only_layers "
                f"{list(arch.mlp_only_layers)}, decoder_sparse_step {arch.decoder_sparse_step}), which "
                "SGLang 0.5.23 cannot serve: it builds every Qwen3-MoE layer sparse (module docstring); "
                "serve it with our engine (engine.backend=jax, or python -m legorl_jax.engine.serve)"
            )
        return self.routing

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
        ids = check_input_ids(input_ids)
        rid = check_generate_args(
            ids, sampling, return_routed_experts, routed_experts_start_len, rid, top_logprobs, session_id
        )
        start = routed_experts_start_len
        routing = await self.routing_shape() if return_routed_experts else None
        headers = {self.routing_key_header: session_id} if session_id and self.routing_key_header else {}
        if return_routed_experts:  # a router drops the body field; our server behind it reads this (wire.py)
            headers[TRACESTATE_HEADER] = routed_start_tracestate(start)
        if session_id is not None and (await self.model_info()).get("session_hint") is not True:
            session_id = None
        body = generate_request_json(
            ids,
            sampling,
            rid=rid,
            return_routed_experts=return_routed_experts,
            routed_experts_start_len=start,
            top_logprobs=top_logprobs,
            session_id=session_id,
        )
        try:
            async with self._counted():
                old_prefixes = self.old_prefixes  # as the server admits it (module docstring)
                reply = await self._json("POST", "/generate", body, idempotent=False, headers=headers or None)
        except EngineTimeoutError:
            await self._abort_quietly(rid)
            raise
        except asyncio.CancelledError:
            task = asyncio.ensure_future(self._abort_quietly(rid))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            raise
        try:
            gen = generation_from_json(
                reply,
                prompt_tokens=len(ids),
                routing=routing,
                routed_experts_start_len=start,
                return_routed_experts=return_routed_experts,
                top_logprobs=top_logprobs,
            )
        except WireError as exc:
            raise EngineError(f"POST {self.base_url}/generate: malformed response: {exc}") from None
        if old_prefixes and gen.cached_tokens > 0:  # it may have attended to an old weights' prefix
            gen = dataclasses.replace(gen, token_stale_kv=np.ones(len(gen.output_ids), np.bool_))
        return gen

    async def prompt_logprobs(self, input_ids: Any, start: int, *, temperature: float = 1.0) -> np.ndarray:
        ids = check_input_ids(input_ids)
        check_logprob_args(ids, start, temperature)
        if start == len(ids):
            return np.zeros(0, np.float32)
        body = {
            "input_ids": ids.tolist(),
            "sampling_params": {**sampling_json(SamplingParams(max_new_tokens=0, temperature=temperature))},
            "return_logprob": True,
            # SGLang scores positions from logprob_start_len on but leaves the first one's value null (it
            # computes no logits before it), so ask from one earlier and drop that entry.
            "logprob_start_len": start - 1,
        }
        reply = await self._json("POST", "/generate", body, idempotent=True)
        entries = reply.get("meta_info", {}).get("input_token_logprobs")
        if not isinstance(entries, list) or len(entries) != len(ids) - start + 1:
            got = len(entries) if isinstance(entries, list) else entries
            raise EngineError(
                f"/generate returned input_token_logprobs of {got!r} entries, expected {len(ids) - start + 1}"
            )
        values = [e[0] if isinstance(e, list) and e else None for e in entries[1:]]
        if any(not isinstance(v, (int, float)) for v in values):
            raise EngineError(f"/generate returned non-numeric input_token_logprobs: {values[:4]!r}...")
        return np.asarray(values, np.float32)

    async def update_weights(self, source: WeightSource, version: str) -> None:
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError(
                "SGLangEngine.update_weights takes an HF directory the server can read, got "
                f"{type(source).__name__}; "
                f"write in-process params with legorl_jax.model.save_hf first"
            )
        if not isinstance(version, str) or not version:
            raise ValueError(f"weight_version must be a non-empty string, got {version!r}")
        body = {"model_path": os.fspath(source), "weight_version": version}
        flushes = not self._paused_in_place or not self._in_flight
        if not flushes:  # SGLang cannot flush while requests hold in place (module docstring)
            body["flush_cache"] = False
        if self._paused_in_place:  # from here: the update may land unflushed even when the call fails
            self.old_prefixes = True
            self._stale_epoch += 1
        try:
            reply = await self._json("POST", "/update_weights_from_disk", body, idempotent=False)
        except BadRequestError as exc:  # SGLang answers a failed update with 400
            if flushes and self._paused_in_place and _UNFLUSHED in str(exc):
                return  # loaded; another client's requests held in place kept the cache (module docstring)
            raise BadRequestError(
                f"update_weights_from_disk({os.fspath(source)!r}) failed: {exc}", "model_path"
            ) from None
        if not reply.get("success", False):
            raise EngineError(
                f"update_weights_from_disk({os.fspath(source)!r}) failed: {reply.get('message')!r}"
            )
        if flushes:  # success with a flush: no old prefix is left
            self.old_prefixes = False
            self._stale_epoch += 1

    async def health(self) -> bool:
        try:
            await self._request("GET", "/health", idempotent=True, timeout_s=min(self.timeout_s, 30.0))
        except EngineError:
            return False
        return True

    async def abort(self, rid: str) -> None:
        if not isinstance(rid, str) or not rid:
            raise ValueError(f"rid must be a non-empty string, got {rid!r}")
        await self._request("POST", "/abort_request", {"rid": rid}, idempotent=True, timeout_s=30.0)

    # ------------------------------------------------------------------------------------------------
    # control

    async def pause(self, mode: str = "in_place") -> None:
        """SGLang's `/pause_generation` in mode in_place or abort; drain is client side (module docstring)."""
        if mode not in PAUSE_MODES:
            raise ValueError(f"mode must be one of {PAUSE_MODES} (retract is not supported), got {mode!r}")
        if mode == "drain":
            await self.drain()
        try:
            await self._json(
                "POST",
                "/pause_generation",
                {"mode": "in_place" if mode == "drain" else mode},
                idempotent=False,
                timeout_s=60.0,
            )
        except BaseException:
            self.end_drain()  # not paused: nothing would resume the held calls
            raise
        self._paused_in_place = mode == "in_place"

    async def resume(self) -> None:
        try:
            await self._json("POST", "/continue_generation", {}, idempotent=False, timeout_s=60.0)
        finally:
            self._paused_in_place = False
            self.end_drain()
            if self.old_prefixes and (self._flusher is None or self._flusher.done()):
                self._flusher = asyncio.ensure_future(self._flush_old_prefixes())

    async def _flush_old_prefixes(self) -> None:
        """Asks SGLang's deferred flush (it runs once the server is idle) until one succeeds after the last
        in-place update, then clears `old_prefixes` (module docstring). Our server answers at once (400
        while busy), hence the pause between tries."""
        while self.old_prefixes:
            epoch = self._stale_epoch
            try:
                flushed = await self.flush_cache(wait_s=FLUSH_WAIT_S)
            except EngineError as exc:
                log.warning("flushing the old weights' prefixes from %s failed: %r", self.base_url, exc)
                flushed = False
            if flushed and epoch == self._stale_epoch:
                self.old_prefixes = False
                return
            await asyncio.sleep(FLUSH_RETRY_S)

    async def drain(self) -> int:
        """Holds this client's new generate calls back and returns once none of its requests is in flight
        (the number that was); `end_drain()` or `resume()` lets the held calls go."""
        self._event("_open").clear()
        drained = self._in_flight
        while self._in_flight:
            ended = self._event("_ended")
            ended.clear()
            await ended.wait()
        return drained

    def end_drain(self) -> None:
        self._event("_open").set()

    @property
    def draining(self) -> bool:
        """Whether `drain` holds this client's new generate calls back now."""
        return not self._event("_open").is_set()

    @property
    def held(self) -> int:
        """This client's generate calls a drain holds back (not sent yet)."""
        return self._held

    @property
    def in_flight(self) -> int:
        """This client's generate calls sent and not answered."""
        return self._in_flight

    @contextlib.asynccontextmanager
    async def _counted(self) -> AsyncIterator[None]:
        """One generate call in flight: it waits while this client is drained, then counts until it ends."""
        self._held += 1
        try:
            await self._event("_open").wait()
        finally:
            self._held -= 1
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            self._event("_ended").set()

    def _event(self, name: str) -> asyncio.Event:
        """The event `name`, made on first use (on the running loop); `_open` starts set."""
        event = getattr(self, name)
        if event is None:
            event = asyncio.Event()
            if name == "_open":
                event.set()
            setattr(self, name, event)
        return event

    async def server_info(self, *, timeout_s: float = 30.0, retry: bool = True) -> dict[str, Any]:
        """`GET /get_server_info`: the server's load figures (ours: running, waiting, prefix_cache, ...).
        `retry=False` asks once (monitoring must not wait on a dead engine through the connect retries)."""
        return await self._json("GET", "/get_server_info", idempotent=retry, timeout_s=timeout_s)

    async def flush_cache(self, wait_s: float = 0.0) -> bool:
        """True when the server flushed (SGLang refuses, with 400, while requests run; with `wait_s` > 0 it
        flushes the moment it is idle within that many seconds, ours answers at once)."""
        path = "/flush_cache" if not wait_s else f"/flush_cache?timeout={float(wait_s)}"
        try:
            await self._request("POST", path, None, idempotent=True, timeout_s=float(wait_s) + 60.0)
        except BadRequestError:
            return False
        return True

    async def _abort_quietly(self, rid: str) -> None:
        try:
            await self.abort(rid)
        except (EngineError, ValueError, asyncio.CancelledError) as exc:
            log.warning("could not abort request %s: %r", rid, exc)
