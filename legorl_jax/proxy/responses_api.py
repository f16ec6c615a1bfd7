"""The OpenAI Responses surface (`POST /v1/responses`): request body -> `ChatRequest`, `Completion` -> a
response object or its SSE events.

Translation, so that a conversation renders to exactly the token ids its chat-completions form would: the
`input` items (and `instructions`) become chat-completions messages, which then go through the chat surface's
own normalisation (`openai_api.parse_messages`, `parse_tools`):
- `instructions` (a string, or input items) comes first as a system message; a `message` item keeps its role
  (`developer` is a system message); its text parts (`input_text`, `output_text`, `text`, `refusal`) are
  joined; images, files and audio are a 400 (the policy reads text only).
- A run of consecutive model items (`reasoning`, an assistant `message`, `function_call`, `custom_tool_call`,
  `local_shell_call`) is one assistant message: reasoning text becomes `reasoning_content` (rendered through
  the template as the chat surface renders thinking), calls become `tool_calls` keyed by `call_id`.
  Reasoning text is read from the item's `reasoning_text` content, else from its `encrypted_content` when
  that is this proxy's (`ENCRYPTED_PREFIX`: the reply's reasoning, base64, so a client that sends back only
  what it was given, as Codex does, sends the same text), else its summary.
- `function_call_output` / `custom_tool_call_output` / `local_shell_call_output` become `tool` messages.
- `previous_response_id` puts that response's conversation (its input and output, not its instructions)
  before `input`; the session keeps every response stored (`store` not false) for that, and for
  `GET /v1/responses/{id}`. An unknown id is a 404 naming it.
- Tools: `function` tools as they are; `custom` (free-form) tools as functions of one string argument
  `input`; `local_shell` as a function `local_shell(command: [str], workdir, timeout_ms)`; the function tools
  of a `namespace` under their own names (the reply's call names its namespace). Hosted tools (`web_search`,
  `file_search`, ...) are counted as ignored fields (`tools.<type>`), as unknown body fields are.
- Sampling: `max_output_tokens`, `temperature`, `top_p`, `top_logprobs` (with `include:
  ["message.output_text.logprobs"]` for log-probs in the reply).
Replies: output items `reasoning` (its text as `reasoning_text` content and as `encrypted_content`),
`message` (one `output_text` part), then one call item per tool call (`function_call`, `custom_tool_call` or
`local_shell_call`, after the tool's kind); status `completed`, or `incomplete` (`max_output_tokens`) when
the reply was cut by its token budget. Streaming replays the finished reply in the Responses API's event
order, every event with its `sequence_number`: `response.created`, `response.in_progress`, per item
`response.output_item.added`, its content (`content_part.added` / `output_text.delta` / `output_text.done` /
`content_part.done`; `reasoning_text.delta` / `.done`; `function_call_arguments.delta` / `.done`;
`custom_tool_call_input.delta` / `.done`), `response.output_item.done`, then `response.completed` (or
`response.incomplete`). Errors use the OpenAI error shape (`openai_api.error_json`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

from legorl_jax.engine.base import MAX_TOP_LOGPROBS
from legorl_jax.proxy import openai_api
from legorl_jax.proxy.chat import ChatRequest, Completion, ProxyError, bad_request, preview
from legorl_jax.proxy.fields import arguments_object, boolean, integer, number

ENCRYPTED_PREFIX = "legorl.reasoning.v1:"
"""How this proxy's `encrypted_content` starts: the reasoning text follows, base64 of its UTF-8."""
LOGPROBS_INCLUDE = "message.output_text.logprobs"
LOCAL_SHELL = "local_shell"
_KNOWN = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "temperature",
        "top_p",
        "top_logprobs",
        "include",
        "stream",
        "store",
        "previous_response_id",
        "parallel_tool_calls",
    }
)
_TEXT_PARTS = ("input_text", "output_text", "text", "reasoning_text", "summary_text")
_MODEL_ITEMS = ("reasoning", "function_call", "custom_tool_call", "local_shell_call")
_OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
_LOCAL_SHELL_SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "The command, as argv."},
        "workdir": {"type": "string", "description": "The working directory."},
        "timeout_ms": {"type": "integer", "description": "The timeout in milliseconds."},
    },
    "required": ["command"],
}


@dataclasses.dataclass(frozen=True)
class ToolKind:
    """How a tool the model calls by `name` is answered: a `function`, `custom` or `local_shell` call item,
    under `namespace` when it came from one."""

    kind: str
    namespace: str | None = None


