"""Config helpers that sit beside the schemas: the one list of harness names, and flattened dotted keys."""

from __future__ import annotations

import subprocess
import sys

import pytest

from legorl_jax.config import Config, EngineConfig, HarnessConfig, TrainConfig, flatten_config
from legorl_jax.harness import HARNESSES


@pytest.mark.parametrize("name", list(HARNESSES))
def test_every_registered_harness_is_a_valid_harness_name(name):
    assert HarnessConfig(name=name).name == name


def test_a_harness_name_outside_the_registry_is_refused_with_the_registered_names():
    with pytest.raises(
        ValueError, match=r"harness.name must be one of \('builtin', .*'openhands', 'codex'\), got 'aider'"
    ):
        HarnessConfig(name="aider")


def test_the_rollout_command_offers_exactly_the_registered_harnesses():
    from legorl_jax.rollout.__main__ import build_parser

    action = next(a for a in build_parser()._actions if a.dest == "harness")
    assert list(action.choices) == list(HARNESSES)


def test_flattening_gives_dotted_keys_and_keeps_lists_and_empty_mappings_as_values():
    tree = {"algo": {"loss": "gspo", "clip": {"low": 3e-4}}, "tags": ["a", "b"], "options": {}, "seed": 0}
    assert flatten_config(tree) == {
        "algo.loss": "gspo",
        "algo.clip.low": 3e-4,
        "tags": ["a", "b"],
        "options": {},
        "seed": 0,
    }


def test_comparing_runs_imports_nothing_of_the_trainer():
    code = (
        "import sys, legorl_jax.monitor.compare; "
        "print(sorted(m for m in sys.modules if m.startswith('legorl_jax.train')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_async_loop_on_several_processes_is_refused_naming_both_settings(compose_config):
    overrides = [
        "loop.mode=async",
        "mesh.distributed.enabled=true",
        "mesh.distributed.num_processes=2",
        "mesh.distributed.process_id=0",
        "mesh.distributed.coordinator_address=127.0.0.1:12355",
    ]
    with pytest.raises(
        ValueError, match=r"loop.mode='async' .* mesh.distributed.enabled=true \(num_processes=2\)"
    ):
        compose_config(overrides)
    assert compose_config(overrides[1:]).mesh.distributed.num_processes == 2  # sync on several processes
    assert compose_config(overrides[:1]).loop.mode == "async"  # async on one


def test_an_engine_context_longer_than_a_training_row_is_warned_about(caplog):
    with caplog.at_level("WARNING", logger="legorl_jax.config"):
        Config(engine=EngineConfig(max_len=4096), train=TrainConfig(max_tokens=4096))
        assert not caplog.records
        Config(engine=EngineConfig(max_len=4096), train=TrainConfig(max_tokens=1024))
    assert "engine.max_len=4096 exceeds train.max_tokens=1024" in caplog.text
