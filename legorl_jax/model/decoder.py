"""Decoder layers and runs of identical layers, scanned or unrolled behind one flag.

A Qwen3-MoE stack can mix dense and MoE layers (`decoder_sparse_step`, `mlp_only_layers`). The policy
splits the stack into maximal runs of consecutive layers of the same kind; each run is one `LayerRun`:
- `scan=True`: one `DecoderLayer` built under `nnx.vmap`, every parameter stacked on a leading `layers`
  axis (added to its logical axes), applied with `jax.lax.scan`;
- `scan=False`: an `nnx.List` of layers applied in a Python loop (for stepping through in a debugger).
Both apply the same pure per-layer function (`nnx.merge` of the layer's graphdef and state), and layer i
of a run is initialised from `fold_in(key, i)` in both layouts, so the flag changes neither the weights
nor the results.

Rematerialisation (`remat`, one of `REMAT_POLICIES`; `train.remat`) wraps that per-layer function in
`jax.checkpoint` with a policy saying what the backward pass finds stored; everything else it recomputes
from the layer's input. Names after maxtext's `remat_policy` where they mean the same:
- `none`: no checkpoint; every intermediate the backward needs stays alive from forward to backward
  (on a long row that includes attention's and the experts' working sets, for every layer);
- `full`: only the layer's input is kept (`nothing_saveable`): one [B, T, D] row per layer; the backward
  recomputes the whole layer first;
- `minimal`: also every matmul output without batch dimensions (`checkpoint_dots_with_no_batch_dims`):
  the q/k/v/o projections, the router logits and a dense MLP's projections; attention scores (batched
  over heads) and the experts' tiles (batched over tiles; `ragged_dot` is no dot) are recomputed;
- `save_dot_except_mlp`: the attention projections as `minimal`, while the MLP / MoE block runs under a
  checkpoint of its own that saves nothing, so none of its intermediates is kept.
Remat changes what is stored, never the values: gradients equal the un-rematerialised ones
(tests/model/test_policy.py). `True` / `False` are accepted for `full` / `none`.

Per layer a run returns (stacked on a leading axis) the routed expert ids and the router statistics
(MoE runs). A cached call's KVCache (all decoder layers) rides in the scan carry and each layer writes
only its new entries at its own layer index, so a donated cache is updated in place.

Einsum legend: B batch, T positions, D model dim, K experts per token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Bool, Float, Int

from legorl_jax.model.architecture import ArchConfig
from legorl_jax.model.attention import Attention
from legorl_jax.model.cache import KVCache
from legorl_jax.model.layers import DenseMLP, RMSNorm
from legorl_jax.model.moe import MoEBlock, RouterStats
from legorl_jax.model.sharding import constrain

RESIDUAL_AXES = ("batch", "seq", "embed")
REMAT_POLICIES = ("none", "full", "minimal", "save_dot_except_mlp")


def remat_policy_name(remat: str | bool) -> str:
    """`remat` as one of `REMAT_POLICIES` (True: full, False: none); anything else is refused."""
    if remat is True or remat is False:
        return "full" if remat else "none"
    if remat not in REMAT_POLICIES:
        raise ValueError(f"remat must be one of {REMAT_POLICIES} (or a bool), got {remat!r}")
    return str(remat)


_SAVED = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "minimal": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
    "save_dot_except_mlp": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LayerContext:
    """What every layer of one call sees besides the residual stream."""

    positions: Int[Array, "b t"]
    token_mask: Bool[Array, "b t"]  # tokens that count for the aux loss (real tokens)
    segment_ids: Int[Array, "b t"] | None  # packed calls
    slots: Int[Array, " b"] | None  # cached calls
    # Cached calls: attend to the first `context` positions of each slot only (None: all); static.
    context: int | None = dataclasses.field(default=None, metadata=dict(static=True))


class DecoderLayer(nnx.Module):
    """Pre-norm attention then pre-norm MLP (dense SwiGLU or MoE), each added to the residual."""

    def __init__(self, config: ArchConfig, is_moe: bool, *, dtype: jnp.dtype, rngs: nnx.Rngs):
        d, eps = config.hidden_size, config.rms_norm_eps
        self.is_moe = is_moe
        self.input_layernorm = RMSNorm(d, eps, "embed", dtype=dtype, rngs=rngs)
        self.self_attn = Attention(config, dtype=dtype, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(d, eps, "embed", dtype=dtype, rngs=rngs)
        if is_moe:
            self.mlp = MoEBlock(config, dtype=dtype, rngs=rngs)
        else:
            self.mlp = DenseMLP(d, config.intermediate_size, dtype=dtype, rngs=rngs)

    def __call__(
        self,
        h: Float[Array, "b t d"],
        ctx: LayerContext,
        forced: Int[Array, "b t k"] | None,
        cache: KVCache | None,
        layer: Int[Array, ""] | int,
        *,
        recompute_mlp: bool = False,
    ) -> tuple[Float[Array, "b t d"], Int[Array, "b t k"] | None, RouterStats | None, KVCache | None]:
        """`recompute_mlp`: run the MLP / MoE block under a checkpoint that saves nothing (its own inputs
        aside), whatever the enclosing layer's policy saves (`save_dot_except_mlp`)."""
        normed = self.input_layernorm(h)
        attn, cache = self.self_attn(
            normed, ctx.positions, ctx.segment_ids, cache, layer, ctx.slots, ctx.context
        )
        h = h + attn
        x = self.post_attention_layernorm(h)
        if recompute_mlp:
            mlp_graph, mlp_state = nnx.split(self.mlp)

            def mlp(state: nnx.State, x: jax.Array, forced: jax.Array | None, token_mask: jax.Array) -> tuple:
                return _apply_mlp(nnx.merge(mlp_graph, state), x, forced, token_mask)

            saves_nothing = jax.checkpoint(mlp, policy=jax.checkpoint_policies.nothing_saveable)
            out, ids, stats = saves_nothing(mlp_state, x, forced, ctx.token_mask)
        else:
            out, ids, stats = _apply_mlp(self.mlp, x, forced, ctx.token_mask)
        return constrain(h + out, RESIDUAL_AXES), ids, stats, cache


