"""Tool-call and reasoning parsers: from the policy's output text to tool calls, one parser per model family.

A parser reads the text the policy sampled (special tokens kept) and returns a `ParsedOutput`: the visible
content, the reasoning (`<think>...</think>`, also when the template pre-filled the opening tag), the tool
calls as `(name, arguments JSON text)`, and whether a tool call was attempted but did not parse (a format
failure: the text is then returned as content and no call is made up).

    parser = get_parser("qwen3")        # Qwen3 / Hermes JSON: <tool_call>{"name", "arguments"}</tool_call>
    parser = get_parser("qwen3_coder")  # Qwen3-Coder XML: <function=N><parameter=P>v</parameter></function>
    parser.check_template(tokenizer)    # the chat template writes what this parser reads (or ValueError)
    out = parser.parse(text, tools)

One source of truth: the chat template writes tool calls into the history and the parser reads them back
from the output, so `check_template` renders a probe call with the model's own template and requires the
parser to recover it exactly; the proxy runs it once at start, so a template and parser that disagree stop
the proxy with an error instead of silently yielding no tool calls (the failure LEGO-RL reports:
one-turn trajectories and an all-zero mask).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclasses.dataclass(frozen=True)
class ParsedCall:
    """A tool call as the policy wrote it: the function name and its arguments as JSON text."""

    name: str
    arguments: str


@dataclasses.dataclass(frozen=True)
class ParsedOutput:
    """One output text split into what the harness sees."""

    content: str
    reasoning: str | None
    calls: tuple[ParsedCall, ...]
    format_failure: bool = False
    """A tool call was attempted (its opening tag appears) but did not parse; `content` holds the raw text."""


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning, rest) of an output: the text before `</think>` (its `<think>` optional) is reasoning."""
    if THINK_CLOSE not in text:
        stripped = text.lstrip()
        if stripped.startswith(THINK_OPEN):
            # An unfinished thought (the response ran out of tokens): all of it is reasoning.
            return stripped[len(THINK_OPEN) :].strip("\n"), ""
        return None, text
    head, rest = text.split(THINK_CLOSE, 1)
    head = head.lstrip()
    if head.startswith(THINK_OPEN):
        head = head[len(THINK_OPEN) :]
    return head.strip("\n"), rest.lstrip("\n")


class ToolCallParser(Protocol):
    """Reads tool calls out of output text in one model family's format."""

    name: str
    opening: str

    def parse_calls(
        self, text: str, tools: Sequence[Mapping[str, Any]] | None
    ) -> tuple[str, list[ParsedCall]]:
        """(content before the calls, calls); raises ValueError when a call is malformed."""
        ...


def parse_output(
    parser: ToolCallParser, text: str, tools: Sequence[Mapping[str, Any]] | None
) -> ParsedOutput:
    """Splits `text` (special tokens removed) into reasoning, content and tool calls with `parser`."""
    reasoning, rest = split_reasoning(text)
    if parser.opening not in rest:
        return ParsedOutput(content=rest, reasoning=reasoning, calls=())
    try:
        content, calls = parser.parse_calls(rest, tools)
    except ValueError:
        return ParsedOutput(content=rest, reasoning=reasoning, calls=(), format_failure=True)
    return ParsedOutput(content=content, reasoning=reasoning, calls=tuple(calls))


def _tool_schema(tools: Sequence[Mapping[str, Any]] | None, name: str) -> Mapping[str, Any]:
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        if isinstance(fn, Mapping) and fn.get("name") == name:
            params = fn.get("parameters")
            return params if isinstance(params, Mapping) else {}
    return {}


_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _split_blocks(text: str) -> tuple[str, list[str]]:
    """(the content before the first <tool_call>, the text of every block); an unclosed block is a
    ValueError."""
    content = text[: text.index("<tool_call>")].rstrip("\n")
    blocks = _BLOCK.findall(text)
    if len(blocks) != text.count("<tool_call>"):
        raise ValueError("a <tool_call> block is not closed")
    return content, blocks


