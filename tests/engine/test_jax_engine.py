"""The embedded engine against the policy's own full forward: tokens, behaviour log-probs, routing,
batching invariance, stop rules, aborts and weight updates in flight."""

import asyncio
import dataclasses

import numpy as np
import pytest
from engine_reference import MAX_LEN, SLOTS, Reference
from flax import nnx

from legorl_jax.config import EngineConfig
from legorl_jax.engine import ContextOverflowError, EngineError, SamplingParams, open_engine
from legorl_jax.engine import programs as programs_module
from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.model import load_hf, save_hf

PROMPTS = [
    [5, 17, 230, 901, 44],
    [1000, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    [77, 78, 79],
    [3000, 12, 1, 4001, 9, 9, 9, 250, 31, 8, 1200, 64, 18, 90],
]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=24, ignore_eos=True)


def pearson(a, b):
    return float(np.corrcoef(np.asarray(a, np.float64), np.asarray(b, np.float64))[0, 1])


async def wait_for_tokens(engine, rid, n, timeout=60.0):
    """Until request `rid` has sampled at least n tokens (read from the scheduler, for timing only)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        req = engine.scheduler.by_rid.get(rid)
        if req is not None and len(req.output_ids) >= n:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"request {rid} did not reach {n} tokens")
        await asyncio.sleep(0.002)


# ----------------------------------------------------------------------------------------------------
# numerics against the full forward


async def test_greedy_decoding_equals_a_stepwise_argmax_over_the_full_forward(engine, reference):
    for prompt in PROMPTS[:2]:
        gen = await engine.generate(prompt, GREEDY)
        seq = np.concatenate([prompt, gen.output_ids])
        logits, _ = reference.logits_and_routing(seq)
        p = len(prompt)
        assert gen.finish_reason == "length" and len(gen.output_ids) == GREEDY.max_new_tokens
        np.testing.assert_array_equal(gen.output_ids, np.argmax(logits[p - 1 : len(seq) - 1], axis=-1))


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=1.0, max_new_tokens=30, seed=11, ignore_eos=True),
        SamplingParams(temperature=0.7, top_p=0.9, top_k=50, max_new_tokens=30, seed=12, ignore_eos=True),
    ],
    ids=["plain", "filtered"],
)
async def test_behaviour_logprobs_match_the_trainer_recompute_with_routing_replayed(
    engine, reference, sampling
):
    engine_lp, trainer_lp = [], []
    gens = await asyncio.gather(*[engine.generate(p, sampling, return_routed_experts=True) for p in PROMPTS])
    for prompt, gen in zip(PROMPTS, gens, strict=True):
        seq = np.concatenate([prompt, gen.output_ids])
        # log_softmax(logits / T) of the sampled token over the full vocabulary, before the filters.
        lp = reference.token_logprobs(seq, routed=gen.routed_experts, temperature=sampling.temperature)
        engine_lp.append(gen.output_logprobs)
        trainer_lp.append(lp[len(prompt) - 1 :])
    engine_lp, trainer_lp = np.concatenate(engine_lp), np.concatenate(trainer_lp)
    assert pearson(engine_lp, trainer_lp) >= 0.9999
    assert np.max(np.abs(engine_lp - trainer_lp)) <= 1e-4


async def test_returned_routing_equals_the_policys_own_routing_for_prompt_and_output(engine, reference):
    prompt = PROMPTS[3]
    sampling = SamplingParams(max_new_tokens=12, seed=5, ignore_eos=True)
    gen = await engine.generate(prompt, sampling, return_routed_experts=True)
    seq = np.concatenate([prompt, gen.output_ids])
    _, native = reference.logits_and_routing(seq)
    assert gen.routed_experts.dtype == np.uint8
    assert gen.routed_experts.shape == (len(seq) - 1, 2, 2)  # P + N - 1 rows, the 2 MoE layers of 3, top-2
    np.testing.assert_array_equal(gen.routed_experts, native[: len(seq) - 1])

    later = await engine.generate(prompt, sampling, return_routed_experts=True, routed_experts_start_len=9)
    np.testing.assert_array_equal(later.output_ids, gen.output_ids)
    assert later.routed_experts_start == 9
    np.testing.assert_array_equal(later.routed_experts, native[9 : len(seq) - 1])


async def test_prompt_logprobs_score_the_given_tokens_as_the_policy_does(engine, reference):
    tokens = np.array(PROMPTS[3], np.int32)
    lp = await engine.prompt_logprobs(tokens, 3)
    assert lp.shape == (len(tokens) - 3,) and lp.dtype == np.float32
    # Engine prefill vs the policy's own forward: re-ordered sums of order-5 log-probs (fp32 simple-op 1e-5).
    np.testing.assert_allclose(lp, reference.token_logprobs(tokens)[2:], atol=1e-5)


# ----------------------------------------------------------------------------------------------------
# batching and seeds


async def test_concurrent_requests_give_the_same_tokens_as_each_request_alone(engine):
    mixes = [
        SamplingParams(max_new_tokens=16, seed=1, ignore_eos=True),
        SamplingParams(max_new_tokens=9, seed=2, top_p=0.8, ignore_eos=True),
        SamplingParams(max_new_tokens=20, seed=3, top_k=20, temperature=0.7, ignore_eos=True),
        SamplingParams(max_new_tokens=12, seed=4, min_p=0.05, ignore_eos=True),
        SamplingParams(max_new_tokens=7, temperature=0.0, ignore_eos=True),
        SamplingParams(max_new_tokens=18, seed=6, ignore_eos=True),
    ]
    requests = [(PROMPTS[i % len(PROMPTS)], s) for i, s in enumerate(mixes)]  # 6 requests, 4 slots
    alone = [await engine.generate(p, s) for p, s in requests]
    together = await asyncio.gather(*[engine.generate(p, s) for p, s in requests])
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_array_equal(a.output_ids, b.output_ids)
        # Alone runs the batch-1 decode program, together the batch-4 one: other matmul shapes and rounding.
        np.testing.assert_allclose(a.output_logprobs, b.output_logprobs, atol=1e-5)


async def test_a_seed_reproduces_its_tokens_and_another_seed_gives_others(engine):
    params = dict(max_new_tokens=16, ignore_eos=True)
    first = await engine.generate(PROMPTS[0], SamplingParams(seed=123, **params))
    again = await engine.generate(PROMPTS[0], SamplingParams(seed=123, **params))
    other = await engine.generate(PROMPTS[0], SamplingParams(seed=124, **params))
    np.testing.assert_array_equal(first.output_ids, again.output_ids)
    assert not np.array_equal(first.output_ids, other.output_ids)


async def test_programs_stay_within_their_buckets_and_waiting_prompts_prefill_together(engine):
    # From an empty registry (other tests and engines of the session compile the same keys) and with every
    # missing key compiled in the caller (no larger bucket covers a call), so the counts below are exact: a
    # program compiled per prompt length or per batch of requests shows as more.
    runner = engine.runner
    programs_module.clear()
    runner.programs.background, stalls = False, runner.programs.stalls
    try:
        lengths = [1, 2, 7, 15, 16, 17, 30, 33, 40]
        rng = np.random.default_rng(0)
        prompts = [rng.integers(0, 4096, n).tolist() for n in lengths]
        await asyncio.gather(
            *[engine.generate(p, SamplingParams(max_new_tokens=3, seed=i)) for i, p in enumerate(prompts)]
        )
    finally:
        runner.programs.background = True
    assert runner.buckets == (16, 32, 64) and runner.batch_buckets == (1, 2, 4)
    assert runner.context_buckets == (64,)  # max_len 64 is below the smallest context bucket (128)
    batches, contexts = len(runner.batch_buckets), len(runner.context_buckets)
    prefills = {key for key in runner.compiled if key[0] == "prefill"}
    decodes = {key for key in runner.compiled if key[0] == "decode"}
    # Every program compiled once for one bucket key (never one per prompt length: 9 lengths, fewer programs).
    assert runner.programs.stalls - stalls == len(prefills) + len(decodes)
    assert len(prefills) < len(lengths)
    assert len(prefills) <= batches * len(runner.buckets) * contexts and len(decodes) <= batches * contexts
    assert {key[0] for key in runner.compiled} <= {"prefill", "decode", "prompt_logprobs", "copy_slot"}
    # The first four prompts (1, 2, 7 and 15 tokens, all in the 16 bucket) were admitted together: one call.
    assert ("prefill", 4, 16, 64, 0) in runner.compiled
    assert len(runner.compiled) <= runner.num_programs_bound


async def test_decode_attends_over_the_context_in_use_not_the_allocated_one(engine, engine_model_dir):
    long = JaxEngine.from_dir(
        engine_model_dir, max_running=SLOTS, max_len=256, min_bucket=16, min_context=32,
        compile_in_background=False,  # exact keys: no larger bucket covers a call, nothing compiles ahead
    )  # fmt: skip
    try:
        assert long.runner.context_buckets == (32, 64, 128, 256)
        sampling = SamplingParams(max_new_tokens=20, seed=4, ignore_eos=True)
        alone = await long.generate(PROMPTS[0], sampling, return_routed_experts=True)  # positions 4..23
        decodes = {key for key in long.runner.compiled if key[0] == "decode"}
        longer = await long.generate(PROMPTS[3], sampling, return_routed_experts=True)  # positions 13..32
    finally:
        long.close()
    # A lone request runs the one-row program, over the first 32 positions of its 256.
    assert decodes == {("decode", 1, 32, 0)}
    assert ("decode", 1, 64, 0) in long.runner.compiled  # position 32 needs the next bucket
    for prompt, got in ((PROMPTS[0], alone), (PROMPTS[3], longer)):
        want = await engine.generate(prompt, sampling, return_routed_experts=True)
        np.testing.assert_array_equal(got.output_ids, want.output_ids)
        # Another bucket's program: other shapes, re-ordered sums of order-5 log-probs (fp32 simple-op 1e-5).
        np.testing.assert_allclose(got.output_logprobs, want.output_logprobs, atol=1e-5)
        np.testing.assert_array_equal(got.routed_experts, want.routed_experts)


# ----------------------------------------------------------------------------------------------------
# finishing


async def test_a_stop_token_id_ends_the_generation_and_is_returned(engine):
    free = await engine.generate(PROMPTS[1], GREEDY)
    k = 6
    stop = int(free.output_ids[k])
    first = int(np.flatnonzero(free.output_ids == stop)[0])
    gen = await engine.generate(
        PROMPTS[1], SamplingParams(temperature=0.0, max_new_tokens=24, ignore_eos=True, stop_token_ids=[stop])
    )
    assert gen.finish_reason == "stop" and gen.matched_stop == stop
    np.testing.assert_array_equal(gen.output_ids, free.output_ids[: first + 1])


async def test_a_stop_string_ends_the_generation_at_the_token_that_completes_it(engine):
    free = await engine.generate(PROMPTS[2], GREEDY)
    tok = engine.tokenizer
    text = tok.decode(free.output_ids[:8])
    stop = text[-3:]
    gen = await engine.generate(
        PROMPTS[2], SamplingParams(temperature=0.0, max_new_tokens=24, ignore_eos=True, stop=[stop])
    )
    assert gen.finish_reason == "stop" and gen.matched_stop == stop
    assert stop in tok.decode(gen.output_ids) and stop not in tok.decode(gen.output_ids[:-1])
    np.testing.assert_array_equal(gen.output_ids, free.output_ids[: len(gen.output_ids)])


async def test_max_new_tokens_and_a_full_context_finish_with_length(engine):
    short = await engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=5, seed=0, ignore_eos=True))
    assert short.finish_reason == "length" and len(short.output_ids) == 5
    prompt = list(range(100, 100 + MAX_LEN - 4))
    full = await engine.generate(
        prompt, SamplingParams(max_new_tokens=50, seed=0, ignore_eos=True), return_routed_experts=True
    )
    assert full.finish_reason == "length" and len(full.output_ids) == 4
    assert full.routed_experts.shape[0] == MAX_LEN - 1


async def test_zero_new_tokens_forwards_only_the_prompt(engine, reference):
    gen = await engine.generate(PROMPTS[1], SamplingParams(max_new_tokens=0), return_routed_experts=True)
    assert len(gen.output_ids) == 0 and gen.finish_reason == "length"
    _, native = reference.logits_and_routing(np.array(PROMPTS[1]))
    np.testing.assert_array_equal(gen.routed_experts, native[: len(PROMPTS[1]) - 1])


async def test_a_prompt_that_fills_the_context_is_rejected_with_the_limit(engine):
    with pytest.raises(ContextOverflowError, match=f"max_len={MAX_LEN}") as err:
        await engine.generate(list(range(MAX_LEN)), SamplingParams())
    assert err.value.limit == MAX_LEN and err.value.prompt_tokens == MAX_LEN


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(input_ids=[1, 5000]), r"input_ids\[1\] = 5000 is outside \[0, vocab_size=4096\)"),
        (dict(input_ids=[]), "input_ids is empty"),
        (dict(input_ids=[[1, 2]]), "flat list"),
        (dict(input_ids="hello"), "list of token ids"),
        (dict(routed_experts_start_len=6), r"routed_experts_start_len .*\[0, prompt_tokens=5\], got 6"),
        (dict(rid=""), "rid must be a non-empty string"),
        (dict(sampling={"max_new_tokens": 3}), "sampling must be a SamplingParams"),
    ],
)
async def test_bad_generate_arguments_raise_naming_the_field_and_value(engine, kwargs, message):
    args = dict(input_ids=PROMPTS[0], sampling=SamplingParams())
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=message):
        await engine.generate(args.pop("input_ids"), args.pop("sampling"), **args)


async def test_duplicate_request_ids_in_flight_are_rejected(engine):
    long = SamplingParams(max_new_tokens=40, seed=0, ignore_eos=True)
    first = asyncio.ensure_future(engine.generate(PROMPTS[0], long, rid="twice"))
    await wait_for_tokens(engine, "twice", 1)
    with pytest.raises(ValueError, match="'twice' is already in flight"):
        await engine.generate(PROMPTS[0], long, rid="twice")
    assert (await first).finish_reason == "length"


# ----------------------------------------------------------------------------------------------------
# aborts


async def test_abort_mid_flight_returns_the_tokens_so_far_and_frees_the_slot(engine):
    long = SamplingParams(max_new_tokens=55, seed=1, ignore_eos=True)
    task = asyncio.ensure_future(
        engine.generate(PROMPTS[2], long, rid="to-abort", return_routed_experts=True)
    )
    await wait_for_tokens(engine, "to-abort", 3)
    await engine.abort("to-abort")
    gen = await task
    assert gen.finish_reason == "abort" and 3 <= len(gen.output_ids) < 55
    assert gen.routed_experts.shape[0] == len(PROMPTS[2]) + len(gen.output_ids) - 1
    await engine.abort("no-such-request")  # ignored
    after = await asyncio.gather(
        *[engine.generate(p, SamplingParams(max_new_tokens=4, seed=2)) for p in PROMPTS]
    )
    assert all(len(g.output_ids) >= 1 for g in after)


async def test_aborting_a_queued_request_returns_it_empty(engine):
    long = SamplingParams(max_new_tokens=50, seed=3, ignore_eos=True)
    running = [
        asyncio.ensure_future(engine.generate(PROMPTS[0], long, rid=f"busy-{i}")) for i in range(SLOTS)
    ]
    for i in range(SLOTS):
        await wait_for_tokens(engine, f"busy-{i}", 1)
    queued = asyncio.ensure_future(
        engine.generate(PROMPTS[1], long, rid="queued", return_routed_experts=True)
    )
    while "queued" not in engine.scheduler.by_rid:
        await asyncio.sleep(0.002)
    await engine.abort("queued")
    gen = await queued
    assert gen.finish_reason == "abort" and len(gen.output_ids) == 0 and gen.routed_experts is None
    for t in running:
        assert (await t).finish_reason == "length"


async def test_a_cancelled_generate_aborts_its_request(engine):
    task = asyncio.ensure_future(
        engine.generate(
            PROMPTS[0], SamplingParams(max_new_tokens=60, seed=4, ignore_eos=True), rid="cancel-me"
        )
    )
    await wait_for_tokens(engine, "cancel-me", 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):
        if "cancel-me" not in engine.scheduler.by_rid:
            break
        await asyncio.sleep(0.01)
    assert "cancel-me" not in engine.scheduler.by_rid


async def test_pause_abort_finishes_every_request_in_flight(engine):
    long = SamplingParams(max_new_tokens=60, seed=5, ignore_eos=True)
    tasks = [
        asyncio.ensure_future(engine.generate(p, long, rid=f"pa-{i}")) for i, p in enumerate(PROMPTS[:2])
    ]
    await wait_for_tokens(engine, "pa-1", 1)
    assert await engine.pause("abort") == 2
    gens = await asyncio.gather(*tasks)
    assert [g.finish_reason for g in gens] == ["abort", "abort"]
    waiting = asyncio.ensure_future(engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=2, seed=0)))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # paused: queued, not run
    assert not await engine.flush_cache()
    await engine.resume()
    assert len((await waiting).output_ids) == 2
    assert await engine.flush_cache()
    with pytest.raises(ValueError, match="retract is not supported"):
        await engine.pause("retract")


# ----------------------------------------------------------------------------------------------------
# weight updates


async def test_a_weight_update_mid_flight_continues_the_request_on_the_new_weights(
    engine, reference, policy, other_model_dir, engine_model_dir
):
    other = Reference(load_hf(other_model_dir))
    long = SamplingParams(temperature=0.0, max_new_tokens=40, ignore_eos=True)
    old_version = engine.weight_version
    task = asyncio.ensure_future(
        engine.generate(PROMPTS[0], long, rid="in-flight", return_routed_experts=True)
    )
    await wait_for_tokens(engine, "in-flight", 3)
    await engine.pause("in_place")
    switch = len(engine.scheduler.by_rid["in-flight"].output_ids)
    await engine.update_weights(nnx.state(load_hf(other_model_dir), nnx.Param), "v-other")
    await engine.resume()
    gen = await task
    try:
        assert gen.finish_reason == "length" and len(gen.output_ids) == 40
        assert gen.weight_version == "v-other"
        assert gen.token_weight_versions == (old_version,) * switch + ("v-other",) * (40 - switch)
        seq = np.concatenate([PROMPTS[0], gen.output_ids])
        old_logits, _ = reference.logits_and_routing(seq)
        p = len(PROMPTS[0])
        # Tokens sampled before the update are the old weights' greedy choices.
        np.testing.assert_array_equal(
            gen.output_ids[:switch], np.argmax(old_logits[p - 1 : p - 1 + switch], axis=-1)
        )
        # A request started after the update runs wholly on the new weights.
        fresh = await engine.generate(PROMPTS[0], GREEDY)
        assert fresh.token_weight_versions is None and fresh.weight_version == "v-other"
        new_logits, _ = other.logits_and_routing(np.concatenate([PROMPTS[0], fresh.output_ids]))
        np.testing.assert_array_equal(fresh.output_ids, np.argmax(new_logits[p - 1 : -1], axis=-1))
    finally:
        await engine.update_weights(engine_model_dir, "v-restored")  # from disk this time
    restored = await engine.generate(PROMPTS[0], GREEDY)
    back, _ = reference.logits_and_routing(np.concatenate([PROMPTS[0], restored.output_ids]))
    np.testing.assert_array_equal(restored.output_ids, np.argmax(back[len(PROMPTS[0]) - 1 : -1], axis=-1))
    assert restored.weight_version == "v-restored"


async def test_an_update_while_decoding_lands_between_steps(engine, policy):
    """Without pausing: the versions of one request's tokens change once, old before new."""
    long = SamplingParams(max_new_tokens=50, seed=9, ignore_eos=True)
    task = asyncio.ensure_future(engine.generate(PROMPTS[1], long, rid="live"))
    await wait_for_tokens(engine, "live", 2)
    await engine.update_weights(policy, "v-live")  # the same weights, a new version
    gen = await task
    versions = gen.token_weight_versions
    assert versions is not None and versions[-1] == "v-live"
    switch = versions.index("v-live")
    assert 2 <= switch and set(versions[switch:]) == {"v-live"} and "v-live" not in versions[:switch]
    # Same weights: the tokens are those of a run without any update.
    plain = await engine.generate(PROMPTS[1], long)
    np.testing.assert_array_equal(gen.output_ids, plain.output_ids)


