"""The OpenAI Responses surface through the real `openai` SDK (and raw SSE), in front of a scripted engine."""

import json

import aiohttp
import numpy as np
import openai
import pytest
from scripted_engine import BASH_TOOL, tool_call_text

from legorl_jax.proxy.responses_api import ENCRYPTED_PREFIX

SYSTEM = {"role": "system", "content": "You fix bugs."}
USER = {"role": "user", "content": "Fix calc.py."}
INSTRUCTIONS = SYSTEM["content"]
BASH = {"type": "function", **BASH_TOOL["function"]}  # the same tool in the Responses API's flat shape
THINK_AND_CALL = "<think>\nplan\n</think>\n\n" + tool_call_text("bash", '{"command": "ls"}', "Looking.")


def client_of(info, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="unused", max_retries=0, **kw)


async def test_plain_response_returns_the_scripted_text_usage_and_logprobs(scripted, serve, tokenizer):
    engine = scripted(["Hello there."])
    proxy = await serve(engine)
    info = proxy.open_session()
    r = await client_of(info).responses.create(
        model="policy",
        instructions=INSTRUCTIONS,
        input="Fix calc.py.",
        include=["message.output_text.logprobs"],
    )
    assert r.status == "completed" and r.output_text == "Hello there." and r.id.startswith("resp_")
    (message,) = r.output
    assert message.type == "message" and message.role == "assistant"
    out_ids = tokenizer.encode("Hello there.") + [engine.eos]
    assert r.usage.output_tokens == len(out_ids)
    assert engine.calls[0]["prompt"] == tokenizer.apply_chat_template(
        [SYSTEM, USER], add_generation_prompt=True
    )
    assert r.usage.input_tokens == len(engine.calls[0]["prompt"])
    logprobs = message.content[0].logprobs
    assert [t.token for t in logprobs] == [tokenizer.decode([i]) for i in out_ids]
    assert [t.logprob for t in logprobs] == pytest.approx([-0.01 * (1 + i % 97) for i in out_ids])
    # The capture is the verbatim record: sampled ids, behaviour log-probs, routing rows.
    turn = proxy.sessions[info.session_id].turns[0]
    assert turn.output_ids.tolist() == out_ids and turn.routed_experts is not None
    assert len(turn.routed_experts) == len(engine.calls[0]["prompt"]) + len(out_ids) - 1


async def test_a_function_call_comes_back_as_an_item_and_its_output_extends_the_branch(scripted, serve):
    engine = scripted([THINK_AND_CALL, "Done."])
    proxy = await serve(engine)
    info = proxy.open_session()
    client = client_of(info)
    r = await client.responses.create(
        model="p", instructions=INSTRUCTIONS, input="Fix calc.py.", tools=[BASH]
    )
    reasoning, message, call = r.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "plan"
    assert reasoning.encrypted_content.startswith(ENCRYPTED_PREFIX)
    assert message.content[0].text == "Looking."
    assert (
        call.type == "function_call"
        and call.name == "bash"
        and json.loads(call.arguments) == {"command": "ls"}
    )
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    follow = [
        {"role": "user", "content": "Fix calc.py."},
        *[item.model_dump(exclude_none=True) for item in r.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "calc.py"},
    ]
    r2 = await client.responses.create(model="p", instructions=INSTRUCTIONS, input=follow, tools=[BASH])
    assert r2.output_text == "Done."
    session = proxy.sessions[info.session_id]
    assert [t.branch for t in session.turns] == [0, 0] and session.counters["rewrites"] == 0
    first, sampled = engine.calls[0]["prompt"], session.turns[0].output_ids.tolist()
    assert engine.calls[1]["prompt"][: len(first) + len(sampled)] == first + sampled


