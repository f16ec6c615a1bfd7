"""The train step on the tiny MoE: sharded = single device, packing and dropped trials change nothing,
accumulation, several updates per batch, skipped updates, learning-rate warnings, R3 coverage."""

import collections
import dataclasses
import logging
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import tiny_run
from omegaconf import OmegaConf

from legorl_jax.config import MeshConfig
from legorl_jax.model import init_policy
from legorl_jax.model.sharding import make_mesh, rules_from_config
from legorl_jax.train.advantages import trajectory_advantages
from legorl_jax.train.batch import pack_trajectories
from legorl_jax.train.step import Trainer
from legorl_jax.types import Outcome, TrainBatch

MESH_PRESETS = pathlib.Path(__file__).parents[2] / "conf" / "mesh"


def mesh_preset(name: str) -> MeshConfig:
    raw = OmegaConf.to_container(OmegaConf.load(MESH_PRESETS / f"{name}.yaml"))
    raw.pop("defaults", None)
    return MeshConfig(**raw)


def cpu8_mesh_config() -> MeshConfig:
    return mesh_preset("cpu8")


def trainer_with(**train_overrides) -> Trainer:
    algo, train = tiny_run.tiny_configs(**train_overrides)
    return Trainer(init_policy(tiny_run.TINY_MOE, seed=0), algo, train)


