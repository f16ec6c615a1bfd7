"""The OpenAI surface through the real `openai` SDK and litellm, in front of a scripted engine."""

import json

import aiohttp
import litellm
import numpy as np
import openai
import pytest
from scripted_engine import BASH_TOOL, tool_call_text

from legorl_jax.config import ProxyConfig

SYSTEM = {"role": "system", "content": "You fix bugs."}
USER = {"role": "user", "content": "Fix calc.py."}


async def test_plain_completion_returns_the_scripted_text_usage_and_logprobs(scripted, serve, tokenizer):
    engine = scripted(["Hello there."])
    proxy = await serve(engine)
    info = proxy.open_session("task", "trial")
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="unused")
    r = await client.chat.completions.create(model="policy", messages=[SYSTEM, USER], logprobs=True)
    choice = r.choices[0]
    assert choice.message.content == "Hello there." and choice.finish_reason == "stop"
    out_ids = tokenizer.encode("Hello there.") + [engine.eos]
    assert r.usage.completion_tokens == len(out_ids)
    assert r.usage.prompt_tokens == len(
        tokenizer.apply_chat_template([SYSTEM, USER], add_generation_prompt=True)
    )
    assert [t.token for t in choice.logprobs.content] == [tokenizer.decode([i]) for i in out_ids]
    assert [t.logprob for t in choice.logprobs.content] == pytest.approx(
        [-0.01 * (1 + i % 97) for i in out_ids]
    )


async def test_tool_calls_come_back_with_fresh_ids_and_the_next_turn_extends_the_branch(scripted, serve):
    engine = scripted([tool_call_text("bash", '{"command": "ls"}', "Looking."), "Done."])
    proxy = await serve(engine)
    info = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="unused")
    r = await client.chat.completions.create(
        model="p", messages=[SYSTEM, USER], tools=[BASH_TOOL], tool_choice="auto"
    )
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.content == "Looking."
    (call,) = msg.tool_calls
    assert call.id.startswith("call_") and len(call.id) == 29
    assert call.function.name == "bash" and json.loads(call.function.arguments) == {"command": "ls"}
    history = [
        SYSTEM,
        USER,
        msg.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "calc.py"},
    ]
    r2 = await client.chat.completions.create(model="p", messages=history, tools=[BASH_TOOL])
    assert r2.choices[0].message.content == "Done."
    session = proxy.sessions[info.session_id]
    assert [t.branch for t in session.turns] == [0, 0]
    # The second prompt is the first prompt followed by the verbatim sampled ids, then the tool result.
    first, sampled = engine.calls[0]["prompt"], session.turns[0].output_ids.tolist()
    assert engine.calls[1]["prompt"][: len(first) + len(sampled)] == first + sampled


async def test_every_call_of_a_session_carries_its_id_as_the_engines_prefix_cache_hint(scripted, serve):
    engine = scripted(["One.", "Two.", "Three."])
    proxy = await serve(engine)
    sessions = [proxy.open_session(), proxy.open_session()]
    for info, user in ((sessions[0], USER), (sessions[1], USER), (sessions[0], {**USER, "content": "And?"})):
        client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="unused")
        await client.chat.completions.create(model="p", messages=[SYSTEM, user])
    ids = [info.session_id for info in sessions]
    assert [call["session_id"] for call in engine.calls] == [ids[0], ids[1], ids[0]]


