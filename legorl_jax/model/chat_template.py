"""The chat-template sandbox: renders a transformers chat template over validated messages and tools.

Owns what a Hugging Face chat template may see and do, as transformers 5's `apply_chat_template` gives it:
an immutable sandboxed Jinja environment (`trim_blocks`, `lstrip_blocks`, loop controls, the
`{% generation %}` tag, `raise_exception`, `strftime_now`, `tojson(ensure_ascii=False, indent, separators,
sort_keys)`, a restricted `dict` and `namespace`), the message preparation (keys whose value is None are
dropped; reasoning given as `reasoning_content`, `thinking` or `reasoning` is visible under
`reasoning_content` and `thinking`) and the template variables (the named special tokens as strings,
`messages`, `tools`, `documents`, `add_generation_prompt`, then the caller's keyword arguments, which win).

Contract: `render(source, special_tokens, messages, ...)` returns the text transformers renders, or raises
`ChatTemplateError` (the template refused the conversation or does not compile), `ValueError`/`TypeError`
naming the malformed field (e.g. `messages[2].tool_calls[0].function.arguments`). Deliberate differences
from HF, all of them errors where HF would render something surprising: non-text content parts, values that
are not JSON data, Python callables as tools, and HF-only options (`continue_final_message`, assistant
token masks, tensors/padding). Which template a model directory uses, and the tokenization of the text,
belong to `tokenizer.py`.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox
import jinja2.utils
import numpy as np

ROLES = ("system", "user", "assistant", "tool")
# The names a message's reasoning may come under; templates read the first (HF aliases them all).
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
# apply_chat_template options of transformers that change its output but have no meaning here.
_UNSUPPORTED_OPTIONS = (
    "tokenize",
    "return_dict",
    "return_tensors",
    "padding",
    "truncation",
    "max_length",
    "tokenizer_kwargs",
    "continue_final_message",
    "return_assistant_tokens_mask",
    "sanitize_control_tokens",
)


class ChatTemplateError(ValueError):
    """The chat template refused the conversation (its `raise_exception`) or could not be compiled."""


# ----------------------------------------------------------------------------------------------------
# The Jinja environment: what transformers' chat templates may rely on.
# ----------------------------------------------------------------------------------------------------


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for HF's token masks; renders it."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: Any = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; chat templates need the plain JSON text.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


class _DictFactory:
    """`dict(...)` and `dict.fromkeys(...)` for templates, without handing them the `dict` type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """Jinja's `namespace()`, refusing underscore-prefixed attributes (they lead to interpreter internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - `self` stays positional so namespace(self=1) works
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates may not set underscore-prefixed attributes, got {name!r}"
            )


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(
        raise_exception=_raise_exception,
        strftime_now=_strftime_now,
        dict=_DictFactory(),
        namespace=_Namespace,
    )
    return env


@functools.lru_cache(maxsize=32)
def compile_template(source: str) -> jinja2.Template:
    """Compiles a chat template in the transformers-compatible environment (cached by source text)."""
    try:
        return _environment().from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"chat template does not compile: {exc.message} (line {exc.lineno})") from exc


# ----------------------------------------------------------------------------------------------------
# Message preparation and validation
# ----------------------------------------------------------------------------------------------------


def _plain(value: Any, where: str) -> Any:
    """The JSON data a template may see; subclasses (str enums, numpy scalars) reduced to the base type."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, np.generic):
        return _plain(value.item(), where)
    if isinstance(value, Mapping):
        return {_plain(k, where): _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return tuple(_plain(v, f"{where}[{i}]") for i, v in enumerate(value))
    raise TypeError(
        f"{where} is a {type(value).__name__}, which is not JSON data a chat template can render: {value!r}"
    )


def _check_content(where: str, content: Any) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, (list, tuple)):
        raise TypeError(
            f"{where} must be a string or a list of text parts, got {type(content).__name__}: {content!r}"
        )
    for j, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise TypeError(f"{where}[{j}] must be a dict like {{'type': 'text', 'text': ...}}, got {part!r}")
        if part.get("type") != "text":
            raise ValueError(
                f"{where}[{j}].type must be 'text' (this renderer is text-only), got {part.get('type')!r}"
            )
        if not isinstance(part.get("text"), str):
            raise TypeError(f"{where}[{j}].text must be a string, got {part.get('text')!r}")


