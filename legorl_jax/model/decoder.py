"""Decoder layers and runs of identical layers, scanned or unrolled behind one flag.

A Qwen3-MoE stack can mix dense and MoE layers (`decoder_sparse_step`, `mlp_only_layers`). The policy
splits the stack into maximal runs of consecutive layers of the same kind; each run is one `LayerRun`:
- `scan=True`: one `DecoderLayer` built under `nnx.vmap`, every parameter stacked on a leading `layers`
  axis (added to its logical axes), applied with `jax.lax.scan`;
- `scan=False`: an `nnx.List` of layers applied in a Python loop (for stepping through in a debugger).
Both apply the same pure per-layer function (`nnx.merge` of the layer's graphdef and state), and layer i
of a run is initialised from `fold_in(key, i)` in both layouts, so the flag changes neither the weights
nor the results. With `remat=True` that function is wrapped in `jax.checkpoint`, so the backward pass
recomputes each layer's activations instead of storing them.

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
    ) -> tuple[Float[Array, "b t d"], Int[Array, "b t k"] | None, RouterStats | None, KVCache | None]:
        normed = self.input_layernorm(h)
        attn, cache = self.self_attn(
            normed, ctx.positions, ctx.segment_ids, cache, layer, ctx.slots, ctx.context
        )
        h = h + attn
        x = self.post_attention_layernorm(h)
        if self.is_moe:
            out, ids, stats = self.mlp(x, forced, ctx.token_mask)
        else:
            out, ids, stats = self.mlp(x), None, None
        return constrain(h + out, RESIDUAL_AXES), ids, stats, cache


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
        remat: bool,
    ):
        self.is_moe = is_moe
        self.count = int(keys.shape[0])
        self.scan = scan
        self.remat = remat

        def make(key: jax.Array) -> DecoderLayer:
            return DecoderLayer(config, is_moe, dtype=dtype, rngs=nnx.Rngs(params=key))

        if scan:
            stacked = nnx.vmap(make, in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
            self.layers = stacked(keys)
        else:
            self.layers = nnx.List([make(keys[i]) for i in range(self.count)])

    def _step(self, graphdef: nnx.GraphDef, ctx: LayerContext) -> Callable:
        def step(state: nnx.State, h: jax.Array, cache: KVCache | None, forced: jax.Array | None, layer: Any):
            h, ids, stats, cache = nnx.merge(graphdef, state)(h, ctx, forced, cache, layer)
            return (h, cache), (ids, stats)

        # Inside scan, CSE across iterations cannot happen, and preventing it would block optimisations.
        return jax.checkpoint(step, prevent_cse=not self.scan) if self.remat else step

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
