"""Packed attention as Pallas (Triton) kernels for the GPU, natural-order rows: FlashAttention-2.

Why our own kernel: `jax.nn.dot_product_attention(implementation="cudnn")` takes no segment ids (only a
dense mask, which is the [T, T] array this op exists to avoid), so the GPU gets this Pallas kernel and
packed rows keep segment ids, causality and GQA without a [T, T] anything.

Layout: q, dO, out [B, N, Tp, H]; k, v [B, K, Sp, H] (Tp = Sp: rows padded with segment 0 to a multiple
of both blocks; H padded with zeros to a power of two, which changes no score and no output column that
is kept). Query head n reads kv head n // G (GQA by index, K/V never repeated).

Which key blocks run: the rows are in natural order (index = position), so query block i can see no key
block at or past ceil((i + 1) * block_q / block_k) (the causal bound); the segment table of `xla.py`
(`block_visibility`, taken over the batch) gives the first key block that shares a segment with the
query block and the last one. Each program loops over exactly that range (`fori_loop` with traced
bounds): blocks above the diagonal and before the query block's first segment are never computed.

Forward (grid B x N x query blocks): running max m, sum l and a float32 accumulator over the key blocks;
out = acc / l, and the log-sum-exp m + log l is saved (+inf for a query that sees nothing: padding,
whose output is 0).

Backward, FlashAttention-2's two kernels recomputing p = exp(s * scale - lse) per pair from the saved
log-sum-exp, with D = rowsum(dO * O) computed once in XLA:
  dq   grid B x N x query blocks, loop over the same key range as the forward: dq += dS k.
  dkv  grid B x K x key blocks, loop over the G query heads of the kv head and over the query blocks
       that can see the key block: dv += p^T dO, dk += dS^T q (dS = p (dO v^T - D) * scale).
Every program writes only its own block, so grid steps never race (Triton runs them concurrently).

Scores, statistics and accumulators are float32; matmul inputs keep the inputs' dtype (bf16 in training),
float32 inputs are multiplied at HIGHEST precision (no tf32), as the log-prob kernels do.

Arbitrary index orders (context parallelism's load-balanced layout, prefill against a cache) are not this
kernel's: ops.py sends them to the blockwise XLA path, as it does for splash on TPU.

Verified without a GPU: numerics in the Pallas interpreter on CPU against the dense oracle, and that
the three kernels lower through Pallas' Triton lowering for an H200 on an abstract device
(tests/kernels/test_attention_ops.py). Unverified here: compiling with Triton, numerics and speed on a
GPU (the `gpu`-marked tests and tools/device_check.sh do that on a machine with one).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from legorl_jax.kernels.attention import xla
from legorl_jax.kernels.logprobs.reference import matmul_precision
from legorl_jax.validate import is_int, positive_int

# Triton's tl.dot needs every matmul dimension >= 16; tile sides are powers of two (tl.arange).
_MIN_GPU_BLOCK = 16
_MASKED = xla.MASKED


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile shape and Triton knobs of the Pallas GPU attention kernels."""

    block_q: int = 64
    """Query tokens per program (forward, dq) and per inner step (dkv)."""
    block_k: int = 64
    """Key tokens per inner step (forward, dq) and per program (dkv)."""
    num_warps: int = 4
    """Triton only: warps per program."""
    num_stages: int = 2
    """Triton only: software-pipelining depth of the key / query loops."""

    def __post_init__(self) -> None:
        for name in ("num_warps", "num_stages"):
            positive_int(f"BlockSizes.{name}", getattr(self, name))
        for name in ("block_q", "block_k"):
            value = getattr(self, name)
            if not is_int(value) or value < 1 or value & (value - 1):
                raise ValueError(f"BlockSizes.{name} must be a positive power of two, got {value!r}")

    def check(self, *, compiled_for_gpu: bool) -> None:
        """Raises ValueError if these blocks cannot be compiled by Triton (interpreted, any power of two
        runs)."""
        if not compiled_for_gpu:
            return
        small = {k: getattr(self, k) for k in ("block_q", "block_k") if getattr(self, k) < _MIN_GPU_BLOCK}
        if small:
            raise ValueError(f"Triton matmuls need tiles of at least {_MIN_GPU_BLOCK}, got {small}")


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def _head_dim(h: int, compiled_for_gpu: bool) -> int:
    """H padded to a power of two (Triton's tl.arange), at least 16 (tl.dot) when compiled."""
    padded = 1 << (h - 1).bit_length()
    return max(padded, _MIN_GPU_BLOCK) if compiled_for_gpu else padded


