"""The tasks/ and verifier/ config groups compose from every preset and reject bad values by name."""

from __future__ import annotations

import pathlib

import pytest

from legorl_jax.config import TasksConfig, VerifierConfig

CONF = pathlib.Path(__file__).parents[2] / "conf"


def test_the_default_run_trains_on_the_builtin_train_split(compose_config):
    cfg = compose_config()
    assert (cfg.tasks.suite, cfg.tasks.split, cfg.tasks.eval_split) == ("builtin", "train", "validation")
    assert cfg.verifier.backend == "auto" and cfg.verifier.concurrency > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"suite": ""}, "tasks.suite.*''"),
        ({"split": ""}, "tasks.split.*''"),
        ({"image_template": "fixed"}, "tasks.image_template.*'fixed'"),
        ({"test_cmd": " "}, "tasks.test_cmd.*' '"),
        ({"log_parser": 3}, "tasks.log_parser.*3"),
    ],
)
def test_tasks_config_names_a_bad_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TasksConfig(**kwargs)


def test_tasks_config_takes_swe_gyms_image_spelling_and_a_command_for_unspecified_repositories():
    cfg = TasksConfig(
        image_template="xingyaoww/sweb.eval.x86_64.{swegym_instance_id}:latest",
        test_cmd="pytest -rA",
        log_parser="parse_log_pytest",
    )
    assert (cfg.test_cmd, cfg.log_parser) == ("pytest -rA", "parse_log_pytest")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"memory_mb": 0}, "verifier.memory_mb.*0"),
        ({"timeout_multiplier": -1.0}, "verifier.timeout_multiplier.*-1.0"),
        ({"concurrency": 2.5}, "verifier.concurrency.*2.5"),
        ({"backend": ""}, "verifier.backend.*''"),
        ({"backend": "kvm"}, "verifier.backend.*'kvm'"),
    ],
)
def test_verifier_config_names_a_bad_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VerifierConfig(**kwargs)
