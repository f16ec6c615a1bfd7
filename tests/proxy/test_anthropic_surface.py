"""The Anthropic surface through the real `anthropic` SDK, in front of a scripted engine."""

import json

import aiohttp
import anthropic
import pytest
from scripted_engine import tool_call_text

from legorl_jax.config import ProxyConfig

BASH = {
    "name": "Bash",
    "description": "Run a command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}
OPENAI_BASH = {
    "type": "function",
    "function": {"name": "Bash", "description": "Run a command", "parameters": BASH["input_schema"]},
}
SYSTEM_BLOCKS = [
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Work in /repo."},
]
SYSTEM_TEXT = "You are Claude Code.\nWork in /repo."


async def test_text_reply_with_system_blocks_renders_like_a_leading_system_message(
    scripted, serve, tokenizer
):
    engine = scripted(["Sure."])
    proxy = await serve(engine)
    info = proxy.open_session()
    client = anthropic.AsyncAnthropic(base_url=info.anthropic_base_url, api_key="x")
    m = await client.messages.create(
        model="p", max_tokens=64, system=SYSTEM_BLOCKS, messages=[{"role": "user", "content": "hi"}]
    )
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == "Sure."
    assert m.stop_reason == "end_turn" and m.usage.output_tokens == len(tokenizer.encode("Sure.")) + 1
    expected = tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM_TEXT}, {"role": "user", "content": "hi"}],
        add_generation_prompt=True,
    )
    assert engine.calls[0]["prompt"] == expected and m.usage.input_tokens == len(expected)


