"""Grouped-query attention (model/attention.py) against a per-head numpy reference; its causal chunks."""

import jax
import numpy as np
import pytest

from legorl_jax.model.attention import attend, segment_mask


def reference(q, k, v, mask, scale):
    """Softmax attention one (batch, query head) at a time, in float64; fully masked rows give zeros."""
    b, t, n, h = q.shape
    groups = n // k.shape[2]
    out = np.zeros((b, t, n, h))
    for i in range(b):
        for head in range(n):
            kv = head // groups
            scores = q[i, :, head] @ k[i, :, kv].T * scale  # [T, S]
            scores = np.where(mask[i], scores, -np.inf)
            seen = mask[i].any(axis=1)
            scores[~seen] = 0.0
            probs = np.exp(scores - scores.max(axis=1, keepdims=True))
            probs = probs / probs.sum(axis=1, keepdims=True)
            out[i, :, head] = np.where(seen[:, None], probs @ v[i, :, kv], 0.0)
    return out


@pytest.fixture
def packed():
    rng = np.random.default_rng(0)
    b, t, n, kv, h = 2, 37, 4, 2, 8  # 37 positions: the chunks are uneven
    q, k, v = (rng.normal(size=(b, t, heads, h)).astype(np.float32) for heads in (n, kv, kv))
    segments = np.zeros((b, t), np.int32)
    segments[0, :20], segments[0, 20:33] = 1, 2  # two sequences, then padding
    segments[1, :] = 1
    return q, k, v, np.asarray(segment_mask(segments)), segments


def test_grouped_query_attention_matches_the_per_head_reference(packed):
    q, k, v, mask, segments = packed
    got = np.asarray(attend(q, k, v, mask, 0.3))
    want = reference(q, k, v, mask, 0.3)
    real = segments > 0  # padding rows are unspecified
    # Grouped vs per-head reference over at most 37 keys of order-1 values (fp32 simple-op 1e-5).
    np.testing.assert_allclose(got[real], want[real], atol=1e-5)


@pytest.mark.parametrize("chunks", [2, 4, 8])
def test_causal_chunks_give_the_attention_of_the_whole_score_matrix(packed, chunks):
    q, k, v, mask, segments = packed
    whole = np.asarray(attend(q, k, v, mask, 0.3))
    chunked = np.asarray(jax.jit(lambda *a: attend(*a, 0.3, causal_chunks=chunks))(q, k, v, mask))
    real = segments > 0
    # Chunks change which keys each softmax sums over (masked ones add exact zeros) and so its order: a sum
    # of t terms moves by ~t·u of their magnitudes (u = 2^-24), relative to the outputs' scale. Measured 1 ulp
    # (2.4e-7 at 2.5), which a fixed 1e-6 held by only 4x.
    t = q.shape[1]
    np.testing.assert_allclose(chunked[real], whole[real], atol=t * 2.0**-24 * np.abs(whole[real]).max())


def test_two_2048_token_sequences_packed_in_one_row_equal_each_alone(moe_config):
    """The policy on one 4,096-token row holding two 2,048-token sequences (several attention blocks each,
    one segment boundary between blocks) gives each sequence the logits it gets alone (fp32, 1e-4 on
    order-1 logits: other block boundaries reorder the sums through 3 layers)."""
    import dataclasses

    import jax.numpy as jnp

    from legorl_jax.model import init_policy

    policy = init_policy(dataclasses.replace(moe_config, max_position_embeddings=4096), seed=2)
    forward = jax.jit(lambda ids, seg: policy(ids, segment_ids=seg).logits)
    ids = np.random.default_rng(3).integers(0, moe_config.vocab_size, (1, 4096)).astype(np.int32)
    packed = forward(jnp.asarray(ids), jnp.asarray(np.repeat([1, 2], 2048)[None], jnp.int32))
    alone = [forward(jnp.asarray(ids[:, i : i + 2048]), jnp.ones((1, 2048), jnp.int32)) for i in (0, 2048)]
    np.testing.assert_allclose(np.asarray(packed[0, :2048]), np.asarray(alone[0][0]), atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.asarray(packed[0, 2048:]), np.asarray(alone[1][0]), atol=1e-4, rtol=0)
