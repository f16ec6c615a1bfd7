"""One capture-proxy session (one trial attempt): sampling policy, generation, parsing, counters, flags.

    session = Session(sid, engine=..., tokenizer=..., parser=..., renderer=..., config=ProxyConfig(), ...)
    completion = await session.complete(chat_request)     # serialised per session; retries answered once
    record = session.close()                              # trajectory dict + training Sequences

Per request (under the session's lock): classify the conversation (main thread or side: a system prompt that
is not the main thread's, or one of the configured side prompts such as OpenCode's title generator), let the
recorder plan the prompt ids, cap the reply by the response budget and the context left (a prompt with no
room left is a non-retryable context overflow that flags the session), sample with the trainer's settings in
train mode (the configured temperature, top_p 1, top_k off, no harness seed: group members must differ) or the
harness's in eval mode, request routing from the first position not yet recorded, recompute log-probs of
re-rendered tokens when configured, parse reasoning and tool calls, and commit the verbatim record.

A reply cut by a weight update (the engine's `abort_resume` policy: finish_reason "abort") is re-issued with
its tokens so far appended, at most `max_resumes` times, and recorded as one generation, earlier tokens'
log-probs and routing as first generated (engine/resume.py); the harness only waits longer. Per session,
`counters["resumes"]` and `counters["resume_prefill_tokens"]` (positions prefilled again) say what that
cost; each turn's record carries its `resumes` and its `stale_kv_tokens` (tokens sampled over K/V of older
weights under the `in_place` policy, `types.Generation`).

A client retry (the same request body, already answered or still in flight) gets the same answer and appends
nothing: the generation runs in a task of its own, so a client that hangs up does not abort it. Counters
(calls, tokens, tool calls per turn, replies without a tool call in a row, format failures, time in the model
and between calls) and flags (`context_overflow`, `no_tool_collapse`, `format_failure`, `engine_failed`) feed
the rollout's outcome taxonomy and the monitor.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import secrets
import time
from typing import Any

import numpy as np

from legorl_jax.config import EngineConfig, ProxyConfig
from legorl_jax.engine.base import BadRequestError, ContextOverflowError, EngineError, SamplingParams
from legorl_jax.engine.resume import generate_resuming
from legorl_jax.proxy.chat import ChatRequest, Completion, OutputToken, ProxyError
from legorl_jax.proxy.recorder import Recorder, Renderer
from legorl_jax.proxy.toolcalls import ToolCallParser, parse_output
from legorl_jax.types import SessionFlags, ToolCall, Turn

log = logging.getLogger(__name__)


def context_message(prompt_tokens: int, limit: int) -> str:
    """Worded as OpenAI words it, so litellm-based harnesses stop at once (ContextWindowExceededError) instead
    of retrying, and with Anthropic's "prompt is too long" for Claude Code."""
    return (
        f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
        f"{prompt_tokens} tokens, which leaves no room to generate (prompt is too long: {prompt_tokens} "
        f"tokens > {limit - 1} maximum)."
    )


def termination_text(count: int) -> str:
    return f"Session terminated: the model produced {count} consecutive responses without calling a tool."


