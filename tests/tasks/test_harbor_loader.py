"""Harbor task directories load into tasks; each bad field is an error naming the task, field and value."""

from __future__ import annotations

import shutil

import pytest
from harbor_fixture import TASK_TOML, write_harbor_task

from legorl_jax.tasks.harbor import load_harbor_task, load_harbor_tasks
from legorl_jax.tasks.schema import TaskError


def test_a_harbor_directory_maps_onto_a_task(tmp_path):
    task = load_harbor_task(write_harbor_task(tmp_path / "add"))
    assert task.kind == "harbor" and task.instance_id == "harbor-add"
    assert (
        task.workdir == "/app"
        and task.test_cmd == "bash /tests/test.sh"
        and task.log_parser == "harbor_reward"
    )
    assert task.image.startswith("legorl-harbor-harbor-add:") and task.image_context.endswith(
        "add/environment"
    )
    assert task.verifier_dir.endswith("add/tests") and task.metadata["solution_dir"].endswith("add/solution")
    assert task.FAIL_TO_PASS == ("test_outputs.py::test_add",)
    assert (task.difficulty, task.domain, task.timeouts.verify_s, task.timeouts.agent_s) == (
        "easy",
        "numerics",
        120.0,
        300.0,
    )
    assert task.base_commit == "" and task.patch == ""
    assert "returns -1" in task.problem_statement


def test_the_image_tag_follows_the_environment_content(tmp_path):
    first = load_harbor_task(write_harbor_task(tmp_path / "add")).image
    (tmp_path / "add" / "environment" / "repo" / "calc.py").write_text("def add(a, b):\n    return b - a\n")
    assert load_harbor_task(tmp_path / "add").image != first


def test_a_docker_image_in_task_toml_is_used_as_is(tmp_path):
    toml = TASK_TOML.replace(
        "[environment]\n", '[environment]\ndocker_image = "prebuilt/img:1"\nworkdir = "/srv"\n'
    )
    task = load_harbor_task(write_harbor_task(tmp_path / "add", task_toml=toml))
    assert (task.image, task.workdir, task.image_context) == ("prebuilt/img:1", "/srv", "")


def test_a_directory_of_harbor_tasks_loads_them_all(tmp_path):
    write_harbor_task(tmp_path / "set" / "one")
    write_harbor_task(
        tmp_path / "set" / "two", task_toml=TASK_TOML.replace("legorl/harbor-add", "legorl/harbor-two")
    )
    assert [t.instance_id for t in load_harbor_tasks(tmp_path / "set")] == ["harbor-add", "harbor-two"]


@pytest.mark.parametrize(
    ("edit", "field", "value"),
    [
        (
            lambda t: t.replace("[agent]\n", "[agent]\nwhat = 1\n").replace("[task]", "colour = 'x'\n[task]"),
            "task.toml",
            "colour",
        ),
        (lambda t: t.replace("timeout_sec = 120.0", "timeout_sec = -1"), "timeouts", "-1"),
        (lambda t: t.replace('name = "legorl/harbor-add"', "name = 5"), "task.name", "5"),
        (
            lambda t: t.replace("[metadata]\n", '[metadata]\nextra = {base_commit = "xyz"}\n'),
            "metadata.extra.base_commit",
            "'xyz'",
        ),
        (lambda t: t.replace("[verifier]\n", "[verifier]\nenv = {A = 1}\n"), "verifier.env.A", "1"),
        (lambda t: t.replace("[verifier]\n", "[verifier]\nuser = ''\n"), "verifier.user", "''"),
        (
            lambda t: t.replace("[environment]\n", "[environment]\ndocker_image = ''\n"),
            "environment.docker_image",
            "''",
        ),
        (lambda t: t + "[[broken", "task.toml", "TOML"),
    ],
)
def test_a_bad_task_toml_is_an_error_naming_task_field_and_value(tmp_path, edit, field, value):
    write_harbor_task(tmp_path / "add", task_toml=edit(TASK_TOML))
    with pytest.raises(TaskError, match=rf"task '(harbor-)?add'.*{field}.*{value}"):
        load_harbor_task(tmp_path / "add")


def test_missing_test_sh_or_dockerfile_is_named(tmp_path):
    task_dir = write_harbor_task(tmp_path / "add")
    (task_dir / "tests" / "test.sh").unlink()
    with pytest.raises(TaskError, match="harbor-add.*tests/test.sh.*missing"):
        load_harbor_task(task_dir)
    task_dir = write_harbor_task(tmp_path / "again")
    shutil.rmtree(task_dir / "environment")
    with pytest.raises(TaskError, match="environment/Dockerfile.*missing"):
        load_harbor_task(task_dir)


