"""Trainer state and optimiser: AdamW with global-norm clipping and a learning-rate schedule.

`TrainState` is one pytree (jit argument, checkpoint item):
- `step` int32[]: `train_step` calls made (updates attempted);
- `skipped` int32[]: updates skipped because the gradient norm was not finite; the optimiser's own count,
  and so the schedule position, is `step - skipped` (a skipped update leaves `opt_state` untouched);
- `params`: the policy's `nnx.Param` state (master weights, in the policy's parameter dtype; with
  `model.dtype=float32, model.compute_dtype=bfloat16` this is fp32 master weights with bf16 compute, the
  cast happening inside the model's forward, so gradients and AdamW moments stay fp32);
- `opt_state`: optax state;
- `rng` uint32[2]: the trainer's random stream (raw key data, so it checkpoints as a plain array).

`make_optimizer(train)` is `clip_by_global_norm(max_grad_norm)` → `adamw(schedule, b1, b2, eps,
weight_decay)`; `make_schedule(train)` is constant or warmup → cosine (to `final_lr_ratio × lr` at
`total_steps`), both with an optional linear warm-up from 0. A schedule that reaches 0 is not an error but
the step logs a warning every time it trains at lr 0 (a learning rate silently at 0 is a failure LEGO-RL
reports).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax

from legorl_jax.config import TrainConfig


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["step", "skipped", "params", "opt_state", "rng"],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class TrainState:
    """Everything a resumed run needs from the trainer (the loop cursor is the loop's)."""

    step: jax.Array  # int32[]
    skipped: jax.Array  # int32[]
    params: Any  # nnx.State of nnx.Param
    opt_state: Any  # optax state
    rng: jax.Array  # uint32[2]

    def replace(self, **changes: Any) -> TrainState:
        return dataclasses.replace(self, **changes)


def make_schedule(train: TrainConfig) -> optax.Schedule:
    """The learning rate as a function of the applied-update count."""
    peak = train.learning_rate
    if train.schedule == "constant":
        if train.warmup_steps == 0:
            return optax.constant_schedule(peak)
        return optax.join_schedules(
            [optax.linear_schedule(0.0, peak, train.warmup_steps), optax.constant_schedule(peak)],
            [train.warmup_steps],
        )
    if train.schedule == "warmup_cosine":
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=peak,
            warmup_steps=train.warmup_steps,
            decay_steps=train.total_steps,
            end_value=peak * train.final_lr_ratio,
        )
    raise ValueError(f"train.schedule must be constant or warmup_cosine, got {train.schedule!r}")


def make_optimizer(train: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping then AdamW on `make_schedule(train)`."""
    adamw = optax.adamw(
        make_schedule(train), b1=train.b1, b2=train.b2, eps=train.eps, weight_decay=train.weight_decay
    )
    if train.max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(train.max_grad_norm), adamw)
    return adamw


def init_train_state(params: Any, optimizer: optax.GradientTransformation, *, seed: int) -> TrainState:
    """A fresh state at step 0 for `params` (an `nnx.State` of parameters)."""
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        skipped=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=optimizer.init(params),
        rng=jax.random.key_data(jax.random.key(seed)),
    )


def apply_gradients(
    state: TrainState, grads: Any, optimizer: optax.GradientTransformation
) -> tuple[TrainState, jax.Array, jax.Array]:
    """One update, skipped when the gradient norm is not finite: (new state, grad norm, applied 0/1)."""
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(grad_norm)

    def update(operands: tuple[Any, Any]) -> tuple[Any, Any]:
        params, opt_state = operands
        updates, new_opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_opt_state

    params, opt_state = jax.lax.cond(
        finite, update, lambda operands: operands, (state.params, state.opt_state)
    )
    new_state = state.replace(
        step=state.step + 1,
        skipped=state.skipped + (~finite).astype(jnp.int32),
        params=params,
        opt_state=opt_state,
    )
    return new_state, grad_norm, finite.astype(jnp.float32)
