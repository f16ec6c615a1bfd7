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
- `prepare(state, batch) -> Prepared`, then `train_step_on(state, mini)` for each of
  `prepared.mini_batches()` per epoch (that loop is `legorl_jax.loop.update_policy`), then
  `summarise(state, prepared, history, pack_stats) -> metrics`: everything one `TrainBatch` gets; metrics are
  host floats: `train/*` (loss terms, clip fraction, KL, entropy, grad norm, learning rate,
  skipped updates), `align/*` (monitor/alignment.py: π_old vs behaviour log-probs, replay coverage, routing
  agreement from one extra forward without replay every `train.routing_agreement_every` steps) and the
  packer's `batch/*`. A learning rate of 0 logs a warning every step it trains at it.

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
from legorl_jax.model.policy import Policy, TokenLogprobs
from legorl_jax.model.sharding import DEFAULT_RULES, Rules, logical_to_spec, state_shardings, use_rules
from legorl_jax.monitor.alignment import logprob_alignment, routing_alignment
from legorl_jax.train import distributed
from legorl_jax.train.batch import PackStats, RoutingSpec
from legorl_jax.train.loss import loss_norm, policy_loss, rollout_correction
from legorl_jax.train.state import (
    TrainState,
    apply_gradients,
    init_train_state,
    make_optimizer,
    make_schedule,
)
from legorl_jax.types import TrainBatch

log = logging.getLogger(__name__)