class Session:
    """State of one session (module docstring)."""

    def __init__(
        self,
        session_id: str,
        *,
        engine: Any,
        tokenizer: Any,
        parser: ToolCallParser,
        renderer: Renderer,
        config: ProxyConfig,
        context_length: int,
        task_id: str = "",
        trial_id: str = "",
        metadata: dict[str, Any] | None = None,
        trial_dir: str = "",  # the archive folder; the proxy always names one
        initial_version: str = "default",  # the engine's starting weights version: version number 0
        max_resumes: int = EngineConfig.max_resumes,
    ):
        self.id = session_id
        self.engine = engine
        self.tokenizer = tokenizer
        self.parser = parser
        self.config = config
        self.context_length = context_length
        self.task_id, self.trial_id = task_id, trial_id
        self.metadata = dict(metadata or {})
        self.trial_dir = trial_dir
        self.recorder = Recorder(
            renderer, shared_tokens=config.shared_tokens, initial_version=initial_version
        )
        self.max_resumes = max_resumes
        self.turns: list[Turn] = []
        self.turn_info: list[dict[str, Any]] = []
        self.flags = SessionFlags()
        self.counters: dict[str, Any] = {
            "calls": 0,
            "main_calls": 0,
            "side_calls": 0,
            "retries": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "tool_calls": 0,
            "tool_calls_per_turn": [],
            "consecutive_no_tool": 0,
            "max_consecutive_no_tool": 0,
            "no_tool_replies": 0,
            "format_failures": 0,
            "context_overflows": 0,
            "engine_errors": 0,
            "rewrites": 0,
            "resumes": 0,
            "resume_prefill_tokens": 0,
            "model_s": 0.0,
            "tool_s": 0.0,
            "ignored_fields": collections.Counter(),
        }
        self.main_system: str | None = None
        # The Responses surface's stored responses (responses_api.py): id -> the conversation a follow-up
        # naming it continues, and id -> the response object (GET /v1/responses/{id}).
        self.responses: dict[str, tuple[dict[str, Any], ...]] = {}
        self.response_bodies: dict[str, dict[str, Any]] = {}
        self.opened_at = time.time()
        self.closed = False
        self._lock = asyncio.Lock()
        self._answers: dict[str, asyncio.Future] = {}
        self._last_done: float | None = None

    # ------------------------------------------------------------------------------------------------
    # requests

    async def complete(self, req: ChatRequest) -> Completion:
        """The reply to `req` (module docstring); raises ProxyError for the client."""
        if self.closed:
            raise ProxyError(404, "not_found", f"session {self.id} is closed")
        key = req.key
        answer = self._answers.get(key)
        if answer is not None:
            self.counters["retries"] += 1
            return await asyncio.shield(answer)
        answer = asyncio.get_running_loop().create_future()
        self._answers[key] = answer
        task = asyncio.ensure_future(self._serve(req))

        def deliver(t: asyncio.Task) -> None:
            if t.cancelled():
                answer.cancel()
            elif t.exception() is not None:
                self._answers.pop(key, None)  # a retry of a failed request tries again
                answer.set_exception(t.exception())
            else:
                answer.set_result(t.result())

        task.add_done_callback(deliver)
        return await asyncio.shield(answer)

    def _kind(self, req: ChatRequest) -> str:
        system = req.system_text
        if any(system.startswith(p) for p in self.config.side_system_prefixes):
            return "side"
        if self.main_system is None:
            self.main_system = system
            return "main"
        if system == self.main_system:
            return "main"
        n = self.config.main_prefix_match
        return "main" if len(system) >= n and system[:n] == self.main_system[:n] else "side"

    async def _serve(self, req: ChatRequest) -> Completion:
        async with self._lock:
            began = time.time()
            kind = self._kind(req)
            c = self.counters
            c["calls"] += 1
            c[f"{kind}_calls"] += 1
            c["ignored_fields"].update(req.ignored)
            if kind == "main" and self._last_done is not None:
                c["tool_s"] += began - self._last_done
            if kind == "main" and self.flags.no_tool_collapse:
                return self._terminated(req)
            try:
                completion = await self._generate(req, kind, began)
            finally:
                if kind == "main":
                    self._last_done = time.time()
            return completion

    def _terminated(self, req: ChatRequest) -> Completion:
        return Completion(
            id=_reply_id(req.surface),
            content=termination_text(self.counters["consecutive_no_tool"]),
            reasoning=None,
            tool_calls=(),
            finish_reason="stop",
            prompt_tokens=0,
            completion_tokens=0,
            created=int(time.time()),
        )

    def _sampling(self, req: ChatRequest, prompt_len: int) -> SamplingParams:
        room = self.context_length - prompt_len
        if room < 1:
            self.flags = dataclasses.replace(self.flags, context_overflow=True)
            self.counters["context_overflows"] += 1
            raise ProxyError(
                400, "context_length_exceeded", context_message(prompt_len, self.context_length), "messages"
            )
        budget = min(self.config.max_response_tokens, room, req.max_tokens or room)
        if self.config.mode == "train":
            return SamplingParams(max_new_tokens=budget, temperature=self.config.temperature, stop=req.stop)
        return SamplingParams(
            max_new_tokens=budget,
            temperature=self.config.temperature if req.temperature is None else req.temperature,
            top_p=req.top_p or 1.0,
            top_k=req.top_k if req.top_k and req.top_k > 0 else -1,
            stop=req.stop,
            seed=req.seed,
        )

    async def _generate(self, req: ChatRequest, kind: str, began: float) -> Completion:
        try:
            plan = self.recorder.plan(list(req.messages), list(req.tools or ()) or None, kind=kind)
        except (ValueError, TypeError) as exc:  # the chat template refused the conversation
            raise ProxyError(
                400, "invalid_request", f"the conversation cannot be rendered: {exc}", "messages"
            ) from None
        sampling = self._sampling(req, len(plan.prompt_ids))
        turn_index = len(self.turns)
        try:
            resumed = await generate_resuming(
                self.engine,
                plan.prompt_ids,
                sampling,
                max_resumes=self.max_resumes,
                return_routed_experts=True,
                routed_experts_start_len=plan.routing_start,
                rid=f"{self.id}-{turn_index}",
                session_id=self.id,  # the prefix cache's hint: this conversation comes back next turn
                **({"top_logprobs": req.top_logprobs} if req.logprobs and req.top_logprobs else {}),
            )
            gen = resumed.generation
            self.counters["resumes"] += resumed.resumes
            self.counters["resume_prefill_tokens"] += resumed.prefill_tokens
            recomputed = None
            if plan.rerendered and self.recorder.shared_tokens == "recompute":
                scored = await self.engine.prompt_logprobs(
                    plan.prompt_ids, 1, temperature=self.config.temperature
                )
                recomputed = np.asarray(scored, np.float32)[np.asarray(plan.rerendered) - 1]
        except ContextOverflowError as exc:
            self.flags = dataclasses.replace(self.flags, context_overflow=True)
            self.counters["context_overflows"] += 1
            raise ProxyError(
                400,
                "context_length_exceeded",
                context_message(exc.prompt_tokens or len(plan.prompt_ids), exc.limit or self.context_length),
                "messages",
            ) from None
        except BadRequestError as exc:
            raise ProxyError(
                400, "invalid_request", f"the engine refused the request: {exc}", exc.field
            ) from None
        except EngineError as exc:
            self.flags = dataclasses.replace(self.flags, engine_failed=True)
            self.counters["engine_errors"] += 1
            log.error("session %s: engine failure: %s", self.id, exc)
            raise ProxyError(502, "engine_error", f"the engine failed: {exc}") from None
        done = time.time()
        completion, calls, failure = self._reply(req, gen)
        if kind == "main" and req.tools:
            completion = self._count_tool_use(req, completion, calls)
        self.counters["format_failures"] += int(failure)
        if failure and kind == "main":
            self.flags = dataclasses.replace(self.flags, format_failure=True)
        branch = self.recorder.commit(plan, gen, completion.message, turn=turn_index, recomputed=recomputed)
        if plan.branch is None and branch.opened_by == "rewrite":
            self.counters["rewrites"] += 1
        self.turns.append(
            Turn(
                prompt_ids=np.asarray(plan.prompt_ids, np.int32),
                output_ids=np.asarray(gen.output_ids, np.int32),
                output_logprobs=np.asarray(gen.output_logprobs, np.float32),
                routed_experts=gen.routed_experts,
                finish_reason=gen.finish_reason,
                weight_version=gen.weight_version,
                tool_calls=calls,
                routed_experts_start=gen.routed_experts_start,
                started_at=began,
                finished_at=done,
                branch=branch.index,
            )
        )
        self.turn_info.append(
            {
                "kind": kind,
                "surface": req.surface,
                "format_failure": failure,
                "requested": _requested(req),
                "sampling": _sampling_json(sampling),
                "resumes": resumed.resumes,
                "stale_kv_tokens": int(gen.stale_kv_tokens),
            }
        )
        c = self.counters
        c["model_s"] += done - began
        c["prompt_tokens"] += len(plan.prompt_ids)
        c["completion_tokens"] += len(gen.output_ids)
        return completion

    def _count_tool_use(self, req: ChatRequest, completion: Completion, calls: tuple) -> Completion:
        c = self.counters
        c["tool_calls"] += len(calls)
        c["tool_calls_per_turn"].append(len(calls))
        if calls:
            c["consecutive_no_tool"] = 0
            return completion
        c["no_tool_replies"] += 1
        c["consecutive_no_tool"] += 1
        c["max_consecutive_no_tool"] = max(c["max_consecutive_no_tool"], c["consecutive_no_tool"])
        limit = self.config.max_consecutive_no_tool
        if limit and c["consecutive_no_tool"] > limit:
            self.flags = dataclasses.replace(self.flags, no_tool_collapse=True)
            return _replace_content(completion, termination_text(c["consecutive_no_tool"]))
        return completion

    def _reply(self, req: ChatRequest, gen: Any) -> tuple[Completion, tuple, bool]:
        ids = np.asarray(gen.output_ids).tolist()
        body = (
            ids[:-1]
            if ids and gen.finish_reason == "stop" and ids[-1] in self.tokenizer.eos_token_ids
            else ids
        )
        text = self.tokenizer.decode(body, skip_special_tokens=False) if body else ""
        stop_sequence = gen.matched_stop if isinstance(gen.matched_stop, str) else None
        if stop_sequence and stop_sequence in text:
            text = text[: text.rindex(stop_sequence)]
        parsed = parse_output(self.parser, text, req.tools)
        prefix = "toolu_" if req.surface == "anthropic" else "call_"
        calls = tuple(
            {
                "id": prefix + secrets.token_hex(12),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in parsed.calls
        )
        if calls:
            finish = "tool_calls"
        else:
            finish = "length" if gen.finish_reason == "length" else "stop"
        tokens = ()
        if req.logprobs:
            lps = np.asarray(gen.output_logprobs, np.float32)
            tops = [()] * len(ids)
            if req.top_logprobs and gen.output_top_ids is not None:
                tops = [
                    tuple(
                        (self.tokenizer.decode([int(t)]), float(lp))
                        for t, lp in zip(t_ids, t_lps, strict=True)
                    )
                    for t_ids, t_lps in zip(gen.output_top_ids, gen.output_top_logprobs, strict=True)
                ]
            tokens = tuple(
                OutputToken(self.tokenizer.decode([t]), float(lp), top)
                for t, lp, top in zip(ids, lps, tops, strict=True)
            )
        completion = Completion(
            id=_reply_id(req.surface),
            content=parsed.content,
            reasoning=parsed.reasoning,
            tool_calls=calls,
            finish_reason=finish,
            prompt_tokens=gen.prompt_tokens,
            completion_tokens=len(ids),
            stop_sequence=stop_sequence,
            tokens=tokens,
            created=int(time.time()),
        )
        records = tuple(ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls)
        return completion, records, parsed.format_failure

    # ------------------------------------------------------------------------------------------------
    # the record

    def trajectory(self, *, arrays: bool = True) -> dict[str, Any]:
        """The session as JSON data: turns in order, branches, counters, flags (token ids included)."""
        turns = []
        for i, (t, info) in enumerate(zip(self.turns, self.turn_info, strict=True)):
            entry = {
                "index": i,
                "branch": t.branch,
                **info,
                "finish_reason": t.finish_reason,
                "weight_version": t.weight_version,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in t.tool_calls],
                "started_at": t.started_at,
                "finished_at": t.finished_at,
                "prompt_tokens": len(t.prompt_ids),
                "output_tokens": len(t.output_ids),
                "routed_experts_start": t.routed_experts_start,
                "routed_experts_rows": 0 if t.routed_experts is None else len(t.routed_experts),
            }
            if i in self.recorder.turn_versions:  # an update landed mid-turn: each output token's version
                entry["token_weight_versions"] = list(self.recorder.turn_versions[i])
            if arrays:
                entry.update(
                    prompt_ids=t.prompt_ids.tolist(),
                    output_ids=t.output_ids.tolist(),
                    output_logprobs=[float(x) for x in t.output_logprobs],
                )
            turns.append(entry)
        counters = {
            k: (dict(v) if isinstance(v, collections.Counter) else v) for k, v in self.counters.items()
        }
        main = [b for b in self.recorder.branches if b.kind == "main"]
        return {
            "session_id": self.id,
            "task_id": self.task_id,
            "trial_id": self.trial_id,
            "metadata": self.metadata,
            "tokenizer": getattr(self.tokenizer, "name", ""),
            "opened_at": self.opened_at,
            "turns": turns,
            "branches": [b.summary() for b in self.recorder.branches],
            "flags": self.flags.to_dict(),
            "counters": counters,
            "messages": main[-1].messages if main else [],
        }

    def close(self) -> None:
        self.closed = True


def _reply_id(surface: str) -> str:
    return {"anthropic": "msg_", "responses": "resp_"}.get(surface, "chatcmpl-") + secrets.token_hex(12)


def _replace_content(c: Completion, text: str) -> Completion:
    return dataclasses.replace(c, content=text, reasoning=None, tool_calls=(), finish_reason="stop")


def _requested(req: ChatRequest) -> dict[str, Any]:
    return {
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "max_tokens": req.max_tokens,
        "seed": req.seed,
        "stop": list(req.stop),
        "tool_choice": req.tool_choice,
    }


def _sampling_json(s: SamplingParams) -> dict[str, Any]:
    return {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "max_new_tokens": s.max_new_tokens,
        "seed": s.seed,
        "stop": list(s.stop),
    }