async def test_streaming_sends_openai_chunks_in_order_with_usage_and_done(scripted, serve):
    engine = scripted(
        ["<think>\nplan\n</think>\n\n" + tool_call_text("bash", '{"command": "pwd"}', "Let me see.")]
    )
    proxy = await serve(engine)
    info = proxy.open_session()
    async with aiohttp.ClientSession() as http:
        body = {
            "model": "p",
            "messages": [SYSTEM, USER],
            "tools": [BASH_TOOL],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with http.post(info.openai_base_url + "/chat/completions", json=body) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            raw = (await resp.read()).decode()
    events = [line[6:] for line in raw.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"reasoning_content": "plan"}
    assert deltas[2] == {"content": "Let me see."}
    assert deltas[3]["tool_calls"][0]["function"] == {"name": "bash", "arguments": ""}
    assert json.loads(deltas[4]["tool_calls"][0]["function"]["arguments"]) == {"command": "pwd"}
    assert chunks[5]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[6]["choices"] == [] and chunks[6]["usage"]["completion_tokens"] > 0
    # The SDK assembles the same stream.
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="unused")
    engine.script = ["Plain answer."]
    engine._turn = 0
    stream = await client.chat.completions.create(model="p", messages=[USER], stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Plain answer."


async def test_litellm_completion_reaches_the_session(scripted, serve):
    engine = scripted([tool_call_text("bash", '{"command": "ls"}')])
    proxy = await serve(engine)
    info = proxy.open_session()
    r = await litellm.acompletion(
        model="openai/my-policy",
        api_base=info.openai_base_url,
        api_key="x",
        messages=[SYSTEM, USER],
        tools=[BASH_TOOL],
        temperature=0.3,
    )
    assert r.choices[0].message.tool_calls[0].function.name == "bash"
    turn = proxy.sessions[info.session_id].turn_info[0]
    assert turn["requested"]["temperature"] == 0.3
    assert turn["sampling"]["temperature"] == 1.0  # train mode enforces the rollout temperature


async def test_train_mode_enforces_sampling_and_eval_mode_passes_it_through(scripted, serve):
    engine = scripted(["x"])
    body = dict(model="p", messages=[USER], temperature=0.2, top_p=0.5, seed=7, max_tokens=50)
    train = await serve(engine, ProxyConfig(temperature=0.9, max_response_tokens=20))
    client = openai.AsyncOpenAI(base_url=train.open_session().openai_base_url, api_key="x")
    await client.chat.completions.create(**body)
    s = engine.calls[-1]["sampling"]
    assert (s.temperature, s.top_p, s.top_k, s.seed, s.max_new_tokens) == (0.9, 1.0, -1, None, 20)
    evaluation = await serve(engine, ProxyConfig(mode="eval", max_response_tokens=100))
    client = openai.AsyncOpenAI(base_url=evaluation.open_session().openai_base_url, api_key="x")
    await client.chat.completions.create(**body)
    s = engine.calls[-1]["sampling"]
    assert (s.temperature, s.top_p, s.seed, s.max_new_tokens) == (0.2, 0.5, 7, 50)


async def test_max_tokens_is_capped_by_the_context_left(scripted, serve, tokenizer):
    engine = scripted(["x"])
    proxy = await serve(engine, ProxyConfig(max_response_tokens=4096, context_length=100))
    client = openai.AsyncOpenAI(base_url=proxy.open_session().openai_base_url, api_key="x")
    await client.chat.completions.create(model="p", messages=[USER], max_completion_tokens=1000)
    prompt = len(tokenizer.apply_chat_template([USER], add_generation_prompt=True))
    assert engine.calls[-1]["sampling"].max_new_tokens == 100 - prompt


async def test_fields_that_change_nothing_are_accepted_and_counted(scripted, serve):
    proxy = await serve(scripted(["ok"]))
    info = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    await client.chat.completions.create(
        model="p",
        messages=[USER],
        reasoning_effort="high",
        parallel_tool_calls=False,
        metadata={"a": "b"},
        store=False,
        extra_body={"prompt_cache_key": "conv-1", "brand_new_field": 1},
    )
    ignored = proxy.sessions[info.session_id].counters["ignored_fields"]
    assert {
        k: ignored[k] for k in ("reasoning_effort", "prompt_cache_key", "metadata", "brand_new_field")
    } == dict.fromkeys(("reasoning_effort", "prompt_cache_key", "metadata", "brand_new_field"), 1)


async def test_content_part_arrays_render_like_plain_strings(scripted, serve, tokenizer):
    engine = scripted(["ok"])
    proxy = await serve(engine)
    client = openai.AsyncOpenAI(base_url=proxy.open_session().openai_base_url, api_key="x")
    parts = {
        "role": "user",
        "content": [{"type": "text", "text": "Fix "}, {"type": "text", "text": "calc.py."}],
    }
    await client.chat.completions.create(model="p", messages=[SYSTEM, parts])
    assert engine.calls[-1]["prompt"] == tokenizer.apply_chat_template(
        [SYSTEM, USER], add_generation_prompt=True
    )


async def test_models_lists_the_policy_and_probes_answer(scripted, serve):
    proxy = await serve(scripted(["x"]))
    info = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    models = await client.models.list()
    assert [m.id for m in models.data] == ["legorl-policy"]
    async with aiohttp.ClientSession() as http:
        for method, url in (
            ("GET", proxy.base_url + "/"),
            ("HEAD", proxy.base_url + "/"),
            ("GET", info.anthropic_base_url),
            ("HEAD", info.anthropic_base_url + "/"),
        ):
            async with http.request(method, url) as resp:
                assert resp.status == 200, (method, url)


# ----------------------------------------------------------------------------------------------------
# errors, each in OpenAI's format and naming the field and value


async def _post(url, body=None, data=None):
    async with aiohttp.ClientSession() as http, http.post(url, json=body, data=data) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"messages": [USER], "n": 3}, "n", "n must be 1"),
        ({"messages": []}, "messages", "non-empty list"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", "'wizard'"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content[0]",
            "'image_url'",
        ),
        ({"messages": [USER], "temperature": "hot"}, "temperature", "'hot'"),
        ({"messages": [USER], "logprobs": True, "top_logprobs": 21}, "top_logprobs", "got 21"),
        ({"messages": [USER], "top_logprobs": 5}, "top_logprobs", "needs logprobs: true"),
        ({"messages": [USER], "tools": [{"type": "retrieval"}]}, "tools[0]", "retrieval"),
        ({"messages": [USER], "max_tokens": 0}, "max_tokens", "got 0"),
    ],
)
async def test_malformed_bodies_are_400s_naming_the_field_and_value(scripted, serve, body, param, fragment):
    proxy = await serve(scripted(["x"]))
    status, err = await _post(proxy.open_session().openai_base_url + "/chat/completions", body)
    assert status == 400
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == param
    assert fragment in err["error"]["message"]


