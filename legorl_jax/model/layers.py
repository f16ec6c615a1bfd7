"""The building blocks every decoder layer shares: the parameter helper, RMSNorm, RoPE, the SwiGLU MLP.

`param` is the only place a parameter is created (docs/style.md rule 9): it checks the logical axis names
against `sharding.LOGICAL_AXES` and stores them in the NNX variable metadata key `out_sharding`, with
eager sharding off (placement is `sharding.place_on_mesh`'s job, so building a model needs no mesh).

Numerics follow HF Qwen3 exactly where it matters for parity:
- RMSNorm normalises in float32 and multiplies the weight after casting back to the input dtype.
- RoPE: `inv_freq` is computed in float32 as HF's `_compute_default_rope_parameters`, the linear
  variant divides it by `factor`, YaRN follows `_compute_yarn_parameters` (transformers 5.24) including
  its attention factor, which scales cos and sin. Rotation is the "rotate half" (non-interleaved) form;
  cos/sin are computed in float32 and cast to the activation dtype, as HF does.

Einsum legend: B batch, T positions, D model dim, F mlp hidden.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from legorl_jax.model.architecture import ArchConfig, RopeScaling
from legorl_jax.model.sharding import LOGICAL_AXES

Initializer = Callable[[jax.Array, tuple[int, ...], jnp.dtype], jax.Array]

# HF's `initializer_range` default for Qwen3; random init exists for tests and benchmarks only.
INIT_STD = 0.02


def normal_init(key: jax.Array, shape: tuple[int, ...], dtype: jnp.dtype) -> jax.Array:
    return (INIT_STD * jax.random.normal(key, shape, jnp.float32)).astype(dtype)


def ones_init(key: jax.Array, shape: tuple[int, ...], dtype: jnp.dtype) -> jax.Array:
    del key
    return jnp.ones(shape, dtype)


def zeros_init(key: jax.Array, shape: tuple[int, ...], dtype: jnp.dtype) -> jax.Array:
    del key
    return jnp.zeros(shape, dtype)


def param(
    rngs: nnx.Rngs,
    init: Initializer,
    shape: Sequence[int],
    axes: Sequence[str | None],
    dtype: jnp.dtype,
) -> nnx.Param:
    """A parameter of `shape` whose dimensions are named by the logical `axes` (None = replicated)."""
    shape, axes = tuple(int(s) for s in shape), tuple(axes)
    if len(shape) != len(axes):
        raise ValueError(f"parameter of shape {shape} needs one logical axis per dimension, got {axes}")
    for axis in axes:
        if axis is not None and axis not in LOGICAL_AXES:
            raise ValueError(f"logical axis {axis!r} is not in the vocabulary {LOGICAL_AXES}")
    return nnx.Param(init(rngs.params(), shape, dtype), out_sharding=axes, eager_sharding=False)


class RMSNorm(nnx.Module):
    """Root-mean-square norm over the last dimension (HF `Qwen3RMSNorm`)."""

    def __init__(self, dim: int, eps: float, axis: str, *, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.eps = eps
        self.weight = param(rngs, ones_init, (dim,), (axis,), dtype)

    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        x32 = x.astype(jnp.float32)
        variance = jnp.mean(x32 * x32, axis=-1, keepdims=True)
        normed = (x32 * jax.lax.rsqrt(variance + self.eps)).astype(x.dtype)
        return self.weight[...].astype(x.dtype) * normed


@functools.lru_cache(maxsize=64)
def rope_frequencies(
    head_dim: int, rope_theta: float, rope_scaling: RopeScaling | None, max_position_embeddings: int
) -> tuple[np.ndarray, float]:
    """(inv_freq float32[head_dim / 2], attention_factor) as HF computes them for this RoPE variant."""
    dim = head_dim
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    pos_freqs = np.float32(rope_theta) ** exponents
    inv_freq = (np.float32(1.0) / pos_freqs).astype(np.float32)
    if rope_scaling is None:
        return inv_freq, 1.0
    if rope_scaling.rope_type == "linear":
        return (inv_freq / np.float32(rope_scaling.factor)).astype(np.float32), 1.0
    return _yarn(dim, rope_theta, rope_scaling, max_position_embeddings, pos_freqs)


def _yarn(
    dim: int, base: float, scaling: RopeScaling, max_position_embeddings: int, pos_freqs: np.ndarray
) -> tuple[np.ndarray, float]:
    """HF `_compute_yarn_parameters`: blend interpolated / extrapolated frequencies over a linear ramp."""
    factor = scaling.factor
    original = scaling.original_max_position_embeddings or max_position_embeddings

    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = scaling.attention_factor
    if attention_factor is None:
        if scaling.mscale and scaling.mscale_all_dim:
            attention_factor = float(
                get_mscale(factor, scaling.mscale) / get_mscale(factor, scaling.mscale_all_dim)
            )
        else:
            attention_factor = get_mscale(factor)
    beta_fast = scaling.beta_fast or 32
    beta_slow = scaling.beta_slow or 1

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.truncate is None or scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1)
    extrapolation_factor = (np.float32(1.0) - ramp).astype(np.float32)
    inv_extrapolation = np.float32(1.0) / pos_freqs
    inv_interpolation = np.float32(1.0) / (np.float32(factor) * pos_freqs)
    inv_freq = (
        inv_interpolation * (np.float32(1.0) - extrapolation_factor)
        + inv_extrapolation * extrapolation_factor
    )
    return inv_freq.astype(np.float32), float(attention_factor)


def rope_for(config: ArchConfig) -> tuple[np.ndarray, float]:
    return rope_frequencies(
        config.head_dim, config.rope_theta, config.rope_scaling, config.max_position_embeddings
    )


def apply_rope(
    x: Float[Array, "b t n h"], positions: Int[Array, "b t"], inv_freq: np.ndarray, attention_factor: float
) -> Float[Array, "b t n h"]:
    """Rotates query/key heads `x` by their `positions` (rotate-half form)."""
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)[None, None, :]  # [B, T, H/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)  # [B, T, H]
    cos = (jnp.cos(emb) * attention_factor).astype(x.dtype)[:, :, None, :]
    sin = (jnp.sin(emb) * attention_factor).astype(x.dtype)[:, :, None, :]
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


class DenseMLP(nnx.Module):
    """SwiGLU MLP: down(silu(gate(x)) * up(x)) (HF `Qwen3MLP`)."""

    def __init__(self, hidden: int, intermediate: int, *, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.gate_proj = param(rngs, normal_init, (hidden, intermediate), ("embed", "mlp"), dtype)
        self.up_proj = param(rngs, normal_init, (hidden, intermediate), ("embed", "mlp"), dtype)
        self.down_proj = param(rngs, normal_init, (intermediate, hidden), ("mlp", "embed"), dtype)

    def __call__(self, x: Float[Array, "b t d"]) -> Float[Array, "b t d"]:
        dtype = x.dtype
        gate = jnp.einsum("btd,df->btf", x, self.gate_proj[...].astype(dtype))
        up = jnp.einsum("btd,df->btf", x, self.up_proj[...].astype(dtype))
        return jnp.einsum("btf,fd->btd", jax.nn.silu(gate) * up, self.down_proj[...].astype(dtype))
