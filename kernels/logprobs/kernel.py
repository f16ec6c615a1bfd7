"""Pallas kernels of the fused log-prob op: LM head matmul + online log-softmax + target gather, tile by tile.

Three `pl.pallas_call`s, all written with the portable grid + `BlockSpec` API (no backend-specific
primitives), so the same code lowers through Triton on GPU and Mosaic on TPU and runs with
`interpret=True` on CPU:

  forward      grid (token blocks, vocabulary splits), both parallel. Each step walks the
               `forward_split_v` columns of its split one [block_n, block_v] tile at a time; a tile's
               logits are a float32 matmul over D in `block_d` chunks, folded into per-token running
               statistics (`online_softmax`). Each split writes its own partial statistics [splits, N];
               they are merged afterwards (the split-K reduction of Flash-Decoding, Dao et al. 2023), so no
               step ever holds more than one tile of logits and no output block is shared between steps.
  d_hidden     grid (token blocks, vocabulary splits), the second a reduction. Each tile recomputes its
               logits, turns them into d(logits) (`online_softmax.logit_cotangent`) and adds
               d(logits) @ lm_head_tile^T into the token block's float32 d_hidden, D chunk by D chunk.
  d_lm_head    grid (vocabulary tiles, token splits), the second a reduction: the same recomputation,
               adding hidden_tile^T @ d(logits) into the vocabulary tile's float32 d_lm_head.

The backward recomputes every tile from `hidden` and `lm_head` (saved: lse and, with entropy, the mean
logit [N]), as Cut Cross-Entropy does (Wijmans et al. 2025), so neither pass materialises [N, V].

Reductions across grid steps accumulate into an output block that stays resident while the reduction
axis advances: correct where grid steps run in order (Mosaic TPU; the interpreter). Triton runs grid
steps concurrently, so on GPU each reduction axis must be one step (`backward_split_* = None`: the whole
axis, walked by an in-kernel loop); `BlockSizes.check` enforces it. On Triton, a block is a pointer
range, not a copy, so a whole-vocabulary block costs nothing; on TPU a block is copied to VMEM, so the
splits bound what is resident there.

Inputs are padded here to whole tiles (zero rows; zero columns only when V % block_v != 0, which copies
lm_head once); padded columns are masked to `MASK_VALUE` and padded rows are sliced off. float32 inputs
multiply at HIGHEST precision (never tf32); bf16 inputs multiply in bf16 with float32 accumulation, and
d(logits) is cast to bf16 before its matmuls.

Verified without an accelerator: the interpreter's numerics; that all three kernels lower through
Pallas to Triton IR for an H200 and to Mosaic for a TPU v5e (tests/kernels, via an abstract device); and
that the Triton IR of the default GPU blocks compiles for sm_90 with no register spills
(`tools/bench_logprobs.py --ptxas-report`, with the standalone triton 3.6 package). Unverified (no
accelerator in the task that wrote this): compiling through jaxlib's own Triton and Mosaic's TPU passes
(e.g. its handling of the 1-D per-token blocks), results on the devices, and speed.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from legorl_jax.kernels.logprobs import online_softmax
from legorl_jax.kernels.logprobs.reference import matmul_precision
from legorl_jax.validate import is_int, positive_int

# Triton's tl.dot needs every matmul dimension >= 16; the tiles' sides are powers of two (tl.arange).
_MIN_GPU_BLOCK = 16


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile shape and grid splits of the Pallas kernels. Sides are powers of two; splits multiples of them."""

    block_n: int = 64
    """Tokens per tile."""
    block_v: int = 128
    """Vocabulary columns per tile (151,936 = 1187 * 128, so 128 never pads a Qwen vocabulary)."""
    block_d: int = 32
    """Hidden-dimension chunk of each tile matmul and of the gradient accumulation; must divide D."""
    forward_split_v: int = 8192
    """Vocabulary columns per forward grid step; splits run in parallel and are merged afterwards."""
    backward_split_v: int | None = None
    """Vocabulary columns per d_hidden grid step; None: the whole vocabulary (required on GPU)."""
    backward_split_n: int | None = None
    """Tokens per d_lm_head grid step; None: every token (required on GPU)."""
    num_warps: int = 8
    """Triton only: warps per program. With 64 x 128 x 32 tiles, 8 warps is the first count at which
    ptxas reports no register spills in any of the three kernels, bf16 or fp32 (see BENCHMARKS.md)."""
    num_stages: int = 3
    """Triton only: software-pipelining depth of the D-chunk loops."""

    def __post_init__(self) -> None:
        for name in ("num_warps", "num_stages"):
            positive_int(f"BlockSizes.{name}", getattr(self, name))
        for name in ("block_n", "block_v", "block_d"):
            value = getattr(self, name)
            if not is_int(value) or value < 1 or value & (value - 1):
                raise ValueError(f"BlockSizes.{name} must be a positive power of two, got {value!r}")
        for name, block in (
            ("forward_split_v", "block_v"),
            ("backward_split_v", "block_v"),
            ("backward_split_n", "block_n"),
        ):
            value, unit = getattr(self, name), getattr(self, block)
            if value is None and name != "forward_split_v":
                continue
            if not is_int(value) or value < 1 or value % unit:
                raise ValueError(
                    f"BlockSizes.{name} must be a positive multiple of {block}={unit}, got {value!r}"
                )

    @classmethod
    def for_platform(cls, platform: str, hidden_dim: int) -> BlockSizes:
        """Defaults for a backend, with block_d shrunk to the largest power of two dividing `hidden_dim`."""
        if platform == "tpu":
            # A step's lm_head block [D, split] is copied to VMEM (double-buffered): keep it near 2M elements
            # (4 MiB in bf16), inside the default scoped VMEM limit, whatever D is. MXU-sized tiles.
            split = max(512, (2**21 // hidden_dim) // 512 * 512)
            sizes = cls(
                block_n=256,
                block_v=512,
                block_d=512,
                forward_split_v=split,
                backward_split_v=split,
                backward_split_n=1024,
            )
        else:
            sizes = cls()
        block_d = sizes.block_d
        while hidden_dim % block_d:
            block_d //= 2
        return dataclasses.replace(sizes, block_d=block_d)

    def check(self, hidden_dim: int, *, compiled_for_gpu: bool) -> None:
        """Raises ValueError if these blocks cannot run on D = `hidden_dim` (and on Triton, if compiled
        there)."""
        if hidden_dim % self.block_d:
            raise ValueError(f"{self.block_d=} must divide the hidden dimension D={hidden_dim}")
        if not compiled_for_gpu:
            return
        small = {
            k: getattr(self, k)
            for k in ("block_n", "block_v", "block_d")
            if getattr(self, k) < _MIN_GPU_BLOCK
        }
        if small:
            raise ValueError(
                f"Triton matmuls need tiles of at least {_MIN_GPU_BLOCK}, got {small} (D={hidden_dim})"
            )
        if self.backward_split_v is not None or self.backward_split_n is not None:
            raise ValueError(
                "on GPU the backward's reduction axes must be one grid step (Triton runs steps "
                "concurrently): set backward_split_v and backward_split_n to None, got "
                f"{self.backward_split_v=}, {self.backward_split_n=}"
            )


@dataclasses.dataclass(frozen=True)
class _Geometry:
    """Static shape facts every kernel body needs."""

    block_n: int
    block_v: int
    block_d: int
    hidden_dim: int
    vocab: int  # real V; columns at or past it are padding
    inv_temperature: float


def _logit_tile(h_ref, w_ref, row0, col0, global_col0, targets, geo: _Geometry):
    """Masked float32 logits of rows [row0, +block_n) x columns [col0, +block_v) of the blocks, and target
    hits.

    `global_col0` is col0's index in the whole vocabulary (for the padding mask and the target compare).
    """
    precision = matmul_precision(h_ref.dtype)

    def matmul_chunk(c, acc):
        d0 = pl.multiple_of(c * geo.block_d, geo.block_d)
        h = h_ref[pl.ds(row0, geo.block_n), pl.ds(d0, geo.block_d)]
        w = w_ref[pl.ds(d0, geo.block_d), pl.ds(col0, geo.block_v)]
        return acc + jnp.dot(h, w, preferred_element_type=jnp.float32, precision=precision)

    zeros = jnp.zeros((geo.block_n, geo.block_v), jnp.float32)
    scores = lax.fori_loop(0, geo.hidden_dim // geo.block_d, matmul_chunk, zeros)
    col_ids = global_col0 + lax.broadcasted_iota(jnp.int32, (geo.block_n, geo.block_v), 1)
    logits = jnp.where(col_ids < geo.vocab, scores * geo.inv_temperature, online_softmax.MASK_VALUE)
    return logits, col_ids == targets[:, None]


def _split_extent(split, tiles_per_split: int, total_tiles: int):
    """First tile of a split and how many tiles it holds (the last split may be short)."""
    first = split * tiles_per_split
    return first, jnp.minimum(tiles_per_split, total_tiles - first)


def _forward_kernel(
    h_ref, w_ref, t_ref, *out_refs, geo: _Geometry, tiles_per_split: int, total_tiles: int, with_entropy: bool
):
    first, count = _split_extent(pl.program_id(1), tiles_per_split, total_tiles)
    targets = t_ref[...]

    def tile_step(j, stats):
        col0 = pl.multiple_of(j * geo.block_v, geo.block_v)
        logits, is_target = _logit_tile(h_ref, w_ref, 0, col0, first * geo.block_v + col0, targets, geo)
        return online_softmax.update(stats, logits, is_target)

    stats = lax.fori_loop(0, count, tile_step, online_softmax.init(geo.block_n, with_entropy=with_entropy))
    for ref, value in zip(out_refs, [x for x in stats if x is not None], strict=True):
        ref[...] = value


def _zero(ref, rows: int, cols: int, chunk: int, along_rows: bool) -> None:
    """Zeroes an accumulator block in `chunk`-wide strips (a whole [block_n, D] tile would not fit in
    registers)."""

    def strip(c, carry):
        start = pl.multiple_of(c * chunk, chunk)
        if along_rows:
            ref[pl.ds(start, chunk), :] = jnp.zeros((chunk, cols), ref.dtype)
        else:
            ref[:, pl.ds(start, chunk)] = jnp.zeros((rows, chunk), ref.dtype)
        return carry

    lax.fori_loop(0, (rows if along_rows else cols) // chunk, strip, 0)


def _row_inputs(refs, rows, with_entropy: bool) -> online_softmax.BackwardRows:
    """Loads a row range of the backward's per-token inputs (refs in `BackwardRows` order, Nones left out)."""
    values = iter(ref[rows] for ref in refs)
    return online_softmax.BackwardRows(
        *(
            next(values) if with_entropy or field not in _ENTROPY_FIELDS else None
            for field in online_softmax.BackwardRows._fields
        )
    )


_ENTROPY_FIELDS = ("mean_logit", "g_entropy")


def _scaled_cotangent(logits, is_target, rows: online_softmax.BackwardRows, geo: _Geometry, dtype):
    d_logits = online_softmax.logit_cotangent(logits, is_target, rows)
    return (d_logits * geo.inv_temperature).astype(dtype)  # chain rule through logits = scores / temperature


def _hidden_grad_kernel(
    h_ref, w_ref, *refs, geo: _Geometry, tiles_per_split: int, total_tiles: int, with_entropy: bool
):
    row_refs, dh_ref = refs[:-1], refs[-1]
    split = pl.program_id(1)

    @pl.when(split == 0)
    def _():
        _zero(dh_ref, geo.block_n, geo.hidden_dim, geo.block_d, along_rows=False)

    first, count = _split_extent(split, tiles_per_split, total_tiles)
    rows_in = _row_inputs(row_refs, slice(None), with_entropy)
    precision = matmul_precision(h_ref.dtype)

    def tile_step(j, carry):
        col0 = pl.multiple_of(j * geo.block_v, geo.block_v)
        logits, is_target = _logit_tile(
            h_ref, w_ref, 0, col0, first * geo.block_v + col0, rows_in.targets, geo
        )
        d_scores = _scaled_cotangent(logits, is_target, rows_in, geo, w_ref.dtype)

        def accumulate(c, carry):
            d0 = pl.multiple_of(c * geo.block_d, geo.block_d)
            w = w_ref[pl.ds(d0, geo.block_d), pl.ds(col0, geo.block_v)]
            dh_ref[:, pl.ds(d0, geo.block_d)] += lax.dot_general(
                d_scores, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32, precision=precision
            )
            return carry

        return lax.fori_loop(0, geo.hidden_dim // geo.block_d, accumulate, carry)

    lax.fori_loop(0, count, tile_step, 0)


def _head_grad_kernel(
    h_ref, w_ref, *refs, geo: _Geometry, tiles_per_split: int, total_tiles: int, with_entropy: bool
):
    row_refs, dw_ref = refs[:-1], refs[-1]
    split = pl.program_id(1)

    @pl.when(split == 0)
    def _():
        _zero(dw_ref, geo.hidden_dim, geo.block_v, geo.block_d, along_rows=True)

    first, count = _split_extent(split, tiles_per_split, total_tiles)
    global_col0 = pl.program_id(0) * geo.block_v
    precision = matmul_precision(h_ref.dtype)

    def tile_step(r, carry):
        row0 = pl.multiple_of(r * geo.block_n, geo.block_n)
        rows_in = _row_inputs(row_refs, pl.ds(row0, geo.block_n), with_entropy)
        logits, is_target = _logit_tile(h_ref, w_ref, row0, 0, global_col0, rows_in.targets, geo)
        d_scores = _scaled_cotangent(logits, is_target, rows_in, geo, h_ref.dtype)

        def accumulate(c, carry):
            d0 = pl.multiple_of(c * geo.block_d, geo.block_d)
            h = h_ref[pl.ds(row0, geo.block_n), pl.ds(d0, geo.block_d)]
            dw_ref[pl.ds(d0, geo.block_d), :] += lax.dot_general(
                h, d_scores, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32, precision=precision
            )
            return carry

        return lax.fori_loop(0, geo.hidden_dim // geo.block_d, accumulate, carry)

    lax.fori_loop(0, count, tile_step, 0)


def _compiler_params(
    sizes: BlockSizes,
    platform: str,
    interpret: bool,
    semantics: tuple[Literal["parallel", "arbitrary"], ...],
) -> Any:
    if interpret:
        return None
    if platform == "tpu":
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.CompilerParams(dimension_semantics=semantics)
    from jax.experimental.pallas import triton as pltriton

    return pltriton.CompilerParams(num_warps=sizes.num_warps, num_stages=sizes.num_stages)


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


@dataclasses.dataclass(frozen=True)
class _Padded:
    hidden: jax.Array  # [N_pad, D]
    lm_head: jax.Array  # [D, V_pad]
    rows: tuple[jax.Array, ...]  # per-token vectors, each [N_pad]
    geo: _Geometry
    row_tiles: int
    col_tiles: int


def _pad(hidden, lm_head, rows, sizes: BlockSizes, inv_temperature: float, compiled_for_gpu: bool) -> _Padded:
    (n, d), v = hidden.shape, lm_head.shape[1]
    n_pad, v_pad = _round_up(n, sizes.block_n), _round_up(v, sizes.block_v)
    if compiled_for_gpu and max(n_pad * d, d * v_pad) >= 2**31:
        # Pallas' Triton lowering computes element offsets in int32.
        raise ValueError(
            f"on GPU each operand must hold < 2**31 elements, got {hidden.shape=}, {lm_head.shape=}"
        )
    if v_pad != v:
        lm_head = jnp.pad(lm_head, ((0, 0), (0, v_pad - v)))
    geo = _Geometry(sizes.block_n, sizes.block_v, sizes.block_d, d, v, inv_temperature)
    return _Padded(
        hidden=jnp.pad(hidden, ((0, n_pad - n), (0, 0))),
        lm_head=lm_head,
        rows=tuple(jnp.pad(x, (0, n_pad - n)) for x in rows),
        geo=geo,
        row_tiles=n_pad // sizes.block_n,
        col_tiles=v_pad // sizes.block_v,
    )


def forward(
    hidden: jax.Array,
    lm_head: jax.Array,
    targets: jax.Array,
    *,
    inv_temperature: float,
    with_entropy: bool,
    sizes: BlockSizes,
    platform: str,
    interpret: bool,
) -> online_softmax.RowResult:
    """Log-probs (and entropy) of `targets` under softmax(hidden @ lm_head * inv_temperature)."""
    n, d = hidden.shape
    p = _pad(hidden, lm_head, (targets,), sizes, inv_temperature, not interpret and platform == "gpu")
    bn = sizes.block_n
    tiles_per_split = min(sizes.forward_split_v // sizes.block_v, p.col_tiles)
    splits = -(-p.col_tiles // tiles_per_split)
    stat_count = 4 if with_entropy else 3
    kernel = functools.partial(
        _forward_kernel,
        geo=p.geo,
        tiles_per_split=tiles_per_split,
        total_tiles=p.col_tiles,
        with_entropy=with_entropy,
    )
    parts = pl.pallas_call(
        kernel,
        grid=(p.row_tiles, splits),
        in_specs=[
            pl.BlockSpec((bn, d), lambda i, k: (i, 0)),
            pl.BlockSpec((d, tiles_per_split * sizes.block_v), lambda i, k: (0, k)),
            pl.BlockSpec((bn,), lambda i, k: (i,)),
        ],
        # Split-major 1-D [splits * N_pad]: Mosaic rejects a squeezed second-to-last block dimension.
        out_specs=[pl.BlockSpec((bn,), lambda i, k: (k * p.row_tiles + i,))] * stat_count,
        out_shape=[jax.ShapeDtypeStruct((splits * p.row_tiles * bn,), jnp.float32)] * stat_count,
        compiler_params=_compiler_params(sizes, platform, interpret, ("parallel", "parallel")),
        interpret=interpret,
        name="token_logprobs_forward",
    )(p.hidden, p.lm_head, *p.rows)
    parts = [x.reshape(splits, p.row_tiles * bn) for x in parts]
    if not with_entropy:
        parts.insert(2, None)  # RunningStats.shifted_sum
    result = online_softmax.finalize(online_softmax.merge(online_softmax.RunningStats(*parts)))
    return jax.tree.map(lambda x: x[:n], result)


def backward(
    hidden: jax.Array,
    lm_head: jax.Array,
    rows: online_softmax.BackwardRows,
    *,
    inv_temperature: float,
    sizes: BlockSizes,
    platform: str,
    interpret: bool,
) -> tuple[jax.Array, jax.Array]:
    """(d_hidden [N, D], d_lm_head [D, V]) in the inputs' dtypes, recomputing every logits tile."""
    (n, d), v = hidden.shape, lm_head.shape[1]
    with_entropy = rows.g_entropy is not None
    rows = tuple(x for x in rows if x is not None)
    p = _pad(hidden, lm_head, rows, sizes, inv_temperature, not interpret and platform == "gpu")
    bn, bv = sizes.block_n, sizes.block_v
    semantics: tuple[Literal["parallel", "arbitrary"], ...] = ("parallel", "arbitrary")

    v_tiles = (
        p.col_tiles if sizes.backward_split_v is None else min(sizes.backward_split_v // bv, p.col_tiles)
    )
    hidden_kernel = functools.partial(
        _hidden_grad_kernel,
        geo=p.geo,
        tiles_per_split=v_tiles,
        total_tiles=p.col_tiles,
        with_entropy=with_entropy,
    )
    d_hidden = pl.pallas_call(
        hidden_kernel,
        grid=(p.row_tiles, -(-p.col_tiles // v_tiles)),
        in_specs=[
            pl.BlockSpec((bn, d), lambda i, k: (i, 0)),
            pl.BlockSpec((d, v_tiles * bv), lambda i, k: (0, k)),
        ]
        + [pl.BlockSpec((bn,), lambda i, k: (i,))] * len(rows),
        out_specs=pl.BlockSpec((bn, d), lambda i, k: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(p.hidden.shape, jnp.float32),
        compiler_params=_compiler_params(sizes, platform, interpret, semantics),
        interpret=interpret,
        name="token_logprobs_d_hidden",
    )(p.hidden, p.lm_head, *p.rows)

    n_tiles = (
        p.row_tiles if sizes.backward_split_n is None else min(sizes.backward_split_n // bn, p.row_tiles)
    )
    head_kernel = functools.partial(
        _head_grad_kernel,
        geo=p.geo,
        tiles_per_split=n_tiles,
        total_tiles=p.row_tiles,
        with_entropy=with_entropy,
    )
    d_head = pl.pallas_call(
        head_kernel,
        grid=(p.col_tiles, -(-p.row_tiles // n_tiles)),
        in_specs=[
            pl.BlockSpec((n_tiles * bn, d), lambda j, k: (k, 0)),
            pl.BlockSpec((d, bv), lambda j, k: (0, j)),
        ]
        + [pl.BlockSpec((n_tiles * bn,), lambda j, k: (k,))] * len(rows),
        out_specs=pl.BlockSpec((d, bv), lambda j, k: (0, j)),
        out_shape=jax.ShapeDtypeStruct(p.lm_head.shape, jnp.float32),
        compiler_params=_compiler_params(sizes, platform, interpret, semantics),
        interpret=interpret,
        name="token_logprobs_d_lm_head",
    )(p.hidden, p.lm_head, *p.rows)
    return d_hidden[:n].astype(hidden.dtype), d_head[:, :v].astype(lm_head.dtype)