async def test_previous_response_id_continues_the_stored_conversation_as_a_resent_history_would(
    scripted, serve
):
    prompts = []
    for chained in (False, True):
        engine = scripted([THINK_AND_CALL, "Done."])
        proxy = await serve(engine)
        info = proxy.open_session()
        client = client_of(info)
        r = await client.responses.create(
            model="p", instructions=INSTRUCTIONS, input="Fix calc.py.", tools=[BASH]
        )
        output = {"type": "function_call_output", "call_id": r.output[-1].call_id, "output": "calc.py"}
        if chained:
            r2 = await client.responses.create(
                model="p", instructions=INSTRUCTIONS, previous_response_id=r.id, input=[output], tools=[BASH]
            )
            assert r2.previous_response_id == r.id
            stored = await client.responses.retrieve(r2.id)
            assert stored.output_text == "Done."
        else:
            history = [USER, *[item.model_dump(exclude_none=True) for item in r.output], output]
            await client.responses.create(model="p", instructions=INSTRUCTIONS, input=history, tools=[BASH])
        prompts.append([call["prompt"] for call in engine.calls])
    assert prompts[0] == prompts[1]


async def test_an_unstored_or_unknown_previous_response_is_a_404_naming_it(scripted, serve):
    proxy = await serve(scripted(["One.", "Two."]))
    client = client_of(proxy.open_session())
    r = await client.responses.create(model="p", input="Hi.", store=False)
    for missing in (r.id, "resp_nope"):
        with pytest.raises(openai.NotFoundError) as caught:
            await client.responses.create(model="p", input="And?", previous_response_id=missing)
        assert missing in caught.value.message and caught.value.body["param"] == "previous_response_id"


