"""The shared argument checks: what passes, and the error naming the field and the received value; the
configs and stage arguments that use them."""

import math

import pytest

from legorl_jax.config import (
    AlgoConfig,
    CheckpointConfig,
    EngineConfig,
    LoopConfig,
    RolloutConfig,
    SandboxConfig,
    SGLangConfig,
    TrainConfig,
    VerifierConfig,
)
from legorl_jax.train.batch import RoutingSpec
from legorl_jax.validate import positive_int, positive_number


def test_a_positive_int_is_returned_as_given():
    assert positive_int("num_slots", 3) == 3


@pytest.mark.parametrize("value", [0, -2, 2.0, True, "3", None])
def test_anything_but_an_int_of_at_least_one_is_refused_naming_field_and_value(value):
    with pytest.raises(ValueError, match=rf"^BlockSizes\.num_warps must be a positive int, got {value!r}$"):
        positive_int("BlockSizes.num_warps", value)


def test_a_positive_int_or_float_is_a_positive_number():
    assert positive_number("rope_theta", 2) == 2 and positive_number("rms_norm_eps", 1e-6) == 1e-6


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan, True, "1"])
def test_a_number_that_is_not_finite_and_positive_is_refused_with_its_unit(value):
    with pytest.raises(
        ValueError, match=rf"^timeouts\.agent_s must be a positive number of seconds, got {value!r}$"
    ):
        positive_number("timeouts.agent_s", value, unit="seconds")
    with pytest.raises(ValueError, match=rf"^init_std must be a positive number, got {value!r}$"):
        positive_number("init_std", value)


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: TrainConfig(micro_batch_rows=True),
            r"^train\.micro_batch_rows must be a positive int, got True$",
        ),
        (lambda: CheckpointConfig(keep=True), r"^train\.checkpoint\.keep must be a positive int, got True$"),
        (lambda: SGLangConfig(tp=True), r"^engine\.sglang\.tp must be a positive int, got True$"),
        (lambda: SandboxConfig(pids=2.5), r"^sandbox\.pids must be a positive int, got 2\.5$"),
        (lambda: VerifierConfig(cpus=math.inf), r"^verifier\.cpus must be a positive number, got inf$"),
        (
            lambda: RolloutConfig(trial_timeout_s=0),
            r"^rollout\.trial_timeout_s must be a positive number of seconds, got 0$",
        ),
        (lambda: LoopConfig(tasks_per_step=0), r"^loop\.tasks_per_step must be a positive int, got 0$"),
        (lambda: LoopConfig(validate_every=-1), r"^loop\.validate_every must be an int >= 0, got -1$"),
        (lambda: RoutingSpec(2, True, 4), r"^RoutingSpec\.top_k must be a positive int, got True$"),
    ],
)
def test_the_configs_and_stage_arguments_refuse_with_the_shared_wording(make, message):
    """The call sites use this module: a bool where a size belongs is refused there too (an inline
    `isinstance(value, int)` copy takes True for 1), and an infinite quota is not a number."""
    with pytest.raises(ValueError, match=message):
        make()


def test_nullable_sizes_take_null():
    assert LoopConfig(tasks_per_step=None, validation_tasks=None).tasks_per_step is None
    assert EngineConfig(chunked_prefill_size=None, prefix_cache_tokens=None).chunked_prefill_size is None
    assert AlgoConfig(agg_norm_length=None).agg_norm_length is None
