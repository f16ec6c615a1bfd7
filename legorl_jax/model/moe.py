"""The sparse MoE block of Qwen3-MoE: float32 softmax router, top-k, routing replay, grouped experts.

Routing (HF `Qwen3MoeTopKRouter`, and R3 of docs/alignment.md §2):
- `probs = softmax(x @ W_router)` in float32 over all E experts; the native selection is `top_k(probs)`
  (descending, as `torch.topk`).
- `forced [B, T, K]` replays a recorded routing: a row whose entries are all >= 0 replaces the selection;
  a row of -1 routes natively. Gate weights are always `probs` gathered at the selected ids, renormalised
  to sum 1 when `norm_topk_prob` (raw softmax values otherwise), so a forced row gets the softmax of the
  *current* router logits restricted to the forced set and gradients still reach the router. Native and
  forced rows share every operation after the id choice, so replaying a forward's own routing reproduces
  its outputs bit for bit.
- The block returns the ids it used and the statistics of HF's `load_balancing_loss_func` over the
  tokens of `token_mask` (padding excluded), from the ids actually used (forced or native).

Experts run grouped: the B*T*K (token, slot) pairs are sorted by expert and pushed through
`jax.lax.ragged_dot` (one grouped matmul per projection; GPU / TPU) or, on CPU where XLA lowers `ragged_dot`
densely, through per-expert tiles of the sorted rows (`grouped_experts`), then unsorted and combined with the
gate weights. HF sums the K expert outputs in expert order, we in slot order: equal up to float rounding.
On CPU, few tokens (decode) run every expert on every token instead (`all_experts`, summed in expert order
with zero gates for the experts not chosen): each expert's weights read once, no sort or gather.
Long rows go through the grouped FFN in chunks of tokens (`chunk_tokens`: once their pairs' rows pass
`CHUNK_ELEMENTS`), one chunk at a time under a checkpointed scan, so its working set does not grow with the
row (exact: no token dropped, each token's output its own; the routing is made once, before).

Expert parallelism. When the `experts` logical axis maps to mesh axes of size > 1 (sharding.py), the
grouped FFN runs under `jax.shard_map` over the whole mesh; each device holds E / |expert| experts
(weights all-gathered over the other axes, i.e. FSDP-style gather at use). Two dispatches
(`expert_ffn(dispatch=...)`), both exact (no capacity, no token dropped, so routing replay holds):
- `tokens`, the group's tokens to the experts. Expert axes that also split the tokens (the batch's rows,
  or a row's tokens under context parallelism): all-gather of the tokens [B_local, T_local, D] (with their
  ids and weights) within the expert group, each device computes only its own experts' (token, slot)
  pairs, then a reduce-scatter (psum_scatter) returns every device its own tokens' sums; expert axes that
  do not split the tokens (replicated there): one all-reduce (psum). Traffic: the group's tokens. But how
  many pairs reach a device's experts is known only at run time, so its buffers take the static bound:
  all N_group * K pairs of the group (a device may hold the experts every token picked), i.e. the whole
  row under context parallelism, on every device; `grouped_experts`' chunks bound those to one chunk's
  pairs at a time, leaving the group's gathered rows and sums.
- `experts`, the experts to the tokens (when every expert axis splits the tokens): all-gather of the
  expert weights over the expert axes, each device runs its own tokens' N_local * K pairs through all E
  experts, and the gather's transpose reduce-scatters the weight gradients back to the experts' owners.
  Buffers: the gathered weights (a constant) plus its own tokens' pairs, so they follow N / devices.
  Traffic: the experts' weights, 3 E D F, whatever the row.
A ragged all-to-all of each device's own pairs (`jax.lax.ragged_all_to_all`) would move only the routed
pairs, but its receive buffer needs the same static bound as `tokens` (all of the group's pairs may pick
one device's experts) and XLA:CPU does not implement it (jax 0.12: "not supported by XLA:CPU
ThunkEmitter"). `default_dispatch` picks by size: `experts` once the group's tokens reach the experts'
weight rows (rows of ~300k tokens and more), `tokens` below. Routing and the router itself stay under
GSPMD, outside the shard_map.

Einsum legend: B batch, T positions, D model dim, E experts, K experts per token, F expert mlp hidden,
N tokens (B*T) in the grouped FFN.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Bool, Float, Int

from legorl_jax.model import sharding
from legorl_jax.model.architecture import ArchConfig
from legorl_jax.model.layers import normal_init, param


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RouterStats:
    """Sums over the masked tokens of one (or, added up, several) MoE layers, for the aux loss."""

    expert_counts: Float[Array, "k e"]  # how often slot k chose expert e
    prob_sums: Float[Array, " e"]  # summed router probabilities

    def __add__(self, other: RouterStats) -> RouterStats:
        return jax.tree.map(jnp.add, self, other)


def route(
    logits: Float[Array, "b t e"], top_k: int, norm_topk_prob: bool, forced: Int[Array, "b t k"] | None
) -> tuple[Int[Array, "b t k"], Float[Array, "b t k"], Float[Array, "b t e"]]:
    """(selected ids, gate weights, router probabilities) for float32 router `logits`."""
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    _, ids = jax.lax.top_k(probs, top_k)
    if forced is not None:
        replay = jnp.all(forced >= 0, axis=-1, keepdims=True)
        ids = jnp.where(replay, forced.astype(ids.dtype), ids)
    weights = jnp.take_along_axis(probs, ids, axis=-1)
    if norm_topk_prob:
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return ids.astype(jnp.int32), weights, probs


def router_stats(
    ids: Int[Array, "b t k"], probs: Float[Array, "b t e"], token_mask: Bool[Array, "b t"]
) -> RouterStats:
    """Counts by a scatter-add of the masked (token, slot) pairs, never a [B, T, K, E] one-hot (512 MiB of
    float32 at 128k tokens and Qwen3-30B-A3B's K = 8 of E = 128)."""
    mask = token_mask.astype(jnp.float32)
    k, e = ids.shape[-1], probs.shape[-1]
    slot = jnp.broadcast_to(jnp.arange(k, dtype=ids.dtype), ids.shape)
    counts = (
        jnp.zeros((k, e), jnp.float32)
        .at[slot.reshape(-1), ids.reshape(-1)]
        .add(jnp.broadcast_to(mask[..., None], ids.shape).reshape(-1))
    )
    return RouterStats(expert_counts=counts, prob_sums=jnp.einsum("bte,bt->e", probs, mask))


def load_balancing_loss(
    stats: RouterStats, tokens: Float[Array, ""], num_layers: int, num_experts: int
) -> Float[Array, ""]:
    """HF `load_balancing_loss_func`, unscaled: E * sum_{k,e} f[k, e] * P[e] over all layers' tokens.

    `stats` is summed over the `num_layers` MoE layers, each of which saw `tokens` masked tokens. HF
    concatenates the layers' rows before averaging, so both means divide by num_layers * tokens.
    """
    rows = num_layers * tokens
    safe = jnp.maximum(rows, 1.0)
    tokens_per_expert = stats.expert_counts / safe  # [K, E]
    prob_per_expert = stats.prob_sums / safe  # [E]
    loss = num_experts * jnp.sum(tokens_per_expert * prob_per_expert[None, :])
    return jnp.where(rows > 0, loss, 0.0)


GROUPED_IMPLS = ("ragged_dot", "tiles", "all_experts")

# On CPU, `all_experts` runs when its rows (every token through every held expert, N * E) are at most this
# many times the tiled path's static row bound (N * K routed rows + each expert's padding to whole tiles).
# Below that, reading each expert's weights once as a batched matmul beats sorting, padding and gathering
# every tile's weights: at 32 experts / top 4 (D 512, F 256) it ran 1.4-7x faster than the tiles from 1 to 32
# tokens (ratio 2.9 at 32), 0.9-1.4x at 64 (4.3) across loaded runs, slower from 128 (5.6) (BENCHMARKS.md,
# "MoE at real sizes"; `tools/bench_model.py --moe-tokens` measures it).
ALL_EXPERTS_ROW_RATIO = 3.0


def default_grouped_impl(
    backend: str | None = None,
    tokens: int | None = None,
    experts: int | None = None,
    top_k: int | None = None,
) -> str:
    """`ragged_dot` off CPU (its grouped-matmul lowering on GPU / TPU). On CPU, where XLA lowers `ragged_dot`
    densely (every expert against every row, E / K times the routed FLOPs): `all_experts` for few tokens
    (decode; `tokens * experts` within `ALL_EXPERTS_ROW_RATIO` of the tiled path's row bound), else `tiles`.
    Without the shapes (`tokens` None) the CPU answer is `tiles`."""
    if (backend or jax.default_backend()) != "cpu":
        return "ragged_dot"
    if tokens is None or experts is None or top_k is None:
        return "tiles"
    pairs = tokens * top_k
    tile = tile_rows(pairs, experts)
    tiled_rows = pairs + experts * (tile - 1)
    return "all_experts" if tokens * experts <= ALL_EXPERTS_ROW_RATIO * tiled_rows else "tiles"


def tile_rows(pairs: int, experts: int) -> int:
    """Rows per tile of the tiled path: about pairs / (2 experts) (a power of two in [8, 128]), so the
    padding of each expert group to whole tiles (< one tile per expert) costs at most about half the routed
    rows again (tiles of pairs / experts rows padded up to twice the work; smaller ones loop more)."""
    return int(min(128, max(8, 1 << max(0, math.ceil(math.log2(max(1, pairs / max(1, 2 * experts))))))))


def _swiglu(dot, xs, w_gate, w_up, w_down):
    """down(silu(gate(xs)) * up(xs)) with `dot(rows, weights)` the (grouped or single-expert) matmul; the
    weights are cast to the activations' dtype and `dot` sums in float32."""
    dtype = xs.dtype
    gate, up = dot(xs, w_gate.astype(dtype)), dot(xs, w_up.astype(dtype))
    return dot((jax.nn.silu(gate) * up).astype(dtype), w_down.astype(dtype))


# Elements of the (token, slot) pairs' rows (pairs x D) up to which `grouped_experts` runs a row's tokens at
# once; more go in chunks of at most about this many. One Qwen3-30B-A3B MoE block (D 2048, top 8) needs ~0.28
# MB of temporaries per token at once (its 8 rows sorted, padded to tiles, projected in float32, and their
# cotangents: 9.4 GiB at 32k tokens); 2^27 elements (2^16 pairs there, 8k tokens) bound it at 6.3 GiB at
# 32k tokens and 7.1 at 128k, of which 2.25 GiB is the float32 gradient of the experts' weights that the
# chunks' scan accumulates (2^17 pairs: 8.4 and 9.0 GiB; 2^15: 5.3 and 6.5). The tiled path pays its
# padding (< one tile per expert) once per chunk: 16,256 rows at 128 experts, 25 % of 2^16 pairs
# (BENCHMARKS.md, "Long context").
CHUNK_ELEMENTS = 1 << 27


def chunk_tokens(tokens: int, top_k: int, width: int) -> int:
    """Tokens per chunk of `grouped_experts` for rows of `width` (D): all of them while their pairs' rows
    hold at most `CHUNK_ELEMENTS` (the demo, decode, a device's share of a long row), else the fewest equal
    chunks of at most about that many (the last one padded)."""
    if tokens < 0 or top_k < 1 or width < 1:
        raise ValueError(
            f"chunk_tokens needs tokens >= 0, top_k >= 1 and width >= 1, got {tokens}, {top_k}, {width}"
        )
    chunks = max(1, -(-tokens * top_k * width // CHUNK_ELEMENTS))
    return max(1, -(-tokens // chunks))


TILES_PER_STEP = 16  # tiles one step of the tiled path's scan runs (a multiple of it is padded up to)


def _tiled_matmuls(
    xs: Float[Array, "r d"],
    tile_expert: Int[Array, " tiles"],
    w_gate: Float[Array, "e d f"],
    w_up: Float[Array, "e d f"],
    w_down: Float[Array, "e f d"],
) -> Float[Array, "r d"]:
    """SwiGLU of each `tile`-row block of `xs` through the expert named by `tile_expert` (float32 sums,
    returned in `xs`'s dtype).

    Batched matmuls over `TILES_PER_STEP` tiles at a time, each tile against its expert's weights gathered
    per tile ([tiles, D, F]). Up to that many tiles run as one batch (the tiny models: no loop at all); more
    go through a `lax.scan` of such batches whose body is checkpointed to keep only its matmul outputs, so
    the gathered weights exist for one step at a time, forward and backward (their gradients are summed
    into the [E, D, F] ones step by step). Gathering them for every tile at once cost 3 weight copies per
    tile and 3 float32 gradients of them in the backward: 11.5 GiB of temporaries for one Qwen3-30B-A3B MoE
    block at 4k tokens, 19.3 GiB at 8k; with `move_rows` and the fused slot sum 2.4 GiB at 4k, 8 at 32k
    (BENCHMARKS.md, "Long context").
    Batching tiles runs ~1.5x faster on XLA:CPU than one small dot per tile; skipping the unused tiles of
    the static bound with a `lax.cond` saved forward time but slowed the gradient and, under expert
    parallelism, deadlocked (devices taking different branches around the weights' collectives)."""
    tiles = tile_expert.shape[0]
    d = xs.shape[-1]
    rows = xs.reshape(tiles, -1, d)  # [tiles, tile, D]
    tile = rows.shape[1]

    def dot(a, w):
        return jnp.einsum("trd,tdf->trf", a, w, preferred_element_type=jnp.float32)

    def swiglu(rows: jax.Array, experts: jax.Array) -> jax.Array:
        gate, up, down = (w.astype(xs.dtype)[experts] for w in (w_gate, w_up, w_down))  # per tile
        hidden = (jax.nn.silu(dot(rows, gate)) * dot(rows, up)).astype(xs.dtype)
        return dot(hidden, down).astype(xs.dtype)  # the caller casts to this dtype anyway

    if tiles <= TILES_PER_STEP:
        return swiglu(rows, tile_expert).reshape(-1, d)
    if tiles % TILES_PER_STEP:
        raise ValueError(f"{tiles} tiles: more than {TILES_PER_STEP} must come in a multiple of it")
    steps = tiles // TILES_PER_STEP
    rows = rows.reshape(steps, TILES_PER_STEP, tile, d)
    experts = tile_expert.reshape(steps, TILES_PER_STEP)
    body = jax.checkpoint(
        lambda carry, step: (carry, swiglu(*step)), policy=jax.checkpoint_policies.dots_saveable
    )
    _, out = jax.lax.scan(body, None, (rows, experts))  # [steps, TILES_PER_STEP, tile, D]
    return out.reshape(-1, d)


@jax.custom_vjp
def move_rows(
    x: Float[Array, "m d"], index: Int[Array, " r"], inverse: Int[Array, " m"]
) -> Float[Array, "r d"]:
    """`x[index]` (rows whose index is out of range are 0) for an `index` that reads each row of `x` at
    most once, `inverse` naming for each row of `x` the row it went to (out of range: none). Its gradient
    is then a gather by `inverse` as well: JAX's own transpose of a gather is a scatter-add, which XLA:CPU
    runs over a 32-bit copy of the rows (2 GiB a buffer for the 262k (token, slot) pairs of 32k tokens)."""
    return jnp.take(x, index, axis=0, mode="fill", fill_value=0)


def _move_rows_fwd(x, index, inverse):
    return move_rows(x, index, inverse), (index, inverse)


def _move_rows_bwd(residuals, cotangent):
    index, inverse = residuals
    zero = np.zeros(index.shape, jax.dtypes.float0), np.zeros(inverse.shape, jax.dtypes.float0)
    return (jnp.take(cotangent, inverse, axis=0, mode="fill", fill_value=0), *zero)


move_rows.defvjp(_move_rows_fwd, _move_rows_bwd)


def _all_experts(
    x: Float[Array, "n d"],
    ids: Int[Array, "n k"],
    weights: Float[Array, "n k"],
    w_gate: Float[Array, "e d f"],
    w_up: Float[Array, "e d f"],
    w_down: Float[Array, "e f d"],
    first_expert: Int[Array, ""] | int,
) -> Float[Array, "n d"]:
    """Every held expert on every token as batched matmuls over the expert axis ([E, N, D] x [E, D, F]: each
    expert's weights read once, no sort, gather or padding), then summed over the experts in expert order
    (as HF's loop does) with each token's gate weight of that expert, 0 for the experts it did not choose.

    The batch dimension matters on XLA:CPU: `einsum("nd,edf->enf")` without it lowers to one dot against the
    weights transposed to [D, E * F], a copy of them per call that took 10x the batched dot's time."""
    n, d = x.shape
    local_experts = w_gate.shape[0]
    dtype = x.dtype
    local = ids - first_expert  # [N, K]; experts held elsewhere fall outside [0, E_local) and match none
    chosen = local[:, :, None] == jnp.arange(local_experts, dtype=local.dtype)  # [N, K, E_local]
    gates = weights.astype(dtype).astype(jnp.float32)  # as the grouped paths round them
    gates = jnp.sum(jnp.where(chosen, gates[:, :, None], 0.0), axis=1)  # [N, E_local]; ids are distinct

    def dot(a, w):
        return jax.lax.dot_general(
            a, w.astype(dtype), (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.float32
        )

    def experts(x, gates, w_gate, w_up, w_down):
        rows = jnp.broadcast_to(x, (local_experts, n, d))
        hidden = (jax.nn.silu(dot(rows, w_gate)) * dot(rows, w_up)).astype(dtype)
        out = dot(hidden, w_down).astype(dtype)  # [E_local, N, D]
        return jnp.sum(out.astype(jnp.float32) * gates.T[:, :, None], axis=0).astype(dtype)

    # Checkpointed to keep only the matmul outputs, as the tiled path's steps are: the same fusions then run
    # under every remat policy of the model, and the forward stays bit-identical across them.
    return jax.checkpoint(experts, policy=jax.checkpoint_policies.dots_saveable)(
        x, gates, w_gate, w_up, w_down
    )


def grouped_experts(
    x: Float[Array, "n d"],
    ids: Int[Array, "n k"],
    weights: Float[Array, "n k"],
    w_gate: Float[Array, "e d f"],
    w_up: Float[Array, "e d f"],
    w_down: Float[Array, "e f d"],
    first_expert: Int[Array, ""] | int = 0,
    impl: str | None = None,
    chunk: int | None = None,
) -> Float[Array, "n d"]:
    """sum_k weights[n, k] * Expert_{ids[n, k]}(x[n]) over the experts held here, `first_expert` onwards.

    The tokens go through in chunks of `chunk` (None: `chunk_tokens` for these shapes, i.e. all of them
    unless their (token, slot) pairs' rows pass `CHUNK_ELEMENTS`): each chunk sorted, tiled and summed on
    its own under a checkpointed `lax.scan`, so the working set is one chunk's (its sorted rows, tiles,
    float32 projections and their cotangents), whatever the row; the routing (ids, gates, router
    statistics) is the caller's, made once for all the tokens. Every token's output is computed from its
    own row and ids alone either way: chunking changes which rows share a matmul, not what any row gets.

    Both implementations sort the N*K (token, slot) pairs by expert. `ragged_dot` pushes the sorted rows
    through one grouped matmul per projection. `tiles` pads each expert's group to whole tiles of
    `tile_rows` rows (a static bound: N*K + E*(tile-1) rows) and runs every tile as a dense SwiGLU against
    its single expert's weights (batched over the tiles), so its cost follows the routed rows on any backend.
    `all_experts` (`_all_experts`) runs every held expert on every token and weights the outputs by the
    gates, 0 where not chosen: E / K times the routed FLOPs but each expert's weights read once, the
    cheapest on CPU for a few tokens (decode). `impl=None` takes `default_grouped_impl()` for these shapes.
    All sum in float32; they agree to float rounding.
    """
    n, k = ids.shape
    chunk = chunk_tokens(n, k, x.shape[-1]) if chunk is None else chunk
    if chunk < 1:
        raise ValueError(f"grouped_experts chunk must be a positive number of tokens, got {chunk}")
    impl = impl or default_grouped_impl(None, min(n, chunk), w_gate.shape[0], k)
    if impl not in GROUPED_IMPLS:
        raise ValueError(f"grouped_experts impl must be one of {GROUPED_IMPLS}, got {impl!r}")
    if chunk >= n:
        return _grouped(x, ids, weights, w_gate, w_up, w_down, first_expert, impl)
    chunks = -(-n // chunk)
    pad = chunks * chunk - n
    # Padding tokens take id -1, which no device holds (below every `first_expert`): they sort into the
    # group no matmul reads, weigh 0 in `all_experts`, and their rows are cut off below.
    x, ids, weights = (
        jnp.pad(a, ((0, pad), (0, 0)), constant_values=fill) for a, fill in ((x, 0), (ids, -1), (weights, 0))
    )

    def one_chunk(carry, part):
        return carry, _grouped(*part, w_gate, w_up, w_down, first_expert, impl)

    # Checkpointed: the scan keeps each chunk's inputs only, and the backward recomputes a chunk's forward
    # beside its cotangents, one chunk at a time.
    parts = (x.reshape(chunks, chunk, -1), ids.reshape(chunks, chunk, k), weights.reshape(chunks, chunk, k))
    _, out = jax.lax.scan(jax.checkpoint(one_chunk), None, parts)  # [chunks, chunk, D]
    return out.reshape(chunks * chunk, -1)[:n]


def _grouped(x, ids, weights, w_gate, w_up, w_down, first_expert, impl):
    """`grouped_experts` of all the tokens at once with `impl`."""
    n, k = ids.shape
    local_experts = w_gate.shape[0]
    if impl == "all_experts":
        return _all_experts(x, ids, weights, w_gate, w_up, w_down, first_expert)
    dtype = x.dtype
    flat = ids.reshape(-1) - first_expert  # [N*K]
    held = (flat >= 0) & (flat < local_experts)
    # Pairs for experts held elsewhere sort last, into a group no matmul reads.
    key = jnp.where(held, flat, local_experts)
    order = jnp.argsort(key, stable=True)
    group_sizes = jnp.bincount(key, length=local_experts + 1)[:local_experts].astype(jnp.int32)
    inverse = jnp.argsort(order)  # pair j of (token, slot) order sits at sorted position inverse[j]
    xs = move_rows(jnp.repeat(x, k, axis=0), order, inverse)  # [N*K, D], sorted by expert
    sorted_held = key[order] < local_experts
    if impl == "ragged_dot":
        out = _swiglu(
            lambda a, w: jax.lax.ragged_dot(a, w, group_sizes, preferred_element_type=jnp.float32),
            xs,
            w_gate,
            w_up,
            w_down,
        )
    else:
        pairs = n * k
        tile = tile_rows(pairs, local_experts)
        tiles = -(-(pairs + local_experts * (tile - 1)) // tile)
        if tiles > TILES_PER_STEP:  # whole steps of the tiled scan; the extra tiles hold no pair
            tiles = -(-tiles // TILES_PER_STEP) * TILES_PER_STEP
        padded = -(-group_sizes // tile) * tile  # each group rounded up to whole tiles
        padded_end = jnp.cumsum(padded)
        group_start = jnp.cumsum(group_sizes) - group_sizes
        expert = jnp.minimum(key[order], local_experts - 1)
        rank = jnp.arange(pairs) - group_start[expert]  # position within its expert's group
        dest = jnp.where(sorted_held, padded_end[expert] - padded[expert] + rank, tiles * tile)
        # The pair each buffer row holds (pairs: none), the inverse of `dest` on the rows it reaches.
        source = jnp.full((tiles * tile,), pairs, jnp.int32).at[dest].set(jnp.arange(pairs), mode="drop")
        buf = move_rows(xs, source, dest)  # [tiles * tile, D]
        # Tiles past the last group run expert E-1 on zero rows that no pair reads back.
        tile_expert = jnp.searchsorted(padded_end, jnp.arange(tiles) * tile, side="right")
        tile_expert = jnp.minimum(tile_expert, local_experts - 1).astype(jnp.int32)
        out = _tiled_matmuls(buf, tile_expert, w_gate, w_up, w_down)
        out = move_rows(out, dest, source)
    out = jnp.where(sorted_held[:, None], out, 0.0).astype(dtype)
    per_slot = move_rows(out, inverse, order).reshape(n, k, -1)  # back to (token, slot) order
    # The gate-weighted sum over slots as one fused multiply-reduce in float32; an einsum lowers to a dot
    # that first copies the [N, K, D] rows to float32 (2 GiB at 32k tokens).
    gates = weights.astype(dtype).astype(jnp.float32)[..., None]
    return jnp.sum(per_slot.astype(jnp.float32) * gates, axis=1).astype(dtype)


DISPATCHES = ("tokens", "experts")


def default_dispatch(group_tokens: int, expert_rows: int, replicated: bool) -> str:
    """`experts` when the tokens the tokens dispatch would gather to every device (`group_tokens`) reach
    the rows of the expert weights the experts dispatch gathers instead (`expert_rows` = 3 E F: gate, up
    and down of every expert); `tokens` otherwise, and always when some expert axis does not split the
    tokens (`replicated`). Traffic per layer (forward, its remat and the backward): the tokens dispatch
    gathers the group's bf16 rows and reduce-scatters their sums, ~12 N D bytes; the experts dispatch
    gathers the float32 weights twice and reduce-scatters their gradients, ~36 E D F bytes: equal at
    N = 3 E F. Memory: since `grouped_experts` runs long rows in chunks, the tokens dispatch's buffers are
    the group's rows plus one chunk's pairs, and it kept less than the experts dispatch at every row
    measured for Qwen3-30B-A3B on conf/mesh/h200x8_long (32k to 256k tokens; crossing, by their slopes, at
    ~490k), so the rule is the traffic's: 294,912 tokens a row there (BENCHMARKS.md, "Long context").
    Before the chunks it switched at 3 E F *pairs* (36,864 tokens), when the tokens dispatch's buffers
    held every pair of the row at once."""
    return "experts" if group_tokens >= expert_rows and not replicated else "tokens"


def expert_ffn(
    x: Float[Array, "b t d"],
    ids: Int[Array, "b t k"],
    weights: Float[Array, "b t k"],
    w_gate: Float[Array, "e d f"],
    w_up: Float[Array, "e d f"],
    w_down: Float[Array, "e f d"],
    dispatch: str | None = None,
) -> Float[Array, "b t d"]:
    """The grouped FFN, expert-parallel under a mesh whose rules shard `experts` (module docstring).

    `dispatch` (under such a mesh): `tokens` gathers the expert group's tokens to each device's experts,
    `experts` gathers the experts' weights to each device's own tokens; None picks by `default_dispatch`."""
    if dispatch is not None and dispatch not in DISPATCHES:
        raise ValueError(f"expert_ffn dispatch must be one of {DISPATCHES} or None, got {dispatch!r}")
    b, t, d = x.shape
    k = ids.shape[-1]
    mesh = sharding.current_mesh()
    expert_axes = () if mesh is None else sharding.mesh_axes_of("experts", w_gate.shape[0], mesh)
    if not expert_axes:
        y = grouped_experts(
            x.reshape(-1, d), ids.reshape(-1, k), weights.reshape(-1, k), w_gate, w_up, w_down
        )
        return y.reshape(b, t, d)
    assert mesh is not None  # expert axes come from a mesh
    # Context parallelism: the token axis stays split over the `seq` axes (each device its own tokens);
    # an expert axis that splits the tokens gathers them along the row as one that splits rows does.
    batch_axes, seq_axes = (
        () if e is None else (e,) if isinstance(e, str) else tuple(e)
        for e in sharding.logical_to_spec(("batch", "seq"), (b, t), mesh=mesh)
    )
    gather = tuple(a for a in expert_axes if a in batch_axes)
    gather_seq = tuple(a for a in expert_axes if a in seq_axes)
    reduce = tuple(a for a in expert_axes if a not in batch_axes and a not in seq_axes)
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    # Tokens of the expert group: this device's, times the expert axes that split them.
    group_tokens = b * t * math.prod(sizes[a] for a in gather + gather_seq)
    group_tokens //= math.prod(sizes[a] for a in batch_axes + seq_axes)
    dispatch = dispatch or default_dispatch(group_tokens, 3 * math.prod(w_gate.shape[::2]), bool(reduce))
    if dispatch == "experts" and reduce:
        raise ValueError(
            f"expert_ffn dispatch 'experts' needs every expert axis {expert_axes} to split the tokens; "
            f"{reduce} do not (the tokens are replicated there): use 'tokens'"
        )
    per_device = w_gate.shape[0] // math.prod(sizes[a] for a in expert_axes)
    tokens, experts = P(batch_axes or None, seq_axes or None), P(expert_axes)

    def gathered_experts(x, ids, weights, w_gate, w_up, w_down):
        # Every expert's weights to this device's own tokens: all-gathered over the expert axes (in the
        # order P(expert_axes) splits them, so expert ids stay global); the transpose reduce-scatters their
        # gradients back to the devices that hold them. Nothing here is sized by other devices' tokens.
        w_gate, w_up, w_down = (
            jax.lax.all_gather(w, expert_axes, axis=0, tiled=True) for w in (w_gate, w_up, w_down)
        )
        rows, local_t = x.shape[:2]
        return grouped_experts(
            x.reshape(-1, d), ids.reshape(-1, k), weights.reshape(-1, k), w_gate, w_up, w_down
        ).reshape(rows, local_t, d)

    def gathered_tokens(x, ids, weights, w_gate, w_up, w_down):
        if gather:
            x, ids, weights = (jax.lax.all_gather(a, gather, axis=0, tiled=True) for a in (x, ids, weights))
        if gather_seq:
            x, ids, weights = (
                jax.lax.all_gather(a, gather_seq, axis=1, tiled=True) for a in (x, ids, weights)
            )
        first = jax.lax.axis_index(expert_axes) * per_device
        rows, local_t = x.shape[:2]
        y = grouped_experts(
            x.reshape(-1, d), ids.reshape(-1, k), weights.reshape(-1, k), w_gate, w_up, w_down, first
        ).reshape(rows, local_t, d)
        if reduce:
            y = jax.lax.psum(y, reduce)
        if gather_seq:
            y = jax.lax.psum_scatter(y, gather_seq, scatter_dimension=1, tiled=True)
        if gather:
            y = jax.lax.psum_scatter(y, gather, scatter_dimension=0, tiled=True)
        return y

    return jax.shard_map(
        gathered_experts if dispatch == "experts" else gathered_tokens,
        mesh=mesh,
        in_specs=(tokens, tokens, tokens, experts, experts, experts),
        out_specs=tokens,
    )(x, ids, weights, w_gate, w_up, w_down)


class MoEBlock(nnx.Module):
    """Router `gate [D, E]` plus E SwiGLU experts stacked as `gate_proj/up_proj [E, D, F]`, `down_proj [E, F,
    D]`."""

    def __init__(self, config: ArchConfig, *, dtype: jnp.dtype, rngs: nnx.Rngs):
        d, e, f = config.hidden_size, config.num_experts, config.moe_intermediate_size
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        # Every token's softmax needs all E logits, so the router's expert dimension stays whole.
        self.gate = param(rngs, normal_init, (d, e), ("embed", None), dtype)
        self.gate_proj = param(rngs, normal_init, (e, d, f), ("experts", "embed", "mlp"), dtype)
        self.up_proj = param(rngs, normal_init, (e, d, f), ("experts", "embed", "mlp"), dtype)
        self.down_proj = param(rngs, normal_init, (e, f, d), ("experts", "mlp", "embed"), dtype)

    def __call__(
        self,
        x: Float[Array, "b t d"],
        forced: Int[Array, "b t k"] | None,
        token_mask: Bool[Array, "b t"],
    ) -> tuple[Float[Array, "b t d"], Int[Array, "b t k"], RouterStats]:
        logits = jnp.einsum("btd,de->bte", x.astype(jnp.float32), self.gate[...].astype(jnp.float32))
        ids, weights, probs = route(logits, self.top_k, self.norm_topk_prob, forced)
        y = expert_ffn(x, ids, weights, self.gate_proj[...], self.up_proj[...], self.down_proj[...])
        return y, ids, router_stats(ids, probs, token_mask)


def check_forced_experts(forced: jax.Array | np.ndarray, expected: tuple[int, ...], num_experts: int) -> None:
    """Shape and dtype always; id range, mixed rows and repeated ids when the array is concrete."""
    if tuple(forced.shape) != tuple(expected):
        raise ValueError(
            f"forced_experts has shape {tuple(forced.shape)}, expected {tuple(expected)} ([L_moe, B, T, K])"
        )
    if not jnp.issubdtype(forced.dtype, jnp.integer):
        raise TypeError(f"forced_experts must be an integer array, got dtype {forced.dtype}")
    if isinstance(forced, jax.core.Tracer):
        return
    ids = np.asarray(forced)
    bad = np.argwhere((ids < -1) | (ids >= num_experts))
    if bad.size:
        where = tuple(int(i) for i in bad[0])
        raise ValueError(
            f"forced_experts{list(where)} = {ids[where]} is outside [-1, num_experts={num_experts})"
        )
    mixed = np.argwhere((ids == -1).any(axis=-1) & (ids >= 0).any(axis=-1))
    if mixed.size:
        where = tuple(int(i) for i in mixed[0])
        raise ValueError(
            f"forced_experts{list(where)} = {ids[where].tolist()} mixes -1 with expert ids "
            "(a row is either all -1, native routing, or all real ids)"
        )
    ordered = np.sort(ids, axis=-1)
    repeated = np.argwhere(((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any(axis=-1))
    if repeated.size:
        where = tuple(int(i) for i in repeated[0])
        raise ValueError(f"forced_experts{list(where)} = {ids[where].tolist()} names an expert twice")
