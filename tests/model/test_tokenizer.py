"""Tokenizer loading, encode/decode, special token ids, and the errors for malformed messages and
directories."""

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from legorl_jax.model.chat_template import ChatTemplateError
from legorl_jax.model.tokenizer import Tokenizer, load_tokenizer

FIXTURE = pathlib.Path(__file__).parents[1] / "fixtures" / "chat_template"
HF = json.loads((FIXTURE / "cases.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer(FIXTURE)


def _copy_fixture(tmp_path: pathlib.Path) -> pathlib.Path:
    for f in FIXTURE.iterdir():
        shutil.copy(f, tmp_path)
    return tmp_path


def _edit_json(path: pathlib.Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("sample", HF["encode_samples"], ids=lambda s: s["text"][:20])
def test_encode_and_decode_match_transformers(tok, sample):
    assert tok.encode(sample["text"]) == sample["ids"]
    assert tok.decode(sample["ids"]) == sample["decoded"]
    assert tok.decode(sample["ids"], skip_special_tokens=True) == sample["decoded_skip_special"]


@pytest.mark.parametrize(
    "text",
    ["", "def f(x):\n\treturn x ** 2  # square\n", "naïve café 東京 🙂 ≤≥", "  \n\n  trailing  ", "a\r\nb"],
)
def test_decode_inverts_encode(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_special_token_ids_match_transformers(tok):
    expected = HF["tokenizer"]
    assert tok.vocab_size == expected["len"]
    assert tok.special_tokens_map == expected["special_tokens_map"]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (
        expected["bos_token_id"], expected["eos_token_id"], expected["pad_token_id"])  # fmt: skip


def test_eos_token_ids_list_generation_config_ids_then_the_tokenizer_eos(tok):
    im_end, eot = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    # generation_config.json says [im_end, endoftext]; the tokenizer's eos (im_end) is not repeated.
    assert tok.eos_token_ids == (im_end, eot)


def test_eos_from_the_tokenizer_alone_when_generation_config_is_absent(tmp_path):
    directory = _copy_fixture(tmp_path)
    (directory / "generation_config.json").unlink()
    bare = Tokenizer.from_dir(directory)
    assert bare.eos_token_ids == (bare.token_to_id("<|im_end|>"),)


def test_control_and_markup_tokens_are_single_ids_and_only_control_tokens_are_skipped(tok):
    text = "<|im_start|>assistant\n<think>\nx\n</think>\n<tool_call>\n{}\n</tool_call><|im_end|>"
    ids = tok.encode(text)
    for token in ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"):
        assert tok.token_to_id(token) in ids
    skipped = tok.decode(ids, skip_special_tokens=True)
    assert "<|im_start|>" not in skipped and "<|im_end|>" not in skipped
    assert "<think>" in skipped and "<tool_call>" in skipped  # parsers need these after decoding


def test_python_code_takes_fewer_tokens_than_a_third_of_its_characters(tok):
    code = (
        "def load_config(path: str) -> dict:\n    with open(path, encoding='utf-8') as f:\n        data = "
        "json.load(f)\n    if not isinstance(data, dict):\n        raise ValueError(f'{path}: expected an "
        "object, got {type(data).__name__}')\n    return data\n"
    )
    assert len(tok.encode(code)) < len(code) / 3


def test_decode_accepts_numpy_ids_drops_ids_past_the_vocabulary_and_rejects_negative_ones(tok):
    ids = tok.encode("hello world")
    assert tok.decode(np.asarray(ids, dtype=np.int32)) == "hello world"
    assert tok.decode([*ids, tok.vocab_size, tok.vocab_size + 7]) == "hello world"  # as HF's decode
    with pytest.raises(ValueError, match=r"ids must be >= 0, got \[-1\]"):
        tok.decode([ids[0], -1])
    with pytest.raises(ValueError, match=r"1-D sequence of ints, got shape \(1, 2\)"):
        tok.decode([ids[:2]])
    assert tok.decode([]) == ""


def test_encode_rejects_non_strings(tok):
    with pytest.raises(TypeError, match="bytes"):
        tok.encode(b"hi")


def test_a_directory_without_tokenizer_json_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        Tokenizer.from_dir(tmp_path)


def test_a_special_token_missing_from_the_vocabulary_is_named(tmp_path):
    directory = _copy_fixture(tmp_path)
    _edit_json(directory / "tokenizer_config.json", eos_token="<|not_a_token|>")
    with pytest.raises(ValueError, match=r"eos_token '<\|not_a_token\|>'"):
        Tokenizer.from_dir(directory)


def test_a_malformed_generation_config_eos_is_named(tmp_path):
    directory = _copy_fixture(tmp_path)
    _edit_json(directory / "generation_config.json", eos_token_id="2")
    with pytest.raises(ValueError, match="generation_config.json: eos_token_id .* got '2'"):
        Tokenizer.from_dir(directory)


def test_added_token_dicts_in_the_config_are_read_by_content(tmp_path):
    directory = _copy_fixture(tmp_path)
    _edit_json(
        directory / "tokenizer_config.json", pad_token={"__type": "AddedToken", "content": "<|im_start|>"}
    )
    assert Tokenizer.from_dir(directory).pad_token_id == Tokenizer.from_dir(FIXTURE).token_to_id(
        "<|im_start|>"
    )


USER = {"role": "user", "content": "hi"}
CALL = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}
BAD_MESSAGES = [
    ("not_a_list", "hello", TypeError, "messages must be a list"),
    ("empty", [], ValueError, "messages is empty"),
    ("message_not_a_dict", [USER, "hi"], TypeError, r"messages\[1\] must be a dict"),
    ("unknown_role", [{"role": "robot", "content": "x"}], ValueError, r"messages\[0\].role .* 'robot'"),
    ("missing_role", [{"content": "x"}], ValueError, r"messages\[0\].role .* None"),
    ("content_not_text", [{"role": "user", "content": 5}], TypeError, r"messages\[0\].content .* int"),
    (
        "image_part",
        [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
        ValueError,
        r"messages\[0\].content\[0\].type must be 'text'",
    ),
    ("part_without_text", [{"role": "user", "content": [{"type": "text"}]}], TypeError, r"content\[0\].text"),
    ("user_without_content", [{"role": "user"}], ValueError, r"messages\[0\].content is required"),
    (
        "tool_without_content",
        [USER, {"role": "tool", "tool_call_id": "c"}],
        ValueError,
        r"messages\[1\].content",
    ),
    (
        "tool_call_id_not_a_string",
        [USER, {"role": "tool", "content": "x", "tool_call_id": 3}],
        TypeError,
        r"messages\[1\].tool_call_id",
    ),
    (
        "assistant_with_nothing",
        [USER, {"role": "assistant"}],
        ValueError,
        r"messages\[1\] .* neither content nor",
    ),
    (
        "tool_calls_on_a_user",
        [{"role": "user", "content": "x", "tool_calls": [CALL]}],
        ValueError,
        r"messages\[0\].tool_calls is only allowed on assistant",
    ),
    (
        "tool_calls_not_a_list",
        [USER, {"role": "assistant", "tool_calls": CALL}],
        TypeError,
        r"messages\[1\].tool_calls must be a list",
    ),
    (
        "call_without_function",
        [USER, {"role": "assistant", "tool_calls": [{"id": "c"}]}],
        ValueError,
        r"messages\[1\].tool_calls\[0\].function must be a dict",
    ),
    (
        "call_with_empty_name",
        [USER, {"role": "assistant", "tool_calls": [{"function": {"name": "", "arguments": "{}"}}]}],
        ValueError,
        r"tool_calls\[0\].function.name .* ''",
    ),
    (
        "arguments_a_number",
        [USER, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 42}}]}],
        ValueError,
        r"tool_calls\[0\].function.arguments .* 42",
    ),
    (
        "arguments_missing",
        [USER, {"role": "assistant", "tool_calls": [CALL, {"function": {"name": "f"}}]}],
        ValueError,
        r"tool_calls\[1\].function.arguments",
    ),
    (
        "call_of_another_type",
        [USER, {"role": "assistant", "tool_calls": [{**CALL, "type": "code"}]}],
        ValueError,
        r"tool_calls\[0\].type must be 'function', got 'code'",
    ),
    (
        "reasoning_not_a_string",
        [USER, {"role": "assistant", "content": "x", "reasoning_content": ["a"]}],
        TypeError,
        r"messages\[1\].reasoning_content",
    ),
    (
        "arguments_not_json_data",
        [
            USER,
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "f", "arguments": {"when": object()}}}],
            },
        ],
        TypeError,
        r"messages\[1\].tool_calls\[0\].function.arguments.when is a object",
    ),
]


