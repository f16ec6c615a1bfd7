"""The cached forward the rollout engine runs: prefill + decode reproduce the full forward, per slot."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from legorl_jax.model import KVCache


@pytest.fixture(scope="module")
def cached_step(moe_policy):
    graphdef, state = nnx.split(moe_policy)

    @functools.partial(jax.jit, donate_argnums=(1,))
    def step(state, cache, input_ids, positions, slots):
        return nnx.merge(graphdef, state).forward_cached(input_ids, positions, cache, slots)

    return lambda cache, ids, positions, slots: step(state, cache, ids, positions, slots)


def test_prefill_then_decode_matches_the_full_forward_in_several_slots(
    moe_policy, jit_forward, cached_step, tokens
):
    lengths, prompts, slots = [6, 10, 8], [3, 5, 4], np.array([2, 0, 3], np.int32)
    seqs = [tokens(1, n, seed=10 + i)[0] for i, n in enumerate(lengths)]
    cache = moe_policy.init_cache(num_slots=4, max_len=16)

    bucket = 8
    ids = np.zeros((3, bucket), np.int32)
    pos = np.full((3, bucket), -1, np.int32)
    for b, (seq, p) in enumerate(zip(seqs, prompts, strict=True)):
        ids[b, :p], pos[b, :p] = seq[:p], np.arange(p)
    out, cache = cached_step(cache, ids, pos, slots)
    logits = [[np.asarray(out.logits[b, t]) for t in range(p)] for b, p in enumerate(prompts)]
    routed = [[np.asarray(out.routed_experts[:, b, t]) for t in range(p)] for b, p in enumerate(prompts)]

    for i in range(min(prompts), max(lengths)):
        # Rows whose sequence is finished (or not yet at i) are padding in this decode call.
        ids = np.zeros((3, 1), np.int32)
        pos = np.full((3, 1), -1, np.int32)
        for b, (seq, p) in enumerate(zip(seqs, prompts, strict=True)):
            if p <= i < len(seq):
                ids[b, 0], pos[b, 0] = seq[i], i
        out, cache = cached_step(cache, ids, pos, slots)
        for b in range(3):
            if pos[b, 0] >= 0:
                logits[b].append(np.asarray(out.logits[b, 0]))
                routed[b].append(np.asarray(out.routed_experts[:, b, 0]))

    full = np.zeros((3, max(lengths)), np.int32)
    for b, seq in enumerate(seqs):
        full[b, : len(seq)] = seq
    reference = jit_forward(moe_policy)(full)
    for b, n in enumerate(lengths):
        # One query at a time against the cache vs the whole forward: other matmul shapes through 3 layers
        # (blocks policy 1e-4 on order-1 logits).
        np.testing.assert_allclose(
            np.stack(logits[b]), np.asarray(reference.logits[b, :n]), atol=1e-4, rtol=0
        )
        np.testing.assert_array_equal(
            np.stack(routed[b], axis=1), np.asarray(reference.routed_experts[:, b, :n])
        )


def test_a_long_prompt_prefilled_in_blockwise_chunks_matches_the_full_forward(
    moe_policy, jit_forward, cached_step, tokens
):
    """Chunks of >= BLOCKWISE_MIN_QUERIES tokens attend to the cache through the blockwise op (kv index =
    cache entry, q index = position): a 200-token prompt in three chunks of 96 positions (the last one mostly
    padding), beside a 150-token one in another slot, gives the full forward's logits."""
    from legorl_jax.model.attention import BLOCKWISE_MIN_QUERIES

    length, chunk = 200, 96
    assert chunk >= BLOCKWISE_MIN_QUERIES
    seqs = tokens(2, length, seed=5)
    cache = moe_policy.init_cache(num_slots=2, max_len=256)
    slots = np.array([1, 0], np.int32)
    logits = []
    for lo in range(0, length, chunk):
        hi = min(lo + chunk, length)
        ids = np.zeros((2, chunk), np.int32)
        pos = np.full((2, chunk), -1, np.int32)
        ids[:, : hi - lo] = seqs[:, lo:hi]
        pos[0, : hi - lo] = np.arange(lo, hi)
        if lo < 150:
            pos[1, : min(hi, 150) - lo] = np.arange(lo, min(hi, 150))
        out, cache = cached_step(cache, ids, pos, slots)
        logits.append(np.asarray(out.logits[:, : hi - lo]))
    got = np.concatenate(logits, axis=1)
    reference = jit_forward(moe_policy)(np.asarray(seqs))
    np.testing.assert_allclose(got[0], np.asarray(reference.logits[0]), atol=1e-4, rtol=0)
    np.testing.assert_allclose(got[1, :150], np.asarray(reference.logits[1, :150]), atol=1e-4, rtol=0)