async def test_weights_saved_in_another_storage_dtype_are_accepted(engine, policy, tmp_path):
    # The checkpoint's torch_dtype only says how it was stored; the engine casts to its own compute dtype.
    # A bug here refuses every bf16 publish to an fp32-started engine (and vice versa).
    save_hf(policy, tmp_path / "bf16", dtype="bfloat16")
    assert load_hf(tmp_path / "bf16").config.torch_dtype != policy.config.torch_dtype
    await engine.update_weights(tmp_path / "bf16", "v-bf16")
    assert (await engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=2))).weight_version == "v-bf16"
    await engine.update_weights(policy, "v-restored")  # back to the session's weights for the other tests


async def test_weight_updates_reject_mismatched_sources(engine, tmp_path, tiny_model_tool):
    with pytest.raises(ValueError, match="is not a directory"):
        await engine.update_weights(str(tmp_path / "missing"), "x")
    with pytest.raises(ValueError, match="weight_version must be a non-empty string"):
        await engine.update_weights(engine.runner.params, "")
    with pytest.raises(TypeError, match="nnx.State of params or a Policy, got dict"):
        await engine.update_weights({"w": np.zeros(3)}, "x")
    small = tiny_model_tool.make_tiny_model(
        tmp_path / "small", tiny_model_tool.TinyModelSpec(num_layers=1), seed=0
    )
    with pytest.raises(
        ValueError, match=r"config differs from the engine's: num_hidden_layers=1 \(engine: 3\)"
    ):
        await engine.update_weights(load_hf(small), "x")
    with pytest.raises(ValueError, match="does not have the engine policy's structure"):
        await engine.update_weights(nnx.state(load_hf(small), nnx.Param), "x")
    assert await engine.health()


