"""Tokenizer and chat template of a Hugging Face model directory: the one renderer from conversations to ids.

Owns reading, from any HF model directory:
- `tokenizer.json` (the `tokenizers` library; the vocabulary and every added token come from here);
- the chat template(s): `chat_template.jinja` and `additional_chat_templates/*.jinja` when present (they
  take priority, as in transformers), else `tokenizer_config.json["chat_template"]` (a string, or a list of
  `{name, template}`);
- the named special tokens (`bos_token`, `eos_token`, `pad_token`, ... in `tokenizer_config.json`) and the
  stop ids (`generation_config.json["eos_token_id"]` followed by the tokenizer's eos).

transformers 5 rebuilds some tokenizer classes from vocab + merges with a pipeline of its own instead of the
one in tokenizer.json; for `Qwen2Tokenizer` (Qwen3 checkpoints and our tiny models) the two give the same
ids, which the fixtures check. For another class, compare against HF before trusting this loader.

Contract: `Tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=..., **kwargs)` returns
the ids that transformers 5 `AutoTokenizer.from_pretrained(dir).apply_chat_template(..., tokenize=True)`
returns, and `render(...)` its text. That means the same Jinja environment (sandboxed and immutable,
`trim_blocks`, `lstrip_blocks`, loop controls, the `{% generation %}` tag, `raise_exception`,
`strftime_now`, `tojson(ensure_ascii=False, indent, separators, sort_keys)`, a restricted `dict` and
`namespace`), the same message preparation (keys whose value is None are dropped; reasoning given as
`reasoning_content`, `thinking` or `reasoning` is visible under `reasoning_content` and `thinking`), the
same template variables (the named special tokens as strings, `messages`, `tools`, `documents`,
`add_generation_prompt`, then the caller's keyword arguments, which win) and the same tokenization: the
rendered text is encoded with `add_special_tokens=False`, because the template writes every control token
itself. tests/model/test_chat_template.py checks this against HF on the cases in
tests/fixtures/chat_template/cases.json. The proxy, the engine and the trainer all render through here.

Messages are validated before rendering; a malformed one raises ValueError/TypeError naming the field, e.g.
`messages[2].tool_calls[0].function.arguments`. Deliberate differences from HF, all of them errors where HF
would render something surprising: non-text content parts, values that are not JSON data (HF renders a
"<ndarray>"-style placeholder), Python callables as tools, and HF-only options (`continue_final_message`,
assistant token masks, tensors/padding) are rejected rather than rendered.
"""

from __future__ import annotations

import datetime
import functools
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox
import jinja2.utils
import numpy as np
import tokenizers

ROLES = ("system", "user", "assistant", "tool")
# The names a message's reasoning may come under; templates read the first (HF aliases them all).
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
# transformers' named special tokens, in its order; each one set in tokenizer_config.json reaches the template.
NAMED_SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
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
    """`{% generation %}...{% endgeneration %}` marks assistant text for HF's token masks; we render its body."""

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
    """The JSON data a template may see; subclasses (str enums, numpy scalars) are reduced to the base type."""
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
                f"messages[{i}] is an assistant message with neither content nor tool_calls: {dict(message)!r}"
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
    """Validated messages as transformers hands them to the template (None keys dropped, reasoning aliased)."""
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
# The tokenizer
# ----------------------------------------------------------------------------------------------------


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _token_text(value: Any, where: str) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, an AddedToken dict, or null."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    raise ValueError(f"{where} must be a string, an AddedToken dict with 'content', or null; got {value!r}")


def _load_templates(directory: pathlib.Path, config: Mapping[str, Any]) -> str | dict[str, str] | None:
    templates: dict[str, str] = {}
    single = directory / "chat_template.jinja"
    if single.is_file():
        templates["default"] = single.read_text(encoding="utf-8")
    extra = directory / "additional_chat_templates"
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            templates[path.name.removesuffix(".jinja")] = path.read_text(encoding="utf-8")
    if templates:
        return templates["default"] if list(templates) == ["default"] else templates
    raw = config.get("chat_template")
    if raw is None or isinstance(raw, str):
        return raw
    if isinstance(raw, list) and all(
        isinstance(t, Mapping) and {"name", "template"} <= t.keys() for t in raw
    ):
        return {t["name"]: t["template"] for t in raw}
    raise ValueError(
        f"{directory}/tokenizer_config.json: chat_template must be a string or a list of {{name, template}}, got {raw!r}"
    )


def _bpe_cleanup(text: str) -> str:
    # transformers' clean_up_tokenization: removes the space the word-piece decoders put before punctuation.
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):  # fmt: skip
        text = text.replace(before, after)
    return text


