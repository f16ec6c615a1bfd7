"""The `sandbox` config group: schema validation, every preset composes, and specs follow the config."""

from __future__ import annotations

import pathlib

import pytest

from legorl_jax.config import SandboxConfig
from legorl_jax.sandbox import spec_from_config

CONF = pathlib.Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF / "sandbox").glob("*.yaml")))
def test_every_sandbox_preset_composes_into_a_valid_config(compose_config, preset):
    from legorl_jax.config import Config

    root = compose_config([f"sandbox={preset}"])
    assert isinstance(root, Config) and isinstance(root.sandbox, SandboxConfig)
    sandbox = root.sandbox
    assert sandbox.backend == {"docker": "docker", "bwrap": "bwrap"}.get(preset, "auto")
    spec = spec_from_config(sandbox, image="legorl-base:latest", proxy_port=8000)
    assert (spec.cpus, spec.memory_mb, spec.read_only_root) == (
        sandbox.cpus,
        sandbox.memory_mb,
        sandbox.read_only_root,
    )


def test_sandbox_config_names_bad_values():
    with pytest.raises(ValueError, match="sandbox.backend.*'lxc'"):
        SandboxConfig(backend="lxc")
    with pytest.raises(ValueError, match="sandbox.network.*'host'"):
        SandboxConfig(network="host")
    with pytest.raises(ValueError, match="sandbox.memory_mb.*-5"):
        SandboxConfig(memory_mb=-5)
    with pytest.raises(ValueError, match="sandbox.pids.*2.5"):
        SandboxConfig(pids=2.5)
    with pytest.raises(ValueError, match="sandbox.read_only_root.*'yes'"):
        SandboxConfig(read_only_root="yes")


def test_spec_from_config_takes_the_trials_own_fields():
    spec = spec_from_config(
        SandboxConfig(network="proxy_only", memory_mb=512),
        image="img",
        workdir="/repo",
        proxy_port=9000,
        labels={"trial": "t1"},
        env={"A": "1"},
    )
    assert (spec.image, spec.workdir, spec.network, spec.proxy_port, spec.memory_mb) == (
        "img",
        "/repo",
        "proxy_only",
        9000,
        512,
    )
    assert dict(spec.labels) == {"trial": "t1"} and dict(spec.env) == {"A": "1"}
    with pytest.raises(ValueError, match="proxy_port"):
        spec_from_config(SandboxConfig(network="proxy_only"), image="img")
