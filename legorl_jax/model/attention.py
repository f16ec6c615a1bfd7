"""Grouped-query attention with per-head q/k RMSNorm and RoPE (HF `Qwen3Attention`), packed or cached.

Two ways to see keys:
- packed (`segment_ids` given): a token attends to earlier-or-equal tokens of its own row with the same
  segment id; segment 0 is padding and attends to nothing (output 0). Attention never crosses a segment
  boundary. This is the blockwise op `legorl_jax.kernels.attention` (FlashAttention-2's recurrence, fully
  masked block pairs skipped, memory linear in the row; splash attention on TPU), with each token's index
  in the row as its place for the causal rule (`index`, default 0..T-1; the context-parallel layout
  gives each device its own tokens' indices and the whole row's K/V, context_parallel.py).
- cached (`cache` given): the call's K/V are written into the cache (cache.py) at this layer's index
  first, then each token attends to its slot's entries at indices <= its position, reading only the
  first `context` entries when the call names one. A call of at least `BLOCKWISE_MIN_QUERIES` tokens (a
  prefill chunk) runs the same blockwise op against the cache (kv index = cache entry, q index = the
  token's position), so a long prompt's prefill never builds [chunk, context] scores; decode steps (a
  token or a few per row) keep the dense `attend`, whose scores are [T, context] and which is faster there.

Scores and softmax are float32 (HF eager casts the softmax to float32 too); masked scores take the
float32 minimum rather than -inf so a fully masked (padding) row stays finite.

Einsum legend: B batch, T query positions, S key positions, D model dim, N query heads, K kv heads,
G query heads per kv head (N = K * G), Q = G * T (a kv head's queries), H head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Bool, Float, Int

from legorl_jax.kernels.attention import attention as blockwise_attention
from legorl_jax.model import cache as kv
from legorl_jax.model import context_parallel
from legorl_jax.model.architecture import ArchConfig
from legorl_jax.model.layers import RMSNorm, apply_rope, normal_init, param, rope_for, zeros_init

_MASKED = float(np.finfo(np.float32).min)


def segment_mask(segment_ids: Int[Array, "b t"]) -> Bool[Array, "b t s"]:
    """Causal within a segment, nothing across segments, nothing for padding (segment 0) keys."""
    t = segment_ids.shape[1]
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    real = segment_ids[:, None, :] > 0
    return causal[None] & same & real


CAUSAL_CHUNKS = 4  # `attend(causal_chunks=)`'s default split of a causal mask's queries
BLOCKWISE_MIN_QUERIES = 64  # cached calls with this many tokens per row or more (prefill) go blockwise


def attend(
    q: Float[Array, "b t n h"],
    k: Float[Array, "b s k h"],
    v: Float[Array, "b s k h"],
    mask: Bool[Array, "b t s"],
    scale: float,
    *,
    causal_chunks: int = 1,
) -> Float[Array, "b t n h"]:
    """Softmax attention of grouped queries. The G query heads of a kv head join its T positions into one
    [G*T] axis (Q), so both matmuls are plain batched ones over (B, K) with contiguous operands: on XLA:CPU
    2.4x faster than contracting the 5-d [B, T, K, G, H] layout directly, with the same sums.

    `causal_chunks` > 1 (only for a causal `mask` over S = T, every query seeing only keys at or before it,
    as packed segments do) skips the scores above the diagonal: the queries go in that many static blocks,
    each against the keys up to its own end (with 4 blocks, 10/16 of the full score matrix). The keys a
    block skips are masked for all its queries anyway, so the result is the same up to the order of sums."""
    b, t, n, h = q.shape
    kv_heads, s = k.shape[2], k.shape[1]
    if causal_chunks > 1 and t >= 2 * causal_chunks:
        bounds = [t * i // causal_chunks for i in range(causal_chunks + 1)]
        return jnp.concatenate(
            [
                attend(q[:, lo:hi], k[:, :hi], v[:, :hi], mask[:, lo:hi, :hi], scale)
                for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
            ],
            axis=1,
        )
    groups = n // kv_heads
    q = q.reshape(b, t, kv_heads, groups, h).transpose(0, 2, 3, 1, 4).reshape(b, kv_heads, groups * t, h)
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, K, S, H]
    scores = jnp.einsum("bkqh,bksh->bkqs", q, k, preferred_element_type=jnp.float32) * scale
    mask = jnp.broadcast_to(mask[:, None, None], (b, kv_heads, groups, t, s))
    mask = mask.reshape(b, kv_heads, groups * t, s)
    scores = jnp.where(mask, scores, _MASKED)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkqs,bksh->bkqh", probs, v)  # [B, K, G*T, H]
    return out.reshape(b, kv_heads, groups, t, h).transpose(0, 3, 1, 2, 4).reshape(b, t, n, h)


class Attention(nnx.Module):
    """Self-attention of one decoder layer; weights stored head-split: q [D, N, H], o [N, H, D]."""

    def __init__(self, config: ArchConfig, *, dtype: jnp.dtype, rngs: nnx.Rngs):
        d, n, k, h = (
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        self.config = config
        self.q_proj = param(rngs, normal_init, (d, n, h), ("embed", "heads", "head_dim"), dtype)
        self.k_proj = param(rngs, normal_init, (d, k, h), ("embed", "kv_heads", "head_dim"), dtype)
        self.v_proj = param(rngs, normal_init, (d, k, h), ("embed", "kv_heads", "head_dim"), dtype)
        self.o_proj = param(rngs, normal_init, (n, h, d), ("heads", "head_dim", "embed"), dtype)
        if config.attention_bias:
            self.q_bias = param(rngs, zeros_init, (n, h), ("heads", "head_dim"), dtype)
            self.k_bias = param(rngs, zeros_init, (k, h), ("kv_heads", "head_dim"), dtype)
            self.v_bias = param(rngs, zeros_init, (k, h), ("kv_heads", "head_dim"), dtype)
            self.o_bias = param(rngs, zeros_init, (d,), ("embed",), dtype)
        self.q_norm = RMSNorm(h, config.rms_norm_eps, "head_dim", dtype=dtype, rngs=rngs)
        self.k_norm = RMSNorm(h, config.rms_norm_eps, "head_dim", dtype=dtype, rngs=rngs)

    def _project(self, x: jax.Array, name: str) -> jax.Array:
        out = jnp.einsum("btd,dnh->btnh", x, getattr(self, f"{name}_proj")[...].astype(x.dtype))
        if self.config.attention_bias:
            out = out + getattr(self, f"{name}_bias")[...].astype(x.dtype)
        return out

    def __call__(
        self,
        x: Float[Array, "b t d"],
        positions: Int[Array, "b t"],
        segment_ids: Int[Array, "b t"] | None,
        cache: kv.KVCache | None = None,
        layer: Int[Array, ""] | int | None = None,
        slots: Int[Array, " b"] | None = None,
        context: int | None = None,
    ) -> tuple[Float[Array, "b t d"], kv.KVCache | None]:
        """Packed attention, or (with `cache`, this decoder `layer`'s index and `slots`) cached attention."""
        inv_freq, attention_factor = rope_for(self.config)
        q = apply_rope(self.q_norm(self._project(x, "q")), positions, inv_freq, attention_factor)
        k = apply_rope(self.k_norm(self._project(x, "k")), positions, inv_freq, attention_factor)
        v = self._project(x, "v")
        scale = self.config.head_dim**-0.5
        if cache is None and context_parallel.shards(*x.shape[:2]) > 1:
            out = context_parallel.attention(q, k, v, segment_ids, scale)
        elif cache is None:
            out = blockwise_attention(q, k, v, q_segment_ids=segment_ids, scale=scale)
        else:
            cache = kv.write(cache, layer, k, v, positions, slots)
            context = cache.max_len if context is None else context
            keys, values = kv.read(cache, layer, slots, context)  # [B, C, K, H]
            keys, values = keys.astype(x.dtype), values.astype(x.dtype)
            if x.shape[1] >= BLOCKWISE_MIN_QUERIES:
                b = x.shape[0]
                out = blockwise_attention(
                    q,
                    keys,
                    values,
                    q_segment_ids=(positions >= 0).astype(jnp.int32),
                    kv_segment_ids=jnp.ones((b, context), jnp.int32),
                    q_index=positions,
                    kv_index=jnp.broadcast_to(jnp.arange(context, dtype=jnp.int32), (b, context)),
                    scale=scale,
                )
            else:
                out = attend(q, keys, values, kv.visible(positions, context), scale)
        out = jnp.einsum("btnh,nhd->btd", out, self.o_proj[...].astype(x.dtype))
        if self.config.attention_bias:
            out = out + self.o_bias[...].astype(x.dtype)
        return out, cache
