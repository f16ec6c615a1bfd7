"""The harness and rollout config groups: `+harness=NAME` selects a harness, the built-in one runs
otherwise."""

import pytest

from legorl_jax.config import HarnessConfig, RolloutConfig


def test_without_a_harness_override_the_builtin_harness_runs(compose_config):
    cfg = compose_config()
    assert cfg.harness.name == "builtin" and cfg.harness.step_limit == 30


def test_plus_harness_selects_a_preset(compose_config):
    cfg = compose_config(["+harness=builtin", "harness.step_limit=12"])
    assert (
        cfg.harness.name == "builtin"
        and cfg.harness.step_limit == 12
        and cfg.harness.options == {"command_timeout_s": 60}
    )


@pytest.mark.parametrize(
    ("cls", "field", "value", "fragment"),
    [
        (HarnessConfig, "name", "aider", "harness.name.*'aider'"),
        (HarnessConfig, "step_limit", 0, "harness.step_limit.*got 0"),
        (RolloutConfig, "concurrency", 0, "rollout.concurrency.*got 0"),
        (RolloutConfig, "retries", -1, "rollout.retries.*got -1"),
        (RolloutConfig, "trial_timeout_s", 0, "rollout.trial_timeout_s.*got 0"),
        (RolloutConfig, "retry_wait_s", -1, "rollout.retry_wait_s.*got -1"),
        (RolloutConfig, "retry_delay_s", "soon", "rollout.retry_delay_s.*got 'soon'"),
    ],
)
def test_a_bad_harness_or_rollout_value_is_refused_naming_it(cls, field, value, fragment):
    with pytest.raises(ValueError, match=fragment):
        cls(**{field: value})
