"""The train step: recompute log-probs with routing replayed (R3), the loss, gradients, one AdamW update.

`Trainer(policy, algo, train, mesh=..., rules=...)` owns the jitted programs of one policy on one mesh:

- `train_step(state, batch, old_logprobs=None, ref_logprobs=None) -> (state, metrics, logprobs)`: one
  optimiser update on one mini-batch. Rows are split into `rows / train.micro_batch_rows` micro-batches
  (micro-batch j takes rows j, j + M, j + 2M, ..., so each one stays sharded like the batch and the split
  moves no data) and gradients are accumulated under `lax.scan`. Every micro-batch loss is its share of the
  mini-batch loss (`loss.LossNorm` is counted over the whole mini-batch first), so accumulation gives the
  full-batch gradient, not a mean of micro-batch means. Log-probs and entropies come from
  `Policy.token_logprobs` (the fused op on the final hidden states: the [N, V] logits never exist) at
  `algo.temperature` with `train.logprob_impl`, with `forced_experts = batch.routed_experts` when
  `train.routing_replay`.
  A non-finite gradient norm skips the update (counted in `state.skipped`). The MoE auxiliary loss is added
  with `algo.aux_loss_coef`.
- `old_logprobs(params, batch)`: π_old with the same replayed routing, computed once per batch before the
  first update whenever there is more than one update (mini-batches × epochs > 1) or masked IS needs the
  ratio before the first gradient; with a single update π_old = sg(π_θ) inside the step (identical values,
  no extra forward).
- `ref_logprobs(batch)`: the frozen reference for the k3 KL (`algo.kl_coef > 0`), routed natively: the
  recorded routing belongs to the rollout policy, not to the reference (verl runs its reference the same
  way). The reference is `reference_params`, by default the weights of the policy the trainer was built
  from (the initial checkpoint); it is not checkpointed, a resumed run rebuilds it from that checkpoint.
  The trainer keeps those initial weights (`initial_params`, the default start of `init_state`).
- `update(state, batch, pack_stats) -> (state, UpdateResult)`: everything one `TrainBatch` gets: the batch
  on the mesh, π_old, the reference and the native routing computed once, then `train_step` on each of
  `train.mini_batches` mini-batches (rows j, j + M, ...) for `train.epochs` epochs. `UpdateResult.metrics`
  are host floats: `train/*` (loss terms, clip fraction, KL, entropy, grad norm, learning rate,
  skipped updates), `align/*` (monitor/alignment.py: π_old vs behaviour log-probs, replay coverage, routing
  agreement from one extra forward without replay every `train.routing_agreement_every` steps), the
  rollout correction's `train/is_*` figures over the whole batch (`loss.importance_stats`: ratio mean, max
  and min, capped share, ESS, computed beside the alignment from the same π_old, no extra forward), with
  `trainer_version` given the same per version gap of `TrainBatch.token_versions` (`train/is_*_gap_<k>`,
  monitor/offpolicy.py) and the log-prob `align/*` figures over the tokens of the trainer's own version only,
  older ones in `offpolicy/*_cross`; with or without it, tokens sampled over K/V of older weights
  (`TrainBatch.stale_kv`) in `offpolicy/*_stale_kv`, not `align/*` (`monitor.alignment.version_alignment`),
  and the packer's `batch/*`;
  `UpdateResult.nll` is the sampled tokens' negative log-likelihood under π_old and
  `UpdateResult.logprob_diffs` the per-token trainer − behaviour log-probs.
  A learning rate of 0 logs a warning every step it trains at it.

Every program takes the `TrainBatch` pytree as it is; `device_batch` puts one on the mesh.

Rematerialisation: the trainer sets `train.remat` on the policy's decoder layers
(`model.decoder.set_remat`) before it splits it: what each layer keeps from the forward for the backward.
It changes memory and time, never a value.

Sharding: with a mesh, every program is jitted with declared in/out shardings: parameters by their
logical axes (model/sharding.py), the optimiser state like the parameters, batch rows over the mesh
axes of the logical `batch` axis, the layer and top-k axes of the routing replicated, scalars replicated.
`train.micro_batch_rows` must be a multiple of the number of batch shards. Without a mesh the same
programs run on one device. On a mesh over several processes (train/distributed.py) every process holds the
same host batch and builds only its own devices' shards; host copies of sharded results are gathered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from legorl_jax.config import AlgoConfig, TrainConfig
from legorl_jax.model.decoder import set_remat
from legorl_jax.model.policy import Policy, TokenLogprobs
from legorl_jax.model.sharding import DEFAULT_RULES, Rules, logical_to_spec, state_shardings, use_rules
from legorl_jax.monitor.alignment import logprob_alignment, routing_alignment, version_alignment
from legorl_jax.monitor.offpolicy import gap_metrics
from legorl_jax.train import distributed
from legorl_jax.train.batch import PackStats, RoutingSpec
from legorl_jax.train.loss import importance_stats, loss_norm, policy_loss, rollout_correction
from legorl_jax.train.state import (
    TrainState,
    apply_gradients,
    init_train_state,
    make_optimizer,
    make_schedule,
)
from legorl_jax.types import TrainBatch

log = logging.getLogger(__name__)

_LAST_VALUE = ("train/lr",)
# One micro-batch's (or mini-batch's) rows with their share of π_old and of the reference.
_Share = tuple[TrainBatch, jax.Array | None, jax.Array | None]


class Trainer:
    """Jitted log-prob, step and alignment programs of one policy on one mesh (module docstring)."""

    def __init__(
        self,
        policy: Policy,
        algo: AlgoConfig,
        train: TrainConfig,
        *,
        mesh: Mesh | None = None,
        rules: Rules | None = None,
        reference_params: Any | None = None,
    ) -> None:
        self.algo, self.train, self.mesh = algo, train, mesh
        self.rules = DEFAULT_RULES if rules is None else rules
        arch = policy.config
        self.routing = (
            RoutingSpec(arch.num_moe_layers, arch.num_experts_per_tok, arch.num_experts)
            if arch.is_moe
            else None
        )
        set_remat(policy, train.remat)
        self.graphdef, self.initial_params, self.rest = nnx.split(policy, nnx.Param, ...)
        self.optimizer = make_optimizer(train)
        self.schedule = make_schedule(train)
        self.norm_length = float(algo.agg_norm_length or train.max_tokens)
        self.param_shardings = None
        if mesh is not None:
            shards = math.prod(
                dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))[a]
                for a in dict(self.rules)["batch"]
            )
            if train.micro_batch_rows % shards:
                raise ValueError(
                    f"train.micro_batch_rows={train.micro_batch_rows} must be a multiple of the "
                    f"{shards} batch shards "
                    f"of the mesh {dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))}"
                )
            with self._context():
                self.param_shardings = nnx.filter_state(state_shardings(policy, mesh, self.rules), nnx.Param)
        self.reference_params = None
        if algo.kl_coef > 0:
            self.reference_params = self._place_params(
                self.initial_params if reference_params is None else reference_params
            )
        self._programs: dict[tuple[Any, ...], Any] = {}
        self._state_shardings = self._init_shardings() if mesh is not None else None

    # ------------------------------------------------------------------------------------------------
    # state and batches

    @property
    def row_multiple(self) -> int:
        """What the packer's row count must be a multiple of (mini-batches × micro-batch rows)."""
        return self.train.mini_batches * self.train.micro_batch_rows

    def init_state(self, params: Any | None = None, *, seed: int = 0) -> TrainState:
        """A step-0 state on the mesh, from `params` (default: the policy's own)."""
        params = self._place_params(self.initial_params if params is None else params)
        placement = {} if self._state_shardings is None else {"out_shardings": self._state_shardings}
        with self._context():
            return jax.jit(lambda p: init_train_state(p, self.optimizer, seed=seed), **placement)(params)

    def abstract_state(self) -> TrainState:
        """Shapes, dtypes and shardings of a state, allocating nothing (the checkpoint restore target)."""
        shapes = jax.eval_shape(lambda p: init_train_state(p, self.optimizer, seed=0), self.initial_params)
        if self._state_shardings is None:
            return shapes
        return jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, self._state_shardings
        )

    def _init_shardings(self) -> Any:
        """The state's shardings: params by logical axes, the optimiser state as XLA propagates them."""
        abstract = jax.tree.map(
            lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
            self.initial_params,
            self.param_shardings,
        )
        init = jax.jit(lambda p: init_train_state(p, self.optimizer, seed=0))
        with self._context():
            return init.lower(abstract).compile().output_shardings

    def policy_of(self, params: Any) -> Policy:
        """The policy module holding `params` (for publishing)."""
        return nnx.merge(self.graphdef, params, self.rest)

    def _place_params(self, params: Any) -> Any:
        if self.param_shardings is None:
            return params
        return distributed.put(params, self.param_shardings)

    def device_batch(self, batch: TrainBatch) -> TrainBatch:
        """The batch's arrays on the mesh (the recorded routing too: replayed only when train.routing_replay,
        compared with the trainer's own routing either way; dropped for a dense policy). `token_versions`
        and `stale_kv` stay on the host: no program reads them, and a batch with and one without them compile
        the same."""
        if not isinstance(batch, TrainBatch):
            raise TypeError(f"device_batch takes a TrainBatch, got {type(batch).__name__}")
        if batch.rows % self.train.micro_batch_rows:
            raise ValueError(
                f"batch has {batch.rows} rows, not a multiple of "
                f"train.micro_batch_rows={self.train.micro_batch_rows}"
            )
        batch = dataclasses.replace(batch, token_versions=None, stale_kv=None)
        if self.routing is None:
            batch = dataclasses.replace(batch, routed_experts=None)
        return distributed.put(batch, self._batch_shardings(batch))

    def _batch_shardings(self, batch: TrainBatch) -> TrainBatch | None:
        """A TrainBatch of the fields' shardings (None without a mesh: one device)."""
        if self.mesh is None:
            return None
        row = self._row_sharding()
        rows = jax.tree.map(lambda _: row, dataclasses.replace(batch, routed_experts=None))
        routing = None if batch.routed_experts is None else self._row_sharding(routing=True)
        return dataclasses.replace(rows, routed_experts=routing)

    def _row_sharding(self, *, routing: bool = False) -> NamedSharding:
        shape = (self.train.micro_batch_rows, self.train.max_tokens)
        spec = logical_to_spec(("batch", "seq"), shape, mesh=self.mesh, rules=self.rules)
        if routing:
            spec = PartitionSpec(None, *spec, None)
        return NamedSharding(self.mesh, spec)

    @contextlib.contextmanager
    def _context(self) -> Iterator[None]:
        if self.mesh is None:
            with use_rules(self.rules):
                yield
            return
        with jax.set_mesh(self.mesh), use_rules(self.rules):
            yield

    # ------------------------------------------------------------------------------------------------
    # the computations (pure functions of arrays, jitted by _jit)

    def _forward(self, params: Any, mb: TrainBatch, *, replay: bool) -> TokenLogprobs:
        model = nnx.merge(self.graphdef, params, self.rest)
        forced = mb.routed_experts if replay and self.train.routing_replay else None
        return model.token_logprobs(
            mb.tokens,
            mb.targets,
            positions=mb.positions,
            segment_ids=mb.segment_ids,
            forced_experts=forced,
            temperature=self.algo.temperature,
            impl=self.train.logprob_impl,
            details=True,
        )

    def _micro_rows(self, x: jax.Array, axis: int = 0) -> jax.Array:
        """[..., B, ...] -> [M, ..., B / M, ...] (B at `axis`) with micro-batch j = rows j, j + M, ...

        Row i * M + j goes to micro-batch j: the rows-per-micro-batch axis stays major, so a batch
        sharded in contiguous row blocks reshapes without moving data.
        """
        rows_per = self.train.micro_batch_rows
        n_micro = x.shape[axis] // rows_per
        x = x.reshape(*x.shape[:axis], rows_per, n_micro, *x.shape[axis + 1 :])
        return jnp.moveaxis(x, axis + 1, 0)

    def _micro_split(self, batch: TrainBatch) -> TrainBatch:
        """Every field split into micro-batches by `_micro_rows` (the routing's row axis is its second)."""
        routing = batch.routed_experts
        split = jax.tree.map(self._micro_rows, dataclasses.replace(batch, routed_experts=None))
        return dataclasses.replace(
            split, routed_experts=None if routing is None else self._micro_rows(routing, axis=1)
        )

    @staticmethod
    def _micro_join(x: jax.Array) -> jax.Array:
        """Inverse of `_micro_split` for [M, B / M, T] arrays."""
        return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])

    def _step_fn(
        self, state: TrainState, batch: TrainBatch, old: jax.Array | None, ref: jax.Array | None
    ) -> tuple[TrainState, dict[str, jax.Array], jax.Array]:
        mask, seg = batch.loss_mask, batch.segment_ids
        if old is None:
            norm = loss_norm(mask, seg)
        else:
            _, kept = rollout_correction(old, batch.behaviour_logprobs, mask, seg, self.algo)
            norm = loss_norm(kept, seg, sampled_mask=mask)
        micro = (
            self._micro_split(batch),
            None if old is None else self._micro_rows(old),
            None if ref is None else self._micro_rows(ref),
        )
        n_micro = micro[0].tokens.shape[0]

        def loss_fn(params: Any, mb: _Share) -> tuple[jax.Array, tuple[dict[str, jax.Array], jax.Array]]:
            rows, mb_old, mb_ref = mb
            scored = self._forward(params, rows, replay=True)
            lp = scored.logprobs
            loss, metrics = policy_loss(
                lp,
                mb_old,
                rows.behaviour_logprobs,
                rows.advantages,
                rows.loss_mask,
                rows.segment_ids,
                self.algo,
                norm_length=self.norm_length,
                norm=norm,
                ref_logprobs=mb_ref,
                entropy=jax.lax.stop_gradient(scored.entropy),
            )
            aux = scored.output.aux_loss / n_micro
            metrics["train/aux_loss"] = jax.lax.stop_gradient(aux)
            loss = loss + self.algo.aux_loss_coef * aux
            metrics["train/loss"] = jax.lax.stop_gradient(loss)
            return loss, (metrics, jax.lax.stop_gradient(lp))

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        def body(acc: Any, mb: _Share) -> tuple[Any, jax.Array]:
            (_, (metrics, lp)), grads = grad_fn(state.params, mb)
            # Accumulate in float32 whatever the parameter dtype.
            grads = jax.tree.map(lambda g: g.astype(jnp.float32), grads)
            return jax.tree.map(jnp.add, acc, (grads, metrics)), lp

        first = jax.tree.map(lambda x: x[0], micro)
        metric_shapes = jax.eval_shape(lambda p, mb: loss_fn(p, mb)[1][0], state.params, first)
        zeros = (
            jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), state.params),
            jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes),
        )
        (grads, metrics), lps = jax.lax.scan(body, zeros, micro)

        metrics["train/lr"] = jnp.asarray(self.schedule(state.step - state.skipped), jnp.float32)
        new_state, grad_norm, applied = apply_gradients(state, grads, self.optimizer)
        metrics["train/grad_norm"] = grad_norm
        metrics["train/update_applied"] = applied
        return new_state, metrics, self._micro_join(lps)

    def _logprob_fn(self, params: Any, batch: TrainBatch, *, replay: bool) -> jax.Array:
        micro = self._micro_split(batch)
        lps = jax.lax.map(lambda mb: self._forward(params, mb, replay=replay).logprobs, micro)
        return self._micro_join(lps)

    def _native_routing_fn(self, params: Any, batch: TrainBatch) -> jax.Array:
        micro = self._micro_split(dataclasses.replace(batch, routed_experts=None))

        def routed(mb: TrainBatch) -> jax.Array:
            model = nnx.merge(self.graphdef, params, self.rest)
            return model(
                mb.tokens, positions=mb.positions, segment_ids=mb.segment_ids, compute_logits=False
            ).routed_experts

        per_micro = jax.lax.map(routed, micro)  # [M, L, B / M, T, K]
        return (
            jnp.moveaxis(per_micro, 1, 0).swapaxes(1, 2).reshape(per_micro.shape[1], -1, *per_micro.shape[3:])
        )

    def _alignment_fn(
        self, train_lp: jax.Array, batch: TrainBatch, native: jax.Array | None
    ) -> dict[str, jax.Array]:
        metrics = logprob_alignment(train_lp, batch.behaviour_logprobs, batch.loss_mask)
        metrics.update(
            importance_stats(
                train_lp, batch.behaviour_logprobs, batch.loss_mask, batch.segment_ids, self.algo
            )
        )
        if self.routing is not None:
            recorded = batch.routed_experts
            if recorded is None:
                recorded = jnp.full(
                    (self.routing.num_layers, *batch.tokens.shape, self.routing.top_k), -1, jnp.int32
                )
            metrics.update(routing_alignment(recorded, native, batch.loss_mask, input_mask=batch.segment_ids))
            if not self.train.routing_replay:  # recorded, compared, but not replayed
                metrics["align/routing_coverage"] = metrics["align/routing_coverage_all"] = jnp.zeros(
                    (), jnp.float32
                )
        return metrics

    # ------------------------------------------------------------------------------------------------
    # jitted entry points

    def _jit(self, key: tuple[Any, ...], fn: Any, shardings: Any, donate: tuple[int, ...] = ()) -> Any:
        """`fn` jitted once per key; with a mesh, `shardings()` gives its (in, out) shardings."""
        if key not in self._programs:
            if self.mesh is None:
                self._programs[key] = jax.jit(fn, donate_argnums=donate)
            else:
                ins, outs = shardings()
                self._programs[key] = jax.jit(fn, in_shardings=ins, out_shardings=outs, donate_argnums=donate)
        return self._programs[key]

    def _replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec())

    def train_step(
        self,
        state: TrainState,
        batch: TrainBatch,
        old_logprobs: jax.Array | None = None,
        ref_logprobs: jax.Array | None = None,
    ) -> tuple[TrainState, dict[str, jax.Array], jax.Array]:
        """One update on one device batch (see module docstring); returns the log-probs it trained on."""
        if self.algo.mis != "none" and old_logprobs is None:
            raise ValueError(
                f"algo.mis={self.algo.mis!r} needs old_logprobs before the update (Trainer.old_logprobs)"
            )
        if (ref_logprobs is None) != (self.algo.kl_coef == 0):
            raise ValueError(
                f"ref_logprobs must be given exactly when algo.kl_coef > 0 (kl_coef={self.algo.kl_coef})"
            )
        given = (old_logprobs is not None, ref_logprobs is not None)

        def shardings() -> tuple[Any, Any]:
            row = self._row_sharding()
            ins = (self._state_shardings, self._batch_shardings(batch), *(row if g else None for g in given))
            return ins, (self._state_shardings, self._replicated(), row)

        program = self._jit(("step", _layout(batch), given), self._step_fn, shardings, donate=(0,))
        with self._context():
            return program(state, batch, old_logprobs, ref_logprobs)

    def _logprobs(self, params: Any, batch: TrainBatch, *, replay: bool) -> jax.Array:
        program = self._jit(
            ("logprobs", _layout(batch), replay),
            lambda p, b: self._logprob_fn(p, b, replay=replay),
            lambda: ((self.param_shardings, self._batch_shardings(batch)), self._row_sharding()),
        )
        with self._context():
            return program(params, batch)

    def old_logprobs(self, params: Any, batch: TrainBatch) -> jax.Array:
        """π_old: log-probs of the batch's targets with the recorded routing replayed, no gradient."""
        return self._logprobs(params, batch, replay=True)

    def ref_logprobs(self, batch: TrainBatch) -> jax.Array:
        """The frozen reference's log-probs, routed natively."""
        return self._logprobs(self.reference_params, batch, replay=False)

    def native_routing(self, params: Any, batch: TrainBatch) -> jax.Array:
        """The trainer's own top-k routing of the batch (no replay), int32[L, B, T, K]."""
        program = self._jit(
            ("native", _layout(batch)),
            self._native_routing_fn,
            lambda: (
                (self.param_shardings, self._batch_shardings(batch)),
                self._row_sharding(routing=True),
            ),
        )
        with self._context():
            return program(params, batch)

    def alignment(self, train_lp: jax.Array, batch: TrainBatch, native: jax.Array | None) -> dict[str, float]:
        """The `align/*` figures of `train_lp` (π_old) against the batch's behaviour log-probs and routing."""

        def shardings() -> tuple[Any, Any]:
            routing = self._row_sharding(routing=True) if native is not None else None
            return (self._row_sharding(), self._batch_shardings(batch), routing), self._replicated()

        program = self._jit(("align", _layout(batch), native is not None), self._alignment_fn, shardings)
        with self._context():
            out = program(train_lp, batch, native)
        return {k: float(v) for k, v in jax.device_get(out).items()}

    # ------------------------------------------------------------------------------------------------
    # one batch: every update it gets

    def update(
        self,
        state: TrainState,
        batch: TrainBatch,
        pack_stats: PackStats | None = None,
        *,
        trainer_version: int | None = None,
    ) -> tuple[TrainState, UpdateResult]:
        """Every optimiser update one packed batch gets: mini-batches × epochs, after π_old / reference /
        routing, and what they did (module docstring). `trainer_version`: the version number of the weights
        `state` holds (`versions.version_number`), for the per-version-gap figures."""
        if batch.rows % self.row_multiple:
            raise ValueError(
                f"batch has {batch.rows} rows, not a multiple of mini_batches × micro_batch_rows = "
                f"{self.row_multiple}; "
                f"pack with row_multiple=trainer.row_multiple"
            )
        host = jax.tree.map(np.asarray, batch)
        full = self.device_batch(host)
        need_old = self.train.updates_per_batch > 1 or self.algo.mis != "none"
        old = self.old_logprobs(state.params, full) if need_old else None
        ref = self.ref_logprobs(full) if self.algo.kl_coef > 0 else None
        every = self.train.routing_agreement_every
        native = None
        if self.routing is not None and every > 0 and int(jax.device_get(state.step)) % every == 0:
            native = self.native_routing(state.params, full)

        history, trained_lp = [], None
        for _epoch in range(self.train.epochs):
            for mini, mini_old, mini_ref in self._mini_batches(host, full, old, ref):
                state, metrics, trained_lp = self.train_step(state, mini, mini_old, mini_ref)
                history.append(metrics)

        # With one update π_old is that update's own log-probs (the step computed them, module docstring).
        train_lp = old if old is not None else trained_lp
        out = _summarise(jax.device_get(history))
        out.update(self.alignment(train_lp, full, native))
        out["train/step"] = float(jax.device_get(state.step))
        out["train/skipped_total"] = float(jax.device_get(state.skipped))
        if pack_stats is not None:
            out.update(pack_stats.as_metrics())
        for lr in (float(m["train/lr"]) for m in history):
            if lr == 0.0:
                log.warning(
                    "learning rate is 0 at step %d (train.schedule=%s, total_steps=%d): "
                    "this update changed nothing",
                    int(out["train/step"]),
                    self.train.schedule,
                    self.train.total_steps,
                )
        lp = distributed.to_host(train_lp)
        sampled = np.asarray(host.loss_mask) > 0
        diffs = (lp - np.asarray(host.behaviour_logprobs))[sampled].astype(np.float32)
        if trainer_version is not None and host.token_versions is not None:
            versions = np.asarray(host.token_versions)[sampled]
            known = versions >= 0  # -1: a sampled token whose version was not recorded
            out.update(gap_metrics(trainer_version - versions[known], diffs[known]))
        out = version_alignment(
            out,
            lp,
            host.behaviour_logprobs,
            host.loss_mask,
            host.token_versions if trainer_version is not None else None,
            trainer_version,
            stale_kv=host.stale_kv,
        )
        nll = float(-lp[sampled].mean()) if sampled.any() else 0.0
        return state, UpdateResult(metrics=out, nll=nll, logprob_diffs=diffs)

    def _mini_batches(
        self, host: TrainBatch, full: TrainBatch, old: jax.Array | None, ref: jax.Array | None
    ) -> Iterator[_Share]:
        """`train.mini_batches` mini-batches on the mesh: rows j, j + M, ... with their share of π_old and
        the reference (one pass; one epoch)."""
        minis = self.train.mini_batches
        if minis == 1:
            yield full, old, ref
            return
        rows = None if self.mesh is None else self._row_sharding()
        for j in range(minis):
            batch = self.device_batch(host.select_rows(slice(j, None, minis)))
            old_j, ref_j = (
                None if x is None else distributed.put(distributed.to_host(x)[j::minis], rows)
                for x in (old, ref)
            )
            yield batch, old_j, ref_j


