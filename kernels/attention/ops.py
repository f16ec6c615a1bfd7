"""Public entry point of packed attention: `attention`, validated and differentiable.

    out[b, t] = softmax_s(q[b, t] . k[b, s] * scale over the visible s) @ v[b, s]

Visibility (one rule for every caller): key s is visible to query t iff both carry the same segment id,
that id is not 0 (padding), and kv_index[s] <= q_index[t]. The indices are the tokens' places in the
packed row (not their RoPE positions), so the same rule serves a packed training row (index = arange), a
prefill chunk against a KV cache (kv_index = cache slots, q_index = the chunk's positions) and the
load-balanced context-parallel layout (each device's tokens keep their index in the whole row). A query
that sees no key (padding) gets output 0 and no gradient.

GQA: q has N heads, k and v have K heads with K dividing N; query head n reads kv head n // (N / K),
as HF's `repeat_kv`, without repeating K/V.

Implementations:
  "xla"        `xla.py`: the blockwise FlashAttention-2 recurrence in plain XLA, fully masked block pairs
               skipped (never computed), backward recomputing blocks from the saved log-sum-exp
               (`custom_vjp`). Runs on every backend; the [T, S] scores and mask never exist.
  "splash"     `kernel.py`: Pallas splash attention (TPU), segment ids + causal + GQA. Only for the
               natural layout (q_index and kv_index absent: every row's index is its position), since its
               causal mask is static.
  "reference"  `reference.py`: dense mask and softmax, autodiff gradients; the test oracle. For the
               natural layout it skips the score blocks above the diagonal in 4 static query chunks,
               as the model's packed attention did before this op (benchmarks compare the two).
  "pallas"     `pallas_gpu.py`: our Pallas (Triton) FlashAttention-2 kernels for the GPU, natural layout
               only (its causal bound is the row's positions): forward, dq and dkv, loops bounded to the
               key / query blocks that can be visible. `jax.nn.dot_product_attention(implementation=
               "cudnn")` takes no segment ids (only a dense [T, S] mask), so the GPU runs this instead.
               Off a GPU it runs in the Pallas interpreter (tests only: slow).
  "auto"       "splash" on TPU and "pallas" on GPU for the natural layout (S == T, no indices), else "xla"
               (arbitrary index orders: context parallelism's layout, prefill against a cache); inside
               `default_impl(name)` the named one (what benchmarks use to run a whole model on the dense
               path side by side).

Checks at the entry raise ValueError / TypeError naming the received value: ranks, shapes, head counts
that do not group, dtypes, unknown impl, a non-positive scale.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from legorl_jax.kernels.attention import kernel, pallas_gpu, reference, xla

IMPLS = ("auto", "xla", "splash", "pallas", "reference")
_FLOAT_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)


_DEFAULT_IMPL: contextvars.ContextVar[str | None] = contextvars.ContextVar("attention_impl", default=None)
REFERENCE_CAUSAL_CHUNKS = 4


@contextlib.contextmanager
def default_impl(impl: str) -> Iterator[None]:
    """Inside the block (read while tracing), impl="auto" means `impl`."""
    if impl not in IMPLS or impl == "auto":
        raise ValueError(f"default_impl takes one of {IMPLS[1:]}, got {impl!r}")
    token = _DEFAULT_IMPL.set(impl)
    try:
        yield
    finally:
        _DEFAULT_IMPL.reset(token)


@dataclasses.dataclass(frozen=True)
class _Plan:
    scale: float
    sizes: xla.BlockSizes


def attention(
    q: Float[Array, "b t n h"],
    k: Float[Array, "b s k h"],
    v: Float[Array, "b s k h"],
    *,
    q_segment_ids: Int[Array, "b t"],
    kv_segment_ids: Int[Array, "b s"] | None = None,
    q_index: Int[Array, "b t"] | None = None,
    kv_index: Int[Array, "b s"] | None = None,
    scale: float,
    block_sizes: xla.BlockSizes | pallas_gpu.BlockSizes | None = None,
    impl: str = "auto",
) -> Float[Array, "b t n h"]:
    """Packed-row attention under the visibility rule above; [B, T, N, H] in q's dtype.

    `kv_segment_ids` defaults to `q_segment_ids` (self-attention over the row, S = T); `q_index` and
    `kv_index` default to each row's positions 0..T-1 / 0..S-1. `block_sizes`: an `xla.BlockSizes` for
    impl="xla" (default `xla.BlockSizes.for_platform(backend, max(T, S))`) or a `pallas_gpu.BlockSizes`
    for impl="pallas" (default `pallas_gpu.BlockSizes()`).
    """
    q, k, v = _check_qkv(q, k, v)
    b, t = q.shape[:2]
    s = k.shape[1]
    natural = q_index is None and kv_index is None
    if kv_segment_ids is None:
        kv_segment_ids = q_segment_ids
    q_segment_ids = _check_ids("q_segment_ids", q_segment_ids, (b, t))
    kv_segment_ids = _check_ids("kv_segment_ids", kv_segment_ids, (b, s))
    q_index = _default_index(q_index, "q_index", b, t)
    kv_index = _default_index(kv_index, "kv_index", b, s)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (0 < scale < math.inf):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        impl = _DEFAULT_IMPL.get() or impl
    if impl == "auto":
        fused = {"tpu": "splash", "gpu": "pallas"}.get(jax.default_backend(), "xla")
        impl = fused if natural and s == t else "xla"
    expected = {"xla": xla.BlockSizes, "pallas": pallas_gpu.BlockSizes}.get(impl)
    if block_sizes is not None and expected is None:
        raise ValueError(f"block_sizes applies to impl='xla' or 'pallas', got {block_sizes=} with {impl=}")
    if block_sizes is not None and expected is not None and not isinstance(block_sizes, expected):
        raise TypeError(
            f"impl={impl!r} takes block_sizes as a {expected.__module__}.{expected.__name__}, "
            f"got {type(block_sizes).__name__}"
        )
    if impl == "reference":
        mask = reference.visibility(q_segment_ids, kv_segment_ids, q_index, kv_index)
        chunks = REFERENCE_CAUSAL_CHUNKS if natural and s == t else 1
        return reference.attention(q, k, v, mask, float(scale), causal_chunks=chunks)
    if impl in ("splash", "pallas") and (not natural or s != t):
        raise ValueError(
            f"impl={impl!r} needs the natural layout (no q_index / kv_index, S == T), got "
            f"q_index={'given' if q_index is not None else None}, S={s}, T={t}"
        )
    if impl == "splash":
        return kernel.splash_attention(q, k, v, q_segment_ids, float(scale))
    if impl == "pallas":
        assert block_sizes is None or isinstance(block_sizes, pallas_gpu.BlockSizes)
        interpret = jax.default_backend() != "gpu"
        return pallas_gpu.pallas_attention(
            q, k, v, q_segment_ids, kv_segment_ids, float(scale), block_sizes=block_sizes, interpret=interpret
        )
    assert block_sizes is None or isinstance(block_sizes, xla.BlockSizes)
    plan = _Plan(
        scale=float(scale), sizes=block_sizes or xla.BlockSizes.for_platform(jax.default_backend(), max(t, s))
    )
    return _blockwise(q, k, v, q_segment_ids, kv_segment_ids, q_index, kv_index, plan)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def _blockwise(q, k, v, q_seg, kv_seg, q_idx, kv_idx, plan: _Plan):
    return xla.forward(q, k, v, q_seg, kv_seg, q_idx, kv_idx, scale=plan.scale, sizes=plan.sizes)[0]


def _blockwise_fwd(q, k, v, q_seg, kv_seg, q_idx, kv_idx, plan: _Plan):
    out, lse = xla.forward(q, k, v, q_seg, kv_seg, q_idx, kv_idx, scale=plan.scale, sizes=plan.sizes)
    return out, (q, k, v, q_seg, kv_seg, q_idx, kv_idx, out, lse)


def _blockwise_bwd(plan: _Plan, residuals, d_out):
    q, k, v, q_seg, kv_seg, q_idx, kv_idx, out, lse = residuals
    d_q, d_k, d_v = xla.backward(
        q, k, v, q_seg, kv_seg, q_idx, kv_idx, out, lse, d_out, scale=plan.scale, sizes=plan.sizes
    )
    return d_q, d_k, d_v, None, None, None, None


_blockwise.defvjp(_blockwise_fwd, _blockwise_bwd)


def _check_qkv(q, k, v) -> tuple[jax.Array, jax.Array, jax.Array]:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, jax.Array):
            raise TypeError(f"{name} must be a jax array, got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"{name} must be [B, T, heads, H], got {name}.shape={tuple(x.shape)}")
        if x.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"{name} must be float32, bfloat16 or float16, got {name}.dtype={x.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {k.shape=} and {v.shape=}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k disagree on batch or head dim: {q.shape=}, {k.shape=}")
    if 0 in q.shape or 0 in k.shape:
        raise ValueError(f"every dimension must be positive, got {q.shape=}, {k.shape=}")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"query heads {q.shape[2]} are not a multiple of kv heads {k.shape[2]}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    return q, k, v


def _check_ids(name: str, x, shape: tuple[int, int]) -> jax.Array:
    x = jnp.asarray(x)
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{name} must be integers, got dtype {x.dtype}")
    return x.astype(jnp.int32)


def _default_index(x, name: str, b: int, n: int) -> jax.Array:
    if x is None:
        return jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (b, n))
    return _check_ids(name, x, (b, n))
