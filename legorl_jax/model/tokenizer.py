"""Tokenizer of a Hugging Face model directory: the one renderer from conversations to ids.

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
returns, and `render(...)` its text. The template is chosen here (the directory's, or a named or given
one, as HF picks) and rendered by `chat_template.py` (the sandboxed Jinja environment, message validation
and template variables); the rendered text is encoded with `add_special_tokens=False`, because the
template writes every control token itself. tests/model/test_chat_template.py checks this against HF on
the cases in tests/fixtures/chat_template/cases.json. The proxy, the engine and the trainer all render
through here.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tokenizers

from legorl_jax.model import chat_template as chat_template_sandbox
from legorl_jax.model.chat_template import ChatTemplateError
from legorl_jax.validate import is_int

__all__ = ["ChatTemplateError", "NAMED_SPECIAL_TOKENS", "Tokenizer", "load_tokenizer"]

# transformers' named special tokens, in its order; each one set in tokenizer_config.json reaches the
# template.
NAMED_SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


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
        f"{directory}/tokenizer_config.json: chat_template must be a string or a list of "
        f"{{name, template}}, got {raw!r}"
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
            text = _token_text(value, f"{where}: {key}")
            if text is not None:
                special.setdefault(key, text)
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
        if not isinstance(eos_ids, list) or not all(is_int(e) for e in eos_ids):
            raise ValueError(f"{gen_where}: eos_token_id must be an int or a list of ints, got {eos!r}")
        pad = generation.get("pad_token_id")
        if pad is not None and (not is_int(pad)):
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
        """Text of `ids`, as transformers' `decode` gives it.

        An id at or past `vocab_size` decodes to nothing, as HF's tokenizers (which SGLang and vLLM decode
        with) drop it: a real checkpoint's embedding has more rows than its tokenizer has entries (Qwen3:
        151,936 vs 151,669), so a policy can sample such an id, and serving it must not fail. A negative id
        is an error."""
        array = np.asarray(ids)
        if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
            raise ValueError(f"ids must be a 1-D sequence of ints, got shape {array.shape} of {array.dtype}")
        if array.size and array.min() < 0:
            raise ValueError(f"ids must be >= 0, got {array[array < 0][:8].tolist()}")
        array = array[array < self.vocab_size]
        text = self._backend.decode(array.astype(np.int64).tolist(), skip_special_tokens=skip_special_tokens)
        return _bpe_cleanup(text) if self._clean_up_spaces else text

    def template_source(self, chat_template: str | None = None, *, tools: Any = None) -> str:
        """The template text used: `chat_template` (a name or a template), else the directory's, as HF
        picks."""
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
                    f"{self.name}: several chat templates {sorted(own)} and no default; "
                    "pass chat_template=NAME"
                )
        if chat_template is not None:
            return chat_template
        if own is None:
            raise ChatTemplateError(f"{self.name}: the directory has no chat template")
        assert not isinstance(own, dict)  # several templates: returned or refused above
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
        source = self.template_source(chat_template, tools=tools)
        return chat_template_sandbox.render(
            source,
            self.special_tokens_map,
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **template_kwargs,
        )

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> list[int]:
        """The conversation as token ids, exactly as transformers' `apply_chat_template(..., tokenize=True)`.

        Takes the options of `render` (tools, documents, add_generation_prompt, chat_template, template
        kwargs).
        """
        return self.encode(self.render(messages, **options), add_special_tokens=False)

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size}, eos_token_ids={self.eos_token_ids})"


def load_tokenizer(path: str | pathlib.Path) -> Tokenizer:
    """`Tokenizer.from_dir(path)`."""
    return Tokenizer.from_dir(path)
