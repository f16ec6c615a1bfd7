"""Chunked XLA path of the fused log-prob op: `lax.scan` over vocabulary and token chunks, no [N, V] buffer.

For hosts where the Pallas kernel does not lower (CPU), and as the baseline the kernel is measured
against. The arithmetic is the kernel's (`online_softmax`): an outer scan walks the vocabulary in chunks
of `chunk_v` columns, slicing each chunk of `lm_head` once; an inner scan walks the tokens in chunks of
`chunk_n` rows and folds the chunk's logits [chunk_n, chunk_v] into each row's running statistics. The
largest temporary is therefore one logits chunk (plus XLA's fused elementwise temporaries of that size),
whatever N and V are (tested through the compiled HLO's memory analysis).

The backward (`backward`) recomputes each logits chunk from `hidden` and `lm_head`, turns it into
d(loss)/d(logits) with the saved lse / mean logit, and accumulates d_hidden [N, D] and d_lm_head [D, V] in
float32 (cast to the inputs' dtypes at the end); d(logits) is cast to the inputs' dtype before its two
matmuls, as the Pallas kernel does.

Ragged sizes: tokens are padded with zero rows to a multiple of the token chunk (cheap: [N, D]). The
vocabulary is never padded (that would copy lm_head): the last chunk's start is clamped to V - chunk_v and
the columns an earlier chunk already covered are masked out (`online_softmax.MASK_VALUE`, d(logits) = 0).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

from legorl_jax.kernels.logprobs import online_softmax
from legorl_jax.kernels.logprobs.reference import matmul_precision
from legorl_jax.validate import positive_int


@dataclasses.dataclass(frozen=True)
class ChunkSizes:
    """Chunk shape of the XLA path; either is clamped to the array's size when larger."""

    chunk_n: int = 1024
    """Tokens per chunk (rows of one logits chunk)."""
    chunk_v: int = 8192
    """Vocabulary columns per chunk; chunk_n * chunk_v * 4 bytes is the logits chunk held at once."""

    def __post_init__(self) -> None:
        for name in ("chunk_n", "chunk_v"):
            positive_int(f"ChunkSizes.{name}", getattr(self, name))


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Static chunk geometry for one call."""

    rows: int  # tokens per chunk
    row_chunks: int
    cols: int  # vocabulary columns per chunk
    col_chunks: int
    vocab: int
    inv_temperature: float


def _layout(n: int, v: int, chunks: ChunkSizes, inv_temperature: float) -> _Layout:
    rows, cols = min(chunks.chunk_n, n), min(chunks.chunk_v, v)
    return _Layout(rows, -(-n // rows), cols, -(-v // cols), v, inv_temperature)


def _chunk_rows(x: jax.Array, layout: _Layout) -> jax.Array:
    """[N, ...] -> [row_chunks, rows, ...], zero-padding the last chunk."""
    pad = layout.row_chunks * layout.rows - x.shape[0]
    x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
    return x.reshape(layout.row_chunks, layout.rows, *x.shape[1:])


def _unchunk_rows(x: jax.Array, n: int) -> jax.Array:
    return x.reshape(-1, *x.shape[2:])[:n]


def _column_chunk(
    lm_head: jax.Array, j: jax.Array, layout: _Layout
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Chunk j of lm_head [D, cols], its global column ids [cols] and which of them are new to this chunk."""
    start = jnp.minimum(j * layout.cols, layout.vocab - layout.cols)
    weights = lax.dynamic_slice_in_dim(lm_head, start, layout.cols, axis=1)
    col_ids = start + jnp.arange(layout.cols, dtype=jnp.int32)
    return weights, col_ids, col_ids >= j * layout.cols


def _masked_logits(
    hidden: jax.Array,
    weights: jax.Array,
    col_ids: jax.Array,
    is_new: jax.Array,
    targets: jax.Array,
    layout: _Layout,
) -> tuple[jax.Array, jax.Array]:
    """float32 logits [rows, cols] with already-covered columns masked, and the target one-hot mask.

    A covered column must not count as the target either: its logit is the mask value, not the real one.
    """
    scores = jnp.dot(
        hidden, weights, preferred_element_type=jnp.float32, precision=matmul_precision(hidden.dtype)
    )
    logits = jnp.where(is_new[None, :], scores * layout.inv_temperature, online_softmax.MASK_VALUE)
    return logits, (col_ids[None, :] == targets[:, None]) & is_new[None, :]


