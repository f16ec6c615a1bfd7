"""The embedded JAX engine: continuous batching on the policy, in process, behind the async `Engine` API.

    engine = JaxEngine.from_dir("runs/tiny-moe", max_running=8, max_len=4096)    # or JaxEngine(policy, ...)
    gen = await engine.generate(
        prompt_ids, SamplingParams(max_new_tokens=64, seed=1), return_routed_experts=True
    )
    await engine.update_weights(trainer_state.params, version="12")             # in-process, no disk
    engine.close()

Threading: one background thread owns the device (a `ModelRunner`) and the host bookkeeping (a
`Scheduler`). The async methods validate their input in the caller, then hand a command to the thread
through a queue and await a future the thread resolves with `loop.call_soon_threadsafe`; the event loop
never waits on the device. The thread loop is: take every queued command (blocking only while there is
no work or generation is paused), admit waiting requests into free slots (prefilled together when
they fit one length bucket), then one decode step over the running requests. Commands therefore land
between decode steps: a weight update never meets a half-run step, and an abort frees its slot before
the next one.

Weight updates (in place, as SGLang's `pause_generation(mode="in_place")` + update): requests in flight
keep their slots and KV and continue on the new weights from the next step; each output token records the
version it was sampled under (`Generation.token_weight_versions`, None when all are the same) and
`Generation.weight_version` is the version of its last token. An HF directory is loaded in a worker
thread (`load_hf`), then swapped in like an in-process state, so decoding continues while it loads.

Pausing: `pause("in_place")` stops scheduling (requests keep their slots; new ones queue), `pause("abort")`
also finishes every request in flight with reason "abort", `pause("drain")` (our extension; SGLang has no
such mode) stops admitting but keeps decoding the running requests, and returns once none runs (so
they end on the weights they started with, while new ones queue); `resume()` continues. A pause or resume
that arrives during a drain supersedes it (the drain returns then). These are the engine halves of the
update policies of weight_update.py. A cancelled `generate` aborts its request; `close()` finishes
requests in flight with reason "abort". If the engine thread fails (a device error), every request in
flight and every queued call gets an `EngineError`, later calls raise it at once, and `health()` turns
False.

Prefix cache (prefix_cache.py, off unless `cache_slots` > 0): a finished request's K/V stays resident in
a spare slot, keyed by its token ids; a request whose prompt starts with a cached prefix prefills only the
rest and reports the hit as `Generation.cached_tokens` (SGLang's `meta_info.cached_tokens`); routing rows
of cached positions are the ones recorded when they were computed. `flush_cache()` empties it (refused
while requests are in flight, as SGLang does), and every weight update empties it.

Not done here: sharding the engine over several devices (it runs on one), speculative decoding.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import queue
import secrets
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from legorl_jax.engine.base import (
    PAUSE_MODES,
    ContextOverflowError,
    EngineError,
    SamplingParams,
    WeightSource,
    check_generate_args,
    check_input_ids,
    check_logprob_args,
)
from legorl_jax.engine.kv_budget import budget_bytes, kv_bytes_per_token, size_kv_cache
from legorl_jax.engine.prefix_cache import PrefixCache
from legorl_jax.engine.runner import ModelRunner, default_scan_layers
from legorl_jax.engine.sampler import SamplingRows
from legorl_jax.engine.scheduler import Request, Scheduler
from legorl_jax.model.policy import Policy, as_dtype
from legorl_jax.model.tokenizer import Tokenizer
from legorl_jax.types import Generation

log = logging.getLogger(__name__)


class _Reply:
    """Resolves an asyncio future of the caller's loop from the engine thread."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.future = self.loop.create_future()

    def _deliver(self, fn: Callable[[], None]) -> None:
        try:
            self.loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
            pass

    def set(self, value: Any) -> None:
        def deliver() -> None:
            if not self.future.done():
                self.future.set_result(value)

        self._deliver(deliver)

    def fail(self, exc: BaseException) -> None:
        def deliver() -> None:
            if not self.future.done():
                self.future.set_exception(exc)

        self._deliver(deliver)