@dataclasses.dataclass(frozen=True)
class ResponsesRequest:
    """One `POST /v1/responses` call: the surface-neutral request plus what the reply echoes and stores."""

    chat: ChatRequest
    prior: tuple[dict[str, Any], ...]
    """The conversation before the instructions are put in front: what a follow-up naming this response
    continues (with the reply's own message appended)."""
    tool_kinds: Mapping[str, ToolKind]
    echo: Mapping[str, Any]
    """The request fields the response object repeats (instructions, tools, tool_choice, ...)."""
    store: bool
    stream: bool


# ------------------------------------------------------------------------------------------------------
# request


def _text(value: Any, where: str) -> str:
    """The text of a message's `content`: a string, or text parts joined."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a string or a list of content parts, got {preview(value)}", where)
    texts = []
    for j, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            shown = kind if kind is not None else type(part).__name__
            raise bad_request(
                f"{where}[{j}] must be a text part (input_text, output_text); got type {shown!r} "
                "(the policy reads text only)",
                f"{where}[{j}]",
            )
    return "".join(texts)


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise bad_request(f"{where}.{key} must be a non-empty string, got {preview(value)}", f"{where}.{key}")
    return value


def reasoning_text(item: dict[str, Any], where: str) -> str:
    """The text of a `reasoning` item (module docstring: content, else this proxy's encrypted_content,
    else the summary)."""
    content = item.get("content")
    if content:
        return _text(content, f"{where}.content")
    encrypted = item.get("encrypted_content")
    if isinstance(encrypted, str) and encrypted.startswith(ENCRYPTED_PREFIX):
        try:
            return base64.b64decode(encrypted[len(ENCRYPTED_PREFIX) :], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise bad_request(
                f"{where}.encrypted_content is not this proxy's reasoning encoding, got {preview(encrypted)}",
                f"{where}.encrypted_content",
            ) from None
    summary = item.get("summary") or []
    if not isinstance(summary, list):
        raise bad_request(f"{where}.summary must be a list, got {preview(summary)}", f"{where}.summary")
    texts = []
    for j, part in enumerate(summary):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise bad_request(
                f"{where}.summary[{j}] must be a summary_text part, got {preview(part)}",
                f"{where}.summary[{j}]",
            )
        texts.append(part["text"])
    return "\n\n".join(texts)


def _call(item: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    """The chat-completions tool call of a model call item."""
    call_id = _string(item, "call_id", where)
    if kind == "function_call":
        arguments = item.get("arguments", "{}")
        if not isinstance(arguments, str):
            raise bad_request(
                f"{where}.arguments must be a JSON string, got {preview(arguments)}", f"{where}.arguments"
            )
        name = _string(item, "name", where)
    elif kind == "custom_tool_call":
        text = item.get("input")
        if not isinstance(text, str):
            raise bad_request(f"{where}.input must be a string, got {preview(text)}", f"{where}.input")
        name, arguments = _string(item, "name", where), json.dumps({"input": text}, ensure_ascii=False)
    else:  # local_shell_call
        action = item.get("action")
        command = action.get("command") if isinstance(action, dict) else None
        if (
            not isinstance(action, dict)
            or not isinstance(command, list)
            or not all(isinstance(c, str) for c in command)
        ):
            raise bad_request(
                f"{where}.action must be {{type: exec, command: [str, ...]}}, got {preview(action)}",
                f"{where}.action",
            )
        args: dict[str, Any] = {"command": command}
        if action.get("working_directory") is not None:
            args["workdir"] = action["working_directory"]
        if action.get("timeout_ms") is not None:
            args["timeout_ms"] = action["timeout_ms"]
        name, arguments = LOCAL_SHELL, json.dumps(args, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _output_text(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    return _text(value, where)


def items_to_messages(items: Any, where: str = "input") -> list[dict[str, Any]]:
    """Input items as chat-completions messages (module docstring), or a 400 naming the first bad item."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise bad_request(f"{where} must be a string or a list of items, got {preview(items)}", where)
    out: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None  # the assistant message being gathered from a run of model items
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{at} must be an object, got {preview(item)}", at)
        kind = item.get("type", "message" if "role" in item else None)
        role = item.get("role")
        if kind in _MODEL_ITEMS or (kind == "message" and role == "assistant"):
            if turn is None:
                turn = {"role": "assistant", "content": ""}
                out.append(turn)
            if kind == "reasoning":
                text = reasoning_text(item, at)
                turn["reasoning_content"] = turn.get("reasoning_content", "") + text
            elif kind == "message":
                turn["content"] += _text(item.get("content"), f"{at}.content")
            else:
                turn.setdefault("tool_calls", []).append(_call(item, str(kind), at))
            continue
        turn = None
        if kind == "message":
            if role not in ("user", "system", "developer"):
                raise bad_request(
                    f"{at}.role must be one of user, assistant, system, developer, got {preview(role)}",
                    f"{at}.role",
                )
            out.append({"role": role, "content": _text(item.get("content"), f"{at}.content")})
        elif kind in _OUTPUT_ITEMS:
            call_id = item.get("call_id") if kind != "local_shell_call_output" else item.get("id")
            if not isinstance(call_id, str) or not call_id:
                key = "call_id" if kind != "local_shell_call_output" else "id"
                raise bad_request(
                    f"{at}.{key} must name the call it answers, got {preview(call_id)}", f"{at}.{key}"
                )
            text = _output_text(item.get("output", ""), f"{at}.output")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            raise bad_request(
                f"{at} has type {preview(kind)}, which this proxy cannot render (message, reasoning, "
                "function_call, function_call_output, custom_tool_call(_output), local_shell_call(_output))",
                f"{at}.type",
            )
    return out


