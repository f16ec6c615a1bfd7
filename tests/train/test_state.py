"""Optimiser, schedules and the skip of non-finite updates."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from legorl_jax.config import TrainConfig
from legorl_jax.train.state import apply_gradients, init_train_state, make_optimizer, make_schedule


def test_schedules_warm_up_linearly_and_decay_by_cosine_to_their_floor():
    constant = make_schedule(TrainConfig(learning_rate=1e-3))
    assert float(constant(0)) == float(constant(10_000)) == pytest.approx(1e-3)
    warm = make_schedule(TrainConfig(learning_rate=1e-3, warmup_steps=4))
    assert [float(warm(i)) for i in (0, 2, 4, 100)] == pytest.approx([0.0, 5e-4, 1e-3, 1e-3])
    cosine = make_schedule(
        TrainConfig(
            learning_rate=1e-3, schedule="warmup_cosine", warmup_steps=2, total_steps=12, final_lr_ratio=0.1
        )
    )
    # peak at the end of warm-up, half-way down the cosine at (2 + 12) / 2, floor 1e-4 at total_steps.
    assert float(cosine(2)) == pytest.approx(1e-3)
    assert float(cosine(7)) == pytest.approx(1e-4 + 0.5 * (1e-3 - 1e-4), rel=1e-5)
    assert float(cosine(12)) == pytest.approx(1e-4) and float(cosine(50)) == pytest.approx(1e-4)


def test_a_finite_gradient_is_clipped_and_applied_like_optax():
    train = TrainConfig(learning_rate=0.1, max_grad_norm=1.0, weight_decay=0.0)
    opt = make_optimizer(train)
    params = {"w": jnp.asarray([1.0, 2.0])}
    state = init_train_state(params, opt, seed=0)
    grads = {"w": jnp.asarray([3.0, 4.0])}  # norm 5: clipped to (0.6, 0.8)
    new, norm, applied = apply_gradients(state, grads, opt)
    expected_updates, _ = optax.adamw(0.1, weight_decay=0.0).update(
        {"w": jnp.asarray([0.6, 0.8])}, optax.adamw(0.1).init(params), params
    )
    np.testing.assert_allclose(new.params["w"], params["w"] + expected_updates["w"], atol=1e-6)
    assert float(norm) == pytest.approx(5.0) and float(applied) == 1.0
    assert int(new.step) == 1 and int(new.skipped) == 0


def test_a_non_finite_gradient_skips_the_update_and_is_counted():
    opt = make_optimizer(TrainConfig(learning_rate=0.1))
    params = {"w": jnp.asarray([1.0, 2.0])}
    state = init_train_state(params, opt, seed=0)
    new, norm, applied = jax.jit(lambda s, g: apply_gradients(s, g, opt))(
        state, {"w": jnp.asarray([jnp.nan, 1.0])}
    )
    assert not np.isfinite(float(norm)) and float(applied) == 0.0
    assert int(new.step) == 1 and int(new.skipped) == 1
    for a, b in zip(
        jax.tree.leaves((new.params, new.opt_state)),
        jax.tree.leaves((state.params, state.opt_state)),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
