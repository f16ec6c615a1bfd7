"""Continuous batching on the host: requests, a fixed table of slots, stop rules and results.

The scheduler owns no device state; the engine thread (jax_engine.py) drives it around a `ModelRunner`:

    for req in scheduler.admit():                      # FIFO into free slots
        token, lp, routed = runner.prefill(req.prompt, req.slot, rows_of([req]))
        scheduler.on_prefill(req, token, lp, routed)
    if scheduler.running:
        tokens, positions, rows = scheduler.decode_inputs()
        scheduler.on_decode(*runner.decode(tokens, positions, rows, want_routing=...))

Request life: waiting → running (holds a slot) → finished (its `Generation` is handed to `on_done` exactly
once, and the slot is free for the next `admit`). A slot's decode input is the request's last sampled
token at position P + n - 1 (n tokens sampled so far); the step returns the experts that token went
through (row P + n - 1) and the next token. So a request that finishes after N tokens has prompt rows
0..P-1 from the prefill and rows P..P+N-2 from N-1 decode steps: P + N - 1 rows, the last sampled token
never forwarded (ARCHITECTURE §4).

Finish rules, checked after each sampled token in this order: a stop token id (`stop_token_ids`, plus the
model's end-of-sequence ids unless `ignore_eos`) → "stop" matched by that id; a stop string in the
output text → "stop" matched by that string; `max_new_tokens` reached, or the context full (P + N =
max_len) → "length". `abort` → "abort" with the tokens so far.

Weight versions: every sampled token records the version current when it was sampled; a request whose
tokens all share one version reports `token_weight_versions=None`. The policy for an update mid-flight is
SGLang's in-place one: running requests keep their slots and continue on the new weights, with the K/V
of their earlier tokens computed under the old ones (and their routing rows recorded under them).

Routed experts are stored as uint8 when the model has at most 256 experts, int16 otherwise, from row
`routed_experts_start_len` on; requests that did not ask for them keep none.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import numpy as np

from legorl_jax.engine.base import BadRequestError, SamplingParams
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
    stop_ids: frozenset[int] = frozenset()
    slot: int | None = None
    output_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    versions: list[str] = dataclasses.field(default_factory=list)
    routing: list[np.ndarray] = dataclasses.field(default_factory=list)  # chunks [rows, L, K]

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
    ):
        """`routing` is (MoE layers, experts per token, experts) of an MoE policy, None for a dense one."""
        self.num_slots, self.max_len = num_slots, max_len
        self.eos_ids = tuple(eos_ids)
        self.detokenize = detokenize
        self.routing = routing
        self.routing_dtype = routing_dtype(routing[2]) if routing else None
        self.weight_version = weight_version
        self.waiting: collections.deque[Request] = collections.deque()
        self.slots: list[Request | None] = [None] * num_slots
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

    def admit(self) -> list[Request]:
        """Moves waiting requests into free slots (FIFO) and returns them, to be prefilled."""
        admitted = []
        for slot, occupant in enumerate(self.slots):
            if occupant is None and self.waiting:
                req = self.waiting.popleft()
                req.slot = slot
                self.slots[slot] = req
                admitted.append(req)
        return admitted

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
        self.by_rid.clear()
        for req in reqs:
            if req.on_error is not None:
                req.on_error(error)

    # ------------------------------------------------------------------------------------------------
    # steps

    def on_prefill(self, req: Request, token: int, logprob: float, routed: np.ndarray | None) -> None:
        """The prefill of `req` ran: record the prompt's routing and its first token (unless it wants none)."""
        if req.return_routed_experts and routed is not None:
            self._keep_routing(req, routed, first_row=0)
        if req.sampling.max_new_tokens == 0:
            if req.routing:  # no token sampled: the last prompt row goes too (rows cover [start, P - 1))
                req.routing[-1] = req.routing[-1][:-1]
            self._finish(req, "length", None)
            return
        self._append(req, token, logprob)

    def decode_inputs(self) -> tuple[np.ndarray, np.ndarray, SamplingRows]:
        """(last token int32[S], its position int32[S] (-1: idle slot), sampling rows) for one decode step."""
        tokens = np.zeros(self.num_slots, np.int32)
        positions = np.full(self.num_slots, -1, np.int32)
        params: list[SamplingParams | None] = [None] * self.num_slots
        seeds = [0] * self.num_slots
        for slot, req in enumerate(self.slots):
            if req is not None:
                tokens[slot], positions[slot] = req.output_ids[-1], req.position
                params[slot], seeds[slot] = req.sampling, req.seed
        return tokens, positions, SamplingRows.host(params, seeds)

    @property
    def wants_routing(self) -> bool:
        return any(r.return_routed_experts for r in self.running)

    def on_decode(self, tokens: np.ndarray, logprobs: np.ndarray, routed: np.ndarray | None) -> None:
        """One decode step ran over the slots of `decode_inputs` (routing [S, L, K] when wanted)."""
        for slot, req in enumerate(self.slots):
            if req is None:
                continue
            if req.return_routed_experts and routed is not None:
                self._keep_routing(req, routed[slot][None], first_row=req.position)
            self._append(req, int(tokens[slot]), float(logprobs[slot]))

    # ------------------------------------------------------------------------------------------------
    # bookkeeping

    def _keep_routing(self, req: Request, rows: np.ndarray, first_row: int) -> None:
        skip = max(0, req.routed_start - first_row)
        if skip < len(rows):
            req.routing.append(rows[skip:].astype(self.routing_dtype))

    def _append(self, req: Request, token: int, logprob: float) -> None:
        req.output_ids.append(token)
        req.logprobs.append(logprob)
        req.versions.append(self.weight_version)
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
        if not stops:
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
        if req.slot is not None:
            self.slots[req.slot] = None
        self.by_rid.pop(req.rid, None)
        n = len(req.output_ids)
        routed = None
        if req.return_routed_experts and self.routing is not None:
            layers, top_k, _ = self.routing
            rows = (
                np.concatenate(req.routing, axis=0)
                if req.routing
                else np.zeros((0, layers, top_k), self.routing_dtype)
            )
            expected = max(req.prompt_len + n - 1 - req.routed_start, 0)
            if len(rows) == expected:
                routed = rows
            elif not (reason == "abort" and n == 0):  # aborted before its prefill: nothing was routed
                raise RuntimeError(f"request {req.rid!r} has {len(rows)} routing rows, expected {expected}")
        versions = tuple(req.versions)
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
            )
        )
