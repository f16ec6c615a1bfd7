"""Weight updates while a request is in flight, under each update policy (engine/weight_update.py), on the
real embedded engine, through its server and `SGLangEngine`: which weights sampled each token, log-probs
against a recompute with those weights, routing rows for every sampled token (a resumed request's: the
re-issue's forward of every position, the routing its tokens were sampled over)."""

import asyncio

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from engine_reference import MAX_LEN, SLOTS, Reference
from flax import nnx

from legorl_jax.engine import SamplingParams
from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.engine.resume import generate_resuming
from legorl_jax.engine.serve import make_app
from legorl_jax.engine.sglang_client import SGLangEngine
from legorl_jax.engine.weight_update import update_weights
from legorl_jax.model import load_hf
from legorl_jax.train.publish import Publisher

PROMPT = [5, 17, 230, 901, 44]
P = len(PROMPT)
N = 30
START = 2  # routing asked from row 2 on, as the proxy asks from its first unrecorded position
LONG = SamplingParams(max_new_tokens=N, seed=7, ignore_eos=True)
# Engine decode vs the full forward: fp32, blocks policy 1e-4 (tests/engine/test_jax_engine.py).
ATOL = 1e-4


@pytest.fixture(scope="module")
def new_policy(other_model_dir):
    return load_hf(other_model_dir)


@pytest.fixture(scope="module")
def new_reference(new_policy):
    return Reference(new_policy)


@pytest.fixture
async def restore(engine, policy):
    """Puts the session engine's own weights back after the test, whatever it published."""
    yield
    await engine.resume()
    await engine.update_weights(policy, "restored")


async def wait_for_tokens(engine, rid, n, timeout=60.0):
    """Until request `rid` has sampled at least n tokens (read from the scheduler, for timing only)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while len(getattr(engine.scheduler.by_rid.get(rid), "output_ids", ())) < n:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"request {rid} did not reach {n} tokens")
        await asyncio.sleep(0.002)


def split_by_version(gen, old, new):
    """The index of the first token sampled under `new`; asserts every token before it is `old`'s."""
    versions = gen.token_weight_versions
    assert versions is not None and set(versions) == {old, new}, versions
    switch = versions.index(new)
    assert versions == (old,) * switch + (new,) * (len(versions) - switch)
    return switch


def check_resumed_on_new_weights(gen, switch, reference, new_reference):
    """abort_resume's result: old tokens score as the old weights do on the prefix, new ones as the new
    weights do on the same prefix; a routing row for every forwarded position, all of them the re-issue's
    forward on the new weights (which re-prefilled the prefix: the routing the new tokens were sampled
    over), so replaying the recorded rows reproduces the new tokens' log-probs (resume.py)."""
    seq = np.concatenate([PROMPT, gen.output_ids])
    old_lp = reference.token_logprobs(seq)[P - 1 :]
    np.testing.assert_allclose(gen.output_logprobs[:switch], old_lp[:switch], atol=ATOL, rtol=0)
    assert gen.routed_experts.shape[0] == P + N - 1 - START and gen.routed_experts_start == START
    cut = P + switch - 1  # the first row the cut piece never forwarded: the last cut token's input position
    old_native, new_native = reference.logits_and_routing(seq)[1], new_reference.logits_and_routing(seq)[1]
    assert not np.array_equal(old_native[START:cut], new_native[START:cut])  # the overwrite is visible
    np.testing.assert_array_equal(gen.routed_experts, new_native[START : P + N - 1])
    forced = np.concatenate([new_native[:START], gen.routed_experts.astype(np.int32)])
    replayed = new_reference.token_logprobs(seq, forced)[P - 1 :]
    np.testing.assert_allclose(gen.output_logprobs[switch:], replayed[switch:], atol=ATOL, rtol=0)