def forward(
    hidden: jax.Array,
    lm_head: jax.Array,
    targets: jax.Array,
    *,
    inv_temperature: float,
    with_entropy: bool,
    chunks: ChunkSizes,
) -> online_softmax.RowResult:
    """Log-probs (and entropy) of `targets` under softmax(hidden @ lm_head * inv_temperature), chunk by
    chunk."""
    n = hidden.shape[0]
    layout = _layout(n, lm_head.shape[1], chunks, inv_temperature)
    hidden_chunks, target_chunks = _chunk_rows(hidden, layout), _chunk_rows(targets, layout)

    def column_step(stats, j):
        weights, col_ids, is_new = _column_chunk(lm_head, j, layout)

        def row_step(_, xs):
            h, t, row_stats = xs
            logits, is_target = _masked_logits(h, weights, col_ids, is_new, t, layout)
            return None, online_softmax.update(row_stats, logits, is_target)

        _, stats = lax.scan(row_step, None, (hidden_chunks, target_chunks, stats))
        return stats, None

    empty = online_softmax.init(layout.rows, with_entropy=with_entropy)
    stats = jax.tree.map(lambda x: jnp.broadcast_to(x, (layout.row_chunks, *x.shape)), empty)
    stats, _ = lax.scan(column_step, stats, jnp.arange(layout.col_chunks))
    result = online_softmax.finalize(stats)
    return jax.tree.map(lambda x: _unchunk_rows(x, n), result)


def backward(
    hidden: jax.Array,
    lm_head: jax.Array,
    rows: online_softmax.BackwardRows,
    *,
    inv_temperature: float,
    chunks: ChunkSizes,
) -> tuple[jax.Array, jax.Array]:
    """(d_hidden [N, D], d_lm_head [D, V]) in the inputs' dtypes, recomputing each logits chunk."""
    n, d = hidden.shape
    layout = _layout(n, lm_head.shape[1], chunks, inv_temperature)
    row_chunks = (_chunk_rows(hidden, layout), jax.tree.map(lambda x: _chunk_rows(x, layout), rows))
    precision = matmul_precision(hidden.dtype)

    def column_step(carry, j):
        d_hidden_chunks, d_head = carry
        weights, col_ids, is_new = _column_chunk(lm_head, j, layout)

        def row_step(d_weights, xs):
            (h, r), d_hidden = xs
            logits, is_target = _masked_logits(h, weights, col_ids, is_new, r.targets, layout)
            d_logits = online_softmax.logit_cotangent(logits, is_target, r)
            d_scores = (d_logits * inv_temperature).astype(lm_head.dtype)
            d_hidden = d_hidden + lax.dot_general(
                d_scores,
                weights,
                (((1,), (1,)), ((), ())),
                preferred_element_type=jnp.float32,
                precision=precision,
            )
            d_weights = d_weights + lax.dot_general(
                h, d_scores, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32, precision=precision
            )
            return d_weights, d_hidden

        d_weights, d_hidden_chunks = lax.scan(
            row_step, jnp.zeros((d, layout.cols), jnp.float32), (row_chunks, d_hidden_chunks)
        )
        # Columns this chunk shares with the previous one got d(logits) = 0, so adding keeps them intact.
        start = jnp.minimum(j * layout.cols, layout.vocab - layout.cols)
        block = lax.dynamic_slice_in_dim(d_head, start, layout.cols, axis=1)
        d_head = lax.dynamic_update_slice_in_dim(d_head, block + d_weights, start, axis=1)
        return (d_hidden_chunks, d_head), None

    init = (
        jnp.zeros((layout.row_chunks, layout.rows, d), jnp.float32),
        jnp.zeros(lm_head.shape, jnp.float32),
    )
    (d_hidden_chunks, d_head), _ = lax.scan(column_step, init, jnp.arange(layout.col_chunks))
    return _unchunk_rows(d_hidden_chunks, n).astype(hidden.dtype), d_head.astype(lm_head.dtype)
