"""The Anthropic messages surface: request body -> `ChatRequest`, `Completion` -> JSON or SSE events.

Translation (before rendering, so both surfaces record with the same fidelity):
- `system` (a string or text blocks) becomes a leading system message; a `role: "system"` message inside
  `messages` (Claude Code's mid-conversation system beta) stays a system message where it stands.
- user text blocks become the message text; each `tool_result` block becomes a `tool` message (before the
  user's own text of that message, which is kept when it is not blank); assistant `thinking` becomes
  `reasoning_content`, `tool_use` becomes an OpenAI tool call (`input` as JSON text); `redacted_thinking` and
  `cache_control` change nothing. Images and documents are a 400 (the policy reads text only).
- tools `{name, description, input_schema}` become OpenAI function tools; server tools (a `type` other than
  `custom`) are counted as ignored fields.
Replies: blocks `thinking`, `text`, then `tool_use` with fresh `toolu_` ids; `stop_reason` tool_use,
max_tokens, stop_sequence or end_turn; streaming events in Anthropic's order: `message_start`, for each
block `content_block_start` / `content_block_delta` (`thinking_delta` + `signature_delta`, `text_delta`,
`input_json_delta`) / `content_block_stop`, `message_delta` with the stop reason and usage, `message_stop`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from legorl_jax.proxy.chat import ChatRequest, Completion, ProxyError, bad_request, preview
from legorl_jax.proxy.fields import boolean, integer, number

_KNOWN = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
    }
)


def _text_blocks(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a string or a list of text blocks, got {preview(value)}", where)
    texts = []
    for j, block in enumerate(value):
        if (
            not isinstance(block, dict)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            raise bad_request(f"{where}[{j}] must be a text block, got {preview(block)}", f"{where}[{j}]")
        texts.append(block["text"])
    return "\n".join(texts) if where == "system" else "".join(texts)


def _convert(i: int, msg: Any) -> list[dict[str, Any]]:
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise bad_request(f"{where} must be an object, got {preview(msg)}", where)
    role = msg.get("role")
    if role not in ("user", "assistant", "system"):
        raise bad_request(
            f"{where}.role must be user, assistant or system, got {preview(role)}", f"{where}.role"
        )
    content = msg.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad_request(
            f"{where}.content must be a string or a list of blocks, got {preview(content)}",
            f"{where}.content",
        )
    if role == "system":
        return [{"role": "system", "content": _text_blocks(content, f"{where}.content")}]
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and role == "assistant":
            reasoning.append(str(block.get("thinking", "")))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                raise bad_request(f"{at} needs a string name and an object input, got {preview(block)}", at)
            fn = {"name": block["name"], "arguments": block.get("input", {})}
            calls.append({"id": block.get("id", ""), "type": "function", "function": fn})
        elif kind == "tool_result" and role == "user":
            inner = block.get("content", "")
            text = inner if isinstance(inner, str) else _tool_result_text(inner, f"{at}.content")
            if block.get("is_error"):
                text = text or "error"
            results.append(
                {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}
            )
        else:
            raise bad_request(
                f"{at} has type {preview(kind)}, which a text-only policy cannot read in a {role} message", at
            )
    out = list(results)
    text = "".join(texts)
    if role == "assistant":
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    elif text.strip() or not results:
        out.append({"role": "user", "content": text})
    return out


def _tool_result_text(value: Any, where: str) -> str:
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a string or a list of blocks, got {preview(value)}", where)
    texts = []
    for j, block in enumerate(value):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise bad_request(
                f"{where}[{j}] has type {preview(kind)}; tool results must be text", f"{where}[{j}]"
            )
        texts.append(str(block.get("text", "")))
    return "".join(texts)


def parse_request(body: dict[str, Any]) -> ChatRequest:
    """The `ChatRequest` of a messages body (module docstring), or a 400 naming the field."""
    messages: list[dict[str, Any]] = []
    if body.get("system") not in (None, "", []):
        messages.append({"role": "system", "content": _text_blocks(body["system"], "system")})
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad_request(f"messages must be a non-empty list, got {preview(raw)}", "messages")
    for i, msg in enumerate(raw):
        messages.extend(_convert(i, msg))
    ignored = [k for k in body if k not in _KNOWN]
    tools = []
    for i, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict):
            raise bad_request(f"tools[{i}] must be an object, got {preview(tool)}", f"tools[{i}]")
        if tool.get("type") not in (None, "custom"):
            ignored.append(f"tools.{tool.get('type')}")
            continue
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise bad_request(
                f"tools[{i}].name must be a non-empty string, got {preview(tool.get('name'))}",
                f"tools[{i}].name",
            )
        schema = tool.get("input_schema", {"type": "object", "properties": {}})
        if not isinstance(schema, dict):
            raise bad_request(
                f"tools[{i}].input_schema must be an object, got {preview(schema)}",
                f"tools[{i}].input_schema",
            )
        fn = {"name": tool["name"], "description": tool.get("description", ""), "parameters": schema}
        tools.append({"type": "function", "function": fn})
    stops = body.get("stop_sequences") or []
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad_request(
            f"stop_sequences must be a list of non-empty strings, got {preview(stops)}", "stop_sequences"
        )
    model = body.get("model", "")
    if not isinstance(model, str):
        raise bad_request(f"model must be a string, got {preview(model)}", "model")
    return ChatRequest(
        surface="anthropic",
        model=model,
        messages=tuple(messages),
        tools=tuple(tools) or None,
        tool_choice=body.get("tool_choice"),
        max_tokens=integer(body, "max_tokens", 1),
        temperature=number(body, "temperature", 0.0, 1.0),
        top_p=number(body, "top_p", 0.0, 1.0) or None,
        top_k=integer(body, "top_k", 1),
        stop=tuple(stops),
        stream=boolean(body, "stream"),
        ignored=tuple(sorted(ignored)),
    )


def _stop_reason(c: Completion) -> str:
    if c.tool_calls:
        return "tool_use"
    if c.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if c.stop_sequence else "end_turn"


def _blocks(c: Completion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if c.reasoning:
        blocks.append({"type": "thinking", "thinking": c.reasoning, "signature": ""})
    if c.content or not c.tool_calls:
        blocks.append({"type": "text", "text": c.content})
    for call in c.tool_calls:
        fn = call["function"]
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": fn["name"], "input": json.loads(fn["arguments"])}
        )
    return blocks


def _usage(c: Completion, output: int | None = None) -> dict[str, int]:
    return {
        "input_tokens": c.prompt_tokens,
        "output_tokens": c.completion_tokens if output is None else output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def response_json(req: ChatRequest, c: Completion) -> dict[str, Any]:
    return {
        "id": c.id,
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": _blocks(c),
        "stop_reason": _stop_reason(c),
        "stop_sequence": c.stop_sequence,
        "usage": _usage(c),
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return (
        f"event: {name}\ndata: ".encode()
        + json.dumps({"type": name, **data}, ensure_ascii=False).encode()
        + b"\n\n"
    )


def stream_events(req: ChatRequest, c: Completion) -> Iterator[bytes]:
    """The SSE events of `c` in Anthropic's order (module docstring)."""
    start = {
        **response_json(req, c),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(c, 1),
    }
    yield _event("message_start", {"message": start})
    for i, block in enumerate(_blocks(c)):
        kind = block["type"]
        if kind == "thinking":
            yield _event(
                "content_block_start",
                {"index": i, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
            )
            yield _event(
                "content_block_delta",
                {"index": i, "delta": {"type": "thinking_delta", "thinking": block["thinking"]}},
            )
            yield _event(
                "content_block_delta", {"index": i, "delta": {"type": "signature_delta", "signature": ""}}
            )
        elif kind == "text":
            yield _event("content_block_start", {"index": i, "content_block": {"type": "text", "text": ""}})
            if block["text"]:
                yield _event(
                    "content_block_delta",
                    {"index": i, "delta": {"type": "text_delta", "text": block["text"]}},
                )
        else:
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            yield _event("content_block_start", {"index": i, "content_block": head})
            partial = json.dumps(block["input"], ensure_ascii=False)
            yield _event(
                "content_block_delta",
                {"index": i, "delta": {"type": "input_json_delta", "partial_json": partial}},
            )
        yield _event("content_block_stop", {"index": i})
    delta = {"stop_reason": _stop_reason(c), "stop_sequence": c.stop_sequence}
    yield _event("message_delta", {"delta": delta, "usage": {"output_tokens": c.completion_tokens}})
    yield _event("message_stop", {})


_TYPES = {
    "invalid_request": "invalid_request_error",
    "context_length_exceeded": "invalid_request_error",
    "not_found": "not_found_error",
    "too_large": "request_too_large",
    "engine_error": "api_error",
    "auth": "authentication_error",
}


def error_json(err: ProxyError) -> dict[str, Any]:
    return {"type": "error", "error": {"type": _TYPES.get(err.code, "api_error"), "message": err.message}}
