"""The Qwen3 / Qwen3-MoE policy: packed forward, cached forward for the engine, token log-probs.

Public surface (names are a contract other components stand on):
    policy = init_policy(arch_config, seed=0, dtype="float32", ...)   # hf_layout.py; load_hf: checkpoint_io
    out = policy(input_ids, positions=None, segment_ids=None, forced_experts=None, compute_logits=True)
    cache = policy.init_cache(num_slots, max_len, dtype=None)
    out, cache = policy.forward_cached(
        input_ids, positions, cache, slots, forced_experts=None, compute_logits=True
    )
    lp = policy.token_logprobs(
        input_ids, targets, positions=None, segment_ids=None, forced_experts=None, temperature=1.0,
        impl="auto", details=False,
    )                         # details=True: a TokenLogprobs (log-probs, entropy, the forward's ModelOutput)
    policy.lm_head_weight()   # [D, V], the embedding transposed when tied
    policy.config             # the ArchConfig

`ModelOutput`: `logits float32[B, T, V]` (None with compute_logits=False), `hidden [B, T, D]` (after the
final norm, compute dtype), `routed_experts int32[L_moe, B, T, K]` (None for dense), `aux_loss float32[]`
(HF's unscaled `load_balancing_loss_func` over real tokens; 0.0 for dense).

`token_logprobs` is the one path from hidden states to log-probs (the engine scores prompts with it, the
trainer computes its log-probs with it): the fused `legorl_jax.kernels.logprobs` op on the final hidden
states, so the [B, T, V] logits never exist. `TokenLogprobs` (with `details=True`): `logprobs` and
`entropy float32[B, T]` (of the tempered distribution) and the `ModelOutput` of that same forward (its
routing and auxiliary loss; `logits` None).

Packed rows: `segment_ids` 0 = padding; attention stays within a segment, causal in it. Default
positions are 0..T-1 without segment ids and restart at each segment start with them.

Routing replay (R3) is an argument and a return value only (docs/style.md rule 13): `forced_experts` has
the shape of `routed_experts`; rows of -1 route natively (moe.py has the rule). Every MoE layer consumes
exactly its own slice.

Mixed precision: parameters are stored in `dtype`, cast to `compute_dtype` at use; the router and
softmaxes run in float32 and logits are always float32.

Jitting: both forwards are pure functions of (graphdef, state):
    graphdef, state = nnx.split(policy)
    step = jax.jit(lambda state, *a: nnx.merge(graphdef, state).forward_cached(*a), donate_argnums=2)
Input values are checked (ids in range, forced ids valid, slots unique) only when concrete, i.e. when
the method is called outside jit; shapes are checked always.

Einsum legend: B batch, T positions, D model dim, V vocabulary.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from legorl_jax.kernels.logprobs import token_logprobs as fused_token_logprobs
from legorl_jax.model import cache as kv
from legorl_jax.model import context_parallel
from legorl_jax.model.architecture import ArchConfig
from legorl_jax.model.decoder import RESIDUAL_AXES, LayerContext, LayerRun
from legorl_jax.model.layers import RMSNorm, normal_init, param
from legorl_jax.model.moe import RouterStats, check_forced_experts, load_balancing_loss
from legorl_jax.model.sharding import constrain

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def as_dtype(name: str, field: str = "dtype") -> jnp.dtype:
    if name not in DTYPES:
        raise ValueError(f"{field} must be one of {tuple(DTYPES)}, got {name!r}")
    return jnp.dtype(DTYPES[name])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ModelOutput:
    """What a forward returns (module docstring)."""

    logits: Float[Array, "b t v"] | None
    hidden: Float[Array, "b t d"]
    routed_experts: Int[Array, "l b t k"] | None
    aux_loss: Float[Array, ""]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TokenLogprobs:
    """What `Policy.token_logprobs(..., details=True)` returns (module docstring)."""

    logprobs: Float[Array, "b t"]
    entropy: Float[Array, "b t"]
    output: ModelOutput


def layer_runs(config: ArchConfig) -> tuple[tuple[bool, int, int], ...]:
    """Maximal runs of consecutive layers of one kind: (is_moe, first layer, count)."""
    runs: list[tuple[bool, int, int]] = []
    for i, is_moe in enumerate(config.layer_is_moe):
        if runs and runs[-1][0] == is_moe:
            runs[-1] = (is_moe, runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((is_moe, i, 1))
    return tuple(runs)


def positions_from_segments(segment_ids: Int[Array, "b t"]) -> Int[Array, "b t"]:
    """0, 1, 2, ... restarting wherever the segment id changes along the row."""
    t = segment_ids.shape[1]
    index = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), segment_ids.shape)
    starts = jnp.concatenate(
        [jnp.ones_like(segment_ids[:, :1], dtype=bool), segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1
    )
    return index - jax.lax.cummax(jnp.where(starts, index, 0), axis=1)


class Policy(nnx.Module):
    """Embedding, runs of decoder layers (decoder.py), final norm, LM head (or the tied embedding)."""

    def __init__(
        self,
        config: ArchConfig,
        *,
        rngs: nnx.Rngs,
        dtype: str = "float32",
        compute_dtype: str | None = None,
        scan_layers: bool = True,
        remat: str | bool = False,
    ):
        if not isinstance(config, ArchConfig):
            raise TypeError(f"config must be an ArchConfig, got {type(config).__name__}")
        param_dtype = as_dtype(dtype)
        self.config = config
        self.dtype = dtype
        self.compute_dtype = compute_dtype or dtype
        as_dtype(self.compute_dtype, "compute_dtype")
        self.scan_layers = scan_layers
        self.remat = remat
        d, v = config.hidden_size, config.vocab_size
        self.embed_tokens = param(rngs, normal_init, (v, d), ("vocab", "embed"), param_dtype)
        layer_key = rngs.params()
        self.run_layout = layer_runs(config)
        runs = []
        for is_moe, first, count in self.run_layout:
            keys = jnp.stack([jax.random.fold_in(layer_key, first + i) for i in range(count)])
            runs.append(LayerRun(config, is_moe, keys, dtype=param_dtype, scan=scan_layers, remat=remat))
        self.runs = nnx.List(runs)
        self.norm = RMSNorm(d, config.rms_norm_eps, "embed", dtype=param_dtype, rngs=rngs)
        if not config.tie_word_embeddings:
            self.lm_head = param(rngs, normal_init, (d, v), ("embed", "vocab"), param_dtype)

    # ------------------------------------------------------------------------------------------------
    # public API

    def __call__(
        self,
        input_ids: Int[Array, "b t"],
        *,
        positions: Int[Array, "b t"] | None = None,
        segment_ids: Int[Array, "b t"] | None = None,
        forced_experts: Int[Array, "l b t k"] | None = None,
        compute_logits: bool = True,
    ) -> ModelOutput:
        input_ids = self._check_tokens(input_ids)
        if segment_ids is None:
            segment_ids = jnp.ones(input_ids.shape, jnp.int32)
        segment_ids = self._check_like(segment_ids, input_ids, "segment_ids")
        positions = positions_from_segments(segment_ids) if positions is None else positions
        positions = self._check_like(positions, input_ids, "positions")
        forced_experts = self._check_forced(forced_experts, input_ids.shape)
        # Context parallelism: the layers run on the row in its load-balanced order (context_parallel.py).
        shards = context_parallel.shards(*input_ids.shape)
        if shards > 1:
            input_ids, positions, segment_ids = (
                context_parallel.to_layout(x, shards) for x in (input_ids, positions, segment_ids)
            )
            if forced_experts is not None:
                forced_experts = context_parallel.to_layout(forced_experts, shards, axis=2)
        ctx = LayerContext(
            positions=positions, token_mask=segment_ids > 0, segment_ids=segment_ids, slots=None
        )
        hidden, routed, stats, _ = self._trunk(input_ids, ctx, forced_experts, None)
        if shards > 1:
            hidden = constrain(context_parallel.from_layout(hidden, shards), RESIDUAL_AXES)
            routed = None if routed is None else context_parallel.from_layout(routed, shards, axis=2)
        return self._output(hidden, routed, stats, ctx, compute_logits)

    def init_cache(self, num_slots: int, max_len: int, dtype: str | None = None) -> kv.KVCache:
        """An empty cache for `num_slots` sequences of up to `max_len` positions (compute dtype by
        default)."""
        c = self.config
        cache_dtype = as_dtype(dtype or self.compute_dtype, "cache dtype")
        return kv.init_kv_cache(
            c.num_hidden_layers, num_slots, max_len, c.num_key_value_heads, c.head_dim, cache_dtype
        )

    def forward_cached(
        self,
        input_ids: Int[Array, "b t"],
        positions: Int[Array, "b t"],
        cache: kv.KVCache,
        slots: Int[Array, " b"],
        *,
        forced_experts: Int[Array, "l b t k"] | None = None,
        compute_logits: bool = True,
        context: int | None = None,
    ) -> tuple[ModelOutput, kv.KVCache]:
        """Prefill (T = bucket length, padding at position -1) and decode (T = 1) alike; see cache.py.

        `context` (static): every position is below it, so attention reads only that many entries per slot.
        """
        input_ids = self._check_tokens(input_ids)
        positions, slots = jnp.asarray(positions), jnp.asarray(slots)
        kv.check_cached_inputs(cache, input_ids, positions, slots, context)
        if cache.num_layers != self.config.num_hidden_layers:
            raise ValueError(
                f"cache has {cache.num_layers} layers, the policy {self.config.num_hidden_layers}"
            )
        forced_experts = self._check_forced(forced_experts, input_ids.shape)
        ctx = LayerContext(
            positions=positions, token_mask=positions >= 0, segment_ids=None, slots=slots, context=context
        )
        hidden, routed, stats, updated = self._trunk(input_ids, ctx, forced_experts, cache)
        assert updated is not None  # a trunk given a cache returns it
        return self._output(hidden, routed, stats, ctx, compute_logits), updated

    def lm_head_weight(self) -> Float[Array, "d v"]:
        """The output projection [D, V] in the parameter dtype (the embedding transposed when tied)."""
        if self.config.tie_word_embeddings:
            return self.embed_tokens[...].T
        return self.lm_head[...]

    def token_logprobs(
        self,
        input_ids: Int[Array, "b t"],
        targets: Int[Array, "b t"],
        *,
        positions: Int[Array, "b t"] | None = None,
        segment_ids: Int[Array, "b t"] | None = None,
        forced_experts: Int[Array, "l b t k"] | None = None,
        temperature: float = 1.0,
        impl: str = "auto",
        details: bool = False,
    ) -> Float[Array, "b t"] | TokenLogprobs:
        """log_softmax(logits / temperature)[targets] per position, without materialising the logits.

        `impl` picks the kernel's implementation (`legorl_jax.kernels.logprobs.IMPLS`); `details=True`
        returns a `TokenLogprobs`: the entropy too, and the forward's `ModelOutput`.
        """
        targets = jnp.asarray(targets)
        if tuple(targets.shape) != tuple(jnp.shape(input_ids)):
            raise ValueError(
                f"targets has shape {tuple(targets.shape)}, input_ids has {tuple(jnp.shape(input_ids))}"
            )
        out = self(
            input_ids,
            positions=positions,
            segment_ids=segment_ids,
            forced_experts=forced_experts,
            compute_logits=False,
        )
        b, t, d = out.hidden.shape
        head = self.lm_head_weight().astype(out.hidden.dtype)
        flat = fused_token_logprobs(
            out.hidden.reshape(b * t, d),
            head,
            targets.reshape(-1),
            temperature=temperature,
            return_entropy=details,
            impl=impl,
        )
        if not details:
            return flat.reshape(b, t)
        logprobs, entropy = flat
        return TokenLogprobs(logprobs=logprobs.reshape(b, t), entropy=entropy.reshape(b, t), output=out)

    # ------------------------------------------------------------------------------------------------
    # internals

    def _trunk(
        self, input_ids: jax.Array, ctx: LayerContext, forced: jax.Array | None, cache: kv.KVCache | None
    ) -> tuple[jax.Array, jax.Array | None, RouterStats | None, kv.KVCache | None]:
        compute = as_dtype(self.compute_dtype)
        # Gather the table whole along embed first (FSDP-style gather at use): a lookup into an
        # embed-sharded table cannot be resharded to batch-sharded rows without a full rematerialisation.
        table = constrain(self.embed_tokens[...], ("vocab", None))
        h = constrain(jnp.take(table, input_ids, axis=0).astype(compute), RESIDUAL_AXES)
        routed: list[jax.Array] = []
        stats = None
        moe_seen = 0
        for run, (is_moe, first, count) in zip(self.runs, self.run_layout, strict=True):
            run_forced = None
            if is_moe and forced is not None:
                run_forced = forced[moe_seen : moe_seen + count]
            h, ids, run_stats, cache = run(h, ctx, run_forced, cache, first)
            if is_moe:
                assert ids is not None  # a MoE run returns its routing
                routed.append(ids)
                summed = jax.tree.map(lambda x: jnp.sum(x, axis=0), run_stats)
                stats = summed if stats is None else stats + summed
                moe_seen += count
        if moe_seen != self.config.num_moe_layers:
            raise RuntimeError(
                f"{moe_seen} MoE layers consumed routing, the config has {self.config.num_moe_layers}"
            )
        routed_experts = jnp.concatenate(routed, axis=0) if routed else None
        return self.norm(h), routed_experts, stats, cache

    def _output(
        self,
        hidden: jax.Array,
        routed: jax.Array | None,
        stats: RouterStats | None,
        ctx: LayerContext,
        compute_logits: bool,
    ) -> ModelOutput:
        logits = None
        if compute_logits:
            head = self.lm_head_weight().astype(hidden.dtype)
            logits = jnp.einsum("btd,dv->btv", hidden, head, preferred_element_type=jnp.float32)
            logits = constrain(logits.astype(jnp.float32), ("batch", "seq", "vocab"))
        if stats is None:
            aux = jnp.zeros((), jnp.float32)
        else:
            tokens = jnp.sum(ctx.token_mask.astype(jnp.float32))
            aux = load_balancing_loss(stats, tokens, self.config.num_moe_layers, self.config.num_experts)
        return ModelOutput(logits=logits, hidden=hidden, routed_experts=routed, aux_loss=aux)

    def _check_tokens(self, input_ids: jax.Array) -> jax.Array:
        input_ids = jnp.asarray(input_ids) if not isinstance(input_ids, jax.core.Tracer) else input_ids
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be [B, T], got shape {tuple(input_ids.shape)}")
        if not jnp.issubdtype(input_ids.dtype, jnp.integer):
            raise TypeError(f"input_ids must be an integer array, got dtype {input_ids.dtype}")
        if not isinstance(input_ids, jax.core.Tracer):
            ids = np.asarray(input_ids)
            bad = np.argwhere((ids < 0) | (ids >= self.config.vocab_size))
            if bad.size:
                b, t = bad[0]
                raise ValueError(
                    f"input_ids[{b}, {t}] = {ids[b, t]} is outside [0, vocab_size={self.config.vocab_size})"
                )
        return input_ids

    @staticmethod
    def _check_like(array: jax.Array, input_ids: jax.Array, name: str) -> jax.Array:
        array = jnp.asarray(array) if not isinstance(array, jax.core.Tracer) else array
        if tuple(array.shape) != tuple(input_ids.shape):
            raise ValueError(f"{name} has shape {tuple(array.shape)}, input_ids has {tuple(input_ids.shape)}")
        if not jnp.issubdtype(array.dtype, jnp.integer):
            raise TypeError(f"{name} must be an integer array, got dtype {array.dtype}")
        return array

    def _check_forced(self, forced: jax.Array | None, token_shape: tuple[int, ...]) -> jax.Array | None:
        if forced is None:
            return None
        if not isinstance(forced, (jax.Array, np.ndarray)):  # nested lists; checked before any cast
            forced = np.asarray(forced)
        c = self.config
        if not c.is_moe:
            raise ValueError(
                f"forced_experts was given (shape {tuple(forced.shape)}) but {c.architectures[0]} has no MoE "
                "layers"
            )
        check_forced_experts(forced, (c.num_moe_layers, *token_shape, c.num_experts_per_tok), c.num_experts)
        return forced