def test_a_dockerfile_without_workdir_needs_one_in_task_toml(tmp_path):
    task_dir = write_harbor_task(tmp_path / "add")
    dockerfile = task_dir / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("WORKDIR /app\n", ""))
    with pytest.raises(TaskError, match="environment.workdir.*no WORKDIR"):
        load_harbor_task(task_dir)


def test_a_bad_config_json_or_test_patch_is_named(tmp_path):
    task_dir = write_harbor_task(tmp_path / "add")
    (task_dir / "tests" / "config.json").write_text('{"FAIL_TO_PASS": 3}')
    with pytest.raises(TaskError, match="config.json FAIL_TO_PASS.*3"):
        load_harbor_task(task_dir)
    (task_dir / "tests" / "config.json").write_text("{")
    with pytest.raises(TaskError, match="config.json.*not valid JSON"):
        load_harbor_task(task_dir)
    (task_dir / "tests" / "config.json").unlink()
    (task_dir / "tests" / "test_patch.diff").write_text(
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,5 +1 @@\n"
    )
    with pytest.raises(TaskError, match="test_patch.diff.*hunk ends early"):
        load_harbor_task(task_dir)


def test_a_directory_without_harbor_tasks_is_an_error(tmp_path):
    with pytest.raises(TaskError, match="holds no Harbor task"):
        load_harbor_tasks(tmp_path)


# The Harbor cookbook's task.toml style: the documented top-level `version` (Harbor renames it to
# schema_version), a `source`, artifacts, and a multi-step sibling in the same directory.
COOKBOOK_TOML = """\
version = "1.0"
source = "harbor-cookbook/recipes/simple-bugfix"
artifacts = ["/app/calc.py"]

[task]
name = "cookbook/simple-bugfix"
description = "Fix add()"
authors = [{ name = "Harbor", email = "harbor@example.com" }]
keywords = ["python", "bugfix"]

[metadata]
difficulty = "easy"
category = "debugging"

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 2048
allow_internet = false
"""

MULTI_STEP_TOML = (
    'multi_step_reward_strategy = "final"\n'
    + COOKBOOK_TOML.replace("cookbook/simple-bugfix", "cookbook/two-steps")
    + """
[[steps]]
name = "write"

[[steps]]
name = "test"
"""
)


def test_a_cookbook_task_with_version_source_and_artifacts_loads(tmp_path):
    task = load_harbor_task(write_harbor_task(tmp_path / "bugfix", task_toml=COOKBOOK_TOML))
    assert task.instance_id == "simple-bugfix"
    assert task.metadata["schema_version"] == "1.0"
    assert task.metadata["source"] == "harbor-cookbook/recipes/simple-bugfix"


def test_version_and_schema_version_together_keep_schema_version(tmp_path):
    toml = 'schema_version = "1.4"\n' + COOKBOOK_TOML
    assert (
        load_harbor_task(write_harbor_task(tmp_path / "bugfix", task_toml=toml)).metadata["schema_version"]
        == "1.4"
    )


def test_a_multi_step_task_is_skipped_with_a_warning_naming_it_and_the_others_load(tmp_path, caplog):
    write_harbor_task(tmp_path / "set" / "bugfix", task_toml=COOKBOOK_TOML)
    write_harbor_task(tmp_path / "set" / "steps-in-toml", task_toml=MULTI_STEP_TOML)
    steps_dir = write_harbor_task(
        tmp_path / "set" / "steps-dir",
        task_toml=COOKBOOK_TOML.replace("cookbook/simple-bugfix", "cookbook/steps-dir"),
    )
    (steps_dir / "steps" / "one").mkdir(parents=True)
    assert [t.instance_id for t in load_harbor_tasks(tmp_path / "set")] == ["simple-bugfix"]
    assert "steps-in-toml" in caplog.text and "steps-dir" in caplog.text and "multi-step" in caplog.text


def test_loading_one_multi_step_task_is_an_error_saying_so(tmp_path):
    with pytest.raises(TaskError, match="steps-in-toml.*multi-step task, which is not supported"):
        load_harbor_task(write_harbor_task(tmp_path / "steps-in-toml", task_toml=MULTI_STEP_TOML))
