"""The OpenAI chat-completions surface: request body -> `ChatRequest`, `Completion` -> JSON or SSE chunks.

Accepts what real harnesses send: string or content-part messages (`developer` is a system
message), tools and `tool_choice`, `temperature`, `top_p`, `max_tokens` / `max_completion_tokens`, `stop`,
`seed`, `logprobs` with `top_logprobs` (0..20, the engine's k likeliest tokens per position; OpenAI's rule:
only with `logprobs: true`), `stream` with `stream_options.include_usage`. `n` other than 1 is a 400. Any
other field is accepted and counted by name. Streaming replays the finished completion in OpenAI's chunk
order: the role delta, reasoning, content, each tool call (id and name, then its arguments), the finish
chunk, a usage chunk when asked, `[DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from legorl_jax.engine.base import MAX_TOP_LOGPROBS
from legorl_jax.proxy.chat import ChatRequest, Completion, ProxyError, bad_request, preview
from legorl_jax.proxy.fields import arguments_object, boolean, integer, number

_KNOWN = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "seed",
        "logprobs",
        "top_logprobs",
        "stream",
        "stream_options",
        "n",
    }
)
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def _content(value: Any, where: str) -> str | list[dict[str, Any]] | None:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a string or a list of content parts, got {preview(value)}", where)
    parts = []
    for j, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise bad_request(
                f"{where}[{j}] must be a text part {{type: text, text}}; got type {kind!r} "
                "(the policy reads text only)",
                f"{where}[{j}]",
            )
        parts.append({"type": "text", "text": part["text"]})
    return parts


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a list, got {preview(value)}", where)
    calls = []
    for j, call in enumerate(value):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_request(f"{where}[{j}] needs function.name, got {preview(call)}", f"{where}[{j}]")
        args = fn.get("arguments", "{}")
        if not isinstance(args, (str, dict)):
            raise bad_request(
                f"{where}[{j}].function.arguments must be a JSON string or an object, got {preview(args)}",
                f"{where}[{j}].function.arguments",
            )
        calls.append(
            {
                "id": call.get("id") or "",
                "type": "function",
                "function": {"name": fn["name"], "arguments": arguments_object(args)},
            }
        )
    return calls


def parse_messages(value: Any) -> tuple[dict[str, Any], ...]:
    """OpenAI messages as the chat template takes them, or a 400 naming the first bad field."""
    if not isinstance(value, list) or not value:
        raise bad_request(f"messages must be a non-empty list, got {preview(value)}", "messages")
    out = []
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise bad_request(f"{where} must be an object, got {preview(msg)}", where)
        role = msg.get("role")
        if role not in _ROLES:
            raise bad_request(
                f"{where}.role must be one of {sorted(_ROLES)}, got {preview(role)}", f"{where}.role"
            )
        clean: dict[str, Any] = {
            "role": _ROLES[role],
            "content": _content(msg.get("content"), f"{where}.content"),
        }
        if role == "assistant":
            if msg.get("tool_calls"):
                clean["tool_calls"] = _tool_calls(msg["tool_calls"], f"{where}.tool_calls")
            for key in ("reasoning_content", "reasoning", "thinking"):
                if isinstance(msg.get(key), str) and msg[key]:
                    clean["reasoning_content"] = msg[key]
                    break
            if clean["content"] is None:
                clean["content"] = ""
        if role == "tool":
            if not isinstance(msg.get("tool_call_id", ""), str):
                raise bad_request(
                    f"{where}.tool_call_id must be a string, got {preview(msg['tool_call_id'])}"
                )
            clean["tool_call_id"] = msg.get("tool_call_id", "")
            if isinstance(msg.get("name"), str):
                clean["name"] = msg["name"]
        if clean["content"] is None:
            clean["content"] = ""
        out.append(clean)
    return tuple(out)


def parse_tools(value: Any) -> tuple[dict[str, Any], ...] | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise bad_request(f"tools must be a list, got {preview(value)}", "tools")
    tools = []
    for i, tool in enumerate(value):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type", "function") != "function"
            or not isinstance(fn, dict)
        ):
            raise bad_request(
                f"tools[{i}] must be {{type: function, function: {{...}}}}, got {preview(tool)}",
                f"tools[{i}]",
            )
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad_request(
                f"tools[{i}].function.name must be a non-empty string, got {preview(fn.get('name'))}"
            )
        tools.append({"type": "function", "function": fn})
    return tuple(tools)


def parse_request(body: dict[str, Any]) -> ChatRequest:
    """The `ChatRequest` of a chat-completions body (module docstring), or a 400 naming the field."""
    n = body.get("n")
    if n is not None and n != 1:
        raise bad_request(f"n must be 1 (one trajectory per call), got {preview(n)}", "n")
    top = integer(body, "top_logprobs", 0) or 0
    if top > MAX_TOP_LOGPROBS:
        raise bad_request(
            f"top_logprobs must be an int in [0, {MAX_TOP_LOGPROBS}], got {top}", "top_logprobs"
        )
    if top and not boolean(body, "logprobs"):
        raise bad_request(f"top_logprobs={top} needs logprobs: true", "top_logprobs")
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) and s for s in stops):
        raise bad_request(
            f"stop must be a string or a list of non-empty strings, got {preview(stop)}", "stop"
        )
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_request(f"stream_options must be an object, got {preview(options)}", "stream_options")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise bad_request(f"model must be a string, got {preview(model)}", "model")
    max_tokens = integer(body, "max_completion_tokens", 1)
    return ChatRequest(
        surface="openai",
        model=model,
        messages=parse_messages(body.get("messages")),
        tools=parse_tools(body.get("tools")),
        tool_choice=body.get("tool_choice"),
        max_tokens=max_tokens if max_tokens is not None else integer(body, "max_tokens", 1),
        temperature=number(body, "temperature", 0.0, 2.0),
        top_p=number(body, "top_p", 0.0, 1.0) or None,
        top_k=integer(body, "top_k", -1),
        stop=stops,
        seed=integer(body, "seed", 0),
        logprobs=boolean(body, "logprobs"),
        top_logprobs=top,
        stream=boolean(body, "stream"),
        include_usage=bool(options.get("include_usage")),
        ignored=tuple(sorted(k for k in body if k not in _KNOWN)),
    )


def _message(c: Completion) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": c.content if (c.content or not c.tool_calls) else None,
    }
    if c.reasoning:
        msg["reasoning_content"] = c.reasoning
    if c.tool_calls:
        msg["tool_calls"] = [dict(t) for t in c.tool_calls]
    return msg


def _logprobs(c: Completion) -> dict[str, Any]:
    return {
        "content": [
            {
                "token": t.text,
                "logprob": t.logprob,
                "bytes": list(t.text.encode()),
                "top_logprobs": [
                    {"token": text, "logprob": lp, "bytes": list(text.encode())} for text, lp in t.top
                ],
            }
            for t in c.tokens
        ]
    }


def _usage(c: Completion) -> dict[str, int]:
    return {
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "total_tokens": c.prompt_tokens + c.completion_tokens,
    }


def response_json(req: ChatRequest, c: Completion) -> dict[str, Any]:
    return {
        "id": c.id,
        "object": "chat.completion",
        "created": c.created,
        "model": req.model,
        "choices": [
            {
                "index": 0,
                "message": _message(c),
                "logprobs": _logprobs(c) if req.logprobs else None,
                "finish_reason": c.finish_reason,
            }
        ],
        "usage": _usage(c),
    }


def stream_events(req: ChatRequest, c: Completion) -> Iterator[bytes]:
    """The SSE lines of `c` in OpenAI's order (module docstring)."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        body = {
            "id": c.id,
            "object": "chat.completion.chunk",
            "created": c.created,
            "model": req.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}],
        }
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if c.reasoning:
        yield chunk({"reasoning_content": c.reasoning})
    if c.content:
        extra: dict[str, Any] = {"logprobs": _logprobs(c)} if req.logprobs else {}
        yield chunk({"content": c.content}, **extra)
    for i, call in enumerate(c.tool_calls):
        head = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        yield chunk({"tool_calls": [head]})
        yield chunk({"tool_calls": [{"index": i, "function": {"arguments": call["function"]["arguments"]}}]})
    yield chunk({}, c.finish_reason)
    if req.include_usage:
        usage = {"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": req.model,
                 "choices": [], "usage": _usage(c)}  # fmt: skip
        yield b"data: " + json.dumps(usage).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


_TYPES = {
    "invalid_request": "invalid_request_error",
    "context_length_exceeded": "invalid_request_error",
    "not_found": "not_found_error",
    "too_large": "invalid_request_error",
    "engine_error": "server_error",
    "auth": "authentication_error",
    "conflict": "invalid_request_error",
}


def error_json(err: ProxyError) -> dict[str, Any]:
    code = err.code if err.code in ("context_length_exceeded",) else None
    return {
        "error": {
            "message": err.message,
            "type": _TYPES.get(err.code, "server_error"),
            "param": err.param,
            "code": code,
        }
    }