def _check_tool_calls(i: int, calls: Any) -> None:
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, (list, tuple)):
        raise TypeError(f"{where} must be a list of tool calls, got {type(calls).__name__}: {calls!r}")
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        if not isinstance(call, Mapping):
            raise TypeError(f"{at} must be a dict, got {call!r}")
        if call.get("type", "function") != "function":
            raise ValueError(f"{at}.type must be 'function', got {call.get('type')!r}")
        if "id" in call and not isinstance(call["id"], str):
            raise TypeError(f"{at}.id must be a string, got {call['id']!r}")
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            raise ValueError(f"{at}.function must be a dict with name and arguments, got {fn!r}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"{at}.function.name must be a non-empty string, got {fn.get('name')!r}")
        if "arguments" not in fn or not isinstance(fn["arguments"], (Mapping, str)):
            raise ValueError(
                f"{at}.function.arguments must be a dict or a JSON string, got {fn.get('arguments')!r}"
            )


def check_message(i: int, message: Mapping[str, Any]) -> None:
    """Raises ValueError/TypeError naming `messages[i].<field>` when the message is malformed.

    `message` is as the template will see it: keys whose value was None are already gone.
    """
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"messages[{i}].role must be one of {ROLES}, got {role!r}")
    content = message.get("content")
    if content is not None:
        _check_content(f"messages[{i}].content", content)
    for key in REASONING_KEYS:
        if key in message and not isinstance(message[key], str):
            raise TypeError(f"messages[{i}].{key} must be a string, got {message[key]!r}")
    calls = message.get("tool_calls")
    if role == "assistant":
        if calls is not None:
            _check_tool_calls(i, calls)
        if content is None and not calls and not any(k in message for k in REASONING_KEYS):
            raise ValueError(
                f"messages[{i}] is an assistant message with neither content nor tool_calls: "
                f"{dict(message)!r}"
            )
        return
    if calls is not None:
        raise ValueError(
            f"messages[{i}].tool_calls is only allowed on assistant messages, this one has role {role!r}"
        )
    if content is None:
        raise ValueError(
            f"messages[{i}].content is required for a {role} message, got none in {dict(message)!r}"
        )
    for key in ("tool_call_id", "name"):
        if key in message and not isinstance(message[key], str):
            raise TypeError(f"messages[{i}].{key} must be a string, got {message[key]!r}")


def prepare_messages(messages: Any) -> list[dict[str, Any]]:
    """Validated messages as transformers hands them to the template (None keys dropped, reasoning
    aliased)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}: {messages!r}")
    if not messages:
        raise ValueError("messages is empty; a conversation needs at least one message")
    prepared = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(f"messages[{i}] must be a dict, got {type(message).__name__}: {message!r}")
        message = {k: v for k, v in message.items() if v is not None}
        message = _plain(message, f"messages[{i}]")
        check_message(i, message)
        reasoning = next((message[k] for k in REASONING_KEYS if k in message), None)
        if reasoning is not None:
            # Same precedence as transformers: an explicit `thinking` key keeps its value and place.
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        prepared.append(message)
    return prepared


def prepare_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Validated tool schemas (OpenAI `{"type": "function", "function": {...}}` or a bare `{name, ...}`)."""
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise TypeError(f"tools must be a list of JSON schema dicts, got {type(tools).__name__}: {tools!r}")
    for j, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise TypeError(f"tools[{j}] must be a JSON schema dict, got {type(tool).__name__}: {tool!r}")
        schema = tool.get("function", tool)
        if not isinstance(schema, Mapping):
            raise ValueError(f"tools[{j}].function must be a dict, got {schema!r}")
        if not isinstance(schema.get("name"), str) or not schema["name"]:
            field = f"tools[{j}].function.name" if "function" in tool else f"tools[{j}].name"
            raise ValueError(f"{field} must be a non-empty string, got {schema.get('name')!r}")
    return _plain(list(tools), "tools")


# ----------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------


def render(
    source: str,
    special_tokens: Mapping[str, str],
    messages: Sequence[Mapping[str, Any]],
    /,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    **template_kwargs: Any,
) -> str:
    """The conversation as template `source` renders it: transformers' `apply_chat_template(tokenize=False)`.

    `special_tokens` are the named special tokens as strings; `template_kwargs` win over every variable.
    """
    if not isinstance(add_generation_prompt, bool):
        raise TypeError(f"add_generation_prompt must be a bool, got {add_generation_prompt!r}")
    unsupported = sorted(set(template_kwargs) & set(_UNSUPPORTED_OPTIONS))
    if unsupported:
        raise ValueError(
            f"apply_chat_template options {unsupported} are transformers-only and not supported here"
        )
    if documents is not None and (
        not isinstance(documents, Sequence) or not all(isinstance(d, Mapping) for d in documents)
    ):
        raise TypeError(f"documents must be a list of dicts, got {documents!r}")
    variables = {
        **special_tokens,
        **_plain(template_kwargs, "template_kwargs"),
        "messages": prepare_messages(messages),
        "tools": prepare_tools(tools),
        "documents": _plain(None if documents is None else list(documents), "documents"),
        "add_generation_prompt": add_generation_prompt,
    }
    try:
        return compile_template(source).render(**variables)
    except jinja2.exceptions.TemplateError as exc:
        raise ChatTemplateError(f"chat template rejected the conversation: {exc}") from exc
