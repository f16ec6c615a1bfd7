"""The proxy in front of the real embedded engine: what it records is what the engine computes."""

import numpy as np
import openai
from scripted_engine import BASH_TOOL

from legorl_jax.config import ProxyConfig

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