def parse_tools(value: Any) -> tuple[list[dict[str, Any]], dict[str, ToolKind], list[str]]:
    """(chat-completions tools, each name's `ToolKind`, ignored hosted-tool fields) of a Responses `tools`."""
    if value is None:
        return [], {}, []
    if not isinstance(value, list):
        raise bad_request(f"tools must be a list, got {preview(value)}", "tools")
    tools: list[dict[str, Any]] = []
    kinds: dict[str, ToolKind] = {}
    ignored: list[str] = []

    def add(tool: Any, where: str, namespace: str | None) -> None:
        if not isinstance(tool, dict):
            raise bad_request(f"{where} must be an object, got {preview(tool)}", where)
        kind = tool.get("type")
        if kind == "namespace" and namespace is None:
            _string(tool, "name", where)
            inner = tool.get("tools")
            if not isinstance(inner, list):
                raise bad_request(f"{where}.tools must be a list, got {preview(inner)}", f"{where}.tools")
            for j, sub in enumerate(inner):
                add(sub, f"{where}.tools[{j}]", tool["name"])
            return
        fn: dict[str, Any]
        if kind == LOCAL_SHELL:
            fn = {
                "name": LOCAL_SHELL,
                "description": "Runs a shell command.",
                "parameters": _LOCAL_SHELL_SCHEMA,
            }
        elif kind in ("function", "custom"):
            name = _string(tool, "name", where)
            description = tool.get("description")
            if description is not None and not isinstance(description, str):
                raise bad_request(
                    f"{where}.description must be a string, got {preview(description)}",
                    f"{where}.description",
                )
            fn = {"name": name}
            if description is not None:
                fn["description"] = description
            if kind == "function":
                parameters = tool.get("parameters")
                if parameters is not None and not isinstance(parameters, dict):
                    raise bad_request(
                        f"{where}.parameters must be a JSON schema object, got {preview(parameters)}",
                        f"{where}.parameters",
                    )
                if parameters is not None:
                    fn["parameters"] = parameters
            else:
                fn["parameters"] = {
                    "type": "object",
                    "properties": {"input": {"type": "string", "description": "The tool's free-form input."}},
                    "required": ["input"],
                }
        elif isinstance(kind, str) and kind:
            ignored.append(f"tools.{kind}")
            return
        else:
            raise bad_request(f"{where}.type must be a tool type, got {preview(kind)}", f"{where}.type")
        kinds.setdefault(str(fn["name"]), ToolKind("custom" if kind == "custom" else str(kind), namespace))
        tools.append({"type": "function", "function": fn})

    for i, tool in enumerate(value):
        add(tool, f"tools[{i}]", None)
    return tools, kinds, ignored