async def test_invalid_json_is_a_400_and_an_unknown_session_a_404(scripted, serve):
    proxy = await serve(scripted(["x"]))
    info = proxy.open_session()
    status, err = await _post(info.openai_base_url + "/chat/completions", data=b"{not json")
    assert status == 400 and "not valid JSON" in err["error"]["message"]
    status, err = await _post(
        proxy.base_url + "/s/" + "0" * 32 + "/v1/chat/completions", {"messages": [USER]}
    )
    assert status == 404 and "unknown session" in err["error"]["message"]


async def test_a_body_over_the_size_limit_is_a_413(scripted, serve):
    proxy = await serve(scripted(["x"]), ProxyConfig(max_body_bytes=1024))
    big = {"messages": [{"role": "user", "content": "x" * 4096}]}
    status, err = await _post(proxy.open_session().openai_base_url + "/chat/completions", big)
    assert status == 413 and "larger than 1024 bytes" in err["error"]["message"]


async def test_a_prompt_over_the_context_is_a_non_retryable_400_that_flags_the_session(scripted, serve):
    engine = scripted(["x"])
    proxy = await serve(engine, ProxyConfig(context_length=20))
    info = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="p", messages=[SYSTEM, USER])
    assert caught.value.code == "context_length_exceeded"
    assert (
        "maximum context length is 20 tokens" in caught.value.message
        and "prompt is too long" in caught.value.message
    )
    assert proxy.sessions[info.session_id].flags.context_overflow and engine.calls == []


async def test_an_engine_failure_is_a_502_that_flags_the_session_without_a_trace(scripted, serve):
    from legorl_jax.engine.base import EngineError

    engine = scripted(["x"])
    engine.fail_with = EngineError("decode thread died")
    proxy = await serve(engine)
    info = proxy.open_session()
    status, err = await _post(info.openai_base_url + "/chat/completions", {"messages": [USER]})
    assert status == 502 and err["error"]["type"] == "server_error"
    assert "decode thread died" in err["error"]["message"] and "Traceback" not in err["error"]["message"]
    session = proxy.sessions[info.session_id]
    assert session.flags.engine_failed and session.turns == []
    engine.fail_with = None  # a retry of the failed request generates anew
    status, _ = await _post(info.openai_base_url + "/chat/completions", {"messages": [USER]})
    assert status == 200 and len(session.turns) == 1


async def test_a_format_failure_is_returned_as_text_and_counted(scripted, serve):
    broken = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}\n</tool_call>'
    proxy = await serve(scripted([broken]))
    info = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    r = await client.chat.completions.create(model="p", messages=[SYSTEM, USER], tools=[BASH_TOOL])
    assert r.choices[0].message.content == broken and not r.choices[0].message.tool_calls
    session = proxy.sessions[info.session_id]
    assert session.counters["format_failures"] == 1 and session.flags.format_failure
    assert np.asarray(session.turns[0].output_ids).size > 0


async def test_parallel_tool_calls_come_back_as_several_calls_and_their_results_extend_the_branch(
    scripted, serve, tokenizer
):
    two = tool_call_text("bash", '{"command": "ls"}') + "\n" + tool_call_text("bash", '{"command": "pwd"}')
    engine = scripted([two, "Done."])
    proxy = await serve(engine)
    info = proxy.open_session()
    async with openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x") as client:
        r = await client.chat.completions.create(
            model="p", messages=[SYSTEM, USER], tools=[BASH_TOOL], parallel_tool_calls=True
        )
        calls = r.choices[0].message.tool_calls
        assert [json.loads(c.function.arguments)["command"] for c in calls] == ["ls", "pwd"]
        assert len({c.id for c in calls}) == 2
        results = [{"role": "tool", "tool_call_id": c.id, "content": f"out {i}"} for i, c in enumerate(calls)]
        history = [SYSTEM, USER, r.choices[0].message.model_dump(exclude_none=True), *results]
        await client.chat.completions.create(model="p", messages=history, tools=[BASH_TOOL])
    session = proxy.sessions[info.session_id]
    assert [t.branch for t in session.turns] == [0, 0]
    # Both results share one user turn, as the template groups consecutive tool messages.
    added = engine.calls[1]["prompt"][len(engine.calls[0]["prompt"]) + len(session.turns[0].output_ids) :]
    assert (
        tokenizer.decode(added)
        == "\n<|im_start|>user\n<tool_response>\nout 0\n</tool_response>\n<tool_response>\nout 1\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


async def test_litellm_reads_a_context_overflow_as_a_context_window_error_and_does_not_retry(scripted, serve):
    engine = scripted(["x"])
    proxy = await serve(engine, ProxyConfig(context_length=20))
    info = proxy.open_session()
    with pytest.raises(litellm.ContextWindowExceededError):
        await litellm.acompletion(
            model="openai/p", api_base=info.openai_base_url, api_key="x", messages=[SYSTEM, USER]
        )
    assert proxy.sessions[info.session_id].counters["context_overflows"] == 1  # one request: no retry
