"""Context parallelism: one packed row split along its tokens over the mesh axes of the logical `seq` axis.

On when the rules map `seq` to mesh axes of total size c > 1 (DEFAULT_RULES: `seq -> context`, so a mesh
with `context: c`) and the row's length T is a multiple of 2c. Nothing to do for callers: the layout is
the model's own business, end to end inside `Policy.__call__`.

Layout (load-balanced for the causal mask, as MaxText's and Llama 3's context parallelism): the row is
cut into 2c chunks of T / 2c tokens and device d holds chunks d and 2c - 1 - d, an early and a late
one, so every device has the same number of (query, key) pairs to compute under the causal mask (with
plain contiguous shards the last device would do 2c - 1 times the first's work). `Policy.__call__`
permutes its integer inputs (ids, positions, segment ids, forced routing) into this order once
(`to_layout`; positions are computed before, so RoPE is unchanged), runs every layer in it, and
un-permutes the final hidden states and the routing (`from_layout`). So the log-prob head, the loss,
routing replay and every caller see the natural order, still sharded along tokens: each device's
log-probs are its own tokens' (a contiguous slice of the natural row after the un-permute's all-to-all).
Per-token work (projections, norms, MoE, the log-prob kernel) never looks at other tokens and runs on
each device's own; MoE's shard_map keeps the token axis sharded (moe.py): when the tokens are split over
the expert axes, its `experts` dispatch brings the expert weights to each device's own tokens instead of
gathering the row.

Attention (`attention`): a shard_map over the `seq` mesh axes only (batch, heads and the rest stay
automatic). Each device all-gathers the row's K and V (GQA: K kv heads, N / K times smaller than the
queries; 4 of 32 heads for Qwen3-30B-A3B) with their segment ids and row indices, and runs the
blockwise op (kernels/attention) for its own queries with q_index = their places in the row: the op's
index rule makes the permuted order exact, and its block table skips what the causal mask hides (the
late chunk sees most of the row, the early one little). Backward: the all-gather's transpose is a
reduce-scatter of dK / dV, in float32 (`gather_rows`).

All-gather rather than a ring of ppermutes: with GQA the gathered K/V of one layer at 131,072 tokens is
2 x 131072 x 4 x 128 x 2 bytes = 256 MiB for Qwen3-30B-A3B, transient (one layer at a time; the layer
scan's remat recomputes it in the backward), and one collective of it overlaps with the projections,
while a ring needs c steps each waiting on its neighbour. A ring is what to build when K/V of a row no
longer fits beside a layer's activations (MHA models, rows of millions of tokens).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from legorl_jax.kernels.attention import attention as blockwise_attention
from legorl_jax.model import sharding


def seq_axes(batch: int, length: int) -> tuple[str, ...]:
    """The mesh axes the tokens of `batch` rows of `length` are split over, as the activations
    [batch, seq, ...] resolve (a mesh axis the batch already uses is not the tokens'); none without a
    mesh or a `seq` rule."""
    mesh = sharding.current_mesh()
    if mesh is None:
        return ()
    entry = sharding.logical_to_spec(("batch", "seq"), (batch, length), mesh=mesh)[1]
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def shards(batch: int, length: int) -> int:
    """How many pieces each of `batch` rows of `length` tokens is split into (1: no context parallelism)."""
    axes = seq_axes(batch, length)
    if not axes:
        return 1
    mesh = sharding.current_mesh()
    assert mesh is not None  # seq axes come from a mesh
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    count = int(np.prod([sizes[a] for a in axes]))
    if length % (2 * count):
        raise ValueError(
            f"context parallelism over {count} devices needs a row length divisible by {2 * count} (two "
            f"chunks per device), got {length}"
        )
    return count


@functools.lru_cache(maxsize=64)
def layout(length: int, count: int) -> np.ndarray:
    """order[j] = the natural place of the token at place j of the load-balanced row (module docstring)."""
    if length % (2 * count):
        raise ValueError(f"row length {length} is not a multiple of 2 x {count} shards")
    chunk = length // (2 * count)
    chunks = [c for d in range(count) for c in (d, 2 * count - 1 - d)]
    order = np.concatenate([np.arange(c * chunk, (c + 1) * chunk) for c in chunks]).astype(np.int32)
    order.setflags(write=False)
    return order


def to_layout(x: jax.Array, count: int, axis: int = 1) -> jax.Array:
    """`x` with its token axis put in the load-balanced order."""
    return jnp.take(x, jnp.asarray(layout(x.shape[axis], count)), axis=axis)


def from_layout(x: jax.Array, count: int, axis: int = 1) -> jax.Array:
    """Inverse of `to_layout`."""
    inverse = np.argsort(layout(x.shape[axis], count)).astype(np.int32)
    return jnp.take(x, jnp.asarray(inverse), axis=axis)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def gather_rows(x: jax.Array, axes: tuple[str, ...]) -> jax.Array:
    """All-gather of `x` along its token axis (1) over the mesh `axes` (inside a shard_map), whose
    backward reduce-scatters the cotangent in float32: the devices' dK / dV contributions are summed in
    float32 (not rounded to bf16 at every step), and XLA:CPU's collective pipeline crashes ("Invalid binary
    instruction opcode copy") on the bf16 reduce-scatter that JAX's own transpose makes under Shardy."""
    return jax.lax.all_gather(x, axes, axis=1, tiled=True)


def _gather_rows_fwd(x, axes):
    return gather_rows(x, axes), None


def _gather_rows_bwd(axes, _, cotangent):
    summed = jax.lax.psum_scatter(cotangent.astype(jnp.float32), axes, scatter_dimension=1, tiled=True)
    return (summed.astype(cotangent.dtype),)


gather_rows.defvjp(_gather_rows_fwd, _gather_rows_bwd)


def attention(q, k, v, segment_ids, scale: float) -> jax.Array:
    """Packed attention of a row in the load-balanced layout, split along tokens (module docstring)."""
    b, t = q.shape[:2]
    axes = seq_axes(b, t)
    index = jnp.broadcast_to(jnp.asarray(layout(t, shards(b, t))), (b, t))
    spec = P(None, axes)  # only the token axes are manual; the batch's stay automatic

    def local(q, k, v, seg, idx):
        gather = functools.partial(jax.lax.all_gather, axis_name=axes, axis=1, tiled=True)
        return blockwise_attention(
            q,
            gather_rows(k, axes),
            gather_rows(v, axes),
            q_segment_ids=seg,
            kv_segment_ids=gather(seg),
            q_index=idx,
            kv_index=gather(idx),
            scale=scale,
        )

    return jax.shard_map(
        local,
        mesh=sharding.current_mesh(),
        in_specs=(spec,) * 5,
        out_specs=spec,
        axis_names=set(axes),
        # The op's loops carry per-device state whose fresh initial values are not varying over the
        # axes; without the check the all-gather still transposes to a reduce-scatter of dK / dV.
        check_vma=False,
    )(q, k, v, segment_ids, index)
