"""Grouped-query attention with per-head q/k RMSNorm and RoPE (HF `Qwen3Attention`), packed or cached.

Two ways to see keys:
- packed (`segment_ids` given): a token attends to earlier-or-equal tokens of its own row with the same
  segment id; segment 0 is padding and attends to nothing useful (its outputs are finite and unspecified).
  Attention never crosses a segment boundary.
- cached (`cache` given): the call's K/V are written into the cache (cache.py) at this layer's index
  first, then each token attends to its slot's entries at indices <= its position, reading only the
  first `context` entries when the call names one.

Scores and softmax are float32 (HF eager casts the softmax to float32 too); masked scores take the
float32 minimum rather than -inf so a fully masked (padding) row stays finite.

Einsum legend: B batch, T query positions, S key positions, D model dim, N query heads, K kv heads,
G query heads per kv head (N = K * G), H head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Bool, Float, Int

from legorl_jax.model import cache as kv
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


def attend(
    q: Float[Array, "b t n h"],
    k: Float[Array, "b s k h"],
    v: Float[Array, "b s k h"],
    mask: Bool[Array, "b t s"],
    scale: float,
) -> Float[Array, "b t n h"]:
    b, t, n, h = q.shape
    groups = n // k.shape[2]
    q = q.reshape(b, t, k.shape[2], groups, h)
    scores = jnp.einsum("btkgh,bskh->bkgts", q, k, preferred_element_type=jnp.float32) * scale
    scores = jnp.where(mask[:, None, None, :, :], scores, _MASKED)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskh->btkgh", probs, v)
    return out.reshape(b, t, n, h)


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
        if cache is None:
            keys, values, mask = k, v, segment_mask(segment_ids)
        else:
            cache = kv.write(cache, layer, k, v, positions, slots)
            context = cache.max_len if context is None else context
            keys, values = kv.read(cache, layer, slots, context)  # [B, C, K, H]
            keys, values = keys.astype(x.dtype), values.astype(x.dtype)
            mask = kv.visible(positions, context)
        out = attend(q, keys, values, mask, self.config.head_dim**-0.5)
        out = jnp.einsum("btnh,nhd->btd", out, self.o_proj[...].astype(x.dtype))
        if self.config.attention_bias:
            out = out + self.o_bias[...].astype(x.dtype)
        return out, cache