def _apply_mlp(
    mlp: nnx.Module, x: jax.Array, forced: jax.Array | None, token_mask: jax.Array
) -> tuple[jax.Array, jax.Array | None, RouterStats | None]:
    if isinstance(mlp, MoEBlock):
        return mlp(x, forced, token_mask)
    return mlp(x), None, None


class LayerRun(nnx.Module):
    """`count` consecutive layers of one kind, initialised from `keys[i]`; see the module docstring."""

    def __init__(
        self,
        config: ArchConfig,
        is_moe: bool,
        keys: jax.Array,
        *,
        dtype: jnp.dtype,
        scan: bool,
        remat: str | bool,
    ):
        self.is_moe = is_moe
        self.count = int(keys.shape[0])
        self.scan = scan
        self.remat = remat_policy_name(remat)

        def make(key: jax.Array) -> DecoderLayer:
            return DecoderLayer(config, is_moe, dtype=dtype, rngs=nnx.Rngs(params=key))

        if scan:
            stacked = nnx.vmap(make, in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
            self.layers = stacked(keys)
        else:
            self.layers = nnx.List([make(keys[i]) for i in range(self.count)])

    def _step(self, graphdef: nnx.GraphDef, ctx: LayerContext) -> Callable:
        policy = remat_policy_name(self.remat)
        recompute_mlp = policy == "save_dot_except_mlp"

        def step(state: nnx.State, h: jax.Array, cache: KVCache | None, forced: jax.Array | None, layer: Any):
            layer_module = nnx.merge(graphdef, state)
            h, ids, stats, cache = layer_module(h, ctx, forced, cache, layer, recompute_mlp=recompute_mlp)
            return (h, cache), (ids, stats)

        if policy == "none":
            return step
        # Inside scan, CSE across iterations cannot happen, and preventing it would block optimisations.
        return jax.checkpoint(step, prevent_cse=not self.scan, policy=_SAVED[policy])

    def __call__(
        self,
        h: Float[Array, "b t d"],
        ctx: LayerContext,
        forced: Int[Array, "n b t k"] | None,
        cache: KVCache | None,
        first_layer: int,
    ) -> tuple[Float[Array, "b t d"], Int[Array, "n b t k"] | None, RouterStats | None, KVCache | None]:
        """Applies the run; `forced` has one entry per layer of the run, `cache` holds every decoder layer
        (this run's are `first_layer` onwards) and travels in the scan carry, so it is updated in place."""
        layers = jnp.arange(first_layer, first_layer + self.count, dtype=jnp.int32)
        if self.scan:
            graphdef, state = nnx.split(self.layers)
            step = self._step(graphdef, ctx)

            def body(carry: tuple, xs: tuple) -> tuple:
                layer_state, layer_forced, layer = xs
                return step(layer_state, *carry, layer_forced, layer)

            (h, cache), (ids, stats) = jax.lax.scan(body, (h, cache), (state, forced, layers))
            return h, ids, stats, cache
        step = self._step(nnx.graphdef(self.layers[0]), ctx)
        outputs = []
        for i, layer in enumerate(self.layers):
            layer_forced = None if forced is None else forced[i]
            (h, cache), out = step(nnx.state(layer), h, cache, layer_forced, layers[i])
            outputs.append(out)
        ids, stats = jax.tree.map(lambda *xs: jnp.stack(xs), *outputs)
        return h, ids, stats, cache


def set_remat(module: nnx.Module, remat: str | bool) -> None:
    """Sets the remat policy of every `LayerRun` in `module` (e.g. a Policy) in place. It changes what a
    gradient stores and recomputes, never a value, so a policy shared with an engine serves the same."""
    policy = remat_policy_name(remat)
    for _, node in nnx.iter_graph(module):
        if isinstance(node, LayerRun):
            node.remat = policy