class Qwen3JsonParser:
    """Qwen3 / Hermes: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` blocks."""

    name = "qwen3"
    opening = "<tool_call>"

    def parse_calls(
        self, text: str, tools: Sequence[Mapping[str, Any]] | None
    ) -> tuple[str, list[ParsedCall]]:
        content, blocks = _split_blocks(text)
        calls = []
        for block in blocks:
            try:
                obj = json.loads(block.strip(), strict=False)
            except json.JSONDecodeError as exc:
                raise ValueError(f"tool call is not JSON: {exc}") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
                raise ValueError(f"tool call needs a string name, got {block.strip()[:80]!r}")
            args = obj.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args, strict=False)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"tool call arguments are not JSON: {exc}") from None
            if not isinstance(args, dict):
                raise ValueError(f"tool call arguments must be an object, got {args!r}")
            calls.append(ParsedCall(obj["name"], json.dumps(args, ensure_ascii=False)))
        return content, calls


_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


def _typed(value: str, schema: Mapping[str, Any]) -> Any:
    """A Qwen3-Coder parameter value (always text) as the type its JSON schema declares."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "string" in kinds or kind is None:
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        if "integer" in kinds or "number" in kinds or "boolean" in kinds:
            raise ValueError(f"parameter value {value[:40]!r} is not a {kind}") from None
        return value


class Qwen3CoderXmlParser:
    """Qwen3-Coder:
    `<tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`."""

    name = "qwen3_coder"
    opening = "<tool_call>"

    def parse_calls(
        self, text: str, tools: Sequence[Mapping[str, Any]] | None
    ) -> tuple[str, list[ParsedCall]]:
        content, blocks = _split_blocks(text)
        calls = []
        for block in blocks:
            match = _FUNCTION.fullmatch(block.strip())
            if match is None:
                raise ValueError(f"tool call is not a <function=...> block: {block.strip()[:80]!r}")
            name = match.group(1).strip()
            properties = _tool_schema(tools, name).get("properties", {})
            args: dict[str, Any] = {}
            body = match.group(2)
            for pname, raw in _PARAMETER.findall(body):
                pname = pname.strip()
                value = raw[1:] if raw.startswith("\n") else raw
                value = value[:-1] if value.endswith("\n") else value
                args[pname] = _typed(
                    value, properties.get(pname, {}) if isinstance(properties, Mapping) else {}
                )
            if _PARAMETER.sub("", body).strip():
                raise ValueError(f"text outside <parameter> blocks in tool call {name!r}")
            calls.append(ParsedCall(name, json.dumps(args, ensure_ascii=False)))
        return content, calls


PARSERS: dict[str, type] = {
    "qwen3": Qwen3JsonParser,
    "hermes": Qwen3JsonParser,
    "qwen3_coder": Qwen3CoderXmlParser,
}


def get_parser(name: str) -> ToolCallParser:
    """The parser registered as `name` (`qwen3`, `hermes`, `qwen3_coder`)."""
    if name not in PARSERS:
        raise ValueError(f"tool_parser must be one of {sorted(PARSERS)}, got {name!r}")
    return PARSERS[name]()


_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_tool",
        "description": "probe",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["path"],
        },
    },
}
_PROBE_ARGS = {"path": "src/a b.py", "count": 3}
_PROBE_TEXT = "PROBE-CONTENT"


def check_template(parser: ToolCallParser, tokenizer: Any, **template_kwargs: Any) -> None:
    """Raises ValueError unless `parser` reads back a tool call that the model's chat template wrote."""
    call = {
        "id": "call_probe",
        "type": "function",
        "function": {"name": "probe_tool", "arguments": _PROBE_ARGS},
    }
    messages = [
        {"role": "user", "content": "probe"},
        {"role": "assistant", "content": _PROBE_TEXT, "tool_calls": [call]},
    ]
    text = tokenizer.render(messages, tools=[_PROBE_TOOL], **template_kwargs)
    start = text.rfind(_PROBE_TEXT)
    if start < 0:
        raise ValueError(f"the chat template does not render assistant content; rendered {text[-200:]!r}")
    rendered = text[start:]
    parsed = parse_output(parser, rendered, [_PROBE_TOOL])
    got = [(c.name, json.loads(c.arguments)) for c in parsed.calls]
    if parsed.format_failure or got != [("probe_tool", _PROBE_ARGS)] or parsed.content.strip() != _PROBE_TEXT:
        raise ValueError(
            f"tool_parser {parser.name!r} does not read the tool calls this model's chat template writes: "
            f"the template rendered {rendered[:300]!r}, the parser found {got}; choose the parser of this "
            f"model family (one of {sorted(PARSERS)})"
        )
