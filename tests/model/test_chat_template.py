"""Our chat-template renderer gives HF transformers' text and ids, and its Jinja environment behaves like
HF's.

References: tests/fixtures/chat_template/cases.json, written by tools/make_hf_fixtures.py with transformers'
`apply_chat_template` on the tokenizer files beside it (the default tiny model's).
"""

import datetime
import json
import pathlib
import shutil

import pytest

from legorl_jax.model.chat_template import ChatTemplateError
from legorl_jax.model.tokenizer import Tokenizer

FIXTURE = pathlib.Path(__file__).parents[1] / "fixtures" / "chat_template"
CASES = json.loads((FIXTURE / "cases.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_dir(FIXTURE)


def _options(case: dict) -> dict:
    return dict(tools=case.get("tools"), add_generation_prompt=case.get("add_generation_prompt", False),
                **case.get("template_kwargs", {}))  # fmt: skip


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
def test_apply_chat_template_gives_transformers_text_and_ids(tok, case):
    options = _options(case)
    assert tok.render(case["messages"], **options) == case["text"]
    assert tok.apply_chat_template(case["messages"], **options) == case["ids"]


@pytest.mark.parametrize(
    "case", CASES["environment_cases"], ids=[c["name"] for c in CASES["environment_cases"]]
)
def test_jinja_environment_renders_like_transformers(tok, case):
    options = {**_options(case), "chat_template": case["template"]}
    if "error" in case:
        message = case["error"].split(": ", 1)[1]
        with pytest.raises(ChatTemplateError, match=message):
            tok.render(case["messages"], **options)
    else:
        assert tok.render(case["messages"], **options) == case["text"]
        assert tok.apply_chat_template(case["messages"], **options) == case["ids"]


def test_committed_cases_cover_every_template_feature():
    cases = CASES["cases"]
    messages = [m for c in cases for m in c["messages"]]
    calls = [tc for m in messages for tc in m.get("tool_calls") or []]
    assert len(cases) >= 8
    assert {m["role"] for m in messages} == {"system", "user", "assistant", "tool"}
    assert any(isinstance(tc["function"]["arguments"], dict) for tc in calls)
    assert any(isinstance(tc["function"]["arguments"], str) for tc in calls)
    assert any(len(m.get("tool_calls") or []) > 1 for m in messages)
    assert any(len(c.get("tools") or []) > 1 for c in cases)
    assert any("reasoning_content" in m for m in messages)
    assert {c["add_generation_prompt"] for c in cases} == {True, False}
    assert any(any(ord(ch) > 0x2000 for ch in c["text"]) for c in cases)


def test_tool_calls_and_results_render_in_the_qwen3_layout(tok):
    case = next(c for c in CASES["cases"] if c["name"] == "tool_call_with_dict_arguments_and_result")
    text = tok.render(case["messages"], tools=case["tools"])
    assert "<tools>\n" + json.dumps(case["tools"][0], ensure_ascii=False) + "\n" in text
    assert (
        '<tool_call>\n{"name": "bash", "arguments": {"command": "python -m pytest '
        '-q"}}\n</tool_call><|im_end|>' in text
    )
    assert "<|im_start|>user\n<tool_response>\nF\n1 failed in 0.02s\n</tool_response><|im_end|>\n" in text


def test_each_prompt_is_a_token_prefix_of_the_next_with_preserved_thinking(tok):
    # The capture proxy extends the previous turn's tokens instead of re-rendering; that only works when the
    # template renders history the same way it rendered the prompt (docs/alignment.md §1).
    case = next(c for c in CASES["cases"] if c["name"] == "reasoning_kept_after_last_user_and_dropped_before")
    messages, tools = case["messages"], case["tools"]
    for n in range(1, len(messages)):
        if messages[n]["role"] != "assistant":
            continue
        prompt = tok.apply_chat_template(
            messages[:n], tools=tools, add_generation_prompt=True, preserve_thinking=True
        )
        full = tok.apply_chat_template(messages[: n + 1], tools=tools, preserve_thinking=True)
        assert full[: len(prompt)] == prompt, f"turn {n} does not extend the prompt"


def test_reasoning_of_turns_before_the_last_user_message_is_dropped_by_default(tok):
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning_content": "early thought"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d", "reasoning_content": "late thought"},
    ]
    text = tok.render(messages)
    assert "early thought" not in text and "<think>\nlate thought\n</think>\n\nd" in text
    assert "early thought" in tok.render(messages, preserve_thinking=True)


def test_chat_template_jinja_beside_the_config_takes_priority(tmp_path, tok):
    for f in FIXTURE.iterdir():
        shutil.copy(f, tmp_path)
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}<{{ m.role }}>{% endfor %}")
    own = Tokenizer.from_dir(tmp_path)
    assert own.render([{"role": "user", "content": "x"}]) == "<user>"


def test_named_templates_pick_tool_use_when_tools_are_given(tmp_path):
    for f in FIXTURE.iterdir():
        shutil.copy(f, tmp_path)
    (tmp_path / "chat_template.jinja").write_text("default")
    (tmp_path / "additional_chat_templates").mkdir()
    (tmp_path / "additional_chat_templates" / "tool_use.jinja").write_text("tools:{{ tools | length }}")
    named = Tokenizer.from_dir(tmp_path)
    msgs = [{"role": "user", "content": "x"}]
    assert named.render(msgs) == "default"
    assert named.render(msgs, tools=[{"name": "f"}]) == "tools:1"
    assert named.render(msgs, chat_template="tool_use", tools=[]) == "tools:0"


def test_list_form_chat_template_in_the_config_is_read_by_name(tmp_path):
    for f in ("tokenizer.json", "generation_config.json"):
        shutil.copy(FIXTURE / f, tmp_path)
    config = json.loads((FIXTURE / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "default", "template": "D"}, {"name": "rag", "template": "R"}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    listed = Tokenizer.from_dir(tmp_path)
    assert listed.render([{"role": "user", "content": "x"}]) == "D"
    assert listed.render([{"role": "user", "content": "x"}], chat_template="rag") == "R"


def test_strftime_now_formats_the_current_date(tok):
    today = datetime.datetime.now().strftime("%Y-%m-%d")
    rendered = tok.render([{"role": "user", "content": "x"}], chat_template="{{ strftime_now('%Y-%m-%d') }}")
    assert rendered in (today, datetime.datetime.now().strftime("%Y-%m-%d"))  # a midnight rollover is fine


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__ }}",  # interpreter internals
        "{{ messages.append(1) }}",  # the immutable sandbox forbids mutating inputs
        "{% set ns = namespace() %}{% set ns._hidden = 1 %}",  # underscore attributes on a namespace
    ],
)
def test_sandbox_refuses_unsafe_templates(tok, template):
    # Refused by the sandbox while rendering (jinja's SecurityError), not by some other failure.
    with pytest.raises(
        ChatTemplateError, match="chat template rejected the conversation: .*(unsafe|immutable|may not set)"
    ):
        tok.render([{"role": "user", "content": "x"}], chat_template=template)


def test_a_template_that_does_not_compile_names_the_line(tok):
    with pytest.raises(ChatTemplateError, match="line 2"):
        tok.render([{"role": "user", "content": "x"}], chat_template="ok\n{% if %}")
