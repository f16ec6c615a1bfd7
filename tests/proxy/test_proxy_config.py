"""The proxy config group: presets compose, bad values are refused by name."""

import pytest

from legorl_jax.config import ProxyConfig


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("mode", "greedy", "'greedy'"),
        ("tool_parser", "mistral", "'mistral'"),
        ("shared_tokens", "keep", "'keep'"),
        ("temperature", 0, "got 0"),
        ("max_response_tokens", 0, "got 0"),
        ("context_length", 1, "got 1"),
        ("max_consecutive_no_tool", -1, "got -1"),
        ("side_system_prefixes", [""], "''"),
    ],
)
def test_a_bad_proxy_value_is_refused_naming_it(field, value, fragment):
    with pytest.raises(ValueError, match=f"proxy.{field}.*{fragment}"):
        ProxyConfig(**{field: value})


def test_a_command_line_override_reaches_the_proxy_config(compose_config):
    cfg = compose_config(["proxy.shared_tokens=recompute", "proxy.max_consecutive_no_tool=0"]).proxy
    assert (cfg.shared_tokens, cfg.max_consecutive_no_tool) == ("recompute", 0)