def assert_trees_close(a, b, atol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def reordering_rtol(batch: TrainBatch, arch=tiny_run.TINY_MOE) -> float:
    """How far, relative to a leaf's largest gradient, two float32 gradients of the same batch may differ
    when only the order of their sums differs (packing, sharding, micro-batching, another host's kernels).

    Re-ordering a float32 sum of n terms moves it by at most about n·u of the sum of their magnitudes
    (u = 2^-24; Higham, Accuracy and Stability of Numerical Algorithms, §4.2). A gradient element sums
    over the batch's B·T token positions terms that each went through one forward and backward pass,
    whose longest contraction (C = max(vocab, hidden, intermediate)) is re-ordered once per layer and
    once in the head: n = B·T + (L + 1)·C. On the tiny MoE with a [4, 32] batch: n = 512, 3.1e-5,
    against 6e-7 measured for packing; attention leaking across packed segments moved it by 1.2.
    """
    contraction = max(arch.vocab_size, arch.hidden_size, arch.intermediate_size)
    n = batch.tokens.size + (arch.num_hidden_layers + 1) * contraction
    return n * 2.0**-24


def assert_first_moments_close(a, b, rel=1e-4, moment="mu"):
    """The AdamW first (or, with moment="nu", second) moments of two states after one update, leaf by leaf,
    relative to each leaf's scale.

    After one update mu = (1 - b1) * clipped gradient, so this compares the gradients themselves. The
    parameters cannot: Adam's first step moves every weight by about ±lr whatever the gradient's size,
    so a gradient that is wrong by any factor of the right sign leaves the parameters unchanged.
    """
    mu_a, mu_b = (optax.tree_utils.tree_get(s.opt_state, moment) for s in (a, b))
    for x, y in zip(jax.tree.leaves(mu_a), jax.tree.leaves(mu_b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert np.abs(y).max() > 0  # a leaf with no gradient at all would make the comparison vacuous
        np.testing.assert_allclose(x, y, atol=rel * float(np.abs(y).max()), rtol=0)


def assert_first_adam_steps_close(a, b, before, lr_a, lr_b, rel):
    """The first AdamW step of two states from the same `before` weights, per unit learning rate, element
    by element within what gradients that agree to `rel` of each leaf's scale allow.

    The first step moves a weight by lr·(g / (|g| + eps) + wd·w): about ±1 per unit lr whatever |g|. Two
    gradients δ apart (δ = rel·max|g| of the leaf) give steps at most 2δ/|g| apart where their signs
    agree (|g| ≥ 2δ), and up to 2 where g is within noise of 0 and the sign can flip; so a fixed
    tolerance on post-Adam weights holds only on the host whose summation order it was measured on
    (issue 32: 1.5e-5 on one element of 4,096, on one host). The weights' own rounding adds 4u·|w| / lr.
    """
    mu_b = optax.tree_utils.tree_get(b.opt_state, "mu")
    for new_a, new_b, old, g in zip(
        jax.tree.leaves(a.params),
        jax.tree.leaves(b.params),
        jax.tree.leaves(before),
        jax.tree.leaves(mu_b),
        strict=True,
    ):
        old, g = np.asarray(old), np.abs(np.asarray(g))  # mu is the gradient times 1 - b1: scale-free here
        step_a = (np.asarray(new_a) - old) / lr_a
        step_b = (np.asarray(new_b) - old) / lr_b
        delta = rel * float(g.max())
        rounding = 4 * 2.0**-24 * np.abs(old) * (1 / lr_a + 1 / lr_b)
        tol = np.minimum(2.0, 2 * delta / np.maximum(g, 1e-30)) + rounding
        bad = np.abs(step_a - step_b) > tol
        assert not bad.any(), (
            f"{bad.sum()} of {bad.size} steps differ beyond Adam's conditioning: "
            f"{step_a[bad][:4]} vs {step_b[bad][:4]} (|g| {g[bad][:4]})"
        )


def pack(trainer, trajs, advantages=None, min_rows=4):
    """Packed to at least 4 rows, so most tests share one compiled shape [4, 32]."""
    adv = trajectory_advantages(trajs) if advantages is None else advantages
    return pack_trajectories(
        trajs,
        adv,
        max_tokens=tiny_run.MAX_TOKENS,
        row_multiple=trainer.row_multiple,
        routing=trainer.routing,
        min_rows=min_rows,
    )


def concat_rows(batches):
    fields = {
        f.name: np.concatenate(
            [getattr(b, f.name) for b in batches], axis=1 if f.name == "routed_experts" else 0
        )
        for f in dataclasses.fields(TrainBatch)
    }
    return TrainBatch(**fields)


@pytest.fixture(scope="module")
def micro4_trainer():
    return trainer_with(micro_batch_rows=4, learning_rate=1e-3, routing_agreement_every=1)


def test_step_on_the_8_device_mesh_equals_the_single_device_step(micro4_trainer):
    mesh_config = cpu8_mesh_config()
    assert (mesh_config.fsdp, mesh_config.expert, mesh_config.tensor) == (2, 2, 2)
    algo, train = tiny_run.tiny_configs(micro_batch_rows=4, learning_rate=1e-3, routing_agreement_every=1)
    sharded = Trainer(
        init_policy(tiny_run.TINY_MOE, seed=0),
        algo,
        train,
        mesh=make_mesh(mesh_config),
        rules=rules_from_config(mesh_config),
    )
    trajs = tiny_run.make_trajectories(7, n=12, routing=sharded.routing)
    batch, stats = pack(sharded, trajs, min_rows=8)
    assert batch.tokens.shape[0] == 8  # two micro-batches of 4 rows, each split over 4 batch shards

    before = jax.device_get(micro4_trainer.initial_params)
    state8, metrics8 = tiny_run.update(sharded, sharded.init_state(seed=0), batch, stats)
    state1, metrics1 = tiny_run.update(micro4_trainer, micro4_trainer.init_state(seed=0), batch, stats)
    w = state8.params["runs"][0]["layers"]["mlp"]["gate_proj"][...]
    assert len({s.device for s in w.addressable_shards}) == 8 and w.sharding.spec != (None,) * w.ndim
    # Per-leaf gradients (mu) and their squares (nu, twice the relative error) to the reordering bound
    # (measured ~1e-6 of scale): a sharded gradient summed over the wrong axis or scaled by a shard count
    # fails here. The weights within what Adam's first step makes of that bound.
    rel = reordering_rtol(batch)
    assert_first_moments_close(state8, state1, rel=rel)
    assert_first_moments_close(state8, state1, rel=2 * rel, moment="nu")
    assert int(state8.step) == int(state1.step) == 1
    lr = metrics1["train/lr"]
    assert_first_adam_steps_close(state8, state1, before, lr, lr, rel)
    assert metrics8.keys() == metrics1.keys()
    # Losses, norms and ratios of order 1e-2..1 (fp32 simple-op 1e-5).
    for key, value in metrics1.items():
        assert metrics8[key] == pytest.approx(value, abs=1e-5, nan_ok=True), key
    assert metrics1["align/routing_coverage"] > 0.9 and 0.0 < metrics1["align/routing_agreement"] < 1.0


def test_a_context_parallel_step_on_the_8_device_mesh_equals_the_single_device_step(micro4_trainer):
    """conf/mesh/cpu8_context: rows split along their tokens over 2 devices, beside fsdp 2 x expert 2 (the
    row of 32 tokens in 4 chunks, each device an early and a late one): loss, gradients and routing
    replay/agreement as on one device."""
    mesh_config = mesh_preset("cpu8_context")
    assert (mesh_config.fsdp, mesh_config.expert, mesh_config.context) == (2, 2, 2)
    algo, train = tiny_run.tiny_configs(micro_batch_rows=4, learning_rate=1e-3, routing_agreement_every=1)
    sharded = Trainer(
        init_policy(tiny_run.TINY_MOE, seed=0),
        algo,
        train,
        mesh=make_mesh(mesh_config),
        rules=rules_from_config(mesh_config),
    )
    trajs = tiny_run.make_trajectories(7, n=12, routing=sharded.routing)
    batch, stats = pack(sharded, trajs, min_rows=8)
    assert sharded._row_sharding().spec == jax.sharding.PartitionSpec(("fsdp", "expert"), "context")

    before = jax.device_get(micro4_trainer.initial_params)
    state8, metrics8 = tiny_run.update(sharded, sharded.init_state(seed=0), batch, stats)
    state1, metrics1 = tiny_run.update(micro4_trainer, micro4_trainer.init_state(seed=0), batch, stats)
    rel = reordering_rtol(batch)
    assert_first_moments_close(state8, state1, rel=rel)
    assert_first_moments_close(state8, state1, rel=2 * rel, moment="nu")
    lr = metrics1["train/lr"]
    assert_first_adam_steps_close(state8, state1, before, lr, lr, rel)
    assert metrics8.keys() == metrics1.keys()
    for key, value in metrics1.items():
        assert metrics8[key] == pytest.approx(value, abs=1e-5, nan_ok=True), key
    assert metrics1["align/routing_coverage"] > 0.9 and 0.0 < metrics1["align/routing_agreement"] < 1.0


def test_the_h200x8_preset_shards_every_weight_but_the_head_dim_norms_over_8_devices_and_steps_like_one():
    # The 8×H200 layout run on the 8 CPU devices: experts over `expert`, every other weight along its
    # embed dimension over the same axis. Without the preset's embed rule, attention, embeddings and the
    # LM head (with their fp32 AdamW moments) would be replicated on all 8 GPUs.
    mesh_config = mesh_preset("h200x8")
    arch = dataclasses.replace(tiny_run.TINY_MOE, num_experts=8)  # 8 experts: one per device
    algo, train = tiny_run.tiny_configs(micro_batch_rows=8, learning_rate=1e-3)
    sharded = Trainer(
        init_policy(arch, seed=0),
        algo,
        train,
        mesh=make_mesh(mesh_config),
        rules=rules_from_config(mesh_config),
    )
    single = Trainer(init_policy(arch, seed=0), algo, train)
    trajs = tiny_run.make_trajectories(7, n=12, routing=sharded.routing)
    batch, stats = pack(sharded, trajs, min_rows=8)
    before = jax.device_get(single.initial_params)
    state8, metrics8 = tiny_run.update(sharded, sharded.init_state(seed=0), batch, stats)
    state1, metrics1 = tiny_run.update(single, single.init_state(seed=0), batch, stats)
    flat = jax.tree_util.tree_flatten_with_path(state8.params)[0]
    replicated = []
    for path, w in flat:
        name = jax.tree_util.keystr(path)
        if "q_norm" in name or "k_norm" in name:
            # [head_dim] norms have no embed dimension: whole on every device.
            assert w.sharding.is_fully_replicated and w.shape[-1] == arch.head_dim, (name, w.shape)
            replicated.append(name)
            continue
        assert math.prod(w.sharding.shard_shape(w.shape)) * 8 == w.size, (name, w.sharding.spec)
    assert len(replicated) == 2 and len(flat) > 2 * len(replicated)  # the two norms of the scanned layers
    # As in the cpu8 test above: gradients to the reordering bound, weights within Adam's conditioning.
    rel = reordering_rtol(batch, arch)
    assert_first_moments_close(state8, state1, rel=rel)
    lr = metrics1["train/lr"]
    assert_first_adam_steps_close(state8, state1, before, lr, lr, rel)
    for key, value in metrics1.items():
        assert metrics8[key] == pytest.approx(value, abs=1e-5, nan_ok=True), key


def test_gradient_accumulation_over_micro_batches_equals_one_big_micro_batch(tiny_trainer, micro4_trainer):
    trajs = tiny_run.make_trajectories(3, n=6, routing=tiny_trainer.routing)
    batch, _ = pack(micro4_trainer, trajs)  # 4 rows: one micro-batch of 4, or two of 2
    state = micro4_trainer.init_state(seed=0)
    before = jax.device_get(state.params)
    one, m_one, _ = micro4_trainer.train_step(state, micro4_trainer.device_batch(batch))
    two, m_two, _ = tiny_trainer.train_step(tiny_trainer.init_state(seed=0), tiny_trainer.device_batch(batch))
    # The whole optimiser state: both AdamW moments leaf by leaf (the gradient itself, not only its norm),
    # the step count, and the parameter step per unit learning rate (the two trainers' rates differ).
    # Accumulating two micro-batches only re-orders the float32 sums: the reordering bound.
    rel = reordering_rtol(batch)
    assert_first_moments_close(two, one, rel=rel)
    assert_first_moments_close(two, one, rel=2 * rel, moment="nu")
    assert int(one.step) == int(two.step) == 1
    lr_one, lr_two = float(m_one["train/lr"]), float(m_two["train/lr"])
    assert lr_one > 0 and lr_two > 0
    assert_first_adam_steps_close(two, one, before, lr_two, lr_one, rel)
    # Same loss and gradient norm: averaging the two micro-batch means instead would change both. The
    # loss (order 1e-2) to float32 noise, the norm to the gradient's bound.
    assert float(m_two["train/loss"]) == pytest.approx(float(m_one["train/loss"]), abs=1e-6)
    assert float(m_two["train/grad_norm"]) == pytest.approx(float(m_one["train/grad_norm"]), rel=rel)


def test_a_packed_batch_gives_the_same_update_as_one_sequence_per_row(tiny_trainer):
    trajs = tiny_run.make_trajectories(11, n=4, routing=tiny_trainer.routing)
    adv = trajectory_advantages(trajs)
    packed, stats = pack(tiny_trainer, trajs, adv)
    assert stats.rows_used < len(trajs) and packed.tokens.shape == (4, tiny_run.MAX_TOKENS)
    unpacked = concat_rows(
        [
            pack_trajectories(
                [t], adv[i : i + 1], max_tokens=tiny_run.MAX_TOKENS, routing=tiny_trainer.routing
            )[0]
            for i, t in enumerate(trajs)
        ]
    )
    state = tiny_trainer.init_state(seed=0)
    lp_packed = np.asarray(tiny_trainer.old_logprobs(state.params, tiny_trainer.device_batch(packed)))
    lp_unpacked = np.asarray(tiny_trainer.old_logprobs(state.params, tiny_trainer.device_batch(unpacked)))
    # The same sampled token's log-prob, wherever packing put its sequence.
    for b in (packed, unpacked):
        assert b.loss_mask.sum() == stats.sampled_tokens

    def by_token(batch, lp):
        sel = batch.loss_mask > 0
        keys = list(zip(batch.tokens[sel], batch.targets[sel], batch.positions[sel], strict=True))
        return dict(zip(keys, lp[sel], strict=True))

    a, b = by_token(packed, lp_packed), by_token(unpacked, lp_unpacked)
    assert a.keys() == b.keys()
    # Log-probs of about -5 through a 128-way log-softmax (fp32 simple-op 1e-5); leaked attention fails it.
    np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], atol=1e-5)
    before = jax.device_get(state.params)
    s_packed, m_packed = tiny_run.update(tiny_trainer, state, packed)
    s_unpacked, m_unpacked = tiny_run.update(tiny_trainer, tiny_trainer.init_state(seed=0), unpacked)
    # A loss of 7e-3, at most 2.2e-8 apart on every XLA setting of issue 32: abs 1e-6 is 45x that.
    assert m_packed["train/pg_loss"] == pytest.approx(m_unpacked["train/pg_loss"], abs=1e-6)
    # The update is a function of the gradient, which is what packing could change (attention leaking
    # across packed segments changes it even where the loss agrees): compare the gradient itself (mu after
    # one step), leaf by leaf, to the reordering bound of its sums, not post-Adam weights, which Adam
    # makes ±lr whatever the gradient (and flips where an element's gradient is within noise of 0).
    rel = reordering_rtol(packed)
    assert_first_moments_close(s_packed, s_unpacked, rel=rel)
    # The norm of that gradient (27k squares summed) within the same bound.
    assert m_packed["train/grad_norm"] == pytest.approx(m_unpacked["train/grad_norm"], rel=rel)
    lr = float(m_packed["train/lr"])
    assert_first_adam_steps_close(s_packed, s_unpacked, before, lr, lr, rel)


def test_an_update_reports_the_nll_and_logprob_differences_of_the_weights_before_it(tiny_trainer):
    batch, _ = pack(tiny_trainer, tiny_run.make_trajectories(5, n=6, routing=tiny_trainer.routing))
    state = tiny_trainer.init_state(seed=0)
    before = np.asarray(tiny_trainer.old_logprobs(state.params, tiny_trainer.device_batch(batch)))
    new_state, result = tiny_trainer.update(state, batch)
    sampled = batch.loss_mask > 0
    # π_old is the weights before the update: reading the moved weights would give other numbers.
    after = np.asarray(tiny_trainer.old_logprobs(new_state.params, tiny_trainer.device_batch(batch)))
    assert np.abs(after - before)[sampled].max() > 1e-4
    assert result.nll == pytest.approx(-before[sampled].mean(), rel=1e-5)
    np.testing.assert_allclose(result.logprob_diffs, (before - batch.behaviour_logprobs)[sampled], atol=1e-5)
    assert result.metrics["train/updates"] == 1.0 and result.metrics["train/step"] == 1.0


def test_repeated_steps_on_a_fixed_batch_raise_the_logprobs_of_positive_advantage_tokens(tiny_trainer):
    trajs = tiny_run.make_trajectories(21, n=6, routing=tiny_trainer.routing)
    batch, _ = pack(tiny_trainer, trajs)
    state = tiny_trainer.init_state(seed=0)
    # Behaviour log-probs = the policy's own, as if the engine had sampled them (IS weights 1).
    first = np.asarray(tiny_trainer.old_logprobs(state.params, tiny_trainer.device_batch(batch)))
    batch = dataclasses.replace(
        batch, behaviour_logprobs=np.where(batch.loss_mask > 0, first, 0.0).astype(np.float32)
    )
    positive = (batch.loss_mask > 0) & (batch.advantages > 0)
    negative = (batch.loss_mask > 0) & (batch.advantages < 0)
    assert positive.any() and negative.any()
    for _ in range(5):
        state, metrics = tiny_run.update(tiny_trainer, state, batch)
    last = np.asarray(tiny_trainer.old_logprobs(state.params, tiny_trainer.device_batch(batch)))
    # Sign errors in the loss would lower the positive tokens and raise the negative ones.
    assert last[positive].mean() > first[positive].mean() + 0.1
    assert last[negative].mean() < first[negative].mean() - 0.1
    assert metrics["train/step"] == 5.0 and metrics["train/skipped_total"] == 0.0


def test_replaying_the_trainers_own_routing_reproduces_its_logprobs_and_agrees_fully(tiny_trainer):
    trajs = tiny_run.make_trajectories(9, n=6, routing=tiny_trainer.routing)
    batch, _ = pack(tiny_trainer, trajs)
    state = tiny_trainer.init_state(seed=0)
    native = np.asarray(tiny_trainer.native_routing(state.params, tiny_trainer.device_batch(batch)))
    own = dataclasses.replace(batch, routed_experts=native)
    native_lp = tiny_trainer.old_logprobs(
        state.params, tiny_trainer.device_batch(dataclasses.replace(batch, routed_experts=None))
    )
    replayed_lp = tiny_trainer.old_logprobs(state.params, tiny_trainer.device_batch(own))
    np.testing.assert_allclose(np.asarray(replayed_lp), np.asarray(native_lp), atol=1e-6)
    dev = tiny_trainer.device_batch(own)
    metrics = tiny_trainer.alignment(replayed_lp, dev, jnp.asarray(native))
    assert metrics["align/routing_agreement"] == 1.0 and metrics["align/routing_coverage"] == 1.0
    random_routing = tiny_trainer.alignment(
        replayed_lp, tiny_trainer.device_batch(batch), jnp.asarray(native)
    )
    assert random_routing["align/routing_agreement"] < 0.8


def test_replay_coverage_counts_the_sequences_without_recorded_routing(tiny_trainer):
    trajs = tiny_run.make_trajectories(13, n=6, routing=tiny_trainer.routing)
    stripped = [
        dataclasses.replace(t, sequences=(dataclasses.replace(t.sequences[0], routed_experts=None),))
        if i % 2
        else t
        for i, t in enumerate(trajs)
    ]
    batch, stats = pack(tiny_trainer, stripped)
    recorded = sum(
        int(t.sequences[0].loss_mask[1:].sum()) for t in stripped if t.sequences[0].routed_experts is not None
    )
    _, metrics = tiny_run.update(tiny_trainer, tiny_trainer.init_state(seed=0), batch, stats)
    assert metrics["align/routing_coverage"] == pytest.approx(recorded / stats.sampled_tokens, abs=1e-6)
    assert metrics["batch/sampled_tokens"] == stats.sampled_tokens


def test_several_updates_per_batch_anchor_their_ratios_to_pi_old_from_before_the_first():
    trainer = trainer_with(mini_batches=2, micro_batch_rows=2)
    trajs = tiny_run.make_trajectories(17, n=12, routing=trainer.routing)
    batch, _ = pack(trainer, trajs)
    assert batch.tokens.shape[0] % 4 == 0
    state, metrics = tiny_run.update(trainer, trainer.init_state(seed=0), batch)
    assert metrics["train/updates"] == 2.0 and metrics["train/step"] == 2.0
    # The second mini-batch is scored against π_old from before the first update, which moved the
    # weights: its ratio is no longer 1. Re-anchoring on the current weights would give exactly 0.
    assert abs(metrics["train/ppo_kl"]) > 1e-6
    # ... and the update is exactly the manual sequence with π_old computed once on the whole batch.
    fresh = trainer.init_state(seed=0)
    old = np.asarray(trainer.old_logprobs(fresh.params, trainer.device_batch(batch)))
    manual = fresh
    for j in range(2):
        rows = {f.name: getattr(batch, f.name) for f in dataclasses.fields(TrainBatch)}
        mini = {
            k: None if v is None else (v[:, j::2] if k == "routed_experts" else v[j::2])
            for k, v in rows.items()
        }
        manual, _, _ = trainer.train_step(
            manual, trainer.device_batch(TrainBatch(**mini)), jnp.asarray(old[j::2])
        )
    # The same compiled programs on the same arrays: measured bitwise equal (issue 32), so 1e-7 is no noise
    # budget, only slack for XLA fusing one of the two programs differently.
    assert_trees_close(state.params, manual.params, atol=1e-7)


def test_a_non_finite_gradient_skips_the_update_and_counts_it(tiny_trainer):
    batch, _ = pack(tiny_trainer, tiny_run.make_trajectories(4, n=6, routing=tiny_trainer.routing))
    poisoned = dataclasses.replace(
        batch, advantages=np.where(batch.loss_mask > 0, np.nan, 0.0).astype(np.float32)
    )
    state = tiny_trainer.init_state(seed=0)
    before = jax.device_get(state.params)
    new, metrics, _ = tiny_trainer.train_step(state, tiny_trainer.device_batch(poisoned))
    assert not math.isfinite(float(metrics["train/grad_norm"]))
    assert int(new.step) == 1 and int(new.skipped) == 1 and float(metrics["train/update_applied"]) == 0.0
    assert_trees_close(new.params, before, atol=0)


@pytest.fixture(scope="module")
def variant_trainer():
    """fp32 master weights with bf16 compute, lr 0 on the first update (warm-up from 0), aux loss 0.01,
    k3 KL 0.1 to the initial weights, routing replay off (agreement still measured)."""
    algo, train = tiny_run.tiny_configs(warmup_steps=1, routing_replay=False, routing_agreement_every=1)
    policy = init_policy(tiny_run.TINY_MOE, seed=0, dtype="float32", compute_dtype="bfloat16")
    return Trainer(
        policy, dataclasses.replace(algo, aux_loss_coef=0.01, kl_coef=0.1), train
    )  # reference: these weights


@pytest.mark.slow  # ~12 s
def test_a_learning_rate_of_zero_is_warned_about_every_step_it_trains_at(variant_trainer, caplog):
    batch, _ = pack(variant_trainer, tiny_run.make_trajectories(2, n=6, routing=variant_trainer.routing))
    state = variant_trainer.init_state(seed=0)
    with caplog.at_level(logging.WARNING, logger="legorl_jax.train.step"):
        state, m0 = tiny_run.update(variant_trainer, state, batch)
        assert m0["train/lr"] == 0.0
        assert [r.getMessage() for r in caplog.records if "learning rate is 0" in r.getMessage()]
        caplog.clear()
        state, m1 = tiny_run.update(variant_trainer, state, batch)
    assert m1["train/lr"] == pytest.approx(1e-2)
    assert not [r for r in caplog.records if "learning rate is 0" in r.getMessage()]


def test_the_moe_aux_loss_and_the_reference_kl_enter_with_their_coefficients(variant_trainer):
    # No recorded routing: the reference is routed natively, so replaying a foreign routing on the policy
    # would make the KL nonzero even at the reference weights.
    batch, _ = pack(variant_trainer, tiny_run.make_trajectories(2, n=6))
    state = variant_trainer.init_state(seed=0)
    kls = []
    for _ in range(3):  # lr 0, then lr 1e-2 from the reference, then away from it
        state, metrics = tiny_run.update(variant_trainer, state, batch)
        kls.append(metrics["train/kl_ref"])
        aux, pg, kl, loss = (
            metrics[k] for k in ("train/aux_loss", "train/pg_loss", "train/kl_ref", "train/loss")
        )
        # HF's unscaled load-balancing loss is about top_k = 2 for an untrained router.
        assert aux > 1.0
        assert loss == pytest.approx(pg + 0.01 * aux + 0.1 * kl, abs=1e-6)
    # At the reference weights the k3 KL is exactly 0; once the policy moved it is positive.
    assert kls[0] == kls[1] == 0.0 and kls[2] > 0.0


@pytest.mark.parametrize(
    "trainer_name, outcome",
    [("tiny_trainer", Outcome.SANDBOX_FAILED), ("variant_trainer", Outcome.HARNESS_CRASHED)],
)
def test_dropped_trials_change_nothing_even_through_the_moe_aux_loss_and_the_kl(
    request, trainer_name, outcome
):
    # variant_trainer adds the MoE load-balancing loss (0.01) and the k3 KL (0.1). The aux loss is taken
    # over every real token of the forward, not over the loss mask, so a dropped trial that is packed with
    # a zero mask still pulls the router: its tokens would change the aux loss and the gradient.
    trainer = request.getfixturevalue(trainer_name)
    trajs = tiny_run.make_trajectories(5, n=4, routing=trainer.routing)
    failed = [
        dataclasses.replace(t, trial_id=f"failed{i}", outcome=outcome)
        for i, t in enumerate(tiny_run.make_trajectories(6, n=2, routing=trainer.routing))
    ]
    with_failed, stats = pack(trainer, trajs + failed)
    without, _ = pack(trainer, trajs)
    assert stats.dropped_trials == 2 and with_failed.tokens.shape == without.tokens.shape
    s_with, m_with = tiny_run.update(trainer, trainer.init_state(seed=0), with_failed)
    s_without, m_without = tiny_run.update(trainer, trainer.init_state(seed=0), without)
    for key in ("train/aux_loss", "train/kl_ref", "train/pg_loss", "train/loss", "train/grad_norm"):
        if key in m_without:
            assert m_with[key] == pytest.approx(m_without[key], rel=1e-6, abs=1e-9), key
    # Dropped trials leave every packed array identical: the same program on the same arrays, measured
    # bitwise equal (issue 32), so these tolerances are no noise budget.
    assert_trees_close(s_with.params, s_without.params, atol=1e-7)
    assert_first_moments_close(s_with, s_without, rel=1e-6)


def test_an_overlong_trial_is_refused_and_counted_while_the_rest_of_the_batch_trains(tiny_trainer, caplog):
    trajs = tiny_run.make_trajectories(5, n=4, routing=tiny_trainer.routing)
    (long,) = tiny_run.make_trajectories(7, n=1, routing=tiny_trainer.routing, lengths=(40, 41))
    long = dataclasses.replace(long, trial_id="too-long")
    with caplog.at_level(logging.WARNING, logger="legorl_jax.train.batch"):
        with_long, stats = pack(tiny_trainer, trajs + [long])
    without, _ = pack(tiny_trainer, trajs)
    assert stats.overlong == 1 and stats.refused == (("too-long", 40),)
    assert "too-long 40" in caplog.text and f"train.max_tokens={tiny_run.MAX_TOKENS}" in caplog.text
    # Not one token of it is packed (a cut would leave its first 32 tokens in a row): the batch is the one
    # without it, field for field.
    for field in dataclasses.fields(TrainBatch):
        np.testing.assert_array_equal(getattr(with_long, field.name), getattr(without, field.name))
    state = tiny_trainer.init_state(seed=0)
    before = [np.asarray(x) for x in jax.tree.leaves(state.params)]  # the update donates `state`
    new_state, update = tiny_trainer.update(state, with_long, stats)
    assert update.metrics["batch/overlong"] == 1.0 and math.isfinite(update.metrics["train/loss"])
    assert int(new_state.step) == 1 and update.metrics["train/skipped_total"] == 0.0
    after = jax.tree.leaves(new_state.params)
    assert max(np.abs(np.asarray(a) - b).max() for a, b in zip(after, before, strict=True)) > 0


def test_with_replay_off_the_recorded_routing_is_compared_but_not_replayed(variant_trainer):
    recorded, _ = pack(variant_trainer, tiny_run.make_trajectories(2, n=6, routing=variant_trainer.routing))
    unrecorded = dataclasses.replace(recorded, routed_experts=None)
    params = variant_trainer.init_state(seed=0).params
    with_routing = variant_trainer.old_logprobs(params, variant_trainer.device_batch(recorded))
    without = variant_trainer.old_logprobs(params, variant_trainer.device_batch(unrecorded))
    np.testing.assert_array_equal(np.asarray(with_routing), np.asarray(without))
    _, metrics = tiny_run.update(variant_trainer, variant_trainer.init_state(seed=0), recorded)
    assert metrics["align/routing_coverage"] == 0.0
    assert 0.0 < metrics["align/routing_agreement"] < 1.0  # random recorded routing vs the trainer's own


def dot_operand_dtypes(jaxpr) -> list[tuple[str, ...]]:
    """The operand dtypes of every matmul (dot_general) in a jaxpr, nested jaxprs included."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(tuple(str(v.aval.dtype) for v in eqn.invars))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found += dot_operand_dtypes(inner)
    return found


def test_fp32_master_weights_train_with_bf16_compute(variant_trainer):
    batch, _ = pack(variant_trainer, tiny_run.make_trajectories(8, n=6, routing=variant_trainer.routing))
    state = variant_trainer.init_state(seed=0)
    # The compute: the train step's attention and expert matmuls multiply bf16 by bf16. The router (and
    # the fused log-prob op's float32 path) may stay float32; a step computing everything in float32 fails.
    device_batch = variant_trainer.device_batch(batch)
    ref = variant_trainer.ref_logprobs(device_batch)  # kl_coef > 0: the step needs its reference
    dots = dot_operand_dtypes(
        jax.make_jaxpr(lambda st, b: variant_trainer.train_step(st, b, ref_logprobs=ref))(
            state, device_batch
        ).jaxpr
    )
    assert sum(d == ("bfloat16", "bfloat16") for d in dots) >= len(dots) // 2, collections.Counter(dots)
    before = jax.device_get(state.params)
    for _ in range(2):  # the first update runs at lr 0 (warm-up)
        state, metrics = tiny_run.update(variant_trainer, state, batch)
    assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
    assert {x.dtype for x in jax.tree.leaves(state.opt_state) if x.ndim} == {jnp.dtype(jnp.float32)}
    assert math.isfinite(metrics["train/loss"]) and metrics["train/grad_norm"] > 0
    moved = [
        float(np.abs(np.asarray(a) - np.asarray(b)).max())
        for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(before), strict=True)
    ]
    assert max(moved) > 1e-3


def test_bad_batches_and_trainer_settings_are_named(tiny_trainer):
    batch, _ = pack(tiny_trainer, tiny_run.make_trajectories(4, n=6, routing=tiny_trainer.routing))
    odd = {f.name: getattr(batch, f.name) for f in dataclasses.fields(TrainBatch)}
    odd = {k: None if v is None else (v[:, :1] if k == "routed_experts" else v[:1]) for k, v in odd.items()}
    with pytest.raises(ValueError, match="batch has 1 rows, not a multiple of train.micro_batch_rows=2"):
        tiny_trainer.device_batch(TrainBatch(**odd))
    algo, train = tiny_run.tiny_configs(micro_batch_rows=2)
    mesh_config = cpu8_mesh_config()
    with pytest.raises(ValueError, match="micro_batch_rows=2 must be a multiple of the 4 batch shards"):
        Trainer(
            init_policy(tiny_run.TINY_MOE, seed=0),
            algo,
            train,
            mesh=make_mesh(mesh_config),
            rules=rules_from_config(mesh_config),
        )


def with_versions(trajs, version_of_trial):
    """The trials with every sampled token tagged `version_of_trial(i)`."""
    return [
        dataclasses.replace(
            t,
            sequences=tuple(
                dataclasses.replace(
                    s, token_versions=np.where(s.loss_mask == 1, version_of_trial(i), -1).astype(np.int32)
                )
                for s in t.sequences
            ),
        )
        for i, t in enumerate(trajs)
    ]


def test_update_reports_is_figures_per_version_gap_and_token_versions_never_recompile(tiny_trainer):
    trajs = with_versions(
        tiny_run.make_trajectories(21, n=6, routing=tiny_trainer.routing), lambda i: 3 - i % 2
    )
    batch, stats = pack(tiny_trainer, trajs)
    _, result = tiny_trainer.update(tiny_trainer.init_state(seed=0), batch, stats, trainer_version=3)
    m = result.metrics
    # The ratio π_old / behaviour per sampled token, from the log-prob differences the update returns.
    w = np.exp(result.logprob_diffs.astype(np.float64))
    assert m["train/is_ratio_mean"] == pytest.approx(w.mean(), rel=1e-5)
    assert m["train/is_ratio_max"] == pytest.approx(w.max(), rel=1e-5)
    assert m["train/is_ratio_min"] == pytest.approx(w.min(), rel=1e-5)
    applied = np.minimum(w, 2.0)  # the default token TIS at cap 2, no rejection
    assert m["train/is_clipped_frac"] == pytest.approx((w >= 2.0).mean(), abs=1e-7)
    assert m["train/is_ess"] == pytest.approx(applied.sum() ** 2 / (w.size * (applied**2).sum()), rel=1e-5)
    # Per gap: even trials were sampled under the trainer's version 3 (gap 0), odd ones under 2 (gap 1);
    # the versions line up with the sampled targets in the same order as the differences.
    versions = batch.token_versions[batch.loss_mask > 0]
    assert set(versions.tolist()) == {2, 3} and versions.size == w.size
    assert m["train/is_ratio_mean_gap_0"] == pytest.approx(w[versions == 3].mean(), rel=1e-6)
    assert m["train/is_ratio_mean_gap_1"] == pytest.approx(w[versions == 2].mean(), rel=1e-6)
    assert "train/is_ratio_mean_gap_2" not in m
    # The alignment gate judges only the tokens of the trainer's own version; the older ones' drift from it
    # is the policy's lag and goes to offpolicy/*, so it cannot read as broken replay.
    behaviour = batch.behaviour_logprobs[batch.loss_mask > 0].astype(np.float64)
    train = behaviour + result.logprob_diffs
    same, old = versions == 3, versions == 2
    assert m["align/same_version_tokens"] == same.sum() and m["offpolicy/cross_version_tokens"] == old.sum()
    pearson = np.corrcoef(np.exp(train[same]), np.exp(behaviour[same]))[0, 1]
    assert m["align/prob_pearson"] == pytest.approx(pearson, abs=1e-4)
    assert m["align/k1"] == pytest.approx(-result.logprob_diffs[same].mean(), abs=1e-5)
    assert m["offpolicy/k1_cross"] == pytest.approx(-result.logprob_diffs[old].mean(), abs=1e-5)
    everything = np.corrcoef(np.exp(train), np.exp(behaviour))[0, 1]
    assert m["offpolicy/prob_pearson_all"] == pytest.approx(everything, abs=1e-4)

    # Another batch of the same shape with other version values, or none at all, runs the same compiled
    # programs: the versions stay on the host (a batch without them would otherwise be a new pytree).
    programs = dict(tiny_trainer._programs)
    compiled = {k: p._cache_size() for k, p in programs.items()}
    other = dataclasses.replace(batch, token_versions=np.where(batch.token_versions >= 0, 7, -1))
    _, again = tiny_trainer.update(tiny_trainer.init_state(seed=0), other, stats, trainer_version=9)
    _, unversioned = tiny_trainer.update(
        tiny_trainer.init_state(seed=0),
        dataclasses.replace(batch, token_versions=None),
        stats,
        trainer_version=3,
    )
    assert tiny_trainer._programs == programs
    assert {k: p._cache_size() for k, p in programs.items()} == compiled
    assert "train/is_ratio_mean_gap_0" not in unversioned.metrics
    assert again.metrics["train/is_ratio_mean_gap_2"] == pytest.approx(m["train/is_ratio_mean"], rel=1e-6)
    # No token of the trainer's version 9: nothing to judge alignment by (the figures are absent, no alert),
    # every token's drift is cross-version; without versions the figures cover every sampled token.
    assert "align/prob_pearson" not in again.metrics and again.metrics["align/same_version_tokens"] == 0
    assert again.metrics["offpolicy/prob_pearson_cross"] == pytest.approx(everything, abs=1e-4)
    assert unversioned.metrics["align/prob_pearson"] == pytest.approx(everything, abs=1e-4)
    assert "align/same_version_tokens" not in unversioned.metrics