# ----------------------------------------------------------------------------------------------------
# construction and failure


async def test_open_engine_builds_the_configured_engine_and_shares_compiled_programs(
    engine, engine_model_dir
):
    config = EngineConfig(max_running=SLOTS, max_len=MAX_LEN, min_prefill_bucket=16, weight_version="cfg-0")
    sampling = SamplingParams(max_new_tokens=5, seed=8, ignore_eos=True)
    expected = await engine.generate(PROMPTS[0], sampling)  # the shared engine has compiled these shapes
    async with open_engine(config, engine_model_dir) as built:
        assert isinstance(built, JaxEngine) and built.tokenizer is not None
        gen = await built.generate(PROMPTS[0], sampling)
        stalls = built.runner.programs.stalls
    assert gen.weight_version == "cfg-0"
    np.testing.assert_array_equal(gen.output_ids, expected.output_ids)
    assert stalls == 0  # same model and shapes: every program it ran was compiled already
    assert not await built.health()  # closed on exit
    with pytest.raises(TypeError, match="EngineConfig"):
        async with open_engine({"backend": "jax"}, engine_model_dir):
            pass


async def test_engine_device_places_the_weights_and_cache_on_that_device(engine_model_dir):
    import jax

    config = EngineConfig(max_running=SLOTS, max_len=MAX_LEN, min_prefill_bucket=16, device=5)
    async with open_engine(config, engine_model_dir) as built:
        placed = {d for leaf in jax.tree.leaves(built.runner.cache) for d in leaf.devices()}
        assert placed == {jax.devices()[5]} and built.runner.device == jax.devices()[5]
        gen = await built.generate(PROMPTS[0], SamplingParams(max_new_tokens=3, seed=1, ignore_eos=True))
        assert len(gen.output_ids) == 3
    with pytest.raises(ValueError, match="engine.device=8, but there are 8 devices"):
        async with open_engine(dataclasses.replace(config, device=8), engine_model_dir):
            pass