def test_padding_writes_nothing_and_other_slots_stay_untouched(moe_policy, cached_step, tokens):
    cache = moe_policy.init_cache(num_slots=3, max_len=8)
    ids = tokens(1, 4, seed=1)
    pos = np.array([[0, 1, -1, -1]], np.int32)
    _, cache = cached_step(cache, ids, pos, np.array([1], np.int32))
    k = np.asarray(cache.k)  # [L, S, M, K, H]
    assert np.all(k[:, 1, :2] != 0) and np.all(k[:, 1, 2:] == 0)
    assert np.all(k[:, 0] == 0) and np.all(k[:, 2] == 0)
    assert cache.num_layers == 3 and cache.num_slots == 3 and cache.max_len == 8


def test_cache_shape_and_dtype_follow_the_policy(moe_policy):
    cache = moe_policy.init_cache(2, 5)
    assert isinstance(cache, KVCache) and cache.k.shape == (3, 2, 5, 2, 8) and cache.k.dtype == jnp.float32
    assert moe_policy.init_cache(2, 5, dtype="bfloat16").v.dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="max_len must be a positive int, got 0"):
        moe_policy.init_cache(2, 0)


@pytest.mark.parametrize(
    "ids, positions, slots, message",
    [
        (np.zeros((2, 2)), [[0, 1], [0, 1]], [0, 0], "slot 0 appears in more than one row"),
        (np.zeros((1, 2)), [[0, 1]], [4], r"slots\[0\] = 4 is outside \[0, num_slots=4\)"),
        (np.zeros((1, 2)), [[7, 8]], [1], r"positions\[0, 1\] = 8 is outside \[-1, max_len=8\)"),
        (np.zeros((1, 2)), [[0, 1, 2]], [1], r"positions has shape \(1, 3\), input_ids has \(1, 2\)"),
        (np.zeros((1, 2)), [[0, 1]], [1, 2], r"slots must have shape \(1,\), got \(2,\)"),
    ],
)  # fmt: skip
def test_bad_cached_inputs_raise_naming_the_value(moe_policy, ids, positions, slots, message):
    cache = moe_policy.init_cache(num_slots=4, max_len=8)
    with pytest.raises(ValueError, match=message):
        moe_policy.forward_cached(
            ids.astype(np.int32), np.array(positions, np.int32), cache, np.array(slots, np.int32)
        )


def test_padding_rows_may_share_a_slot_with_a_real_row(moe_policy, cached_step):
    cache = moe_policy.init_cache(num_slots=4, max_len=16)
    ids = np.array([[5], [9], [11]], np.int32)
    out, cache = cached_step(cache, ids, np.array([[0], [-1], [-1]], np.int32), np.array([1, 1, 1], np.int32))
    alone, _ = cached_step(
        moe_policy.init_cache(4, 16), ids, np.array([[0], [-1], [-1]], np.int32), np.array([1, 2, 3])
    )
    np.testing.assert_array_equal(np.asarray(out.logits[0]), np.asarray(alone.logits[0]))


def test_a_call_naming_its_context_reads_only_that_many_positions_and_gives_the_same_logits(moe_policy):
    ids = np.array([[5, 9, 11, 3]], np.int32)
    positions, slots = np.arange(4, dtype=np.int32)[None], np.array([2], np.int32)
    full, _ = moe_policy.forward_cached(ids, positions, moe_policy.init_cache(4, 16), slots)
    short, _ = moe_policy.forward_cached(ids, positions, moe_policy.init_cache(4, 16), slots, context=4)
    # Reading 4 positions instead of 16: the unread 12 had weight exactly 0; only sum shapes differ.
    np.testing.assert_allclose(np.asarray(short.logits), np.asarray(full.logits), atol=1e-5)
    with pytest.raises(ValueError, match=r"positions\[0, 3\] = 3 is outside \[-1, context=3\)"):
        moe_policy.forward_cached(ids, positions, moe_policy.init_cache(4, 16), slots, context=3)
    with pytest.raises(ValueError, match="context must be an int in \\[1, max_len=16\\] or None, got 17"):
        moe_policy.forward_cached(ids, positions, moe_policy.init_cache(4, 16), slots, context=17)