def parse_request(body: dict[str, Any], stored: Mapping[str, tuple[dict[str, Any], ...]]) -> ResponsesRequest:
    """The `ResponsesRequest` of a Responses body (module docstring), or a 400/404 naming the field.
    `stored`: the session's kept responses, response id -> its conversation."""
    model = body.get("model", "")
    if not isinstance(model, str):
        raise bad_request(f"model must be a string, got {preview(model)}", "model")
    if "input" not in body:
        raise bad_request("input is required: a string or a list of items", "input")
    previous = body.get("previous_response_id")
    prior: list[dict[str, Any]] = []
    if previous is not None:
        if not isinstance(previous, str):
            raise bad_request(
                f"previous_response_id must be a response id string, got {preview(previous)}",
                "previous_response_id",
            )
        if previous not in stored:
            raise ProxyError(
                404,
                "not_found",
                f"Previous response with id {preview(previous)} not found in this session",
                "previous_response_id",
            )
        prior = list(stored[previous])
    prior += items_to_messages(body["input"])
    instructions = body.get("instructions")
    head: list[dict[str, Any]] = []
    if isinstance(instructions, str):
        head = [{"role": "system", "content": instructions}] if instructions else []
    elif instructions is not None:
        head = items_to_messages(instructions, "instructions")
    if not head + prior:
        raise bad_request(f"input must hold at least one item, got {preview(body['input'])}", "input")
    tools, kinds, ignored = parse_tools(body.get("tools"))
    include = body.get("include") or []
    if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
        raise bad_request(f"include must be a list of strings, got {preview(include)}", "include")
    top = integer(body, "top_logprobs", 0) or 0
    if top > MAX_TOP_LOGPROBS:
        raise bad_request(
            f"top_logprobs must be an int in [0, {MAX_TOP_LOGPROBS}], got {top}", "top_logprobs"
        )
    store = body.get("store", True)
    if store is not None and not isinstance(store, bool):
        raise bad_request(f"store must be a boolean, got {preview(store)}", "store")
    stream = boolean(body, "stream")
    chat = ChatRequest(
        surface="responses",
        model=model,
        messages=openai_api.parse_messages(head + prior),
        tools=openai_api.parse_tools(tools),
        tool_choice=body.get("tool_choice"),
        max_tokens=integer(body, "max_output_tokens", 1),
        temperature=number(body, "temperature", 0.0, 2.0),
        top_p=number(body, "top_p", 0.0, 1.0) or None,
        logprobs=LOGPROBS_INCLUDE in include or top > 0,
        top_logprobs=top,
        stream=stream,
        ignored=tuple(sorted([k for k in body if k not in _KNOWN] + ignored)),
    )
    echo = {
        "instructions": instructions,
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice", "auto"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": chat.temperature,
        "top_p": chat.top_p,
        "max_output_tokens": chat.max_tokens,
        "previous_response_id": previous,
        "metadata": body.get("metadata") or {},
    }
    return ResponsesRequest(chat, tuple(prior), kinds, echo, store is not False, stream)


# ------------------------------------------------------------------------------------------------------
# reply


def encrypt(reasoning: str) -> str:
    """This proxy's `encrypted_content` of a reasoning text (not a secret: a form clients send back)."""
    return ENCRYPTED_PREFIX + base64.b64encode(reasoning.encode()).decode()


def _logprobs(c: Completion) -> list[dict[str, Any]]:
    return [
        {
            "token": t.text,
            "logprob": t.logprob,
            "bytes": list(t.text.encode()),
            "top_logprobs": [{"token": s, "logprob": lp, "bytes": list(s.encode())} for s, lp in t.top],
        }
        for t in c.tokens
    ]


