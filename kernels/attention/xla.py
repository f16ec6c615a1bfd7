"""Blockwise attention in plain XLA: FlashAttention-2's recurrence with loops over visible blocks only.

Layout inside: queries [B, K, G, T, H] (a kv head's G query heads side by side, so GQA never repeats K/V),
keys and values [B, K, S, H]. The row is cut into query blocks of `block_q` and key blocks of `block_k`
tokens (the last of each padded with segment 0, which sees and is seen by nothing).

Which pairs run: from each block's smallest / largest index and segment id (padding excluded) a
[num_q_blocks, num_k_blocks] table says whether the pair *can* hold a visible (query, key): a key block
whose first index lies after the query block's last, or whose segment range does not meet the query
block's, cannot. For every query block the loop runs only from its first to its last possible key block
(a `fori_loop` with traced bounds), and a `lax.cond` skips the impossible pairs in between (segment
boundaries). So above the causal diagonal nothing is computed at all, for any layout of the indices
(packed rows, chunked prefill against a cache, the load-balanced context-parallel layout). The table is
taken over the batch (a pair runs when any row needs it), so the `cond` never becomes a select.

Forward: per query block, running max m, running sum l and an unnormalised float32 accumulator, exactly
FlashAttention-2; the block's output is acc / l and its log-sum-exp m + log l is saved. A query that sees
no key (padding) gets output 0 and log-sum-exp +inf, so its probabilities are 0 in the backward too.

Backward: per key block, the query blocks that can see it; each pair recomputes its probabilities from
the saved log-sum-exp (p = exp(s - lse)), adds p^T dO to dV and dS^T Q to dK of the key block, and
dS K to dQ of the query block (dS = p (dP - rowsum(dO * O)), FlashAttention-2's D term). Nothing
[T, S]-sized is ever stored: the live temporaries are one [B, K, G*block_q, block_k] score tile and the
inputs' own size in float32 accumulators.

Scores, softmax statistics and accumulators are float32; matmul inputs keep the inputs' dtype (bf16 in
training) with float32 accumulation, as the dense path did.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from legorl_jax.validate import positive_int

MASKED = float(np.finfo(np.float32).min)
_BIG = int(np.iinfo(np.int32).max)


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Query and key tokens per block. A row shorter than a block is one block (no padding)."""

    block_q: int = 512
    block_k: int = 512

    def __post_init__(self):
        positive_int("block_q", self.block_q)
        positive_int("block_k", self.block_k)

    @classmethod
    def for_platform(cls, platform: str, length: int) -> BlockSizes:
        """The default for a row of `length` tokens. XLA:CPU: 128 up to 4,096 tokens, 256 beyond. The tiny
        MoE's whole log-prob gradient step at 1,024 tokens (7 alternated rounds, load 20-100 on this 2-core
        box, so rough): 128 blocks 0.53x the dense step's time, 256 1.05x; the attention gradient alone at
        4,096: 128 and 256 tie, 512 1.5x slower; longer rows take 256 to keep the loop's step count (and
        its per-step overhead) down. Accelerators: 512 (fewer, larger matmuls per step; unmeasured)."""
        if platform != "cpu":
            return cls()
        return cls(128, 128) if length <= 4096 else cls(256, 256)


