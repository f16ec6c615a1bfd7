"""Continuous batching on the host: requests, a table of slots, the prefix cache, stop rules and results.

The scheduler owns no device state; the engine thread (jax_engine.py) drives it around a `ModelRunner`:

    admitted, copies = scheduler.admit()               # FIFO, at most max_running requests at once
    for src, dst in copies:                            # cached prefixes shared with another request
        runner.copy_slot(src, dst)
    tokens, lps, routed = runner.prefill(prompts, slots, cached_lens, rows_of(admitted))  # [cached_len, P)
    for req, token, lp, rows in zip(admitted, tokens, lps, routed):
        scheduler.on_prefill(req, token, lp, rows)
    if scheduler.running:
        tokens, positions, slots, rows = scheduler.decode_inputs()
        scheduler.on_decode(*runner.decode(tokens, positions, slots, rows, want_routing=...))

Slots: the KV cache has `max_running + cache.max_entries` slots; a slot is running (a request owns it),
cached (a `PrefixCache` entry, prefix_cache.py) or free. Entries never outnumber `cache.max_entries`, so
admitting up to `max_running` requests always finds free slots. A request whose prompt starts with a
cached prefix takes the entry's slot when its prompt extends the whole entry (and no other request
admitted with it wants the entry), else a free slot the entry is copied into; `cached_len` prompt
positions are then not prefilled, and their routing rows are the ones recorded with the entry. A finished
request's slot becomes an entry (unless the weights changed since it was admitted: its K/V would mix
versions). With the cache on, every request of an MoE policy records its routing from row 0, whatever it
asked for, so that a later hit can return rows it did not compute.

Request life: waiting → running (holds a slot) → finished (its `Generation` is handed to `on_done` exactly
once, and the slot is free for the next `admit`). A slot's decode input is the request's last sampled
token at position P + n - 1 (n tokens sampled so far); the step returns the experts that token went
through (row P + n - 1) and the next token. So a request that finishes after N tokens has prompt rows
0..P-1 from the prefill and rows P..P+N-2 from N-1 decode steps: P + N - 1 rows, the last sampled token
never forwarded (`types.Generation`).

Finish rules, checked after each sampled token in this order: a stop token id (`stop_token_ids`, plus the
model's end-of-sequence ids unless `ignore_eos`) → "stop" matched by that id; a stop string in the
output text → "stop" matched by that string; `max_new_tokens` reached, or the context full (P + N =
max_len) → "length". `abort` → "abort" with the tokens so far.

Weight versions: every sampled token records the version current when it was sampled; a request whose
tokens all share one version reports `token_weight_versions=None`. The policy for an update mid-flight is
SGLang's in-place one: running requests keep their slots and continue on the new weights, with the K/V
of their earlier tokens computed under the old ones (and their routing rows recorded under them); each
token sampled so is flagged in `Generation.token_stale_kv` (every token after the update: the K/V it attends
to includes the prompt's, computed before it). (The engine's `pause` modes `drain` and
`abort` keep requests from spanning an update at all.)

Routed experts are stored as uint8 when the model has at most 256 experts, int16 otherwise, from row
`routed_experts_start_len` on; requests that did not ask for them keep none.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import numpy as np

from legorl_jax.engine.base import BadRequestError, SamplingParams
from legorl_jax.engine.prefix_cache import PrefixCache
from legorl_jax.engine.sampler import SamplingRows
from legorl_jax.engine.wire import routing_dtype
from legorl_jax.types import Generation

Detokenize = Callable[[list[int]], str]


@dataclasses.dataclass(eq=False)
class Request:
    """One generation request and its progress."""

    rid: str
    prompt: np.ndarray  # int32[P]
    sampling: SamplingParams
    seed: int
    return_routed_experts: bool
    routed_start: int
    on_done: Callable[[Generation], None]
    on_error: Callable[[BaseException], None] | None = None  # the engine failed before the request finished
    session: str | None = None  # the prefix cache's hint: keep this conversation resident between turns
    top_logprobs: int = 0  # k: keep the k likeliest tokens of every output position
    stop_ids: frozenset[int] = frozenset()
    slot: int | None = None
    cached_len: int = 0  # prompt positions whose K/V came from the prefix cache (not prefilled)
    routing_from: int = 0  # the first row `routing` holds (routed_start, or 0 when the cache keeps every row)
    epoch: int = 0  # the weights' epoch at admission
    # Per output token: sampled after a weight update, over K/V of the weights before it.
    stale_kv: list[bool] = dataclasses.field(default_factory=list)
    output_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    versions: list[str] = dataclasses.field(default_factory=list)
    routing: list[np.ndarray] = dataclasses.field(default_factory=list)  # chunks [rows, L, K]
    tops: list[tuple[np.ndarray, np.ndarray]] = dataclasses.field(
        default_factory=list
    )  # per token (lps, ids)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt)

    @property
    def position(self) -> int:
        """Position of the last sampled token (the next decode input)."""
        return self.prompt_len + len(self.output_ids) - 1


class Scheduler:
    """Slots, queues and stop rules (module docstring)."""

    def __init__(
        self,
        num_slots: int,
        max_len: int,
        *,
        eos_ids: tuple[int, ...] = (),
        routing: tuple[int, int, int] | None = None,
        detokenize: Detokenize | None = None,
        weight_version: str = "default",
        cache: PrefixCache | None = None,
    ):
        """`num_slots` is max_running; `routing` is (MoE layers, experts per token, experts) of an MoE
        model."""
        self.max_running, self.max_len = num_slots, max_len
        self.cache = cache or PrefixCache(0)
        self.num_slots = num_slots + self.cache.max_entries
        self.epoch = 0  # bumped by every weight update
        self.eos_ids = tuple(eos_ids)
        self.detokenize = detokenize
        self.routing = routing
        self.routing_dtype = routing_dtype(routing[2]) if routing else None
        self.weight_version = weight_version
        self.waiting: collections.deque[Request] = collections.deque()
        self.slots: list[Request | None] = [None] * self.num_slots
        self.by_rid: dict[str, Request] = {}

    # ------------------------------------------------------------------------------------------------
    # queue

    @property
    def running(self) -> list[Request]:
        return [r for r in self.slots if r is not None]

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def submit(self, req: Request) -> None:
        if req.rid in self.by_rid:
            raise BadRequestError(f"rid {req.rid!r} is already in flight; request ids must be unique", "rid")
        req.stop_ids = frozenset(req.sampling.stop_token_ids) | (
            frozenset() if req.sampling.ignore_eos else frozenset(self.eos_ids)
        )
        if req.sampling.stop and self.detokenize is None:
            raise BadRequestError(
                f"sampling_params.stop={list(req.sampling.stop)!r} needs a tokenizer; the engine has none",
                "sampling_params.stop",
            )
        self.by_rid[req.rid] = req
        self.waiting.append(req)

    def admit(self) -> tuple[list[Request], list[tuple[int, int]]]:
        """Moves waiting requests (FIFO) into slots; returns them and the (src, dst) copies to run first."""
        room = self.max_running - len(self.running)
        admitted = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
        matches = [self.cache.match(req.prompt) for req in admitted]
        last_user = {id(entry): i for i, (entry, _, _) in enumerate(matches) if entry is not None}
        copies, taken = [], []
        for i, (req, (entry, m, whole)) in enumerate(zip(admitted, matches, strict=True)):
            req.routing_from = 0 if self._keeps_all_routing else req.routed_start
            req.epoch = self.epoch
            if entry is not None and whole and last_user[id(entry)] == i:
                slot = entry.slot
                taken.append(entry)
            else:
                slot = self._free_slot()
                if entry is not None:
                    copies.append((entry.slot, slot))
            req.slot, self.slots[slot] = slot, req
            if entry is not None:
                req.cached_len = m
                if entry.routing is not None and self._keeps_all_routing:
                    req.routing.append(entry.routing[:m].copy())
        for entry in taken:
            self.cache.take(entry)
        return admitted, copies

    @property
    def _keeps_all_routing(self) -> bool:
        return self.cache.enabled and self.routing is not None

    def _free_slot(self) -> int:
        for slot, occupant in enumerate(self.slots):
            if occupant is None and slot not in self.cache.by_slot:
                return slot
        raise RuntimeError(  # cannot happen: entries never outnumber the spare slots
            f"no free slot: {len(self.running)} running, {len(self.cache.by_slot)} cached of {self.num_slots}"
        )

    def flush_cache(self) -> bool:
        """Empties the prefix cache unless a request is in flight (SGLang refuses then); True if flushed."""
        if not self.idle:
            return False
        self.cache.flush()
        return True

    def on_weights(self, version: str) -> None:
        """New weights: cached K/V is stale, and requests in flight will not be cached when they finish."""
        self.weight_version = version
        self.epoch += 1
        self.cache.flush()

    def abort(self, rid: str) -> bool:
        """Finishes `rid` with reason abort; False when no such request is in flight."""
        req = self.by_rid.get(rid)
        if req is None:
            return False
        if req.slot is None:
            self.waiting.remove(req)
        self._finish(req, "abort", None)
        return True

    def abort_all(self) -> int:
        reqs = list(self.by_rid.values())
        for req in reqs:
            self.abort(req.rid)
        return len(reqs)

    def fail_all(self, error: BaseException) -> None:
        """Drops every request in flight, handing each `error` (the engine can no longer serve them)."""
        reqs = list(self.by_rid.values())
        self.waiting.clear()
        self.slots = [None] * self.num_slots
        self.cache.flush()
        self.by_rid.clear()
        for req in reqs:
            if req.on_error is not None:
                req.on_error(error)

    # ------------------------------------------------------------------------------------------------
    # steps

    def on_prefill(
        self,
        req: Request,
        token: int,
        logprob: float,
        routed: np.ndarray | None,
        top: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """The prefill of `req` ran (positions from `cached_len` on): record its routing and first token
        (with `top`, the likeliest tokens of that position: log-probs float32[k'], ids int32[k'])."""
        if self._records_routing(req) and routed is not None:
            self._keep_routing(req, routed, first_row=req.cached_len)
        if req.sampling.max_new_tokens == 0:
            self._finish(req, "length", None)
            return
        self._append(req, token, logprob, top)

    def decode_inputs(
        self, batch: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, SamplingRows]:
        """(last token int32[B], its position int32[B] (-1: padding), slot int32[B], sampling rows): one step.

        Row i is the i-th running request in slot order; rows past them (up to `batch`) are padding.
        """
        running = self.running
        batch = len(running) if batch is None else batch
        if batch < len(running):
            raise ValueError(f"batch={batch} is smaller than the {len(running)} running requests")
        tokens = np.zeros(batch, np.int32)
        positions = np.full(batch, -1, np.int32)
        slots = np.zeros(batch, np.int32)
        params: list[SamplingParams | None] = [None] * batch
        seeds = [0] * batch
        for i, req in enumerate(running):
            assert req.position is not None and req.slot is not None  # a running request holds a slot
            tokens[i], positions[i], slots[i] = req.output_ids[-1], req.position, req.slot
            params[i], seeds[i] = req.sampling, req.seed
        return tokens, positions, slots, SamplingRows.host(params, seeds)

    @property
    def wants_routing(self) -> bool:
        return any(self._records_routing(r) for r in self.running)

    @property
    def wants_top(self) -> bool:
        return any(r.top_logprobs for r in self.running)

    def _records_routing(self, req: Request) -> bool:
        return req.return_routed_experts or self._keeps_all_routing

    def on_decode(
        self,
        tokens: np.ndarray,
        logprobs: np.ndarray,
        routed: np.ndarray | None,
        tops: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """One decode step ran over the rows of `decode_inputs` (routing [B, L, K] and the likeliest
        tokens ([B, k'] log-probs, [B, k'] ids) when wanted)."""
        for i, req in enumerate(self.running):
            if self._records_routing(req) and routed is not None:
                self._keep_routing(req, routed[i][None], first_row=req.position)
            top = None if tops is None else (tops[0][i], tops[1][i])
            self._append(req, int(tokens[i]), float(logprobs[i]), top)

    # ------------------------------------------------------------------------------------------------
    # bookkeeping

    def _keep_routing(self, req: Request, rows: np.ndarray, first_row: int) -> None:
        skip = max(0, req.routing_from - first_row)
        if skip < len(rows):
            req.routing.append(rows[skip:].astype(self.routing_dtype))

    def _append(
        self, req: Request, token: int, logprob: float, top: tuple[np.ndarray, np.ndarray] | None = None
    ) -> None:
        if req.top_logprobs:
            if top is None:
                raise RuntimeError(f"request {req.rid!r} asked for top log-probs and the step computed none")
            req.tops.append((top[0][: req.top_logprobs], top[1][: req.top_logprobs]))
        req.output_ids.append(token)
        req.logprobs.append(logprob)
        req.versions.append(self.weight_version)
        req.stale_kv.append(req.epoch != self.epoch)
        if token in req.stop_ids:
            self._finish(req, "stop", token)
        elif (matched := self._stop_string(req)) is not None:
            self._finish(req, "stop", matched)
        elif (
            len(req.output_ids) >= req.sampling.max_new_tokens
            or req.prompt_len + len(req.output_ids) >= self.max_len
        ):
            self._finish(req, "length", None)

    def _stop_string(self, req: Request) -> str | None:
        stops = req.sampling.stop
        if not stops or self.detokenize is None:  # submit refuses stop strings without a detokenizer
            return None
        # Checked after every token, so a match is new and ends in the newest token. Every token decodes
        # to at least one character, so it lies within the last len(stop) + 1 tokens (one more for a
        # multi-byte character split at the window's start).
        tail = self.detokenize(req.output_ids[-(max(len(s) for s in stops) + 1) :])
        for s in stops:
            if s in tail:
                return s
        return None

    def _finish(self, req: Request, reason: str, matched: int | str | None) -> None:
        n = len(req.output_ids)
        # Positions with K/V in the slot: the prompt, and every output token but the last (never forwarded).
        kv_len = req.prompt_len + max(n - 1, 0)
        prefilled = req.slot is not None
        rows = None
        if self._records_routing(req) and self.routing is not None:
            layers, top_k, _ = self.routing
            rows = (
                np.concatenate(req.routing, axis=0)
                if req.routing
                else np.zeros((0, layers, top_k), self.routing_dtype)
            )
            if prefilled and len(rows) != kv_len - req.routing_from:
                raise RuntimeError(
                    f"request {req.rid!r} has {len(rows)} routing rows, expected {kv_len - req.routing_from}"
                )
        if req.slot is not None:  # prefilled
            self.slots[req.slot] = None
            if req.epoch == self.epoch:
                full = np.concatenate([req.prompt, np.asarray(req.output_ids, np.int32)])[:kv_len]
                self.cache.insert(req.slot, full, rows if self._keeps_all_routing else None, req.session)
        self.by_rid.pop(req.rid, None)
        routed = None
        if req.return_routed_experts and rows is not None and prefilled:
            # Rows cover [routed_start, P + N - 1): with no token sampled, the last prompt row goes too.
            expected = max(req.prompt_len + n - 1 - req.routed_start, 0)
            first = req.routed_start - req.routing_from
            routed = rows[first : first + expected]
        versions = tuple(req.versions)
        top_lps = top_ids = None
        if req.top_logprobs:
            k = req.top_logprobs
            top_lps = np.asarray([t[0] for t in req.tops], np.float32).reshape(n, k)
            top_ids = np.asarray([t[1] for t in req.tops], np.int32).reshape(n, k)
        req.on_done(
            Generation(
                output_ids=np.asarray(req.output_ids, np.int32),
                output_logprobs=np.asarray(req.logprobs, np.float32),
                routed_experts=routed,
                finish_reason=reason,
                weight_version=versions[-1] if versions else self.weight_version,
                prompt_tokens=req.prompt_len,
                routed_experts_start=req.routed_start,
                token_weight_versions=versions if len(set(versions)) > 1 else None,
                matched_stop=matched,
                cached_tokens=req.cached_len,
                output_top_ids=top_ids,
                output_top_logprobs=top_lps,
                token_stale_kv=np.asarray(req.stale_kv, np.bool_) if any(req.stale_kv) else None,
            )
        )