def _compiler_params(sizes: BlockSizes, interpret: bool):
    if interpret:
        return None
    from jax.experimental.pallas import triton as pltriton

    return pltriton.CompilerParams(num_warps=sizes.num_warps, num_stages=sizes.num_stages)


@dataclasses.dataclass(frozen=True)
class _Geometry:
    """Static facts every kernel body needs."""

    block_q: int
    block_k: int
    groups: int
    padded_len: int  # Tp = Sp
    scale: float


def _scores(q, k, q_seg, k_seg, q0, k0, geo: _Geometry, precision):
    """float32 scaled scores of one [block_q, block_k] pair and its mask (the rule of ops.py, natural
    order: index = position)."""
    s = lax.dot_general(
        q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32, precision=precision
    )
    q_pos = q0 + lax.broadcasted_iota(jnp.int32, (geo.block_q, geo.block_k), 0)
    k_pos = k0 + lax.broadcasted_iota(jnp.int32, (geo.block_q, geo.block_k), 1)
    mask = (q_seg[:, None] == k_seg[None, :]) & (k_seg[None, :] > 0) & (k_pos <= q_pos)
    return s * geo.scale, mask


def _key_range(lo_ref, hi_ref, i, geo: _Geometry):
    """Key blocks query block i loops over: the segment table's range, cut at the causal bound."""
    causal_end = ((i + 1) * geo.block_q + geo.block_k - 1) // geo.block_k
    return lo_ref[i], jnp.minimum(hi_ref[i], causal_end)


def _forward_kernel(q_ref, k_ref, v_ref, qs_ref, ks_ref, lo_ref, hi_ref, o_ref, lse_ref, *, geo: _Geometry):
    i = pl.program_id(2)
    q0 = i * geo.block_q
    q = q_ref[...]
    q_seg = qs_ref[...]
    precision = matmul_precision(q_ref.dtype)
    lo, hi = _key_range(lo_ref, hi_ref, i, geo)

    def step(j, carry):
        m, total, acc = carry
        k0 = pl.multiple_of(j * geo.block_k, geo.block_k)
        k = k_ref[pl.ds(k0, geo.block_k), :]
        v = v_ref[pl.ds(k0, geo.block_k), :]
        s, mask = _scores(q, k, q_seg, ks_ref[pl.ds(k0, geo.block_k)], q0, k0, geo, precision)
        m_new = jnp.maximum(m, jnp.max(jnp.where(mask, s, _MASKED), axis=1))
        p = jnp.where(mask, jnp.exp(s - m_new[:, None]), 0.0)
        alpha = jnp.exp(m - m_new)
        total = alpha * total + jnp.sum(p, axis=1)
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32, precision=precision)
        return m_new, total, acc * alpha[:, None] + pv

    h = q_ref.shape[-1]
    init = (
        jnp.full((geo.block_q,), _MASKED, jnp.float32),
        jnp.zeros((geo.block_q,), jnp.float32),
        jnp.zeros((geo.block_q, h), jnp.float32),
    )
    m, total, acc = lax.fori_loop(lo, hi, step, init)
    seen = total > 0.0
    safe_total = jnp.where(seen, total, 1.0)
    o_ref[...] = (acc / safe_total[:, None]).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(seen, m + jnp.log(safe_total), jnp.inf)


def _probs_and_dscores(q, k, v, do, q_seg, k_seg, lse, delta, q0, k0, geo: _Geometry, precision):
    """Recomputed probabilities p = exp(s - lse) of a pair and dS (the scores' cotangent, scale applied)."""
    s, mask = _scores(q, k, q_seg, k_seg, q0, k0, geo, precision)
    p = jnp.where(mask, jnp.exp(s - lse[:, None]), 0.0)
    dp = lax.dot_general(
        do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32, precision=precision
    )
    return p, p * (dp - delta[:, None]) * geo.scale


