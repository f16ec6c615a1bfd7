"""The surface-neutral request and reply of the capture proxy, and its one error type.

Both API surfaces (openai_api.py, anthropic_api.py) translate their wire body into a `ChatRequest`
(OpenAI-style messages as the chat template takes them, OpenAI function tools, what the harness asked of
sampling) and a `Completion` back into their own format; the session (session.py) sees only these.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import orjson

# Fields a harness may send that change nothing here: accepted, counted per name in the session.
IGNORED_FIELDS = frozenset(
    {
        "metadata",
        "cache_control",
        "thinking",
        "output_config",
        "context_management",
        "reasoning_effort",
        "prompt_cache_key",
        "user",
        "store",
        "service_tier",
        "parallel_tool_calls",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "response_format",
        "modalities",
        "prediction",
        "audio",
        "web_search_options",
        "safety_identifier",
        "verbosity",
        "mcp_servers",
        "container",
        "betas",
        "anthropic_version",
        "extra_body",
        "functions",
        "function_call",
    }
)


class ProxyError(Exception):
    """A request the proxy answers with an error: HTTP `status`, a `code` each surface maps to its own
    format."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        # invalid_request | context_length_exceeded | not_found | engine_error | too_large | auth | conflict
        self.code = code
        self.message = message
        self.param = param


def bad_request(message: str, param: str | None = None) -> ProxyError:
    return ProxyError(400, "invalid_request", message, param)


def preview(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    """One model call in surface-neutral form."""

    surface: str  # "openai" | "responses" | "anthropic"
    model: str
    messages: tuple[dict[str, Any], ...]  # OpenAI-style, as the chat template takes them
    tools: tuple[dict[str, Any], ...] | None  # OpenAI function tools
    tool_choice: Any = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0  # k: with logprobs, the k likeliest tokens of each output position too
    stream: bool = False
    include_usage: bool = False
    ignored: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Identifies a client retry: the same surface, messages, tools and sampling asks."""
        body = [
            self.surface,
            self.messages,
            self.tools,
            self.tool_choice,
            self.max_tokens,
            self.temperature,
            self.top_p,
            self.top_k,
            self.stop,
            self.seed,
        ]
        return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()

    @property
    def system_text(self) -> str:
        first = self.messages[0] if self.messages else {}
        if first.get("role") != "system":
            return ""
        content = first.get("content")
        if isinstance(content, str):
            return content
        return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


@dataclasses.dataclass(frozen=True)
class OutputToken:
    """One sampled token as the OpenAI logprobs format shows it."""

    text: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()  # (text, logprob) of the likeliest tokens, most likely first


@dataclasses.dataclass(frozen=True)
class Completion:
    """The proxy's reply to one `ChatRequest`."""

    id: str
    content: str
    reasoning: str | None
    tool_calls: tuple[
        dict[str, Any], ...
    ]  # OpenAI tool_calls: {id, type: function, function: {name, arguments}}
    finish_reason: str  # stop | length | tool_calls
    prompt_tokens: int
    completion_tokens: int
    stop_sequence: str | None = None
    tokens: tuple[OutputToken, ...] = ()
    created: int = 0

    @property
    def message(self) -> dict[str, Any]:
        """The assistant message as the harness will send it back (what the branch records)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    **c,
                    "function": {
                        "name": c["function"]["name"],
                        "arguments": json.loads(c["function"]["arguments"]),
                    },
                }
                for c in self.tool_calls
            ]
        return msg