async def test_a_failed_engine_thread_fails_requests_in_flight_and_every_later_call(engine_model_dir):
    broken = JaxEngine.from_dir(engine_model_dir, max_running=SLOTS, max_len=MAX_LEN, min_bucket=16)
    try:
        task = asyncio.ensure_future(
            broken.generate(
                PROMPTS[0], SamplingParams(max_new_tokens=50, ignore_eos=True, seed=0), rid="doomed"
            )
        )
        await wait_for_tokens(broken, "doomed", 1)
        broken.runner.params = None  # the next decode step cannot run
        with pytest.raises(EngineError, match="engine thread failed"):
            await task
        assert not await broken.health()
        with pytest.raises(EngineError, match="engine thread failed"):
            await broken.generate(PROMPTS[0], SamplingParams())
    finally:
        broken.close()


async def test_weights_sharded_over_a_mesh_are_copied_in_and_may_be_deleted_after(engine, policy):
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("fsdp",))

    def spread(x):  # the trainer's layout: split over every device where the shape allows, else replicated
        spec = PartitionSpec("fsdp") if x.shape and x.shape[0] % len(jax.devices()) == 0 else PartitionSpec()
        # A copy first: a replicated device_put may alias the session policy's own buffer, which the
        # deletion below would then take from every later test using `policy` or `reference`.
        return jax.device_put(jnp.copy(x), NamedSharding(mesh, spec))

    expected = await engine.generate(PROMPTS[1], GREEDY)
    params = jax.tree.map(spread, nnx.state(policy, nnx.Param))
    assert any(len(leaf.sharding.device_set) > 1 for leaf in jax.tree.leaves(params))
    await engine.update_weights(params, "sharded")
    for leaf in jax.tree.leaves(params):
        leaf.delete()  # what donating the trainer state to its next step does to these buffers
    gen = await engine.generate(PROMPTS[1], GREEDY)
    np.testing.assert_array_equal(gen.output_ids, expected.output_ids)
    assert gen.weight_version == "sharded"