async def test_tool_use_round_trip_converts_tool_results_and_extends_the_branch(scripted, serve, tokenizer):
    engine = scripted(
        [
            "<think>\ncheck files\n</think>\n\n" + tool_call_text("Bash", '{"command": "ls"}', "Listing."),
            "All done.",
        ]
    )
    proxy = await serve(engine)
    info = proxy.open_session()
    client = anthropic.AsyncAnthropic(base_url=info.anthropic_base_url, api_key="x")
    user = {"role": "user", "content": "fix it"}
    m = await client.messages.create(
        model="p", max_tokens=200, system=SYSTEM_BLOCKS, tools=[BASH], messages=[user]
    )
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"] and m.stop_reason == "tool_use"
    thinking, text, use = m.content
    assert thinking.thinking == "check files" and text.text == "Listing."
    assert use.id.startswith("toolu_") and use.name == "Bash" and use.input == {"command": "ls"}
    follow = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "calc.py"}]}
        ],
    }
    m2 = await client.messages.create(
        model="p",
        max_tokens=200,
        system=SYSTEM_BLOCKS,
        tools=[BASH],
        messages=[user, {"role": "assistant", "content": [b.model_dump() for b in m.content]}, follow],
    )
    assert m2.content[0].text == "All done."
    session = proxy.sessions[info.session_id]
    assert [t.branch for t in session.turns] == [0, 0]
    returned = [
        {"role": "system", "content": SYSTEM_TEXT},
        user,
        {
            "role": "assistant",
            "content": "Listing.",
            "reasoning_content": "check files",
            "tool_calls": [
                {
                    "id": use.id,
                    "type": "function",
                    "function": {"name": "Bash", "arguments": {"command": "ls"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": use.id, "content": "calc.py"},
    ]
    assert engine.calls[1]["prompt"] == tokenizer.apply_chat_template(
        returned, tools=[OPENAI_BASH], add_generation_prompt=True
    )


async def test_streaming_events_come_in_anthropic_order_and_the_sdk_assembles_them(scripted, serve):
    engine = scripted(
        ["<think>\nhmm\n</think>\n\n" + tool_call_text("Bash", '{"command": "pwd"}', "Checking.")]
    )
    proxy = await serve(engine)
    info = proxy.open_session()
    client = anthropic.AsyncAnthropic(base_url=info.anthropic_base_url, api_key="x")
    names = []
    async with client.messages.stream(
        model="p", max_tokens=100, tools=[BASH], messages=[{"role": "user", "content": "go"}]
    ) as s:
        async for event in s:
            names.append(event.type)
        final = await s.get_final_message()
    raw_order = [
        n
        for n in names
        if n
        in (
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        )
    ]
    assert raw_order[0] == "message_start" and raw_order[-2:] == ["message_delta", "message_stop"]
    assert raw_order.count("content_block_start") == raw_order.count("content_block_stop") == 3
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[2].input == {"command": "pwd"} and final.stop_reason == "tool_use"


async def test_beta_query_mid_conversation_system_and_claude_code_fields_are_accepted(
    scripted, serve, tokenizer
):
    engine = scripted(["ok"])
    proxy = await serve(engine)
    info = proxy.open_session()
    body = {
        "model": "p",
        "max_tokens": 32000,
        "stream": False,
        "system": SYSTEM_BLOCKS,
        "messages": [
            {"role": "system", "content": "Available agent types: none."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
        "metadata": {"user_id": '{"device": 1}'},
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": []},
        "output_config": {"effort": "high"},
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(
            info.anthropic_base_url + "/v1/messages?beta=true",
            json=body,
            headers={"anthropic-beta": "claude-code-20250219", "x-api-key": "x"},
        ) as resp:
            assert resp.status == 200
            reply = await resp.json()
    assert reply["content"] == [{"type": "text", "text": "ok"}]
    expected = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": SYSTEM_TEXT},
            {"role": "system", "content": "Available agent types: none."},
            {"role": "user", "content": "hi"},
        ],
        add_generation_prompt=True,
    )
    assert engine.calls[0]["prompt"] == expected
    ignored = proxy.sessions[info.session_id].counters["ignored_fields"]
    assert all(ignored[k] == 1 for k in ("metadata", "thinking", "context_management", "output_config"))


async def test_count_tokens_counts_the_rendered_prompt(scripted, serve, tokenizer):
    proxy = await serve(scripted(["x"]))
    client = anthropic.AsyncAnthropic(base_url=proxy.open_session().anthropic_base_url, api_key="x")
    r = await client.messages.count_tokens(
        model="p", system="sys", messages=[{"role": "user", "content": "hello"}]
    )
    assert r.input_tokens == len(
        tokenizer.apply_chat_template(
            [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}],
            add_generation_prompt=True,
        )
    )


async def test_stop_sequences_and_max_tokens_map_to_anthropic_stop_reasons(scripted, serve):
    engine = scripted(["a very long answer that goes on and on"])
    proxy = await serve(engine)
    client = anthropic.AsyncAnthropic(base_url=proxy.open_session().anthropic_base_url, api_key="x")
    m = await client.messages.create(model="p", max_tokens=3, messages=[{"role": "user", "content": "q"}])
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3
    m = await client.messages.create(
        model="p", max_tokens=50, stop_sequences=["END"], messages=[{"role": "user", "content": "q2"}]
    )
    assert engine.calls[-1]["sampling"].stop == ("END",)


async def test_a_prompt_over_the_context_says_prompt_is_too_long(scripted, serve):
    proxy = await serve(scripted(["x"]), ProxyConfig(context_length=10))
    info = proxy.open_session()
    client = anthropic.AsyncAnthropic(base_url=info.anthropic_base_url, api_key="x", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(
            model="p", max_tokens=10, messages=[{"role": "user", "content": "a long question"}]
        )
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "prompt is too long" in caught.value.body["error"]["message"]
    assert proxy.sessions[info.session_id].flags.context_overflow


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        (
            [{"role": "user", "content": [{"type": "image", "source": {}}]}],
            "messages[0].content[0] has type 'image'",
        ),
        ([{"role": "robot", "content": "x"}], "'robot'"),
        ([{"role": "user", "content": 5}], "got 5"),
        ([], "non-empty list"),
    ],
)
async def test_malformed_messages_are_anthropic_400s_naming_the_field(scripted, serve, messages, fragment):
    proxy = await serve(scripted(["x"]))
    async with aiohttp.ClientSession() as http:
        url = proxy.open_session().anthropic_base_url + "/v1/messages"
        async with http.post(url, json={"model": "p", "max_tokens": 5, "messages": messages}) as resp:
            assert resp.status == 400
            err = await resp.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert fragment in err["error"]["message"]


async def test_an_unknown_session_is_an_anthropic_404(scripted, serve):
    proxy = await serve(scripted(["x"]))
    client = anthropic.AsyncAnthropic(base_url=f"{proxy.base_url}/s/{'ab' * 16}", api_key="x", max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as caught:
        await client.messages.create(model="p", max_tokens=5, messages=[{"role": "user", "content": "q"}])
    assert caught.value.body["error"]["type"] == "not_found_error"
    assert json.dumps(caught.value.body).count("unknown session") == 1
