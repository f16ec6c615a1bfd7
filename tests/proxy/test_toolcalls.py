"""Tool-call and reasoning parsers, and the template round trip that keeps parser and template one format."""

import json

import pytest

from legorl_jax.proxy.toolcalls import check_template, get_parser, parse_output, split_reasoning

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "edit",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "line": {"type": "integer"},
                    "force": {"type": "boolean"},
                    "body": {"type": "string"},
                },
            },
        },
    }
]


def test_qwen3_parser_reads_several_json_calls_and_the_content_before_them():
    text = (
        'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "edit", "arguments": "{\\"path\\": \\"a.py\\"}"}\n</tool_call>'
    )
    out = parse_output(get_parser("qwen3"), text, None)
    assert out.content == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in out.calls] == [
        ("bash", {"command": "ls -la"}),
        ("edit", {"path": "a.py"}),
    ]
    assert not out.format_failure


def test_qwen3_parser_accepts_raw_newlines_inside_argument_strings():
    text = '<tool_call>\n{"name": "bash", "arguments": {"command": "echo a\nb"}}\n</tool_call>'
    out = parse_output(get_parser("qwen3"), text, None)
    assert json.loads(out.calls[0].arguments) == {"command": "echo a\nb"}


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}\n</tool_call>',  # unbalanced JSON
        '<tool_call>\n{"arguments": {}}\n</tool_call>',  # no name
        '<tool_call>\n{"name": "bash", "arguments": [1]}\n</tool_call>',  # arguments not an object
        'text <tool_call>\n{"name": "bash", "arguments": {}}',  # never closed
    ],
)
def test_a_malformed_call_is_returned_as_text_and_flagged(text):
    out = parse_output(get_parser("qwen3"), text, None)
    assert out.format_failure
    assert out.calls == ()
    assert out.content == text


def test_qwen3_coder_parser_types_parameters_by_the_tool_schema():
    text = (
        "Fixing it.\n<tool_call>\n<function=edit>\n<parameter=path>\nsrc/a.py\n</parameter>\n"
        "<parameter=line>\n12\n</parameter>\n<parameter=force>\ntrue\n</parameter>\n"
        "<parameter=body>\n  x = 1\n  y = 2\n</parameter>\n</function>\n</tool_call>"
    )
    out = parse_output(get_parser("qwen3_coder"), text, TOOLS)
    assert out.content == "Fixing it."
    assert out.calls[0].name == "edit"
    assert json.loads(out.calls[0].arguments) == {
        "path": "src/a.py",
        "line": 12,
        "force": True,
        "body": "  x = 1\n  y = 2",
    }


def test_qwen3_coder_parser_flags_an_integer_parameter_that_is_not_a_number():
    text = "<tool_call>\n<function=edit>\n<parameter=line>\ntwelve\n</parameter>\n</function>\n</tool_call>"
    assert parse_output(get_parser("qwen3_coder"), text, TOOLS).format_failure


@pytest.mark.parametrize(
    ("text", "reasoning", "rest"),
    [
        ("<think>\nplan\n</think>\n\nanswer", "plan", "answer"),
        ("plan only\n</think>\n\nanswer", "plan only", "answer"),  # the template pre-filled <think>
        ("no thinking here", None, "no thinking here"),
        ("<think>\nunfinished", "unfinished", ""),
    ],
)
def test_reasoning_is_split_from_the_visible_text(text, reasoning, rest):
    assert split_reasoning(text) == (reasoning, rest)


def test_each_parser_reads_back_what_its_template_writes(tokenizer, coder_tokenizer):
    check_template(get_parser("qwen3"), tokenizer)
    check_template(get_parser("qwen3_coder"), coder_tokenizer)


def test_a_parser_that_does_not_match_the_template_is_refused_naming_both(tokenizer, coder_tokenizer):
    with pytest.raises(ValueError, match="tool_parser 'qwen3_coder' does not read the tool calls"):
        check_template(get_parser("qwen3_coder"), tokenizer)
    with pytest.raises(ValueError, match="tool_parser 'qwen3' does not read the tool calls"):
        check_template(get_parser("qwen3"), coder_tokenizer)


def test_an_unknown_parser_name_is_an_error_naming_it():
    with pytest.raises(ValueError, match="got 'mistral'"):
        get_parser("mistral")