def _ceil_to(n: int, block: int) -> int:
    return -(-n // block) * block


def _pad_tokens(x: jax.Array, length: int, value=0) -> jax.Array:
    """Pads axis 1 (tokens) to `length`."""
    extra = length - x.shape[1]
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[1] = (0, extra)
    return jnp.pad(x, widths, constant_values=value)


def _block_stats(segments: jax.Array, index: jax.Array, block: int):
    """Per block of each row: smallest and largest index, smallest and largest segment, padding excluded
    (a block of padding only gets an empty range: lo > hi)."""
    b, n = segments.shape
    seg = segments.reshape(b, n // block, block)
    idx = index.reshape(b, n // block, block)
    real = seg > 0
    return (
        jnp.where(real, idx, _BIG).min(-1),
        jnp.where(real, idx, -_BIG).max(-1),
        jnp.where(real, seg, _BIG).min(-1),
        jnp.where(real, seg, 0).max(-1),
    )


def block_visibility(q_seg, kv_seg, q_idx, kv_idx, block_q: int, block_k: int) -> jax.Array:
    """[num_q_blocks, num_k_blocks]: True where some row may have a visible (query, key) in the pair."""
    _, q_idx_max, q_seg_lo, q_seg_hi = (a[:, :, None] for a in _block_stats(q_seg, q_idx, block_q))
    k_idx_min, _, k_seg_lo, k_seg_hi = (a[:, None, :] for a in _block_stats(kv_seg, kv_idx, block_k))
    pairs = (k_idx_min <= q_idx_max) & (k_seg_lo <= q_seg_hi) & (q_seg_lo <= k_seg_hi)
    return pairs.any(axis=0)


def visible_ranges(visible: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per row of `visible`: the first True column and one past the last (0, 0 when none)."""
    cols = jnp.arange(visible.shape[1], dtype=jnp.int32)
    lo = jnp.where(visible, cols, visible.shape[1]).min(axis=1)
    hi = jnp.where(visible, cols + 1, 0).max(axis=1)
    return jnp.minimum(lo, hi), hi


def _tile_mask(q_seg, q_idx, kv_seg, kv_idx, groups: int) -> jax.Array:
    """[B, 1, G*bq, bk]: the masking rule on one (query block, key block) pair, repeated for the G heads."""
    mask = (
        (q_seg[:, :, None] == kv_seg[:, None, :])
        & (kv_seg[:, None, :] > 0)
        & (kv_idx[:, None, :] <= q_idx[:, :, None])
    )
    b, bq, bk = mask.shape
    return jnp.broadcast_to(mask[:, None], (b, groups, bq, bk)).reshape(b, 1, groups * bq, bk)


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """The padded, transposed operands both passes share."""

    q: jax.Array  # [B, K, G, Tp, H]
    k: jax.Array  # [B, K, Sp, H]
    v: jax.Array  # [B, K, Sp, H]
    q_seg: jax.Array  # [B, Tp]
    kv_seg: jax.Array  # [B, Sp]
    q_idx: jax.Array
    kv_idx: jax.Array
    block_q: int
    block_k: int


def _prepare(q, k, v, q_seg, kv_seg, q_idx, kv_idx, sizes: BlockSizes) -> _Prepared:
    b, t, n, h = q.shape
    s, kv_heads = k.shape[1], k.shape[2]
    bq, bk = min(sizes.block_q, t), min(sizes.block_k, s)
    tp, sp = _ceil_to(t, bq), _ceil_to(s, bk)
    q = _pad_tokens(q, tp).reshape(b, tp, kv_heads, n // kv_heads, h).transpose(0, 2, 3, 1, 4)
    return _Prepared(
        q=q,
        k=_pad_tokens(k, sp).transpose(0, 2, 1, 3),
        v=_pad_tokens(v, sp).transpose(0, 2, 1, 3),
        q_seg=_pad_tokens(q_seg, tp),
        kv_seg=_pad_tokens(kv_seg, sp),
        q_idx=_pad_tokens(q_idx, tp),
        kv_idx=_pad_tokens(kv_idx, sp),
        block_q=bq,
        block_k=bk,
    )


def _q_tile(x: jax.Array, i, block: int) -> jax.Array:
    """Query block i of a [B, K, G, Tp, ...] array, as [B, K, G*block, ...]."""
    tile = lax.dynamic_slice_in_dim(x, i * block, block, axis=3)
    return tile.reshape(tile.shape[:2] + (-1,) + tile.shape[4:])


def forward(q, k, v, q_seg, kv_seg, q_idx, kv_idx, *, scale: float, sizes: BlockSizes):
    """Attention output [B, T, N, H] (q's dtype) and the log-sum-exp [B, K, G, Tp] (float32, padded)."""
    b, t, n, h = q.shape
    p = _prepare(q, k, v, q_seg, kv_seg, q_idx, kv_idx, sizes)
    kv_heads, groups, tp = p.q.shape[1], p.q.shape[2], p.q.shape[3]
    bq, bk = p.block_q, p.block_k
    visible = block_visibility(p.q_seg, p.kv_seg, p.q_idx, p.kv_idx, bq, bk)
    lo, hi = visible_ranges(visible)

    def query_block(i):
        qb = _q_tile(p.q, i, bq)  # [B, K, G*bq, H]
        qs = lax.dynamic_slice_in_dim(p.q_seg, i * bq, bq, axis=1)
        qi = lax.dynamic_slice_in_dim(p.q_idx, i * bq, bq, axis=1)

        def pair(j, carry):
            m, total, acc = carry
            kb = lax.dynamic_slice_in_dim(p.k, j * bk, bk, axis=2)
            vb = lax.dynamic_slice_in_dim(p.v, j * bk, bk, axis=2)
            ks = lax.dynamic_slice_in_dim(p.kv_seg, j * bk, bk, axis=1)
            ki = lax.dynamic_slice_in_dim(p.kv_idx, j * bk, bk, axis=1)
            mask = _tile_mask(qs, qi, ks, ki, groups)
            scores = jnp.einsum("bkqh,bksh->bkqs", qb, kb, preferred_element_type=jnp.float32) * scale
            scores = jnp.where(mask, scores, MASKED)
            m_new = jnp.maximum(m, scores.max(axis=-1))
            probs = jnp.where(mask, jnp.exp(scores - m_new[..., None]), 0.0)
            correction = jnp.exp(m - m_new)
            total = total * correction + probs.sum(axis=-1)
            update = jnp.einsum(
                "bkqs,bksh->bkqh", probs.astype(vb.dtype), vb, preferred_element_type=jnp.float32
            )
            return m_new, total, acc * correction[..., None] + update

        def maybe_pair(j, carry):
            return lax.cond(visible[i, j], lambda c: pair(j, c), lambda c: c, carry)

        rows = (b, kv_heads, groups * bq)
        init = (jnp.full(rows, MASKED, jnp.float32), jnp.zeros(rows, jnp.float32), jnp.zeros(rows + (h,)))
        m, total, acc = lax.fori_loop(lo[i], hi[i], maybe_pair, init)
        seen = total > 0
        total = jnp.where(seen, total, 1.0)
        out = acc / total[..., None]
        lse = jnp.where(seen, m + jnp.log(total), jnp.inf)
        return out.astype(q.dtype), lse

    outs, lses = lax.map(query_block, jnp.arange(tp // bq))  # [nq, B, K, G*bq, (H)]
    nq = tp // bq
    out = outs.reshape(nq, b, kv_heads, groups, bq, h).transpose(1, 0, 4, 2, 3, 5).reshape(b, tp, n, h)
    lse = lses.reshape(nq, b, kv_heads, groups, bq).transpose(1, 2, 3, 0, 4).reshape(b, kv_heads, groups, tp)
    return out[:, :t], lse


def backward(q, k, v, q_seg, kv_seg, q_idx, kv_idx, out, lse, d_out, *, scale: float, sizes: BlockSizes):
    """dQ, dK, dV (the inputs' dtypes) from the saved output and log-sum-exp, block pair by block pair."""
    b, t, n, h = q.shape
    s = k.shape[1]
    p = _prepare(q, k, v, q_seg, kv_seg, q_idx, kv_idx, sizes)
    kv_heads, groups, tp = p.q.shape[1], p.q.shape[2], p.q.shape[3]
    sp = p.k.shape[2]
    bq, bk = p.block_q, p.block_k
    to_blocks = lambda x: x.reshape(b, tp, kv_heads, groups, h).transpose(0, 2, 3, 1, 4)  # noqa: E731
    d_out_t = to_blocks(_pad_tokens(d_out, tp))
    delta = (d_out_t.astype(jnp.float32) * to_blocks(_pad_tokens(out, tp)).astype(jnp.float32)).sum(-1)
    visible = block_visibility(p.q_seg, p.kv_seg, p.q_idx, p.kv_idx, bq, bk)
    lo, hi = visible_ranges(visible.T)

    def key_block(d_q, j):
        kb = lax.dynamic_slice_in_dim(p.k, j * bk, bk, axis=2)  # [B, K, bk, H]
        vb = lax.dynamic_slice_in_dim(p.v, j * bk, bk, axis=2)
        ks = lax.dynamic_slice_in_dim(p.kv_seg, j * bk, bk, axis=1)
        ki = lax.dynamic_slice_in_dim(p.kv_idx, j * bk, bk, axis=1)

        def pair(i, d_k, d_v):
            qb, dob = _q_tile(p.q, i, bq), _q_tile(d_out_t, i, bq)  # [B, K, G*bq, H]
            lse_b, delta_b = _q_tile(lse, i, bq), _q_tile(delta, i, bq)  # [B, K, G*bq]
            qs = lax.dynamic_slice_in_dim(p.q_seg, i * bq, bq, axis=1)
            qi = lax.dynamic_slice_in_dim(p.q_idx, i * bq, bq, axis=1)
            mask = _tile_mask(qs, qi, ks, ki, groups)
            scores = jnp.einsum("bkqh,bksh->bkqs", qb, kb, preferred_element_type=jnp.float32) * scale
            probs = jnp.exp(jnp.where(mask, scores - lse_b[..., None], -jnp.inf))
            d_v = d_v + jnp.einsum(
                "bkqs,bkqh->bksh", probs.astype(vb.dtype), dob, preferred_element_type=jnp.float32
            )
            d_probs = jnp.einsum("bkqh,bksh->bkqs", dob, vb, preferred_element_type=jnp.float32)
            d_scores = (probs * (d_probs - delta_b[..., None]) * scale).astype(qb.dtype)
            d_k = d_k + jnp.einsum("bkqs,bkqh->bksh", d_scores, qb, preferred_element_type=jnp.float32)
            d_qb = jnp.einsum("bkqs,bksh->bkqh", d_scores, kb, preferred_element_type=jnp.float32)
            return d_qb, d_k, d_v

        def skip(i, d_k, d_v):
            return jnp.zeros((b, kv_heads, groups * bq, h), jnp.float32), d_k, d_v

        def maybe_pair(i, carry):
            d_q, d_k, d_v = carry
            d_qb, d_k, d_v = lax.cond(visible[i, j], pair, skip, i, d_k, d_v)
            d_qb = d_qb.reshape(b, kv_heads, groups, bq, h)
            current = lax.dynamic_slice_in_dim(d_q, i * bq, bq, axis=3)
            return lax.dynamic_update_slice_in_dim(d_q, current + d_qb, i * bq, axis=3), d_k, d_v

        zeros = jnp.zeros((b, kv_heads, bk, h), jnp.float32)
        d_q, d_k, d_v = lax.fori_loop(lo[j], hi[j], maybe_pair, (d_q, zeros, zeros))
        return d_q, (d_k, d_v)

    d_q0 = jnp.zeros((b, kv_heads, groups, tp, h), jnp.float32)
    d_q, (d_ks, d_vs) = lax.scan(key_block, d_q0, jnp.arange(sp // bk))  # d_ks [nk, B, K, bk, H]
    d_q = d_q.transpose(0, 3, 1, 2, 4).reshape(b, tp, n, h)[:, :t]
    from_blocks = lambda x: x.transpose(1, 0, 3, 2, 4).reshape(b, sp, kv_heads, h)[:, :s]  # noqa: E731
    return d_q.astype(q.dtype), from_blocks(d_ks).astype(k.dtype), from_blocks(d_vs).astype(v.dtype)