def output_items(req: ResponsesRequest, c: Completion) -> list[dict[str, Any]]:
    """The reply's output items (module docstring), ids derived from the response id."""
    suffix = c.id.removeprefix("resp_")
    items: list[dict[str, Any]] = []
    if c.reasoning:
        items.append(
            {
                "id": f"rs_{suffix}",
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": c.reasoning}],
                "encrypted_content": encrypt(c.reasoning),
                "status": "completed",
            }
        )
    if c.content or not c.tool_calls:
        part: dict[str, Any] = {"type": "output_text", "text": c.content, "annotations": []}
        if req.chat.logprobs:
            part["logprobs"] = _logprobs(c)
        items.append(
            {
                "id": f"msg_{suffix}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    for i, call in enumerate(c.tool_calls):
        fn = call["function"]
        tool = req.tool_kinds.get(fn["name"], ToolKind("function"))
        extra = {"namespace": tool.namespace} if tool.namespace else {}
        args = arguments_object(fn["arguments"])
        if tool.kind == "custom" and isinstance(args, dict) and isinstance(args.get("input"), str):
            items.append(
                {
                    "id": f"ctc_{suffix}_{i}",
                    "type": "custom_tool_call",
                    "call_id": call["id"],
                    "name": fn["name"],
                    "input": args["input"],
                    "status": "completed",
                    **extra,
                }  # fmt: skip
            )
        elif tool.kind == LOCAL_SHELL and isinstance(args, dict) and isinstance(args.get("command"), list):
            action = {
                "type": "exec",
                "command": args["command"],
                "env": {},
                "timeout_ms": args.get("timeout_ms"),
                "working_directory": args.get("workdir"),
            }
            items.append(
                {
                    "id": f"lsh_{suffix}_{i}",
                    "type": "local_shell_call",
                    "call_id": call["id"],
                    "action": action,
                    "status": "completed",
                }  # fmt: skip
            )
        else:
            items.append(
                {
                    "id": f"fc_{suffix}_{i}",
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": fn["name"],
                    "arguments": fn["arguments"],
                    "status": "completed",
                    **extra,
                }  # fmt: skip
            )
    return items


def response_json(req: ResponsesRequest, c: Completion) -> dict[str, Any]:
    """The response object of `c` (complete, or `incomplete` when its token budget cut it)."""
    cut = c.finish_reason == "length"
    return {
        "id": c.id,
        "object": "response",
        "created_at": c.created,
        "status": "incomplete" if cut else "completed",
        "completed_at": None if cut else c.created,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "model": req.chat.model,
        "output": output_items(req, c),
        **req.echo,
        "reasoning": None,
        "store": req.store,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": {
            "input_tokens": c.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": c.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": c.prompt_tokens + c.completion_tokens,
        },
    }


def conversation(req: ResponsesRequest, c: Completion) -> tuple[dict[str, Any], ...]:
    """What a follow-up naming this response continues: its conversation without the instructions, then its
    output items read back as input would be (so `previous_response_id` and a resent history render alike)."""
    return req.prior + tuple(items_to_messages(output_items(req, c), "output"))


def stream_events(full: dict[str, Any]) -> Iterator[bytes]:
    """The SSE events of the finished response object `full` (`response_json`) in the Responses API's order
    (module docstring)."""
    seq = 0

    def event(kind: str, **data: Any) -> bytes:
        nonlocal seq
        body = {"type": kind, "sequence_number": seq, **data}
        seq += 1
        return f"event: {kind}\ndata: ".encode() + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"

    start = {**full, "status": "in_progress", "output": [], "usage": None, "completed_at": None,
             "incomplete_details": None}  # fmt: skip
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    for n, item in enumerate(full["output"]):
        kind, at = item["type"], {"item_id": item["id"], "output_index": n}
        if kind == "message":
            yield event("response.output_item.added", output_index=n,
                        item={**item, "status": "in_progress", "content": []})  # fmt: skip
            (part,) = item["content"]
            empty = {**part, "text": ""} | ({"logprobs": []} if "logprobs" in part else {})
            yield event("response.content_part.added", **at, content_index=0, part=empty)
            lps = part.get("logprobs", [])
            yield event("response.output_text.delta", **at, content_index=0, delta=part["text"], logprobs=lps)
            yield event("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=lps)
            yield event("response.content_part.done", **at, content_index=0, part=part)
        elif kind == "reasoning":
            yield event("response.output_item.added", output_index=n,
                        item={**item, "status": "in_progress", "content": []})  # fmt: skip
            text = item["content"][0]["text"]
            empty = {"type": "reasoning_text", "text": ""}
            yield event("response.content_part.added", **at, content_index=0, part=empty)
            yield event("response.reasoning_text.delta", **at, content_index=0, delta=text)
            yield event("response.reasoning_text.done", **at, content_index=0, text=text)
            yield event("response.content_part.done", **at, content_index=0, part=item["content"][0])
        elif kind == "function_call":
            yield event("response.output_item.added", output_index=n,
                        item={**item, "status": "in_progress", "arguments": ""})  # fmt: skip
            yield event("response.function_call_arguments.delta", **at, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **at, name=item["name"],
                        arguments=item["arguments"])  # fmt: skip
        elif kind == "custom_tool_call":
            yield event("response.output_item.added", output_index=n,
                        item={**item, "status": "in_progress", "input": ""})  # fmt: skip
            yield event("response.custom_tool_call_input.delta", **at, delta=item["input"])
            yield event("response.custom_tool_call_input.done", **at, input=item["input"])
        else:  # local_shell_call: one piece
            yield event("response.output_item.added", output_index=n, item={**item, "status": "in_progress"})
        yield event("response.output_item.done", output_index=n, item=item)
    yield event(
        "response.incomplete" if full["status"] == "incomplete" else "response.completed", response=full
    )


error_json = openai_api.error_json