@dataclasses.dataclass(frozen=True)
class UpdateResult:
    """What `Trainer.update` did to one batch."""

    metrics: dict[str, float]
    """Host floats: `train/*`, `align/*` and the packer's `batch/*` (module docstring)."""
    nll: float
    """Mean negative log-likelihood per sampled token under π_old (the weights before the update)."""
    logprob_diffs: np.ndarray
    """float32[sampled tokens]: trainer (π_old) minus behaviour log-prob per sampled token."""


def _layout(batch: TrainBatch) -> bool:
    """What a batch's programs are compiled for besides its shapes: whether it carries routing."""
    return batch.routed_experts is not None


def _summarise(history: list[dict[str, Any]]) -> dict[str, float]:
    """Means over the batch's updates; the last learning rate; the largest grad norm; skipped count."""
    keys = history[0].keys()
    out = {k: float(np.mean([float(h[k]) for h in history])) for k in keys}
    for k in _LAST_VALUE:
        out[k] = float(history[-1][k])
    out["train/grad_norm_max"] = float(max(float(h["train/grad_norm"]) for h in history))
    out["train/skipped_updates"] = float(sum(1.0 - float(h["train/update_applied"]) for h in history))
    out["train/updates"] = float(len(history))
    del out["train/update_applied"]
    return out