async def test_abort_resume_ends_the_request_on_the_new_weights_with_its_earlier_tokens_kept(
    engine, reference, new_policy, new_reference, restore
):
    old = engine.weight_version
    task = asyncio.ensure_future(
        generate_resuming(
            engine,
            PROMPT,
            LONG,
            max_resumes=2,
            return_routed_experts=True,
            routed_experts_start_len=START,
            rid="ar",
        )  # fmt: skip
    )
    await wait_for_tokens(engine, "ar", 4)
    publisher = Publisher(engine, mode="in_process", update_policy="abort_resume")
    await publisher.publish(nnx.state(new_policy, nnx.Param), "ar-new")
    resumed = await task
    gen = resumed.generation
    assert gen.finish_reason == "length" and len(gen.output_ids) == N and resumed.resumes == 1
    switch = split_by_version(gen, old, "ar-new")
    assert switch >= 4 and gen.weight_version == "ar-new" and gen.stale_kv_tokens == 0
    # The re-issue prefilled the prompt and the cut tokens but the last (which it forwards as its input).
    assert resumed.prefill_tokens == P + switch - 1
    check_resumed_on_new_weights(gen, switch, reference, new_reference)


async def test_in_place_continues_over_the_old_kv_and_records_the_tokens_sampled_so(
    engine, reference, new_policy, new_reference, restore
):
    old = engine.weight_version
    task = asyncio.ensure_future(
        engine.generate(PROMPT, LONG, rid="ip", return_routed_experts=True, routed_experts_start_len=START)
    )
    await wait_for_tokens(engine, "ip", 4)
    publisher = Publisher(engine, mode="in_process", update_policy="in_place")
    await publisher.publish(nnx.state(new_policy, nnx.Param), "ip-new")
    gen = await task
    assert gen.finish_reason == "length" and len(gen.output_ids) == N
    switch = split_by_version(gen, old, "ip-new")
    assert gen.stale_kv_tokens == N - switch  # every token after the update attended to old K/V
    seq = np.concatenate([PROMPT, gen.output_ids])
    old_lp = reference.token_logprobs(seq)[P - 1 :]
    new_lp = new_reference.token_logprobs(seq)[P - 1 :]
    np.testing.assert_allclose(gen.output_logprobs[:switch], old_lp[:switch], atol=ATOL, rtol=0)
    # After the update the log-probs are those of the new weights over the old K/V: neither recompute's.
    after = gen.output_logprobs[switch:]
    assert np.max(np.abs(after - old_lp[switch:])) > 1e-2
    assert np.max(np.abs(after - new_lp[switch:])) > 1e-2
    cut = P + switch - 1
    assert gen.routed_experts.shape[0] == P + N - 1 - START
    np.testing.assert_array_equal(
        gen.routed_experts[: cut - START], reference.logits_and_routing(seq)[1][START:cut]
    )


async def test_drain_finishes_the_running_request_on_the_old_weights_and_holds_new_ones_for_the_new(
    engine, reference, new_policy, new_reference, restore
):
    old = engine.weight_version
    task = asyncio.ensure_future(engine.generate(PROMPT, LONG, rid="dr"))
    await wait_for_tokens(engine, "dr", 2)
    publisher = Publisher(engine, mode="in_process", update_policy="drain")
    publish = asyncio.ensure_future(publisher.publish(nnx.state(new_policy, nnx.Param), "dr-new"))
    while not engine.stats()["draining"]:
        await asyncio.sleep(0.002)
    late_prompt = [77, 78, 79]
    late = asyncio.ensure_future(
        engine.generate(late_prompt, SamplingParams(max_new_tokens=6, seed=8, ignore_eos=True))
    )
    await asyncio.sleep(0)
    assert not task.done()  # `late` arrived while the first request was still decoding
    gen = await task
    await publish
    late_gen = await late
    assert gen.finish_reason == "length" and len(gen.output_ids) == N
    assert gen.token_weight_versions is None and gen.weight_version == old and gen.stale_kv_tokens == 0
    seq = np.concatenate([PROMPT, gen.output_ids])
    np.testing.assert_allclose(gen.output_logprobs, reference.token_logprobs(seq)[P - 1 :], atol=ATOL, rtol=0)
    assert late_gen.token_weight_versions is None and late_gen.weight_version == "dr-new"
    late_seq = np.concatenate([late_prompt, late_gen.output_ids])
    np.testing.assert_allclose(
        late_gen.output_logprobs,
        new_reference.token_logprobs(late_seq)[len(late_prompt) - 1 :],
        atol=ATOL,
        rtol=0,
    )