class Tokenizer:
    """Encode/decode, special tokens and the chat template of one HF model directory."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        chat_template: str | dict[str, str] | None,
        special_tokens: Mapping[str, str],
        generation_eos_ids: Sequence[int] = (),
        generation_pad_id: int | None = None,
        clean_up_spaces: bool = False,
        name: str = "",
    ) -> None:
        self._backend = backend
        self.chat_template = chat_template
        self.special_tokens_map = dict(special_tokens)
        self._clean_up_spaces = clean_up_spaces
        self.name = name
        for key in NAMED_SPECIAL_TOKENS:
            token = self.special_tokens_map.get(key)
            if token is not None and backend.token_to_id(token) is None:
                raise ValueError(
                    f"{name or 'tokenizer'}: {key} {token!r} is not in the tokenizer's vocabulary"
                )
        self.bos_token_id = self._named_id("bos_token")
        self.eos_token_id = self._named_id("eos_token")
        pad = self._named_id("pad_token")
        self.pad_token_id = pad if pad is not None else generation_pad_id
        eos = list(generation_eos_ids) + ([self.eos_token_id] if self.eos_token_id is not None else [])
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(eos))
        """Every id that ends a generation: generation_config.json's eos ids, then the tokenizer's eos."""

    @classmethod
    def from_dir(cls, path: str | pathlib.Path) -> Tokenizer:
        """Loads tokenizer.json, tokenizer_config.json, the chat template(s) and generation_config.json."""
        directory = pathlib.Path(path)
        if not (directory / "tokenizer.json").is_file():
            raise FileNotFoundError(
                f"{directory} has no tokenizer.json (a fast-tokenizer HF directory is required)"
            )
        backend = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
        config = _read_json(directory / "tokenizer_config.json")
        where = f"{directory}/tokenizer_config.json"
        special: dict[str, str] = {}
        for key in NAMED_SPECIAL_TOKENS:
            token = _token_text(config.get(key), f"{where}: {key}")
            if token is not None:
                special[key] = token
        extra = config.get("extra_special_tokens")
        named_extra = extra.items() if isinstance(extra, Mapping) else ()
        # transformers also treats any other `*_token` string in the config as a named model-specific token.
        loose = (
            (k, v)
            for k, v in config.items()
            if k.endswith("_token") and k not in special and isinstance(v, str)
        )
        for key, value in [*named_extra, *loose]:
            special.setdefault(key, _token_text(value, f"{where}: {key}"))
        split_special = config.get("split_special_tokens", False)
        if not isinstance(split_special, bool):
            raise ValueError(f"{where}: split_special_tokens must be a bool, got {split_special!r}")
        backend.encode_special_tokens = split_special
        clean_up = bool(config.get("clean_up_tokenization_spaces", False))
        if type(backend.model).__name__ == "BPE":
            # transformers 5 ignores the clean-up for BPE (it would corrupt byte-level output) unless forced.
            clean_up = clean_up and bool(
                config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output")
            )
        generation = _read_json(directory / "generation_config.json")
        gen_where = f"{directory}/generation_config.json"
        eos = generation.get("eos_token_id")
        eos_ids = [eos] if isinstance(eos, int) else (eos or [])
        if not isinstance(eos_ids, list) or not all(
            isinstance(e, int) and not isinstance(e, bool) for e in eos_ids
        ):
            raise ValueError(f"{gen_where}: eos_token_id must be an int or a list of ints, got {eos!r}")
        pad = generation.get("pad_token_id")
        if pad is not None and (not isinstance(pad, int) or isinstance(pad, bool)):
            raise ValueError(f"{gen_where}: pad_token_id must be an int, got {pad!r}")
        return cls(
            backend,
            chat_template=_load_templates(directory, config),
            special_tokens=special,
            generation_eos_ids=eos_ids,
            generation_pad_id=pad,
            clean_up_spaces=clean_up,
            name=str(directory),
        )

    def _named_id(self, key: str) -> int | None:
        token = self.special_tokens_map.get(key)
        return None if token is None else self._backend.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added tokens included (transformers' `len(tokenizer)`)."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The underlying `tokenizers.Tokenizer` (for offsets, batch encoding, ...)."""
        return self._backend

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._backend.id_to_token(token_id)

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. Unlike transformers' default, no special tokens are added unless asked."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}: {text!r}")
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int] | np.ndarray, *, skip_special_tokens: bool = False) -> str:
        """Text of `ids`, as transformers' `decode` gives it."""
        array = np.asarray(ids)
        if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
            raise ValueError(f"ids must be a 1-D sequence of ints, got shape {array.shape} of {array.dtype}")
        ids = array.astype(np.int64).tolist()
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids must lie in [0, {self.vocab_size}), got {bad[:8]}")
        text = self._backend.decode(ids, skip_special_tokens=skip_special_tokens)
        return _bpe_cleanup(text) if self._clean_up_spaces else text

    def template_source(self, chat_template: str | None = None, *, tools: Any = None) -> str:
        """The template text used: `chat_template` (a name or a template), else the directory's, as HF picks."""
        own = self.chat_template
        if isinstance(own, dict):
            if chat_template is not None and chat_template in own:
                return own[chat_template]
            if chat_template is None:
                if tools is not None and "tool_use" in own:
                    return own["tool_use"]
                if "default" in own:
                    return own["default"]
                raise ChatTemplateError(
                    f"{self.name}: several chat templates {sorted(own)} and no default; pass chat_template=NAME"
                )
        if chat_template is not None:
            return chat_template
        if own is None:
            raise ChatTemplateError(f"{self.name}: the directory has no chat template")
        return own

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        chat_template: str | None = None,
        **template_kwargs: Any,
    ) -> str:
        """The conversation as text, exactly as transformers' `apply_chat_template(..., tokenize=False)`."""
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
        source = self.template_source(chat_template, tools=tools)
        variables = {
            **self.special_tokens_map,
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

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> list[int]:
        """The conversation as token ids, exactly as transformers' `apply_chat_template(..., tokenize=True)`.

        Takes the options of `render` (tools, documents, add_generation_prompt, chat_template, template kwargs).
        """
        return self.encode(self.render(messages, **options), add_special_tokens=False)

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size}, eos_token_ids={self.eos_token_ids})"


def load_tokenizer(path: str | pathlib.Path) -> Tokenizer:
    """`Tokenizer.from_dir(path)`."""
    return Tokenizer.from_dir(path)