async def test_streaming_sends_the_responses_events_in_order_and_the_sdk_assembles_them(scripted, serve):
    engine = scripted([THINK_AND_CALL])
    proxy = await serve(engine)
    info = proxy.open_session()
    body = {
        "model": "p",
        "instructions": INSTRUCTIONS,
        "input": "Fix calc.py.",
        "tools": [BASH],
        "stream": True,
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(info.openai_base_url + "/responses", json=body) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
            raw = (await resp.read()).decode()
    blocks = [b for b in raw.split("\n\n") if b]
    events = [json.loads(b.split("\ndata: ", 1)[1]) for b in blocks]
    assert [b.split("\n", 1)[0] for b in blocks] == [f"event: {e['type']}" for e in events]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # reasoning
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # message
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # function call
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[10]["delta"] == "Looking." and json.loads(events[15]["delta"]) == {"command": "ls"}
    # The SDK's stream helper assembles the same reply.
    engine._turn = 0
    async with client_of(info).responses.stream(
        model="p", instructions=INSTRUCTIONS, input="Fix calc.py.", tools=[BASH]
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[1].content[0].text == "Looking." and final.output[2].name == "bash"


async def test_the_same_conversation_through_chat_and_responses_renders_the_same_token_ids(scripted, serve):
    """Two turns with thinking, a tool call and its result: the engine sees the same prompts either way."""
    prompts = {}
    for surface in ("chat", "responses"):
        engine = scripted([THINK_AND_CALL, "Done."])
        proxy = await serve(engine)
        info = proxy.open_session()
        client = client_of(info)
        if surface == "chat":
            r = await client.chat.completions.create(model="p", messages=[SYSTEM, USER], tools=[BASH_TOOL])
            msg = r.choices[0].message
            history = [
                SYSTEM,
                USER,
                {**msg.model_dump(exclude_none=True), "reasoning_content": "plan"},
                {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "calc.py"},
            ]
            await client.chat.completions.create(model="p", messages=history, tools=[BASH_TOOL])
        else:
            r = await client.responses.create(
                model="p", instructions=INSTRUCTIONS, input=[USER], tools=[BASH]
            )
            history = [
                USER,
                *[item.model_dump(exclude_none=True) for item in r.output],
                {"type": "function_call_output", "call_id": r.output[-1].call_id, "output": "calc.py"},
            ]
            await client.responses.create(model="p", instructions=INSTRUCTIONS, input=history, tools=[BASH])
        session = proxy.sessions[info.session_id]
        assert [t.branch for t in session.turns] == [0, 0]
        record = await proxy.close_session(info.session_id)
        (seq,) = record.sequences
        prompts[surface] = (
            [c["prompt"] for c in engine.calls],
            seq.token_ids.tolist(),
            seq.loss_mask.tolist(),
        )
    assert prompts["chat"] == prompts["responses"]


async def test_reasoning_sent_back_only_as_encrypted_content_renders_as_its_text(scripted, serve):
    prompts = []
    for keep_content in (True, False):
        engine = scripted([THINK_AND_CALL, "Done."])
        proxy = await serve(engine)
        client = client_of(proxy.open_session())
        r = await client.responses.create(model="p", input=[USER], tools=[BASH])
        items = [item.model_dump(exclude_none=True) for item in r.output]
        if not keep_content:
            del items[0]["content"]  # what Codex sends back: summary + encrypted_content
        output = {"type": "function_call_output", "call_id": r.output[-1].call_id, "output": "calc.py"}
        await client.responses.create(model="p", input=[USER, *items, output], tools=[BASH])
        prompts.append(engine.calls[1]["prompt"])
    assert prompts[0] == prompts[1]


async def test_codex_tool_shapes_answer_with_their_own_call_items(scripted, serve):
    """Custom (free-form) and namespaced tools come back as `custom_tool_call` and a namespaced
    `function_call`; hosted tools are counted as ignored, and the calls render back into the next prompt."""
    patch = "*** Begin Patch\n*** End Patch"
    engine = scripted(
        [
            tool_call_text("apply_patch", json.dumps({"input": patch})),
            tool_call_text("spawn_agent", '{"task": "x"}'),
            tool_call_text("local_shell", '{"command": ["ls", "-a"], "workdir": "/w"}'),
            "Done.",
        ]
    )
    proxy = await serve(engine)
    info = proxy.open_session()
    client = client_of(info)
    tools = [
        {"type": "custom", "name": "apply_patch", "description": "Edit files.", "format": {"type": "text"}},
        {
            "type": "namespace",
            "name": "agents",
            "description": "Sub-agents.",
            "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}],
        },  # fmt: skip
        {"type": "local_shell"},
        {"type": "web_search", "external_web_access": True},
    ]
    history: list = [USER]
    kinds = []
    for answer in ("patched", "spawned", "listed"):
        r = await client.responses.create(model="p", input=history, tools=tools)
        (item,) = r.output
        kinds.append(item.type)
        key = "id" if item.type == "local_shell_call" else "call_id"
        history += [
            item.model_dump(exclude_none=True),
            {"type": f"{item.type}_output", key: item.call_id, "output": answer},
        ]
        if item.type == "custom_tool_call":
            assert item.input == patch and item.name == "apply_patch"
        elif item.type == "function_call":
            assert item.namespace == "agents" and item.name == "spawn_agent"
        else:
            assert item.action.command == ["ls", "-a"] and item.action.working_directory == "/w"
    r = await client.responses.create(model="p", input=history, tools=tools)
    assert kinds == ["custom_tool_call", "function_call", "local_shell_call"] and r.output_text == "Done."
    session = proxy.sessions[info.session_id]
    assert [t.branch for t in session.turns] == [0, 0, 0, 0]
    assert session.counters["ignored_fields"]["tools.web_search"] == 4


async def test_a_side_conversation_stays_out_of_the_training_sequences(scripted, serve, tokenizer):
    engine = scripted(["Main reply.", "A title", "Main again."])
    proxy = await serve(engine)
    info = proxy.open_session()
    client = client_of(info)
    r = await client.responses.create(model="p", instructions=INSTRUCTIONS, input="Fix calc.py.")
    await client.responses.create(model="p", instructions="You are a title generator.", input="Fix calc.py.")
    await client.responses.create(
        model="p", instructions=INSTRUCTIONS, previous_response_id=r.id, input="More."
    )
    record = await proxy.close_session(info.session_id)
    assert record.counters["main_calls"] == 2 and record.counters["side_calls"] == 1
    (seq,) = record.sequences
    sampled = np.asarray(seq.token_ids)[np.asarray(seq.loss_mask) == 1].tolist()
    eos = engine.eos
    assert sampled == tokenizer.encode("Main reply.") + [eos] + tokenizer.encode("Main again.") + [eos]


async def _post(url, body):
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"model": "p"}, "input", "input is required"),
        ({"input": 7}, "input", "got 7"),
        ({"input": [{"type": "mystery"}]}, "input[0].type", "'mystery'"),
        ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role", "'wizard'"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
            "'input_image'",
        ),
        (
            {"input": [{"type": "function_call", "name": "bash", "arguments": "{}"}]},
            "input[0].call_id",
            "None",
        ),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name", "None"),
        ({"input": "x", "temperature": "hot"}, "temperature", "'hot'"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "got 0"),
        ({"input": "x", "include": "all"}, "include", "'all'"),
        ({"input": "x", "instructions": 5}, "instructions", "got 5"),
        ({"input": "x", "previous_response_id": 5}, "previous_response_id", "got 5"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": {"a": 1}}]},
            "input[0].output",
            "{'a': 1}",
        ),
        ({"input": [{"role": "user", "content": None}]}, "input[0].content", "None"),
        (
            {"input": "x", "tools": [{"type": "namespace", "name": "ns", "tools": "all"}]},
            "tools[0].tools",
            "'all'",
        ),
        ({"input": "x", "stream": "yes"}, "stream", "'yes'"),
        (
            {"input": [{"type": "reasoning", "summary": [], "encrypted_content": ENCRYPTED_PREFIX + "!!"}]},
            "input[0].encrypted_content",
            "!!",
        ),
    ],
)
async def test_malformed_bodies_are_responses_errors_naming_the_field_and_value(
    scripted, serve, body, param, fragment
):
    proxy = await serve(scripted(["x"]))
    status, err = await _post(proxy.open_session().openai_base_url + "/responses", body)
    assert status == 400, err
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == param
    assert fragment in err["error"]["message"]