ROW_FIELDS = (
    "tokens",
    "targets",
    "positions",
    "segment_ids",
    "loss_mask",
    "advantages",
    "behaviour_logprobs",
)
_LAST_VALUE = ("train/lr",)


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

    def device_batch(self, batch: TrainBatch | dict[str, Any]) -> dict[str, jax.Array]:
        """The batch's arrays on the mesh (the recorded routing too: replayed only when train.routing_replay,
        compared with the trainer's own routing either way)."""
        host = batch if isinstance(batch, dict) else _batch_dict(batch)
        rows = host["tokens"].shape[0]
        if rows % self.train.micro_batch_rows:
            raise ValueError(
                f"batch has {rows} rows, not a multiple of "
                f"train.micro_batch_rows={self.train.micro_batch_rows}"
            )
        arrays = {k: v for k, v in host.items() if v is not None}
        if self.routing is None:
            arrays.pop("routed_experts", None)
        return distributed.put(arrays, self._shardings_of(arrays))

    def _shardings_of(self, arrays: dict[str, Any]) -> Any:
        if self.mesh is None:
            return None
        return {k: self._row_sharding(k) for k in arrays}

    def _row_sharding(self, name: str) -> NamedSharding:
        shape = (self.train.micro_batch_rows, self.train.max_tokens)
        spec = logical_to_spec(("batch", "seq"), shape, mesh=self.mesh, rules=self.rules)
        if name == "routed_experts":
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

    def _forward(self, params: Any, mb: dict[str, jax.Array], *, replay: bool) -> TokenLogprobs:
        model = nnx.merge(self.graphdef, params, self.rest)
        forced = mb.get("routed_experts") if replay and self.train.routing_replay else None
        return model.token_logprobs(
            mb["tokens"],
            mb["targets"],
            positions=mb["positions"],
            segment_ids=mb["segment_ids"],
            forced_experts=forced,
            temperature=self.algo.temperature,
            impl=self.train.logprob_impl,
            details=True,
        )

    def _micro_split(self, tree: Any) -> Any:
        """[B, ...] -> [M, B / M, ...] with micro-batch j = rows j, j + M, ... (routing: batch axis 1).

        Row i * M + j goes to micro-batch j: the rows-per-micro-batch axis stays major, so a batch
        sharded in contiguous row blocks reshapes without moving data.
        """
        rows_per = self.train.micro_batch_rows

        def split(name: str, x: jax.Array) -> jax.Array:
            axis = 1 if name == "routed_experts" else 0
            n_micro = x.shape[axis] // rows_per
            x = x.reshape(*x.shape[:axis], rows_per, n_micro, *x.shape[axis + 1 :])
            return jnp.moveaxis(x, axis + 1, 0)

        return {k: split(k, v) for k, v in tree.items()}

    @staticmethod
    def _micro_join(x: jax.Array) -> jax.Array:
        """Inverse of `_micro_split` for [M, B / M, T] arrays."""
        return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])

    def _step_fn(
        self, state: TrainState, batch: dict[str, jax.Array], old: jax.Array | None, ref: jax.Array | None
    ) -> tuple[TrainState, dict[str, jax.Array], jax.Array]:
        mask, seg = batch["loss_mask"], batch["segment_ids"]
        if old is None:
            norm = loss_norm(mask, seg)
        else:
            _, kept = rollout_correction(old, batch["behaviour_logprobs"], mask, seg, self.algo)
            norm = loss_norm(kept, seg, sampled_mask=mask)
        extras = {k: v for k, v in (("old", old), ("ref", ref)) if v is not None}
        micro = self._micro_split({**batch, **extras})
        n_micro = micro["tokens"].shape[0]

        def loss_fn(
            params: Any, mb: dict[str, jax.Array]
        ) -> tuple[jax.Array, tuple[dict[str, jax.Array], jax.Array]]:
            scored = self._forward(params, mb, replay=True)
            lp = scored.logprobs
            loss, metrics = policy_loss(
                lp,
                mb.get("old"),
                mb["behaviour_logprobs"],
                mb["advantages"],
                mb["loss_mask"],
                mb["segment_ids"],
                self.algo,
                norm_length=self.norm_length,
                norm=norm,
                ref_logprobs=mb.get("ref"),
                entropy=jax.lax.stop_gradient(scored.entropy),
            )
            aux = scored.output.aux_loss / n_micro
            metrics["train/aux_loss"] = jax.lax.stop_gradient(aux)
            loss = loss + self.algo.aux_loss_coef * aux
            metrics["train/loss"] = jax.lax.stop_gradient(loss)
            return loss, (metrics, jax.lax.stop_gradient(lp))

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        def body(acc: Any, mb: dict[str, jax.Array]) -> tuple[Any, jax.Array]:
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

    def _logprob_fn(self, params: Any, batch: dict[str, jax.Array], *, replay: bool) -> jax.Array:
        micro = self._micro_split(batch)
        lps = jax.lax.map(lambda mb: self._forward(params, mb, replay=replay).logprobs, micro)
        return self._micro_join(lps)

    def _native_routing_fn(self, params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        micro = self._micro_split({k: v for k, v in batch.items() if k != "routed_experts"})

        def routed(mb: dict[str, jax.Array]) -> jax.Array:
            model = nnx.merge(self.graphdef, params, self.rest)
            return model(
                mb["tokens"], positions=mb["positions"], segment_ids=mb["segment_ids"], compute_logits=False
            ).routed_experts

        per_micro = jax.lax.map(routed, micro)  # [M, L, B / M, T, K]
        return (
            jnp.moveaxis(per_micro, 1, 0).swapaxes(1, 2).reshape(per_micro.shape[1], -1, *per_micro.shape[3:])
        )

    def _alignment_fn(
        self, train_lp: jax.Array, batch: dict[str, jax.Array], native: jax.Array | None
    ) -> dict[str, jax.Array]:
        metrics = logprob_alignment(train_lp, batch["behaviour_logprobs"], batch["loss_mask"])
        if self.routing is not None:
            recorded = batch.get("routed_experts")
            if recorded is None:
                recorded = jnp.full(
                    (self.routing.num_layers, *batch["tokens"].shape, self.routing.top_k), -1, jnp.int32
                )
            metrics.update(
                routing_alignment(recorded, native, batch["loss_mask"], input_mask=batch["segment_ids"])
            )
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

    def _batch_shardings(self, batch: dict[str, Any]) -> dict[str, NamedSharding]:
        return {k: self._row_sharding(k) for k in batch}

    def _replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec())

    def train_step(
        self,
        state: TrainState,
        batch: dict[str, jax.Array],
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
            row = self._row_sharding("tokens")
            ins = (self._state_shardings, self._batch_shardings(batch), *(row if g else None for g in given))
            return ins, (self._state_shardings, self._replicated(), row)

        program = self._jit(("step", tuple(batch), given), self._step_fn, shardings, donate=(0,))
        with self._context():
            return program(state, batch, old_logprobs, ref_logprobs)

    def _logprobs(self, params: Any, batch: dict[str, jax.Array], *, replay: bool) -> jax.Array:
        program = self._jit(
            ("logprobs", tuple(batch), replay),
            lambda p, b: self._logprob_fn(p, b, replay=replay),
            lambda: ((self.param_shardings, self._batch_shardings(batch)), self._row_sharding("tokens")),
        )
        with self._context():
            return program(params, batch)

    def old_logprobs(self, params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        """π_old: log-probs of the batch's targets with the recorded routing replayed, no gradient."""
        return self._logprobs(params, batch, replay=True)

    def ref_logprobs(self, batch: dict[str, jax.Array]) -> jax.Array:
        """The frozen reference's log-probs, routed natively."""
        return self._logprobs(self.reference_params, batch, replay=False)

    def native_routing(self, params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        """The trainer's own top-k routing of the batch (no replay), int32[L, B, T, K]."""
        program = self._jit(
            ("native", tuple(batch)),
            self._native_routing_fn,
            lambda: (
                (self.param_shardings, self._batch_shardings(batch)),
                self._row_sharding("routed_experts"),
            ),
        )
        with self._context():
            return program(params, batch)

    def alignment(
        self, train_lp: jax.Array, batch: dict[str, jax.Array], native: jax.Array | None
    ) -> dict[str, float]:
        """The `align/*` figures of `train_lp` (π_old) against the batch's behaviour log-probs and routing."""

        def shardings() -> tuple[Any, Any]:
            routing = self._row_sharding("routed_experts") if native is not None else None
            return (self._row_sharding("tokens"), self._batch_shardings(batch), routing), self._replicated()

        program = self._jit(("align", tuple(batch), native is not None), self._alignment_fn, shardings)
        with self._context():
            out = program(train_lp, batch, native)
        return {k: float(v) for k, v in jax.device_get(out).items()}

    # ------------------------------------------------------------------------------------------------
    # one batch: what its updates share (the mini-batch × epoch loop is legorl_jax/loop.py's update_policy)

    def prepare(self, state: TrainState, batch: TrainBatch) -> Prepared:
        """The batch on the mesh with π_old, the reference and the native routing its updates share."""
        host = _batch_dict(batch)
        rows = host["tokens"].shape[0]
        if rows % self.row_multiple:
            raise ValueError(
                f"batch has {rows} rows, not a multiple of mini_batches × micro_batch_rows = "
                f"{self.row_multiple}; "
                f"pack with row_multiple=trainer.row_multiple"
            )
        full = self.device_batch(host)
        need_old = self.train.updates_per_batch > 1 or self.algo.mis != "none"
        old = self.old_logprobs(state.params, full) if need_old else None
        ref = self.ref_logprobs(full) if self.algo.kl_coef > 0 else None
        every = self.train.routing_agreement_every
        native = None
        if self.routing is not None and every > 0 and int(jax.device_get(state.step)) % every == 0:
            native = self.native_routing(state.params, full)
        return Prepared(self, host, full, old, ref, native)

    def train_step_on(self, state: TrainState, mini: MiniBatch) -> tuple[TrainState, dict[str, jax.Array]]:
        """One optimiser update on one prepared mini-batch; its trained log-probs are kept for alignment."""
        state, metrics, mini.prepared.trained_lp = self.train_step(state, mini.batch, mini.old, mini.ref)
        return state, metrics

    def summarise(
        self,
        state: TrainState,
        prepared: Prepared,
        history: list[dict[str, jax.Array]],
        pack_stats: PackStats | None = None,
    ) -> dict[str, float]:
        """Host-float metrics of a batch's updates: `train/*`, `align/*` and the packer's `batch/*`."""
        if not history:
            raise ValueError("summarise needs the metrics of at least one update, got none")
        history = jax.device_get(history)
        out = _summarise(history)
        train_lp = prepared.old if prepared.old is not None else prepared.trained_lp
        out.update(self.alignment(train_lp, prepared.full, prepared.native))
        prepared.logprob_diffs = _masked_diffs(train_lp, prepared.host)
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
        return out

    def _put_rows(self, x: np.ndarray) -> jax.Array:
        return distributed.put(x, None if self.mesh is None else self._row_sharding("tokens"))


@dataclasses.dataclass
class MiniBatch:
    """One mini-batch of a prepared batch, on the mesh, with its share of π_old and the reference."""

    prepared: Prepared
    batch: dict[str, jax.Array]
    old: jax.Array | None
    ref: jax.Array | None


@dataclasses.dataclass
class Prepared:
    """A batch ready for its updates (`Trainer.prepare`): host and device arrays, π_old, reference,
    routing."""

    trainer: Trainer
    host: dict[str, Any]
    full: dict[str, jax.Array]
    old: jax.Array | None
    ref: jax.Array | None
    native: jax.Array | None
    trained_lp: jax.Array | None = None
    logprob_diffs: np.ndarray | None = None  # trainer minus behaviour log-prob per sampled token (summarise)

    def mini_batches(self) -> Iterator[MiniBatch]:
        """`train.mini_batches` mini-batches: rows j, j + M, ... (one pass; call again for the next epoch)."""
        minis = self.trainer.train.mini_batches
        if minis == 1:
            yield MiniBatch(self, self.full, self.old, self.ref)
            return
        for j in range(minis):
            batch = self.trainer.device_batch(_rows_of(self.host, slice(j, None, minis)))
            old, ref = (
                None if x is None else self.trainer._put_rows(distributed.to_host(x)[j::minis])
                for x in (self.old, self.ref)
            )
            yield MiniBatch(self, batch, old, ref)


def _masked_diffs(train_lp: jax.Array, host: dict[str, Any]) -> np.ndarray:
    mask = np.asarray(host["loss_mask"]) > 0
    return (distributed.to_host(train_lp) - np.asarray(host["behaviour_logprobs"]))[mask].astype(np.float32)


def _rows_of(host: dict[str, Any], rows: slice) -> dict[str, Any]:
    """The given rows of a host batch (the routing's row axis is its second)."""
    return {
        k: None if v is None else (v[:, rows] if k == "routed_experts" else v[rows]) for k, v in host.items()
    }


def _batch_dict(batch: TrainBatch) -> dict[str, Any]:
    out = {k: np.asarray(getattr(batch, k)) for k in ROW_FIELDS}
    out["routed_experts"] = None if batch.routed_experts is None else np.asarray(batch.routed_experts)
    return out


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
