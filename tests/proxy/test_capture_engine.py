"""The proxy in front of the real embedded engine: what it records is what the engine computes."""

import asyncio

import numpy as np
import openai
from scripted_engine import BASH_TOOL

from legorl_jax.config import ProxyConfig
from legorl_jax.engine.weight_update import update_weights
from legorl_jax.model import load_hf

SYSTEM = {"role": "system", "content": "You fix bugs."}


async def test_captured_logprobs_equal_the_engines_prompt_logprobs_on_the_captured_sequence(
    jax_engine, serve, tokenizer
):
    temperature = 0.7
    config = ProxyConfig(temperature=temperature, max_response_tokens=12, max_consecutive_no_tool=0)
    proxy = await serve(jax_engine, config)
    info = proxy.open_session("calc", "calc-0")
    messages = [SYSTEM, {"role": "user", "content": "Fix calc.py."}]
    async with openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x") as client:
        for turn in range(3):
            r = await client.chat.completions.create(
                model="p", messages=messages, tools=[BASH_TOOL], temperature=0.0
            )
            messages = [
                *messages,
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": f"continue {turn}"},
            ]
    closed = await proxy.close_session(info.session_id)
    session_turns = closed.turns
    assert [t["branch"] for t in session_turns] == [0, 0, 0]  # garbage text still extends the branch verbatim
    assert all(t["sampling"]["temperature"] == temperature for t in session_turns)
    (seq,) = closed.sequences
    assert seq.num_sampled == sum(t["output_tokens"] for t in session_turns)
    scored = await jax_engine.prompt_logprobs(seq.token_ids, 1, temperature=temperature)
    sampled = np.flatnonzero(seq.loss_mask)
    np.testing.assert_allclose(seq.behaviour_logprobs[sampled], scored[sampled - 1], atol=1e-4, rtol=0)
    # Every input position but the last has its experts recorded, within the model's expert range.
    routed = seq.routed_experts
    assert routed.shape == (len(seq.token_ids), 2, 2)
    assert np.all((routed[:-1] >= 0) & (routed[:-1] < 8)) and np.all(routed[-1] == -1)


async def test_each_turn_feeds_the_engine_the_branch_so_far_verbatim(jax_engine, serve):
    proxy = await serve(jax_engine, ProxyConfig(max_response_tokens=8, max_consecutive_no_tool=0))
    info = proxy.open_session()
    messages = [SYSTEM, {"role": "user", "content": "hello"}]
    async with openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x") as client:
        for _ in range(2):
            r = await client.chat.completions.create(model="p", messages=messages)
            messages = [
                *messages,
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": "more"},
            ]
    turns = proxy.sessions[info.session_id].turns
    first = turns[0].prompt_ids.tolist() + turns[0].output_ids.tolist()
    assert turns[1].prompt_ids.tolist()[: len(first)] == first


async def test_top_logprobs_come_back_in_openais_format_streamed_or_not(jax_engine, serve, tokenizer):
    config = ProxyConfig(mode="eval", max_response_tokens=6, max_consecutive_no_tool=0)
    proxy = await serve(jax_engine, config)
    info = proxy.open_session("calc", "calc-top")
    messages = [SYSTEM, {"role": "user", "content": "Fix calc.py."}]
    async with openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x") as client:
        r = await client.chat.completions.create(
            model="p", messages=messages, temperature=0.0, seed=1, logprobs=True, top_logprobs=3
        )
        stream = await client.chat.completions.create(
            model="p", messages=messages, temperature=0.0, seed=1, logprobs=True, top_logprobs=3, stream=True
        )
        streamed = [t async for chunk in stream if chunk.choices and chunk.choices[0].logprobs
                    for t in chunk.choices[0].logprobs.content]  # fmt: skip
    content = r.choices[0].logprobs.content
    assert content and [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content]
    for token in content:
        assert len(token.top_logprobs) == 3
        values = [alt.logprob for alt in token.top_logprobs]
        assert values == sorted(values, reverse=True)
        # Greedy: the sampled token is the likeliest, with the same behaviour log-prob.
        assert token.top_logprobs[0].token == token.token
        assert abs(token.top_logprobs[0].logprob - token.logprob) < 1e-6
        assert token.top_logprobs[0].bytes == list(token.token.encode())


async def test_a_seeded_reply_cut_by_an_abort_resume_update_reaches_the_harness_as_if_uncut(
    jax_engine, serve, proxy_model_dir
):
    config = ProxyConfig(mode="eval", max_response_tokens=24, max_consecutive_no_tool=0)
    proxy = await serve(jax_engine, config)
    body = dict(model="p", messages=[SYSTEM, {"role": "user", "content": "Fix calc.py."}], seed=11)
    uncut_info, info = proxy.open_session(), proxy.open_session()
    async with openai.AsyncOpenAI(base_url=uncut_info.openai_base_url, api_key="x") as client:
        uncut = await client.chat.completions.create(**body)
    assert uncut.choices[0].finish_reason == "length"  # 24 tokens: room to cut it in the middle
    old_version, same_weights = jax_engine.weight_version, load_hf(proxy_model_dir)
    async with openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x") as client:
        call = asyncio.ensure_future(client.chat.completions.create(**body))
        rid = f"{info.session_id}-0"
        while len(getattr(jax_engine.scheduler.by_rid.get(rid), "output_ids", ())) < 3:
            await asyncio.sleep(0.002)
        try:
            await update_weights(jax_engine, same_weights, "cut", "abort_resume")
            cut = await call
        finally:
            await jax_engine.update_weights(same_weights, old_version)
    # The harness gets a whole reply, the one it would have had uncut (same seed, same weights).
    assert cut.choices[0].finish_reason == "length"
    assert cut.choices[0].message.content == uncut.choices[0].message.content
    session, reference = proxy.sessions[info.session_id], proxy.sessions[uncut_info.session_id]
    (turn,), (uncut_turn,) = session.turns, reference.turns
    np.testing.assert_array_equal(turn.output_ids, uncut_turn.output_ids)
    np.testing.assert_allclose(turn.output_logprobs, uncut_turn.output_logprobs, atol=1e-4, rtol=0)
    np.testing.assert_array_equal(turn.routed_experts, uncut_turn.routed_experts)
    assert session.counters["resumes"] == 1 and session.turn_info[0]["resumes"] == 1
    prompt = len(turn.prompt_ids)
    assert prompt + 2 <= session.counters["resume_prefill_tokens"] <= prompt + len(turn.output_ids) - 2
    assert reference.counters["resumes"] == 0 and reference.counters["resume_prefill_tokens"] == 0