@pytest.mark.parametrize(
    "messages, error, match", [c[1:] for c in BAD_MESSAGES], ids=[c[0] for c in BAD_MESSAGES]
)
def test_malformed_messages_raise_naming_the_index_and_field(tok, messages, error, match):
    with pytest.raises(error, match=match):
        tok.apply_chat_template(messages)


@pytest.mark.parametrize(
    "tools, error, match",
    [
        ({"name": "f"}, TypeError, "tools must be a list"),
        (["bash"], TypeError, r"tools\[0\] must be a JSON schema dict"),
        (
            [{"type": "function", "function": {"description": "no name"}}],
            ValueError,
            r"tools\[0\].function.name",
        ),
        ([{"name": "ok"}, {"parameters": {}}], ValueError, r"tools\[1\].name"),
    ],
)
def test_malformed_tools_raise_naming_the_index(tok, tools, error, match):
    with pytest.raises(error, match=match):
        tok.apply_chat_template([USER], tools=tools)


def test_transformers_only_options_are_refused_rather_than_passed_to_the_template(tok):
    with pytest.raises(ValueError, match="continue_final_message"):
        tok.apply_chat_template([USER], continue_final_message=True)
    with pytest.raises(TypeError, match="add_generation_prompt"):
        tok.apply_chat_template([USER], add_generation_prompt="yes")


