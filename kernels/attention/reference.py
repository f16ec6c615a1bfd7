"""The dense oracle of packed attention: the whole [T, S] score matrix and mask, softmax in float32.

This is what `model/attention.py` computed before the blockwise op; it stays as the test oracle. Its
memory is quadratic in the row, so nothing but tests (and short reference runs) should call it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

MASKED = float(np.finfo(np.float32).min)


def visibility(
    q_segment_ids: Int[Array, "b t"],
    kv_segment_ids: Int[Array, "b s"],
    q_index: Int[Array, "b t"],
    kv_index: Int[Array, "b s"],
) -> Bool[Array, "b t s"]:
    """The masking rule: key s is visible to query t iff both carry the same segment id, that id is not 0
    (padding), and the key's index in the row is at or before the query's."""
    same = q_segment_ids[:, :, None] == kv_segment_ids[:, None, :]
    real = kv_segment_ids[:, None, :] > 0
    causal = kv_index[:, None, :] <= q_index[:, :, None]
    return same & real & causal


def attention(
    q: Float[Array, "b t n h"],
    k: Float[Array, "b s k h"],
    v: Float[Array, "b s k h"],
    mask: Bool[Array, "b t s"],
    scale: float,
    *,
    causal_chunks: int = 1,
) -> Float[Array, "b t n h"]:
    """Softmax attention of grouped queries under a dense mask. Queries that see no key get zeros (the
    blockwise op's convention), so the oracle and the op agree everywhere, padding included.

    The G query heads of a kv head join its T positions into one [G*T] axis, so both matmuls are plain
    batched ones over (B, K) with contiguous operands (on XLA:CPU 2.4x faster than the 5-d layout).
    `causal_chunks` > 1 (only for a causal `mask` over S = T) splits the queries into that many static
    blocks, each against the keys up to its own end (with 4, 10/16 of the score matrix): the model's
    packed attention before the blockwise op, kept for side-by-side benchmarks."""
    b, t, n, h = q.shape
    if causal_chunks > 1 and t >= 2 * causal_chunks:
        bounds = [t * i // causal_chunks for i in range(causal_chunks + 1)]
        return jnp.concatenate(
            [
                attention(q[:, lo:hi], k[:, :hi], v[:, :hi], mask[:, lo:hi, :hi], scale)
                for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
            ],
            axis=1,
        )
    kv_heads, s = k.shape[2], k.shape[1]
    groups = n // kv_heads
    q = q.reshape(b, t, kv_heads, groups, h).transpose(0, 2, 3, 1, 4).reshape(b, kv_heads, groups * t, h)
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, K, S, H]
    scores = jnp.einsum("bkqh,bksh->bkqs", q, k, preferred_element_type=jnp.float32) * scale
    mask = jnp.broadcast_to(mask[:, None, None], (b, kv_heads, groups, t, s)).reshape(b, kv_heads, -1, s)
    scores = jnp.where(mask, scores, MASKED)
    probs = jax.nn.softmax(scores, axis=-1)
    probs = jnp.where(mask.any(axis=-1, keepdims=True), probs, 0.0).astype(v.dtype)
    out = jnp.einsum("bkqs,bksh->bkqh", probs, v)  # [B, K, G*T, H]
    return out.reshape(b, kv_heads, groups, t, h).transpose(0, 3, 1, 2, 4).reshape(b, t, n, h)