async def test_a_seeded_request_cut_by_an_abort_resumes_to_exactly_the_tokens_it_had_uncut(engine):
    uncut = await engine.generate(PROMPT, LONG, return_routed_experts=True)
    task = asyncio.ensure_future(
        generate_resuming(engine, PROMPT, LONG, max_resumes=1, return_routed_experts=True, rid="cut")
    )
    await wait_for_tokens(engine, "cut", 3)
    assert await engine.pause("abort") == 1  # an abort with the weights unchanged
    await engine.resume()
    resumed = await task
    assert resumed.resumes == 1 and resumed.generation.finish_reason == "length"
    np.testing.assert_array_equal(resumed.generation.output_ids, uncut.output_ids)
    np.testing.assert_allclose(resumed.generation.output_logprobs, uncut.output_logprobs, atol=ATOL)
    np.testing.assert_array_equal(resumed.generation.routed_experts, uncut.routed_experts)


async def test_aborts_that_are_not_updates_surface_after_max_resumes(engine, engine_model_dir):
    task = asyncio.ensure_future(generate_resuming(engine, PROMPT, LONG, max_resumes=1, rid="ab"))
    await wait_for_tokens(engine, "ab", 2)
    await engine.abort("ab")
    await wait_for_tokens(engine, "ab-resume1", 1)
    await engine.abort("ab-resume1")
    resumed = await task
    assert resumed.resumes == 1 and resumed.generation.finish_reason == "abort"
    assert 3 <= len(resumed.generation.output_ids) < N
    # A closing engine is unhealthy: its abort is not re-issued at all.
    closing = JaxEngine.from_dir(engine_model_dir, max_running=SLOTS, max_len=MAX_LEN, min_bucket=16)
    task = asyncio.ensure_future(generate_resuming(closing, PROMPT, LONG, max_resumes=5, rid="cl"))
    await wait_for_tokens(closing, "cl", 1)
    await asyncio.to_thread(closing.close)
    resumed = await task
    assert resumed.resumes == 0 and resumed.generation.finish_reason == "abort"


async def test_no_prefix_cache_hit_serves_kv_of_weights_older_than_the_request(engine_model_dir, policy):
    cached = JaxEngine.from_dir(
        engine_model_dir, max_running=SLOTS // 2, max_len=MAX_LEN, min_bucket=16, cache_slots=SLOTS // 2
    )
    try:
        short = SamplingParams(max_new_tokens=4, seed=1, ignore_eos=True)
        first = await cached.generate(PROMPT, short)
        follow = PROMPT + first.output_ids.tolist() + [9, 9]
        assert (await cached.generate(follow, short)).cached_tokens > 0  # the cache does serve hits
        # A request in flight across an in-place update keeps its K/V (old weights) to its end, yet its
        # slot does not become an entry: the next turn after it prefills everything on the new weights.
        task = asyncio.ensure_future(cached.generate([3, 1, 4, 1, 5], LONG, rid="x"))
        await wait_for_tokens(cached, "x", 2)
        await update_weights(cached, policy, "same-weights-new-version", "in_place")
        gen = await task
        assert gen.stale_kv_tokens > 0
        nxt = [3, 1, 4, 1, 5] + gen.output_ids.tolist() + [9]
        assert (await cached.generate(nxt, short)).cached_tokens == 0
        assert (await cached.generate(follow, short)).cached_tokens == 0  # and the older entry is gone
    finally:
        cached.close()


