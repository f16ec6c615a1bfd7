"""A `Task` is valid by construction: every bad field raises `TaskError` naming the task, field and value."""

from __future__ import annotations

import dataclasses
import json

import pytest

from legorl_jax.tasks.schema import Task, TaskError, Timeouts


def make(**changes) -> Task:
    fields = dict(
        instance_id="demo-1",
        repo="legorl-suite/demo-1",
        base_commit="0" * 40,
        problem_statement="it breaks",
        patch="",
        test_patch="",
        FAIL_TO_PASS=["tests/test_a.py::test_a"],
        PASS_TO_PASS=["tests/test_b.py::test_b"],
        version="1",
        environment_setup_commit="0" * 40,
        image="img:1",
        workdir="/testbed",
        test_cmd="python3 -m pytest",
        log_parser="junit",
    )
    fields.update(changes)
    return Task(**fields)


def test_a_valid_task_round_trips_through_json():
    task = make(metadata={"tags": ("a", "b")}, timeouts=Timeouts(verify_s=30))
    data = json.loads(json.dumps(task.to_dict()))
    assert data["FAIL_TO_PASS"] == ["tests/test_a.py::test_a"] and data["metadata"] == {"tags": ["a", "b"]}
    assert data["timeouts"] == {"agent_s": 900.0, "verify_s": 30.0, "build_s": 600.0}
    assert task.tests == ("tests/test_a.py::test_a", "tests/test_b.py::test_b")
    assert isinstance(task.FAIL_TO_PASS, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.image = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "field", "value"),
    [
        ({"instance_id": "bad id!"}, "instance_id", "'bad id!'"),
        ({"base_commit": "HEAD"}, "base_commit", "'HEAD'"),
        ({"workdir": "testbed"}, "workdir", "'testbed'"),
        ({"kind": "gitlab"}, "kind", "'gitlab'"),
        ({"image": ""}, "image", "''"),
        ({"repo": None}, "repo", "NoneType None"),
        ({"FAIL_TO_PASS": "tests/test_a.py::test_a"}, "FAIL_TO_PASS", "'tests/test_a.py::test_a'"),
        ({"FAIL_TO_PASS": []}, "FAIL_TO_PASS", r"\[\]"),
        ({"PASS_TO_PASS": ["x", ""]}, "PASS_TO_PASS", "item ''"),
        ({"PASS_TO_PASS": ["tests/test_a.py::test_a"]}, "PASS_TO_PASS", "repeats FAIL_TO_PASS"),
        ({"protected_paths": ["a", "a"]}, "protected_paths", r"\['a'\] more than once"),
        ({"timeouts": {"verify_s": 3}}, "timeouts", "verify_s"),
        ({"metadata": []}, "metadata", r"\[\]"),
    ],
)
def test_each_bad_field_is_named_with_its_value(changes, field, value):
    with pytest.raises(TaskError, match=rf"task '.*': {field}: .*{value}"):
        make(**changes)


def test_only_harbor_tasks_may_omit_the_base_commit_and_the_test_lists():
    task = make(kind="harbor", base_commit="", FAIL_TO_PASS=[], PASS_TO_PASS=[], log_parser="harbor_reward")
    assert task.tests == ()
    with pytest.raises(TaskError, match="base_commit"):
        make(base_commit="")


@pytest.mark.parametrize("value", [0, -1.5, float("nan"), float("inf"), "10", True])
def test_timeouts_must_be_positive_finite_numbers(value):
    with pytest.raises(
        ValueError, match=r"timeouts.agent_s.*" + repr(value).replace("(", r"\(").replace(")", r"\)")
    ):
        Timeouts(agent_s=value)


def test_timeouts_from_a_table_reject_unknown_keys_and_non_tables():
    assert Timeouts.from_mapping("t", {"agent_s": 5}).agent_s == 5.0
    assert Timeouts.from_mapping("t", None) == Timeouts()
    with pytest.raises(TaskError, match="unknown keys \\['verify'\\]"):
        Timeouts.from_mapping("t", {"verify": 5})
    with pytest.raises(TaskError, match="table of seconds, got 5"):
        Timeouts.from_mapping("t", 5)


def test_importing_every_tasks_module_starts_nothing():
    import subprocess
    import sys

    code = (
        "import sys, legorl_jax.tasks.cli, legorl_jax.tasks.agent_sandbox, legorl_jax.tasks.task_image;"
        "print(sorted(m for m in ('jax', 'docker', 'swebench') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
