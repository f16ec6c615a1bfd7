"""The prefix cache: a cached engine gives what the uncached shared engine gives (tokens, log-probs,
routing of every row), reports its hits as `cached_tokens`, evicts under its budget, never lets one
session's request overwrite a prefix another reads, and empties on flush and on new weights."""

import asyncio

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from engine_reference import MAX_LEN, SLOTS

from legorl_jax.engine import SamplingParams
from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.engine.prefix_cache import PrefixCache
from legorl_jax.engine.serve import make_app

SAMPLING = SamplingParams(max_new_tokens=6, seed=5, ignore_eos=True)
SYSTEM = list(range(300, 318))  # 18 tokens every session starts with


def tool_result(turn, session=0):
    return [2000 + 50 * session + 7 * turn + i for i in range(4)]


def cached_engine(model_dir, **cache):
    """2 running + 2 cache slots: the shared engine's KV shape (4 slots), so its compiled programs serve."""
    return JaxEngine.from_dir(model_dir, max_running=SLOTS // 2, max_len=MAX_LEN, min_bucket=16, **cache)


@pytest.fixture(scope="module")
def cached(engine_model_dir):
    eng = cached_engine(engine_model_dir, cache_slots=SLOTS // 2)
    yield eng
    eng.close()


def assert_same(got, want):
    """Same tokens, log-probs within fp32 tolerance, and the same routing of every row."""
    np.testing.assert_array_equal(got.output_ids, want.output_ids)
    # A reused prefix's K/V came from another program (prefill vs decode shapes): blocks policy 1e-4.
    np.testing.assert_allclose(got.output_logprobs, want.output_logprobs, atol=1e-4)
    np.testing.assert_array_equal(got.routed_experts, want.routed_experts)


async def conversation(engine, first, turns, session=0, session_id=None):
    """`turns` calls, each prompt = the last prompt + its output + a tool result; returns the Generations."""
    prompt, gens = list(first), []
    for turn in range(turns):
        gen = await engine.generate(prompt, SAMPLING, return_routed_experts=True, session_id=session_id)
        gens.append((list(prompt), gen))
        prompt = prompt + gen.output_ids.tolist() + tool_result(turn, session)
    return gens


async def test_a_multi_turn_conversation_gives_the_same_results_with_the_cache_on_and_off(cached, engine):
    assert await cached.flush_cache()
    on = await conversation(cached, SYSTEM[:6], turns=4)
    off = await conversation(engine, SYSTEM[:6], turns=4)
    for turn, ((prompt, got), (_, want)) in enumerate(zip(on, off, strict=True)):
        assert_same(got, want)
        assert want.cached_tokens == 0
        # Every turn but the first finds the previous turn resident: its prompt and all its output but the
        # last token (never forwarded, so it has no K/V).
        previous = 0 if turn == 0 else len(on[turn - 1][0]) + len(on[turn - 1][1].output_ids) - 1
        assert got.cached_tokens == previous, (turn, len(prompt))


async def test_routing_of_cached_rows_is_returned_as_recorded_from_any_start_row(cached, engine):
    assert await cached.flush_cache()
    prompt = SYSTEM + [9, 8, 7]
    await cached.generate(prompt, SAMPLING)  # caches the prompt without asking for routing
    for start in (0, 5, len(prompt)):
        got = await cached.generate(
            prompt, SAMPLING, return_routed_experts=True, routed_experts_start_len=start
        )
        want = await engine.generate(
            prompt, SAMPLING, return_routed_experts=True, routed_experts_start_len=start
        )
        assert got.cached_tokens == len(prompt) - 1  # the last prompt token is always run (its logits)
        assert got.routed_experts.shape[0] == len(prompt) + len(got.output_ids) - 1 - start
        assert_same(got, want)


async def test_eviction_under_a_small_budget_keeps_results_identical_and_reports_the_misses(
    engine_model_dir, engine
):
    small = cached_engine(engine_model_dir, cache_slots=SLOTS // 2, cache_tokens=15)
    try:
        a1 = SYSTEM[:5] + [1, 2]
        b1 = [40, 41, 42, 43]
        got_a1 = await small.generate(a1, SAMPLING, return_routed_experts=True)  # keeps 7 + 6 - 1 = 12 tokens
        got_b1 = await small.generate(b1, SAMPLING, return_routed_experts=True)  # + 9 > 15: a1's entry goes
        a2 = a1 + got_a1.output_ids.tolist() + tool_result(0)
        b2 = b1 + got_b1.output_ids.tolist() + tool_result(0, 1)
        got_a2 = await small.generate(a2, SAMPLING, return_routed_experts=True)  # a miss; 22 tokens evict all
        got_b2 = await small.generate(b2, SAMPLING, return_routed_experts=True)  # a miss; 19 > 15 alone
        stats = small.stats()["prefix_cache"]
    finally:
        small.close()
    assert [g.cached_tokens for g in (got_a1, got_b1, got_a2, got_b2)] == [0, 0, 0, 0]
    assert stats["evictions"] == 4 and stats["entries"] == 0 and stats["max_tokens"] == 15
    for prompt, got in ((a1, got_a1), (b1, got_b1), (a2, got_a2), (b2, got_b2)):
        assert_same(got, await engine.generate(prompt, SAMPLING, return_routed_experts=True))


async def test_a_cached_prefix_shared_by_two_sessions_is_corrupted_by_neither(cached, engine):
    assert await cached.flush_cache()
    x1 = SYSTEM + [11, 12]
    got_x1 = await cached.generate(x1, SAMPLING, return_routed_experts=True)
    x2 = x1 + got_x1.output_ids.tolist() + tool_result(0)
    y1 = SYSTEM + [21, 22, 23]
    # Admitted together: y1 reads the shared system prompt from x1's entry while x2 extends that entry.
    got_y1, got_x2 = await asyncio.gather(
        cached.generate(y1, SAMPLING, return_routed_experts=True),
        cached.generate(x2, SAMPLING, return_routed_experts=True),
    )
    z1 = SYSTEM + [31]
    got_z1 = await cached.generate(z1, SAMPLING, return_routed_experts=True)  # after both have written
    assert (
        got_y1.cached_tokens == len(SYSTEM) and got_x2.cached_tokens == len(x1) + len(got_x1.output_ids) - 1
    )
    assert got_z1.cached_tokens == len(SYSTEM)
    for prompt, got in ((x1, got_x1), (y1, got_y1), (x2, got_x2), (z1, got_z1)):
        assert_same(got, await engine.generate(prompt, SAMPLING, return_routed_experts=True))


async def test_flush_and_new_weights_empty_the_cache(cached, policy):
    prompt = SYSTEM + [5, 6]
    await cached.generate(prompt, SAMPLING)
    assert (await cached.generate(prompt, SAMPLING)).cached_tokens == len(prompt) - 1
    assert await cached.flush_cache()
    assert cached.stats()["prefix_cache"]["entries"] == 0
    assert (await cached.generate(prompt, SAMPLING)).cached_tokens == 0
    await cached.update_weights(policy, version="same-weights")
    assert cached.stats()["prefix_cache"]["entries"] == 0
    assert (await cached.generate(prompt, SAMPLING)).cached_tokens == 0


async def test_the_server_reports_cached_tokens_and_flush_cache_empties_it(cached):
    assert await cached.flush_cache()
    body = {"input_ids": SYSTEM, "sampling_params": {"max_new_tokens": 3, "sampling_seed": 1}}
    async with TestClient(TestServer(make_app(cached))) as client:
        first = await (await client.post("/generate", json=body)).json()
        again = await (await client.post("/generate", json={**body, "session_id": "agent-1"})).json()
        assert (await client.post("/flush_cache")).status == 200
        flushed = await (await client.post("/generate", json=body)).json()
    assert first["meta_info"]["cached_tokens"] == 0
    assert again["meta_info"]["cached_tokens"] == len(SYSTEM) - 1
    assert flushed["meta_info"]["cached_tokens"] == 0


async def test_the_session_hint_reaches_the_cache_through_the_client_and_our_server(cached):
    from legorl_jax.engine.sglang_client import SGLangEngine

    assert await cached.flush_cache()
    async with TestServer(make_app(cached)) as server, SGLangEngine(str(server.make_url(""))) as client:
        await client.generate(SYSTEM, SamplingParams(max_new_tokens=3, seed=1), session_id="agent-9")
        await client.generate(SYSTEM[:-2], SamplingParams(max_new_tokens=3, seed=1))
    sessions = sorted((e.session or "-") for e in cached.scheduler.cache.by_slot.values())
    assert sessions == ["-", "agent-9"]


async def test_our_server_takes_the_session_hint_from_the_routers_routing_key_header(cached):
    # sglang-router drops the body's session_id but forwards x-smg-routing-key, which the fleet fills with it.
    from legorl_jax.engine.wire import ROUTING_KEY_HEADER

    assert await cached.flush_cache()
    body = {"input_ids": SYSTEM, "sampling_params": {"max_new_tokens": 3, "sampling_seed": 1}}
    async with TestClient(TestServer(make_app(cached))) as client:
        await client.post("/generate", json=body, headers={ROUTING_KEY_HEADER: "agent-7"})
        await client.post("/generate", json={**body, "input_ids": SYSTEM[:-2]})
    sessions = sorted((e.session or "-") for e in cached.scheduler.cache.by_slot.values())
    assert sessions == ["-", "agent-7"]


def test_a_session_entry_outlives_traffic_without_a_session_hint():
    cache = PrefixCache(max_entries=1)
    cache.insert(0, np.arange(10, dtype=np.int32), None, session="agent")
    cache.insert(1, np.arange(100, 120, dtype=np.int32), None, session=None)  # evicted at once, not the agent
    assert list(cache.by_slot) == [0] and cache.evictions == 1
    entry, usable, whole = cache.match(np.arange(12, dtype=np.int32))
    assert entry.slot == 0 and usable == 10 and whole


def test_the_token_budget_evicts_least_recently_used_first():
    cache = PrefixCache(max_entries=4, max_tokens=25)
    cache.insert(0, np.arange(10, dtype=np.int32), None, None)
    cache.insert(1, np.arange(50, 60, dtype=np.int32), None, None)
    cache.match(np.arange(11, dtype=np.int32))  # slot 0 used again: slot 1 is now the oldest
    cache.insert(2, np.arange(80, 90, dtype=np.int32), None, None)  # 30 tokens > 25
    assert sorted(cache.by_slot) == [0, 2] and cache.tokens == 20


def test_an_entry_extended_by_a_newer_one_is_dropped_and_matches_stop_before_the_last_prompt_token():
    cache = PrefixCache(max_entries=4)
    cache.insert(0, np.arange(8, dtype=np.int32), None, None)
    cache.insert(1, np.arange(12, dtype=np.int32), None, None)
    assert list(cache.by_slot) == [1]
    entry, usable, whole = cache.match(np.arange(12, dtype=np.int32))
    assert (entry.slot, usable, whole) == (1, 11, True)
    assert cache.match(np.array([99, 1], np.int32)) == (None, 0, False)
    with pytest.raises(ValueError, match="got -1"):
        PrefixCache(-1)