def _dq_kernel(
    q_ref, k_ref, v_ref, do_ref, qs_ref, ks_ref, lse_ref, delta_ref, lo_ref, hi_ref, dq_ref, *, geo: _Geometry
):
    i = pl.program_id(2)
    q0 = i * geo.block_q
    q, do, q_seg = q_ref[...], do_ref[...], qs_ref[...]
    lse, delta = lse_ref[...], delta_ref[...]
    precision = matmul_precision(q_ref.dtype)
    lo, hi = _key_range(lo_ref, hi_ref, i, geo)

    def step(j, dq):
        k0 = pl.multiple_of(j * geo.block_k, geo.block_k)
        k = k_ref[pl.ds(k0, geo.block_k), :]
        v = v_ref[pl.ds(k0, geo.block_k), :]
        _, ds = _probs_and_dscores(
            q, k, v, do, q_seg, ks_ref[pl.ds(k0, geo.block_k)], lse, delta, q0, k0, geo, precision
        )
        return dq + jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32, precision=precision)

    dq = lax.fori_loop(lo, hi, step, jnp.zeros(q_ref.shape, jnp.float32))
    dq_ref[...] = dq.astype(dq_ref.dtype)


def _dkv_kernel(
    q_ref,
    k_ref,
    v_ref,
    do_ref,
    qs_ref,
    ks_ref,
    lse_ref,
    delta_ref,
    lo_ref,
    hi_ref,
    dk_ref,
    dv_ref,
    *,
    geo: _Geometry,
):
    """One key block of one kv head. q, dO, lse and D hold the kv head's G query heads end to end
    ([G * Tp] rows); the loop visits, per head, the query blocks the segment table allows, from the first
    one that reaches the key block (causal)."""
    j = pl.program_id(2)
    k0 = j * geo.block_k
    k, v, k_seg = k_ref[...], v_ref[...], ks_ref[...]
    precision = matmul_precision(k_ref.dtype)
    first = jnp.maximum(lo_ref[j], k0 // geo.block_q)
    count = jnp.maximum(hi_ref[j] - first, 0)

    def step(r, carry):
        dk, dv = carry
        g, i = r // jnp.maximum(count, 1), first + r % jnp.maximum(count, 1)
        q0 = pl.multiple_of(i * geo.block_q, geo.block_q)
        row0 = pl.multiple_of(g * geo.padded_len + q0, geo.block_q)
        rows = pl.ds(row0, geo.block_q)
        q, do = q_ref[rows, :], do_ref[rows, :]
        p, ds = _probs_and_dscores(
            q,
            k,
            v,
            do,
            qs_ref[pl.ds(q0, geo.block_q)],
            k_seg,
            lse_ref[rows],
            delta_ref[rows],
            q0,
            k0,
            geo,
            precision,
        )
        dims = (((0,), (0,)), ((), ()))
        dv = dv + lax.dot_general(
            p.astype(do.dtype), do, dims, preferred_element_type=jnp.float32, precision=precision
        )
        dk = dk + lax.dot_general(
            ds.astype(q.dtype), q, dims, preferred_element_type=jnp.float32, precision=precision
        )
        return dk, dv

    zeros = jnp.zeros(k_ref.shape, jnp.float32)
    dk, dv = lax.fori_loop(0, geo.groups * count, step, (zeros, zeros))
    dk_ref[...] = dk.astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


@dataclasses.dataclass(frozen=True)
class _Prepared:
    q: jax.Array  # [B, N, Tp, Hp]
    k: jax.Array  # [B, K, Tp, Hp]
    v: jax.Array
    q_seg: jax.Array  # [B, Tp]
    kv_seg: jax.Array  # [B, Tp]
    key_lo: jax.Array  # [num_q_blocks]: per query block, its first and one-past-last key block
    key_hi: jax.Array
    query_lo: jax.Array  # [num_k_blocks]: per key block, its first and one-past-last query block
    query_hi: jax.Array
    geo: _Geometry


def _to_heads_major(x: jax.Array, length: int, h_pad: int) -> jax.Array:
    """[B, T, heads, H] -> [B, heads, length, h_pad], zero padded."""
    t, h = x.shape[1], x.shape[3]
    x = jnp.pad(x, ((0, 0), (0, length - t), (0, 0), (0, h_pad - h)))
    return x.transpose(0, 2, 1, 3)


def _prepare(q, k, v, q_seg, kv_seg, scale: float, sizes: BlockSizes, interpret: bool) -> _Prepared:
    b, t, n, h = q.shape
    length = _round_up(t, max(sizes.block_q, sizes.block_k))
    h_pad = _head_dim(h, not interpret)
    sizes.check(compiled_for_gpu=not interpret)
    if not interpret and b * n * length * h_pad >= 2**31:
        # Pallas' Triton lowering computes element offsets in int32.
        raise ValueError(
            f"on GPU q padded to [B, N, Tp, Hp] = {(b, n, length, h_pad)} must hold < 2**31 elements "
            f"(q.shape={q.shape}, blocks {sizes.block_q} x {sizes.block_k})"
        )
    q_seg, kv_seg = (jnp.pad(x, ((0, 0), (0, length - t))) for x in (q_seg, kv_seg))
    index = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (b, length))
    table = xla.block_visibility(q_seg, kv_seg, index, index, sizes.block_q, sizes.block_k)
    key_lo, key_hi = xla.visible_ranges(table)
    query_lo, query_hi = xla.visible_ranges(table.T)
    geo = _Geometry(sizes.block_q, sizes.block_k, n // k.shape[2], length, float(scale))
    return _Prepared(
        q=_to_heads_major(q, length, h_pad),
        k=_to_heads_major(k, length, h_pad),
        v=_to_heads_major(v, length, h_pad),
        q_seg=q_seg,
        kv_seg=kv_seg,
        key_lo=key_lo,
        key_hi=key_hi,
        query_lo=query_lo,
        query_hi=query_hi,
        geo=geo,
    )


def _forward(p: _Prepared, sizes: BlockSizes, interpret: bool) -> tuple[jax.Array, jax.Array]:
    """out [B, N, Tp, Hp] and lse [B, N, Tp] (float32)."""
    b, n, length, h = p.q.shape
    geo = p.geo
    bq, g = geo.block_q, geo.groups
    q_blocks = length // bq
    return pl.pallas_call(
        functools.partial(_forward_kernel, geo=geo),
        grid=(b, n, q_blocks),
        in_specs=[
            pl.BlockSpec((None, None, bq, h), lambda bi, ni, i: (bi, ni, i, 0)),
            pl.BlockSpec((None, None, length, h), lambda bi, ni, i: (bi, ni // g, 0, 0)),
            pl.BlockSpec((None, None, length, h), lambda bi, ni, i: (bi, ni // g, 0, 0)),
            pl.BlockSpec((None, bq), lambda bi, ni, i: (bi, i)),
            pl.BlockSpec((None, length), lambda bi, ni, i: (bi, 0)),
            pl.BlockSpec((q_blocks,), lambda bi, ni, i: (0,)),
            pl.BlockSpec((q_blocks,), lambda bi, ni, i: (0,)),
        ],
        out_specs=[
            pl.BlockSpec((None, None, bq, h), lambda bi, ni, i: (bi, ni, i, 0)),
            pl.BlockSpec((None, None, bq), lambda bi, ni, i: (bi, ni, i)),
        ],
        out_shape=[
            jax.ShapeDtypeStruct(p.q.shape, p.q.dtype),
            jax.ShapeDtypeStruct((b, n, length), jnp.float32),
        ],
        compiler_params=_compiler_params(sizes, interpret),
        interpret=interpret,
        name="packed_attention_forward",
    )(p.q, p.k, p.v, p.q_seg, p.kv_seg, p.key_lo, p.key_hi)


def _backward(p: _Prepared, out, lse, d_out, sizes: BlockSizes, interpret: bool):
    """dq [B, N, Tp, Hp], dk and dv [B, K, Tp, Hp] from the padded forward's out and lse."""
    b, n, length, h = p.q.shape
    kv_heads = p.k.shape[1]
    geo = p.geo
    bq, bk, g = geo.block_q, geo.block_k, geo.groups
    q_blocks, k_blocks = length // bq, length // bk
    delta = jnp.sum(out.astype(jnp.float32) * d_out.astype(jnp.float32), axis=-1)  # [B, N, Tp]
    params = _compiler_params(sizes, interpret)
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, geo=geo),
        grid=(b, n, q_blocks),
        in_specs=[
            pl.BlockSpec((None, None, bq, h), lambda bi, ni, i: (bi, ni, i, 0)),
            pl.BlockSpec((None, None, length, h), lambda bi, ni, i: (bi, ni // g, 0, 0)),
            pl.BlockSpec((None, None, length, h), lambda bi, ni, i: (bi, ni // g, 0, 0)),
            pl.BlockSpec((None, None, bq, h), lambda bi, ni, i: (bi, ni, i, 0)),
            pl.BlockSpec((None, bq), lambda bi, ni, i: (bi, i)),
            pl.BlockSpec((None, length), lambda bi, ni, i: (bi, 0)),
            pl.BlockSpec((None, None, bq), lambda bi, ni, i: (bi, ni, i)),
            pl.BlockSpec((None, None, bq), lambda bi, ni, i: (bi, ni, i)),
            pl.BlockSpec((q_blocks,), lambda bi, ni, i: (0,)),
            pl.BlockSpec((q_blocks,), lambda bi, ni, i: (0,)),
        ],
        out_specs=pl.BlockSpec((None, None, bq, h), lambda bi, ni, i: (bi, ni, i, 0)),
        out_shape=jax.ShapeDtypeStruct(p.q.shape, p.q.dtype),
        compiler_params=params,
        interpret=interpret,
        name="packed_attention_dq",
    )(p.q, p.k, p.v, d_out, p.q_seg, p.kv_seg, lse, delta, p.key_lo, p.key_hi)
    # A kv head's G query heads end to end: [B, K, G * Tp, ...].
    grouped = lambda x: x.reshape(b, kv_heads, g * length, *x.shape[3:])  # noqa: E731
    rows = g * length
    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, geo=geo),
        grid=(b, kv_heads, k_blocks),
        in_specs=[
            pl.BlockSpec((None, None, rows, h), lambda bi, ki, j: (bi, ki, 0, 0)),
            pl.BlockSpec((None, None, bk, h), lambda bi, ki, j: (bi, ki, j, 0)),
            pl.BlockSpec((None, None, bk, h), lambda bi, ki, j: (bi, ki, j, 0)),
            pl.BlockSpec((None, None, rows, h), lambda bi, ki, j: (bi, ki, 0, 0)),
            pl.BlockSpec((None, length), lambda bi, ki, j: (bi, 0)),
            pl.BlockSpec((None, bk), lambda bi, ki, j: (bi, j)),
            pl.BlockSpec((None, None, rows), lambda bi, ki, j: (bi, ki, 0)),
            pl.BlockSpec((None, None, rows), lambda bi, ki, j: (bi, ki, 0)),
            pl.BlockSpec((k_blocks,), lambda bi, ki, j: (0,)),
            pl.BlockSpec((k_blocks,), lambda bi, ki, j: (0,)),
        ],
        out_specs=[pl.BlockSpec((None, None, bk, h), lambda bi, ki, j: (bi, ki, j, 0))] * 2,
        out_shape=[jax.ShapeDtypeStruct(p.k.shape, p.k.dtype)] * 2,
        compiler_params=params,
        interpret=interpret,
        name="packed_attention_dkv",
    )(
        grouped(p.q),
        p.k,
        p.v,
        grouped(d_out),
        p.q_seg,
        p.kv_seg,
        grouped(lse),
        grouped(delta),
        p.query_lo,
        p.query_hi,
    )
    return dq, dk, dv


def _from_heads_major(x: jax.Array, t: int, h: int) -> jax.Array:
    """[B, heads, Tp, Hp] -> [B, t, heads, h]."""
    return x[:, :, :t, :h].transpose(0, 2, 1, 3)


@dataclasses.dataclass(frozen=True)
class _Static:
    scale: float
    sizes: BlockSizes
    interpret: bool


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _attention(q, k, v, q_seg, kv_seg, static: _Static):
    return _attention_fwd(q, k, v, q_seg, kv_seg, static)[0]


def _attention_fwd(q, k, v, q_seg, kv_seg, static: _Static):
    p = _prepare(q, k, v, q_seg, kv_seg, static.scale, static.sizes, static.interpret)
    out, lse = _forward(p, static.sizes, static.interpret)
    return _from_heads_major(out, q.shape[1], q.shape[3]), (q, k, v, q_seg, kv_seg, out, lse)


def _attention_bwd(static: _Static, residuals, d_out):
    q, k, v, q_seg, kv_seg, out, lse = residuals
    p = _prepare(q, k, v, q_seg, kv_seg, static.scale, static.sizes, static.interpret)
    d_out = _to_heads_major(d_out.astype(q.dtype), p.q.shape[2], p.q.shape[3])
    dq, dk, dv = _backward(p, out, lse, d_out, static.sizes, static.interpret)
    t, h = q.shape[1], q.shape[3]
    return _from_heads_major(dq, t, h), _from_heads_major(dk, t, h), _from_heads_major(dv, t, h), None, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def pallas_attention(
    q,
    k,
    v,
    q_segment_ids,
    kv_segment_ids,
    scale: float,
    *,
    block_sizes: BlockSizes | None = None,
    interpret: bool = False,
) -> jax.Array:
    """[B, T, N, H] attention of packed rows in natural order (S = T; causal, same segment, padding sees
    nothing), differentiable in q, k and v. Inputs are checked by ops.attention."""
    static = _Static(float(scale), block_sizes or BlockSizes(), interpret)
    return _attention(q, k, v, q_segment_ids, kv_segment_ids, static)
