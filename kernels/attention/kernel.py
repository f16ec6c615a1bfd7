"""Pallas attention kernels: JAX's splash attention on TPU, for packed rows in the natural layout.

Splash attention (`jax.experimental.pallas.ops.tpu.splash_attention`) is FlashAttention on TPU with a
block-sparse mask: its causal mask is static (block pairs above the diagonal are never visited), segment
ids are dynamic and checked per tile, and its MQA form runs the G query heads of one kv head against a
single K/V, so GQA never repeats K/V. Its backward is its own (dq and dkv kernels recomputing from the
saved log-sum-exp).

Mapping onto our rule (ops.py): causal on the row's positions, same segment id. Splash lets padding
(segment 0) see padding; our rule gives padding nothing to see. The difference is only in padding
outputs, which the op documents as unspecified-but-finite on this path (no real token sees padding
either way). The scale is applied to q before the kernel (splash applies none). The row is padded to a
multiple of 128 (splash's tile) with segment 0.

Verified without a TPU: the forward and backward lower through Mosaic for a TPU v5e / v5p on an abstract
device (tests/kernels/test_attention.py). Unverified: compiling with Mosaic's TPU passes, numerics on a
TPU, speed.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash

_TILE = 128  # splash's smallest block; rows are padded to a multiple of it
_BLOCK = 512  # splash tile when the row allows (the defaults of 128 underfill the MXU at long rows)


@functools.lru_cache(maxsize=32)
def _mqa_kernel(length: int, groups: int, interpret: bool):
    """The splash MQA kernel for one kv head's G query heads over a causal row of `length` (cached: mask
    processing is host numpy work per shape)."""
    block = _BLOCK if length % _BLOCK == 0 else _TILE
    sizes = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    mask = splash.MultiHeadMask([splash.CausalMask((length, length)) for _ in range(groups)])
    return splash.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret)


def splash_attention(q, k, v, segment_ids, scale: float, *, interpret: bool = False) -> jax.Array:
    """[B, T, N, H] attention of a packed row (causal, within segments) with splash attention."""
    b, t, n, h = q.shape
    kv_heads = k.shape[2]
    groups = n // kv_heads
    length = -(-t // _TILE) * _TILE
    pad = [(0, 0), (0, length - t), (0, 0), (0, 0)]
    q, k, v = (jnp.pad(x, pad) for x in (q * jnp.asarray(scale, q.dtype), k, v))
    segment_ids = jnp.pad(segment_ids, [(0, 0), (0, length - t)])
    q = q.reshape(b, length, kv_heads, groups, h).transpose(0, 2, 3, 1, 4)  # [B, K, G, T, H]
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, K, T, H]
    kernel = _mqa_kernel(length, groups, interpret)

    def one_row(q_row, k_row, v_row, seg):
        ids = splash.SegmentIds(q=seg, kv=seg)
        return jax.vmap(lambda qh, kh, vh: kernel(qh, kh, vh, segment_ids=ids))(q_row, k_row, v_row)

    out = jax.vmap(one_row)(q, k, v, segment_ids)  # [B, K, G, T, H]
    return out.transpose(0, 3, 1, 2, 4).reshape(b, length, n, h)[:, :t]
