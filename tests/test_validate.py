"""The shared argument checks: what passes, and the error naming the field and the received value."""

import math

import pytest

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