async def test_a_prompt_prefilled_in_chunks_gives_what_one_piece_gives(engine, engine_model_dir):
    chunked = JaxEngine.from_dir(
        engine_model_dir, max_running=SLOTS, max_len=MAX_LEN, min_bucket=16, prefill_chunk=16
    )
    try:
        assert chunked.runner.buckets == (16,)  # 40 tokens go in as 16 + 16 + 8
        prompt = list(range(200, 240))
        sampling = SamplingParams(max_new_tokens=10, seed=17, ignore_eos=True)
        whole = await engine.generate(prompt, sampling, return_routed_experts=True)
        pieces = await chunked.generate(prompt, sampling, return_routed_experts=True)
    finally:
        chunked.close()
    np.testing.assert_array_equal(pieces.output_ids, whole.output_ids)
    # Chunked prefill re-orders the prompt's sums; order-5 log-probs (fp32 simple-op 1e-5).
    np.testing.assert_allclose(pieces.output_logprobs, whole.output_logprobs, atol=1e-5)
    np.testing.assert_array_equal(pieces.routed_experts, whole.routed_experts)


# ----------------------------------------------------------------------------------------------------
# top log-probs


@pytest.mark.parametrize("temperature", [0.0, 0.7], ids=["greedy", "sampled"])
async def test_top_logprobs_are_the_likeliest_tokens_as_the_full_forward_scores_them(
    engine, reference, temperature
):
    sampling = SamplingParams(temperature=temperature, max_new_tokens=8, seed=3, ignore_eos=True)
    plain, gen = await asyncio.gather(
        engine.generate(PROMPTS[1], sampling), engine.generate(PROMPTS[1], sampling, top_logprobs=5)
    )
    np.testing.assert_array_equal(gen.output_ids, plain.output_ids)  # asking for them changes no token
    assert plain.output_top_ids is None and gen.output_top_ids.shape == (8, 5)
    seq = np.concatenate([PROMPTS[1], gen.output_ids])
    logits, _ = reference.logits_and_routing(seq)
    p = len(PROMPTS[1])
    scaled = logits[p - 1 : len(seq) - 1] / (temperature or 1.0)
    logp = (
        scaled
        - np.log(np.sum(np.exp(scaled - scaled.max(-1, keepdims=True)), -1, keepdims=True))
        - scaled.max(-1, keepdims=True)
    )
    np.testing.assert_array_equal(gen.output_top_ids, np.argsort(-logp, axis=-1, kind="stable")[:, :5])
    # Decode steps vs one whole forward of the sequence (KV cache, other shapes): blocks policy 1e-4.
    np.testing.assert_allclose(gen.output_top_logprobs, np.sort(logp, axis=-1)[:, ::-1][:, :5], atol=1e-4)
    assert np.all(np.diff(gen.output_top_logprobs, axis=-1) <= 0)
    if temperature == 0.0:  # greedy: the sampled token is the likeliest one
        np.testing.assert_array_equal(gen.output_top_ids[:, 0], gen.output_ids)
        # The same step's log-softmax read twice: equal up to the top-k gather, 1e-6 is slack.
        np.testing.assert_allclose(gen.output_top_logprobs[:, 0], gen.output_logprobs, atol=1e-6)
    with pytest.raises(ValueError, match="top_logprobs must be an int in \\[0, 20\\], got 21"):
        await engine.generate(PROMPTS[1], sampling, top_logprobs=21)
