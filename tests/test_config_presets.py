"""Every preset of every config group composes into the root config with exactly its own values.

For each `conf/<group>/<preset>.yaml`, the composed group equals its schema's defaults with the preset's own
keys (and those of presets it extends) applied: a preset states only what differs, and nothing else moves.
Experiments (presets over several groups) are checked the same way, group by group.
"""

from __future__ import annotations

import dataclasses
import pathlib

import pytest
import yaml

from legorl_jax import config as C

CONF = pathlib.Path(__file__).resolve().parents[1] / "conf"
SCHEMAS = {
    "model": C.ModelConfig,
    "mesh": C.MeshConfig,
    "algo": C.AlgoConfig,
    "train": C.TrainConfig,
    "tasks": C.TasksConfig,
    "verifier": C.VerifierConfig,
    "sandbox": C.SandboxConfig,
    "engine": C.EngineConfig,
    "proxy": C.ProxyConfig,
    "harness": C.HarnessConfig,
    "rollout": C.RolloutConfig,
    "loop": C.LoopConfig,
    "tracking": C.TrackingConfig,
}
PRESETS = [(g, p.stem) for g in SCHEMAS for p in sorted((CONF / g).glob("*.yaml"))]


def _stated(group: str, preset: str) -> dict:
    """The preset's own values, over those of the presets it lists in its defaults (not the schema)."""
    data = yaml.safe_load((CONF / group / f"{preset}.yaml").read_text()) or {}
    merged: dict = {}
    for parent in data.pop("defaults", []):
        if isinstance(parent, str) and parent not in ("schema", "_self_"):
            merged = _merge(merged, _stated(group, parent))
    return _merge(merged, data)


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _expected(schema: type, stated: dict) -> dict:
    return _merge(dataclasses.asdict(schema()), stated)


def _resolved(value: object) -> object:
    return (
        value
        if not (isinstance(value, str) and value.startswith("${oc.env:"))
        else value.split(",", 1)[1].rstrip("}")
    )


@pytest.mark.parametrize(("group", "preset"), PRESETS, ids=[f"{g}={p}" for g, p in PRESETS])
def test_every_preset_composes_with_its_own_values_and_the_schema_defaults(
    compose_config, group, preset, monkeypatch
):
    monkeypatch.delenv("LEGORL_MODEL", raising=False)
    override = f"+harness={preset}" if group == "harness" else f"{group}={preset}"
    composed = dataclasses.asdict(getattr(compose_config([override]), group))
    expected = {k: _resolved(v) for k, v in _expected(SCHEMAS[group], _stated(group, preset)).items()}
    assert composed == expected


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_every_experiment_sets_its_groups_values_and_leaves_the_rest_at_the_defaults(
    compose_config, experiment
):
    data = yaml.safe_load((CONF / "experiment" / f"{experiment}.yaml").read_text())
    overridden = {
        key.removeprefix("override /"): value for d in data.pop("defaults", []) for key, value in d.items()
    }
    base, root = compose_config([]), compose_config([f"experiment={experiment}"])
    for group in SCHEMAS:
        got = dataclasses.asdict(getattr(root, group))
        if group in overridden:
            want = _expected(SCHEMAS[group], _merge(_stated(group, overridden[group]), data.get(group, {})))
            want = {k: _resolved(v) for k, v in want.items()}
        else:
            want = _merge(dataclasses.asdict(getattr(base, group)), data.get(group, {}))
        assert got == want, group


def test_a_choice_outside_its_values_is_refused_naming_it(compose_config):
    with pytest.raises(Exception, match="loop.publish must be one of .*'carrier_pigeon'"):
        compose_config(["loop.publish=carrier_pigeon"])
    with pytest.raises(Exception, match="tracking.backend must be one of .*'wandb'"):
        compose_config(["tracking.backend=wandb"])
