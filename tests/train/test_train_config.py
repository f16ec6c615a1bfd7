"""The algo/ and train/ presets compose, and bad values are refused naming field and value."""

import jax.numpy as jnp
import numpy as np
import pytest

from legorl_jax.config import AlgoConfig, CheckpointConfig, Config, MeshConfig, TrainConfig
from legorl_jax.train.advantages import grpo_advantages
from legorl_jax.train.loss import LossNorm, aggregate


@pytest.mark.parametrize("preset", ["gspo", "ppo", "cispo", "dr_grpo"])
def test_every_algo_preset_composes_into_a_valid_config(compose_config, preset):
    cfg = compose_config([f"algo={preset}", "train=tiny"])
    assert isinstance(cfg, Config) and isinstance(cfg.algo, AlgoConfig) and isinstance(cfg.train, TrainConfig)
    assert isinstance(cfg.train.checkpoint, CheckpointConfig)


def test_the_default_algorithm_is_gspo_with_lego_rl_clip_range(compose_config):
    cfg = compose_config([])
    assert (cfg.algo.loss, cfg.algo.clip_low, cfg.algo.clip_high) == ("gspo", 3e-4, 4e-4)
    assert cfg.algo.loss_agg == "seq-mean-token-mean" and cfg.train.schedule == "constant"


def test_dr_grpo_preset_values_drop_the_std_and_the_length_normalisation(compose_config):
    # The preset's own values fed to the functions that read them (the loop passes them the same way).
    algo = compose_config(["algo=dr_grpo"]).algo
    # One success in a group of four: r - mean = 0.75 / -0.25. Dividing by the std (0.5, ddof 1) would
    # give 1.5 / -0.5.
    advantages = grpo_advantages([1.0, 0.0, 0.0, 0.0], ["g"] * 4, std=algo.advantage_std)
    np.testing.assert_allclose(advantages, [0.75, -0.25, -0.25, -0.25], rtol=0, atol=1e-7)
    # Two sequences of 1 and 3 tokens, every token's value 1, constant length 4: (1 + 3) / (2 * 4) = 0.5.
    # A per-sequence token mean (the 1/|o| normalisation) would give 1.0.
    segments = jnp.array([[1, 2, 2, 2]], jnp.int32)
    mask = jnp.ones((1, 4), jnp.float32)
    norm = LossNorm(tokens=jnp.float32(4), sequences=jnp.float32(2), sampled=jnp.float32(4))
    loss = aggregate(jnp.ones((1, 4), jnp.float32), mask, segments, algo.loss_agg, norm, 4.0)
    assert float(loss) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "preset, devices",
    [
        ("cpu8", 8),
        ("cpu8_context", 8),
        ("gpu1", 1),
        ("h200x8", 8),
        ("h200x8_long", 8),
        ("h200x8x2", 16),
        ("h200x8x8", 64),
        ("h200x8x8_long", 64),
    ],
)
def test_every_mesh_preset_composes_and_spans_its_device_count(compose_config, preset, devices):
    mesh = compose_config([f"mesh={preset}"]).mesh
    assert isinstance(mesh, MeshConfig)
    # A preset whose axes multiply to another count would fail make_mesh on the machine it names.
    assert mesh.data * mesh.fsdp * mesh.tensor * mesh.expert * mesh.context == devices


@pytest.mark.parametrize(
    "override, message",
    [
        ("algo.loss=grpo", r"algo\.loss .*'grpo'"),
        ("algo.tis_cap=-1", r"algo\.tis_cap must be > 0, got -1"),
        ("train.schedule=linear", r"train\.schedule .*'linear'"),
        ("train.micro_batch_rows=0", r"train\.micro_batch_rows must be a positive int, got 0"),
        ("train.checkpoint.keep=0", r"train\.checkpoint\.keep must be a positive int, got 0"),
        ("train.remat=everything", r"train\.remat must be one of .* got 'everything'"),
    ],
)
def test_bad_config_values_are_named(compose_config, override, message):
    with pytest.raises(ValueError, match=message):
        compose_config([override])


def test_a_cosine_schedule_needs_room_after_its_warmup():
    with pytest.raises(ValueError, match="warmup_steps=10 must be < train.total_steps=10"):
        TrainConfig(schedule="warmup_cosine", warmup_steps=10, total_steps=10)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("max_share", 0, "max_share.*got 0"),
        ("max_share", 1.5, "max_share.*got 1.5"),
        ("cheap_s", -1, "cheap_s.*got -1"),
    ],
)
def test_a_bad_checkpoint_time_budget_is_refused_naming_the_value(field, value, fragment):
    with pytest.raises(ValueError, match=f"train.checkpoint.{fragment}"):
        CheckpointConfig(**{field: value})


def test_by_default_a_run_checkpoints_every_loop_step(compose_config):
    checkpoint = compose_config([]).train.checkpoint
    assert checkpoint.every == 1 and 0 < checkpoint.max_share <= 1