# ----------------------------------------------------------------------------------------------------
# through the server


@pytest.fixture
async def ours(engine):
    async with TestServer(make_app(engine)) as server:
        async with SGLangEngine(str(server.make_url("")), retries=0) as client:
            yield client


async def test_abort_resume_through_the_server_and_client_resumes_on_the_new_weights(
    engine, ours, reference, new_reference, other_model_dir, restore
):
    old = engine.weight_version
    task = asyncio.ensure_future(
        generate_resuming(
            ours,
            PROMPT,
            LONG,
            max_resumes=2,
            return_routed_experts=True,
            routed_experts_start_len=START,
            rid="srv-ar",
        )  # fmt: skip
    )
    await wait_for_tokens(engine, "srv-ar", 4)
    await update_weights(ours, str(other_model_dir), "srv-ar-new", "abort_resume")
    resumed = await task
    gen = resumed.generation
    assert gen.finish_reason == "length" and len(gen.output_ids) == N and resumed.resumes == 1
    switch = split_by_version(gen, old, "srv-ar-new")
    check_resumed_on_new_weights(gen, switch, reference, new_reference)


async def test_drain_through_the_client_holds_its_new_requests_until_the_new_weights_serve(
    engine, ours, other_model_dir, restore
):
    old = engine.weight_version
    task = asyncio.ensure_future(ours.generate(PROMPT, LONG, rid="srv-dr"))
    await wait_for_tokens(engine, "srv-dr", 2)
    publish = asyncio.ensure_future(update_weights(ours, str(other_model_dir), "srv-dr-new", "drain"))
    for _ in range(3):  # the drain closes the client's gate before its first wait
        await asyncio.sleep(0)
    late = asyncio.ensure_future(ours.generate([77, 78, 79], SamplingParams(max_new_tokens=4, seed=2)))
    await asyncio.sleep(0)
    assert not task.done()  # `late` arrived while the first request was still decoding
    gen = await task
    await publish
    late_gen = await late
    assert gen.finish_reason == "length" and gen.token_weight_versions is None and gen.weight_version == old
    assert late_gen.token_weight_versions is None and late_gen.weight_version == "srv-dr-new"


async def test_the_servers_drain_pause_answers_once_the_running_request_has_finished(engine):
    task = asyncio.ensure_future(engine.generate(PROMPT, LONG, rid="http-dr"))
    await wait_for_tokens(engine, "http-dr", 2)
    async with TestClient(TestServer(make_app(engine))) as client:
        try:
            resp = await client.post("/pause_generation", json={"mode": "drain"})
            assert resp.status == 200 and "drain, 1 requests" in (await resp.json())["message"]
            assert task.done() and (await task).finish_reason == "length"
            held = asyncio.ensure_future(engine.generate([77, 78], SamplingParams(max_new_tokens=2)))
            await asyncio.sleep(0.05)
            assert not held.done()  # drained and paused: new requests wait
        finally:
            assert (await client.post("/continue_generation")).status == 200
        assert len((await held).output_ids) == 2


async def test_bad_update_policies_are_named(engine):
    class NoPause:
        async def update_weights(self, source, version):
            pass

    with pytest.raises(ValueError, match="update_policy must be one of .* got 'retract'"):
        Publisher(engine, mode="in_process", update_policy="retract")
    with pytest.raises(TypeError, match="update_policy 'drain' needs an engine with pause"):
        Publisher(NoPause(), mode="in_process", update_policy="drain")
    await update_weights(NoPause(), None, "v", "in_place")  # no pause needed: the update lands between steps
    with pytest.raises(ValueError, match="max_resumes must be an int >= 0, got -1"):
        await generate_resuming(engine, PROMPT, LONG, max_resumes=-1)
    with pytest.raises(ValueError, match="mode must be one of .* got 'sideways'"):
        await engine.pause("sideways")