_STOP = object()


class JaxEngine:
    """The `Engine` on the in-process policy (module docstring)."""

    updates_between_steps = True
    """An update lands between two decode steps on its own (a directory loads while decoding goes on), so
    the in_place policy needs no pause around it (engine/weight_update.py)."""

    def __init__(
        self,
        policy: Policy,
        *,
        tokenizer: Tokenizer | None = None,
        max_running: int = 8,
        max_len: int | None = None,
        min_bucket: int = 16,
        prefill_chunk: int | None = None,
        dtype: str | None = None,
        weight_version: str = "default",
        eos_token_ids: tuple[int, ...] | None = None,
        model_path: str | None = None,
        cache_slots: int = 0,
        cache_tokens: int | None = None,
        min_context: int = 128,
        compile_in_background: bool = True,
        device: Any = None,
        kv_gib: float | None = None,
        mem_fraction: float | None = None,
        scan_layers: bool | None = None,
    ):
        """`device` (a `jax.Device`, default the first) holds the weights and the KV cache. `scan_layers`
        is the layer layout served (None: unrolled on CPU, scanned elsewhere; runner.py), whatever the
        layout of `policy` and of later updates. `cache_slots`
        spare KV slots hold finished requests' prefixes (0: no prefix cache), together at most
        `cache_tokens` tokens (None: no limit but the slots). With `compile_in_background` a call
        whose bucket has no compiled program yet runs on a compiled larger bucket, its own compiling on a
        background thread once it has come up often enough (programs.py); False compiles every new bucket in
        the engine thread. `kv_gib` (GiB) or `mem_fraction` (of the memory the device has free) bound the KV
        cache (kv_budget.py): an unasked `max_len` is capped to fit, then prefix-cache and running slots are
        given up, and a `KVBudgetError` names the numbers when not one slot fits; `kv_sizing` says what was
        allocated. Neither: slots × max_len as asked."""
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a legorl_jax.model.Policy, got {type(policy).__name__}")
        budget, source = budget_bytes(kv_gib=kv_gib, mem_fraction=mem_fraction, device=device)
        c = policy.config
        self.kv_sizing = size_kv_cache(
            bytes_per_token=kv_bytes_per_token(
                c.num_hidden_layers,
                c.num_key_value_heads,
                c.head_dim,
                as_dtype(dtype or policy.dtype, "engine dtype").itemsize,
            ),
            running=max_running,
            cache_slots=cache_slots,
            max_len=max_len,
            model_max_len=c.max_position_embeddings,
            budget=budget,
            source=source,
        )
        log.info("%s", self.kv_sizing.describe())
        max_running, cache_slots = self.kv_sizing.running, self.kv_sizing.cache_slots
        max_len = self.kv_sizing.max_len
        cache = PrefixCache(cache_slots, cache_tokens)
        self.runner = ModelRunner(
            policy, max_running + cache_slots, max_len, min_bucket=min_bucket, prefill_chunk=prefill_chunk,
            dtype=dtype, max_batch=max_running, min_context=min_context,
            compile_in_background=compile_in_background, device=device, scan_layers=scan_layers,
        )  # fmt: skip
        self.config = policy.config
        self.tokenizer = tokenizer
        self.model_path = model_path
        if eos_token_ids is None:
            eos_token_ids = tokenizer.eos_token_ids if tokenizer is not None else ()
        routing = (
            (self.config.num_moe_layers, self.config.num_experts_per_tok, self.config.num_experts)
            if self.config.is_moe
            else None
        )
        self.scheduler = Scheduler(
            max_running,
            max_len,
            eos_ids=tuple(eos_token_ids),
            routing=routing,
            detokenize=None if tokenizer is None else (lambda ids: tokenizer.decode(ids)),
            weight_version=_check_version(weight_version),
            cache=cache,
        )
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._paused = False
        self._drains: list[tuple[_Reply, int]] = []  # pause("drain") calls waiting for the running to end
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="legorl-jax-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_dir(
        cls,
        path: str | os.PathLike,
        *,
        dtype: str | None = None,
        scan_layers: bool | None = None,
        **options: Any,
    ) -> JaxEngine:
        """An engine on the HF checkpoint directory `path` (weights, tokenizer, eos ids from
        generation_config), read straight into the layer layout served (`scan_layers`, see `__init__`).

        `dtype` is the engine's weight and KV dtype (None: float32).
        """
        from legorl_jax.model.checkpoint_io import load_hf

        if scan_layers is None:
            scan_layers = default_scan_layers(options.get("device"))
        policy = load_hf(path, dtype or "float32", scan_layers=scan_layers)
        return cls(
            policy, tokenizer=tokenizer_of(path), model_path=str(path), dtype=dtype, scan_layers=scan_layers,
            **options,
        )  # fmt: skip

    # ------------------------------------------------------------------------------------------------
    # properties

    @property
    def max_len(self) -> int:
        return self.runner.max_len

    @property
    def max_running(self) -> int:
        return self.scheduler.max_running

    @property
    def weight_version(self) -> str:
        return self.scheduler.weight_version

    def stats(self) -> dict[str, Any]:
        """Load and state figures (read without locking: a snapshot, for monitoring only)."""
        return {
            "running": sum(r is not None for r in self.scheduler.slots),
            "waiting": len(self.scheduler.waiting),
            "max_running": self.max_running,
            "max_len": self.max_len,
            "paused": self._paused,
            "draining": bool(self._drains),
            "weight_version": self.weight_version,
            "prefill_buckets": list(self.runner.buckets),
            "batch_buckets": list(self.runner.batch_buckets),
            "context_buckets": list(self.runner.context_buckets),
            "chunked_prefill_size": self.runner.prefill_chunk,
            "compiled_programs": sorted(self.runner.compiled),
            # Calls that waited for their program to compile, calls run on a larger compiled bucket, and
            # background compiles queued or under way (programs.py).
            "compile_stalls": self.runner.programs.stalls,
            "covered_calls": self.runner.programs.covered,
            "compiling": self.runner.programs.compiling,
            "prefix_cache": self.scheduler.cache.stats(),
        }

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
        """The `Engine` call; `session_id` is the prefix cache's hint: keep this conversation resident."""
        prompt = self._check_prompt(input_ids)
        rid = check_generate_args(
            prompt, sampling, return_routed_experts, routed_experts_start_len, rid, top_logprobs, session_id
        )
        reply = _Reply()
        req = Request(
            rid=rid,
            prompt=prompt,
            sampling=sampling,
            seed=secrets.randbits(64) if sampling.seed is None else sampling.seed,
            return_routed_experts=return_routed_experts and self.config.is_moe,
            routed_start=routed_experts_start_len,
            session=session_id,
            top_logprobs=int(top_logprobs),
            on_done=reply.set,
            on_error=reply.fail,
        )
        self._send("submit", req, reply)
        try:
            return await reply.future
        except asyncio.CancelledError:
            self._commands.put(("abort", rid, None))
            raise

    async def prompt_logprobs(self, input_ids: Any, start: int, *, temperature: float = 1.0) -> np.ndarray:
        ids = check_input_ids(input_ids, self.config.vocab_size)
        if len(ids) > self.max_len:
            raise ContextOverflowError(
                f"input_ids has {len(ids)} tokens, more than the engine's context of "
                f"max_len={self.max_len} tokens",
                prompt_tokens=len(ids),
                limit=self.max_len,
            )
        check_logprob_args(ids, start, temperature)
        return await self._call("logprobs", (ids, start, float(temperature)))

    async def update_weights(self, source: WeightSource, version: str) -> None:
        _check_version(version)
        if isinstance(source, (str, os.PathLike)):
            from legorl_jax.model.checkpoint_io import load_hf

            path = pathlib.Path(source)
            if not path.is_dir():
                raise ValueError(f"update_weights: model_path {str(path)!r} is not a directory")
            source = await asyncio.to_thread(
                load_hf, path, self.runner.dtype_name, scan_layers=self.runner.scan_layers
            )
        params = self.runner.check_params(source)
        await self._call("weights", (params, version))

    async def health(self) -> bool:
        return self._thread.is_alive() and self._error is None and not self._closed

    async def abort(self, rid: str) -> None:
        if not isinstance(rid, str) or not rid:
            raise ValueError(f"rid must be a non-empty string, got {rid!r}")
        await self._call("abort", rid)

    # ------------------------------------------------------------------------------------------------
    # control (the server's /pause_generation, /continue_generation, /flush_cache, /abort_request)

    async def pause(self, mode: str = "in_place") -> int:
        """Stops scheduling; with mode "abort" finishes every request in flight, with mode "drain" returns
        once the running requests have finished (module docstring). Returns the requests affected."""
        if mode not in PAUSE_MODES:
            raise ValueError(f"mode must be one of {PAUSE_MODES} (retract is not supported), got {mode!r}")
        return await self._call("pause", mode)

    async def resume(self) -> None:
        await self._call("resume", None)

    async def abort_all(self) -> int:
        return await self._call("abort_all", None)

    async def flush_cache(self) -> bool:
        """Empties the prefix cache; False (nothing dropped) while requests run or wait, as SGLang refuses."""
        return await self._call("flush", None)

    def close(self, timeout: float = 30.0) -> None:
        """Aborts what is in flight and stops the engine thread."""
        if not self._closed:
            self._closed = True
            self._commands.put((_STOP, None, None))
        self._thread.join(timeout)

    # ------------------------------------------------------------------------------------------------
    # caller side

    def _check_prompt(self, input_ids: Any) -> np.ndarray:
        prompt = check_input_ids(input_ids, self.config.vocab_size)
        if len(prompt) >= self.max_len:
            raise ContextOverflowError(
                f"input_ids has {len(prompt)} tokens; the engine's context is max_len={self.max_len} "
                f"tokens, so a prompt may have at most {self.max_len - 1} (one position is left for the "
                "first generated token)",
                prompt_tokens=len(prompt),
                limit=self.max_len,
            )
        return prompt

    def _send(self, kind: str, payload: Any, reply: _Reply) -> None:
        if self._error is not None:
            raise EngineError(f"the engine thread failed: {self._error!r}")
        if self._closed:
            raise EngineError("the engine is closed")
        self._commands.put((kind, payload, reply))
        if not self._thread.is_alive():  # it ended between the checks above and the put: nobody would answer
            self._fail_queued(
                EngineError(
                    "the engine is closed"
                    if self._error is None
                    else f"the engine thread failed: {self._error!r}"
                )
            )

    async def _call(self, kind: str, payload: Any) -> Any:
        reply = _Reply()
        self._send(kind, payload, reply)
        return await reply.future

    # ------------------------------------------------------------------------------------------------
    # engine thread

    def _run(self) -> None:
        try:
            while True:
                block = self._paused or self.scheduler.idle
                for kind, payload, reply in self._take(block):
                    if kind is _STOP:
                        self.scheduler.abort_all()
                        self._end_drains(EngineError("the engine is closed"))
                        self._fail_queued(EngineError("the engine is closed"))
                        return
                    self._handle(kind, payload, reply)
                self._check_drained()
                if not self._paused:
                    self._step(admit=not self._drains)
                    self._check_drained()
        except BaseException as exc:  # noqa: BLE001 - every caller must hear about it
            log.exception("the engine thread failed")
            self._error = exc
            error = EngineError(f"the engine thread failed: {exc!r}")
            self.scheduler.fail_all(error)
            self._end_drains(error)
            self._fail_queued(error)

    def _check_drained(self) -> None:
        """A drain is complete once no request runs: the engine is paused and the drains return."""
        if self._drains and not self.scheduler.running:
            self._paused = True
            self._end_drains()

    def _end_drains(self, error: EngineError | None = None) -> None:
        drains, self._drains = self._drains, []
        for reply, drained in drains:
            if error is None:
                reply.set(drained)
            else:
                reply.fail(error)

    def _take(self, block: bool) -> list[tuple]:
        commands = [self._commands.get()] if block else []
        while True:
            try:
                commands.append(self._commands.get_nowait())
            except queue.Empty:
                return commands

    def _handle(self, kind: str, payload: Any, reply: _Reply | None) -> None:
        try:
            result: Any = None
            if kind == "submit":
                self.scheduler.submit(payload)
                return  # the reply comes with the Generation
            if kind == "abort":
                self.scheduler.abort(payload)
            elif kind == "abort_all":
                result = self.scheduler.abort_all()
            elif kind == "logprobs":
                result = self.runner.prompt_logprobs(*payload)
            elif kind == "weights":
                params, version = payload
                self.runner.set_params(params)
                self.scheduler.on_weights(version)
            elif kind == "pause" and payload == "drain":
                assert reply is not None  # a pause is awaited
                self._drains.append((reply, len(self.scheduler.running)))
                self._paused = False  # the running requests decode on (even after a pause in place)
                return  # the reply comes when no request runs (_check_drained)
            elif kind == "pause":
                self._end_drains()
                result = self.scheduler.abort_all() if payload == "abort" else len(self.scheduler.by_rid)
                self._paused = True
            elif kind == "resume":
                self._end_drains()
                self._paused = False
            elif kind == "flush":
                result = self.scheduler.flush_cache()
            else:
                raise ValueError(f"unknown engine command {kind!r}")
        except Exception as exc:  # noqa: BLE001 - a bad command fails its caller, not the engine
            if reply is not None:
                reply.fail(exc)
            return
        if reply is not None:
            reply.set(result)

    def _step(self, admit: bool = True) -> None:
        admitted, copies = self.scheduler.admit() if admit else ([], [])
        for src, dst in copies:
            self.runner.copy_slot(src, dst)
        if admitted:
            rows = SamplingRows.host([r.sampling for r in admitted], [r.seed for r in admitted])
            tokens, logprobs, routed, tops = self.runner.prefill(
                [r.prompt for r in admitted],
                [_slot_of(r) for r in admitted],
                [r.cached_len for r in admitted],
                rows,
                want_top=any(r.top_logprobs for r in admitted),
            )
            for i, req in enumerate(admitted):
                top = None if tops is None else (tops[0][i], tops[1][i])
                self.scheduler.on_prefill(req, int(tokens[i]), float(logprobs[i]), routed[i], top)
        if self.scheduler.running:
            tokens, positions, slots, rows = self.scheduler.decode_inputs()
            out = self.runner.decode(
                tokens,
                positions,
                slots,
                rows,
                want_routing=self.scheduler.wants_routing,
                want_top=self.scheduler.wants_top,
            )
            self.scheduler.on_decode(*out)

    def _fail_queued(self, error: EngineError) -> None:
        """Fails every command still queued (requests submitted after the end included)."""
        for kind, payload, reply in self._take(block=False):
            if kind == "submit" and payload.on_error is not None:
                payload.on_error(error)
            elif isinstance(reply, _Reply):
                reply.fail(error)


def tokenizer_of(path: str | os.PathLike) -> Tokenizer | None:
    """The tokenizer of an HF directory, or None when it ships none (stop strings and text need one)."""
    directory = pathlib.Path(path)
    return Tokenizer.from_dir(directory) if (directory / "tokenizer.json").is_file() else None


def _check_version(version: Any) -> str:
    if not isinstance(version, str) or not version:
        raise ValueError(f"weight_version must be a non-empty string, got {version!r}")
    return version


def _slot_of(request: Any) -> int:
    """The slot an admitted request was given (admission gives every one a slot)."""
    if request.slot is None:
        raise RuntimeError(f"request {request.rid!r} was admitted without a slot")
    return int(request.slot)