async def test_the_sdk_raises_its_own_errors_for_a_bad_request_and_an_unknown_session(scripted, serve):
    proxy = await serve(scripted(["x"]))
    info = proxy.open_session()
    with pytest.raises(openai.BadRequestError) as caught:
        await client_of(info).responses.create(model="p", input=[{"role": "user", "content": 5}])
    assert "input[0].content" in caught.value.message and "5" in caught.value.message
    gone = openai.AsyncOpenAI(base_url=proxy.base_url + "/s/" + "0" * 32 + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        await gone.responses.create(model="p", input="x")


async def test_a_rewritten_history_opens_a_new_branch_with_its_own_verbatim_record(scripted, serve):
    engine = scripted(["One.", "Two.", "Three."])
    proxy = await serve(engine)
    info = proxy.open_session()
    client = client_of(info)
    r = await client.responses.create(model="p", instructions=INSTRUCTIONS, input="Fix calc.py.")
    history = [
        USER,
        *[item.model_dump(exclude_none=True) for item in r.output],
        {"role": "user", "content": "Go on."},
    ]
    await client.responses.create(model="p", instructions=INSTRUCTIONS, input=history)
    # The harness compacts: the earlier turns are replaced by a summary.
    await client.responses.create(
        model="p", instructions=INSTRUCTIONS, input="Summary: fixing calc.py. Go on."
    )
    session = proxy.sessions[info.session_id]
    assert [t.branch for t in session.turns] == [0, 0, 1] and session.counters["rewrites"] == 1
    record = await proxy.close_session(info.session_id)
    assert [b["opened_by"] for b in record.branches][1] == "rewrite"
    assert len(record.sequences) == 2 and all(s.loss_mask.sum() > 0 for s in record.sequences)