def test_a_conversation_the_template_refuses_raises_a_value_error(tok):
    template = "{{ raise_exception('no tools here') if tools else 'ok' }}"
    assert tok.render([USER], chat_template=template) == "ok"
    with pytest.raises(ChatTemplateError, match="no tools here") as info:
        tok.render([USER], chat_template=template, tools=[{"name": "f"}])
    assert isinstance(info.value, ValueError)


def test_rendering_does_not_modify_the_callers_messages(tok):
    messages = [USER, {"role": "assistant", "content": None, "reasoning": "r", "tool_calls": [CALL]}]
    before = json.dumps(messages)
    tok.apply_chat_template(messages)
    assert json.dumps(messages) == before


def test_the_tokenizer_and_chat_template_modules_import_without_jax():
    # Imported without legorl_jax.model's __init__ (which imports the policy; the package is stood in for
    # by a bare one over the same folder): the proxy's renderer itself must not pull in jax.
    folder = pathlib.Path(__file__).parents[2] / "legorl_jax" / "model"
    code = (
        "import importlib, sys, types\n"
        "package = types.ModuleType('legorl_jax.model')\n"
        f"package.__path__ = [{str(folder)!r}]\n"
        "sys.modules['legorl_jax.model'] = package\n"
        "tokenizer = importlib.import_module('legorl_jax.model.tokenizer')\n"
        f"assert tokenizer.__file__ == {str(folder / 'tokenizer.py')!r}, tokenizer.__file__\n"
        "print('jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
