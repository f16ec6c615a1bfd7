"""SWE-bench / SWE-Gym / SWE-rebench rows (JSONL, JSON, Parquet) load into tasks; each bad field is an error
naming the instance, line and value."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from legorl_jax.tasks.log_parsers import available_parsers
from legorl_jax.tasks.schema import TaskError
from legorl_jax.tasks.swebench import (
    SWEGYM_IMAGE_TEMPLATE,
    directives_from_test_patch,
    docker_instance_id,
    load_swebench_file,
    spec_table,
)

SHA = "a" * 40
PATCH = "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
TEST_PATCH = (
    "diff --git a/tests/test_m.py b/tests/test_m.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tests/test_m.py\n@@ -0,0 +1,2 @@\n+def test_a():\n+    pass\n"
    "diff --git a/tests/data.json b/tests/data.json\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tests/data.json\n@@ -0,0 +1 @@\n+{}\n"
)


def row(**changes) -> dict:
    base = {
        "instance_id": "octo__widgets-123",
        "repo": "octo/widgets",
        "base_commit": SHA,
        "problem_statement": "widgets break",
        "patch": PATCH,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": json.dumps(["tests/test_m.py::test_a"]),
        "PASS_TO_PASS": "[]",
        "version": 1.2,
        "environment_setup_commit": "b" * 40,
        "test_cmd": "pytest -rA tests/test_m.py",
        "log_parser": "pytest",
        "hints_text": "look at m",
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def write_rows(path: Path, *rows: dict) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_a_row_with_json_encoded_lists_loads_with_the_templated_image(tmp_path):
    (task,) = load_swebench_file(write_rows(tmp_path / "set.jsonl", row()))
    assert task.kind == "swebench" and task.instance_id == "octo__widgets-123"
    assert task.FAIL_TO_PASS == ("tests/test_m.py::test_a",) and task.PASS_TO_PASS == ()
    assert task.image == "swebench/sweb.eval.x86_64.octo_1776_widgets-123:latest"
    assert task.version == "1.2" and task.workdir == "/testbed" and task.log_parser == "pytest"
    assert task.timeouts.verify_s == 1800.0 and task.metadata["hints_text"] == "look at m"


def test_the_image_template_and_per_row_fields_override_the_defaults(tmp_path):
    rows = [
        row(),
        row(
            instance_id="b__c-1",
            image="local/b:1",
            workdir="/work",
            split="train",
            timeouts={"verify_s": 30},
            protected_paths=["fixtures/"],
        ),
    ]
    a, b = load_swebench_file(
        write_rows(tmp_path / "set.jsonl", *rows), image_template="mirror/{instance_id}:v1"
    )
    assert a.image == "mirror/octo_1776_widgets-123:v1"
    assert (b.image, b.workdir, b.split, b.timeouts.verify_s, b.protected_paths) == (
        "local/b:1",
        "/work",
        "train",
        30.0,
        ("fixtures/",),
    )


def test_a_json_file_holding_a_list_of_rows_loads(tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([row(), row(instance_id="x__y-2")]))
    assert [t.instance_id for t in load_swebench_file(path)] == ["octo__widgets-123", "x__y-2"]


def test_docker_spelling_of_instance_ids_matches_swebench():
    assert docker_instance_id("django__django-11099") == "django_1776_django-11099"
    assert docker_instance_id("Org__Repo-1") == "org_1776_repo-1"


def test_test_directives_skip_data_files_and_use_module_paths_for_django():
    assert directives_from_test_patch("octo/widgets", TEST_PATCH) == ["tests/test_m.py"]
    django = TEST_PATCH.replace("tests/test_m.py", "tests/forms_tests/test_fields.py")
    assert directives_from_test_patch("django/django", django) == ["forms_tests.test_fields"]


@pytest.mark.parametrize(
    ("changes", "field", "value"),
    [
        ({"repo": None}, "repo", "is missing"),
        ({"base_commit": "abc"}, "base_commit", "'abc'"),
        ({"FAIL_TO_PASS": "not json"}, "FAIL_TO_PASS", "'not json'"),
        ({"FAIL_TO_PASS": {"a": 1}}, "FAIL_TO_PASS", "{'a': 1}"),
        ({"PASS_TO_PASS": [1, 2]}, "PASS_TO_PASS", "item 1"),
        ({"version": [1]}, "version", r"\[1\]"),
        ({"patch": "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,9 +1 @@\n"}, "patch", "hunk ends early"),
        ({"log_parser": "parse_log_cobol"}, "log_parser", "'parse_log_cobol'"),
        ({"test_cmd": 7}, "test_cmd", "7"),
        ({"workdir": "testbed"}, "workdir", "'testbed'"),
        ({"timeouts": {"verify_s": 0}}, "timeouts", "0"),
        ({"problem_statement": ""}, "problem_statement", "''"),
    ],
)
def test_a_bad_row_field_is_an_error_naming_the_instance_line_field_and_value(
    tmp_path, changes, field, value
):
    path = write_rows(tmp_path / "set.jsonl", row(instance_id="ok__one-1"), row(**changes))
    with pytest.raises(TaskError, match=rf"octo__widgets-123 \(set.jsonl:2\).*{field}.*{value}"):
        load_swebench_file(path)


def test_an_unknown_log_parser_error_lists_the_available_ones(tmp_path):
    path = write_rows(tmp_path / "set.jsonl", row(log_parser="parse_log_cobol"))
    with pytest.raises(TaskError) as err:
        load_swebench_file(path)
    assert all(name in str(err.value) for name in available_parsers())


def test_a_missing_test_cmd_for_a_repo_no_spec_knows_is_an_error_saying_so(tmp_path):
    with pytest.raises(
        TaskError, match="octo__widgets-123.*test_cmd.*no eval_script.*'octo/widgets' version '1.2'"
    ):
        load_swebench_file(write_rows(tmp_path / "set.jsonl", row(test_cmd=None)))


def test_a_row_with_a_test_cmd_but_no_log_parser_is_an_error_not_a_pytest_default(tmp_path):
    with pytest.raises(TaskError, match=r"octo__widgets-123 \(set.jsonl:1\).*log_parser.*'octo/widgets'"):
        load_swebench_file(write_rows(tmp_path / "set.jsonl", row(log_parser=None)))


# Real rows (SWE-agent's test data, tests/fixtures/swebench/README.md): official fields only, no test_cmd,
# no parser.
REAL_ROWS = Path(__file__).parents[1] / "fixtures" / "swebench" / "dev-easy.json"
# swebench 4.1.0's get_test_directives on each real row, computed with that release.
UPSTREAM_DIRECTIVES = {
    "pydicom__pydicom-1458": ["pydicom/tests/test_numpy_pixel_data.py"],
    "pylint-dev__astroid-1268": ["tests/unittest_nodes.py"],
    "pydicom__pydicom-1194": ["pydicom/tests/test_filewriter.py"],
    "sqlfluff__sqlfluff-2386": ["test/core/rules/docstring_test.py", "test/rules/std_L054_test.py"],
}


def test_real_swebench_rows_load_with_the_spec_table_and_say_so():
    tasks = load_swebench_file(REAL_ROWS)
    assert [t.instance_id for t in tasks] == list(
        UPSTREAM_DIRECTIVES
    )  # the exact repeat of astroid is skipped
    by_id = {t.instance_id: t for t in tasks}
    assert by_id["pydicom__pydicom-1458"].log_parser == "parse_log_pytest_options"
    assert by_id["sqlfluff__sqlfluff-2386"].log_parser == "parse_log_pytest"
    for task in tasks:
        assert task.metadata["test_cmd_source"] in ("spec table (swebench 4.1.0)",) or task.metadata[
            "test_cmd_source"
        ].startswith("swebench 4")
        assert task.test_cmd.endswith("pytest -rA " + " ".join(UPSTREAM_DIRECTIVES[task.instance_id]))
        assert task.image == f"swebench/sweb.eval.x86_64.{docker_instance_id(task.instance_id)}:latest"


def test_real_rows_load_the_same_from_jsonl_with_json_encoded_test_lists(tmp_path):
    rows = json.loads(REAL_ROWS.read_text())
    as_hf = [
        {**r, "FAIL_TO_PASS": json.dumps(r["FAIL_TO_PASS"]), "PASS_TO_PASS": json.dumps(r["PASS_TO_PASS"])}
        for r in rows
    ]
    from_jsonl = load_swebench_file(write_rows(tmp_path / "dev.jsonl", *as_hf))
    from_json = load_swebench_file(REAL_ROWS)
    assert [(t.instance_id, t.FAIL_TO_PASS, t.PASS_TO_PASS, t.test_cmd) for t in from_jsonl] == [
        (t.instance_id, t.FAIL_TO_PASS, t.PASS_TO_PASS, t.test_cmd) for t in from_json
    ]


def test_directives_equal_upstream_for_every_real_row():
    for r in json.loads(REAL_ROWS.read_text()):
        assert directives_from_test_patch(r["repo"], r["test_patch"]) == UPSTREAM_DIRECTIVES[r["instance_id"]]


def test_django_directives_keep_non_test_modules_the_patch_touches_as_upstream_does():
    # django__django-16255's test patch; swebench 4.1.0 gives both modules (ours dropped urls.http).
    patch = "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
        for p in ("tests/sitemaps_tests/test_http.py", "tests/sitemaps_tests/urls/http.py")
    )
    assert directives_from_test_patch("django/django", patch) == [
        "sitemaps_tests.test_http",
        "sitemaps_tests.urls.http",
    ]


def test_a_repeated_instance_with_different_contents_is_an_error(tmp_path):
    path = write_rows(tmp_path / "set.jsonl", row(), row(problem_statement="other"))
    with pytest.raises(TaskError, match="octo__widgets-123.*rows 1 and 2.*different"):
        load_swebench_file(path)


def test_a_line_that_is_not_json_names_its_line(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(row()) + "\n{broken\n")
    with pytest.raises(TaskError, match="set.jsonl:2.*not valid JSON"):
        load_swebench_file(path)


def test_a_row_that_is_not_an_object_is_an_error(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(TaskError, match="set.jsonl:1.*row.*JSON object.*list"):
        load_swebench_file(path)


def test_an_exact_repeat_of_a_row_loads_once(tmp_path, caplog):
    tasks = load_swebench_file(write_rows(tmp_path / "set.jsonl", row(), row()))
    assert [t.instance_id for t in tasks] == ["octo__widgets-123"]
    assert "row 2 repeats row 1" in caplog.text


def test_an_image_template_without_the_placeholder_is_an_error(tmp_path):
    with pytest.raises(TaskError, match="image_template.*'fixed:latest'"):
        load_swebench_file(write_rows(tmp_path / "set.jsonl", row()), image_template="fixed:latest")


def test_a_swebench_5_row_takes_its_test_command_from_the_eval_script(tmp_path):
    script = "\n".join(
        [
            "#!/bin/bash",
            "set -uxo pipefail",
            "source /opt/miniconda3/bin/activate",
            "conda activate testbed",
            "cd /testbed",
            "git checkout abc tests/test_m.py",
            "git apply -v - <<'EOF_1'",
            "diff --git a/x b/x",
            "EOF_1",
            ": '>>>>> Start Test Output'",
            "pytest -rA tests/test_m.py",
            ": '>>>>> End Test Output'",
            "git checkout abc tests/test_m.py",
        ]
    )
    (task,) = load_swebench_file(write_rows(tmp_path / "set.jsonl", row(test_cmd=None, eval_script=script)))
    assert task.test_cmd == (
        "source /opt/miniconda3/bin/activate\nconda activate testbed\ncd /testbed\npytest -rA tests/test_m.py"
    )


def test_an_eval_script_without_markers_is_an_error(tmp_path):
    with pytest.raises(TaskError, match="eval_script.*no command between"):
        load_swebench_file(write_rows(tmp_path / "set.jsonl", row(test_cmd=None, eval_script="pytest\n")))


# SWE-bench Lite as Hugging Face serves it: one row per repository of Lite and Verified (fixture README).
LITE = Path(__file__).parents[1] / "fixtures" / "swebench_lite" / "lite_one_per_repo.jsonl"
LITE_REPOS = {
    "astropy/astropy",
    "django/django",
    "matplotlib/matplotlib",
    "mwaskom/seaborn",
    "pallets/flask",
    "psf/requests",
    "pydata/xarray",
    "pylint-dev/pylint",
    "pytest-dev/pytest",
    "scikit-learn/scikit-learn",
    "sphinx-doc/sphinx",
    "sympy/sympy",
}


def test_every_lite_repository_loads_with_its_official_command_and_parser():
    tasks = load_swebench_file(LITE)
    assert {t.repo for t in tasks} == LITE_REPOS and len(tasks) == len(LITE_REPOS)
    table = spec_table()
    for task in tasks:
        command = table["test_cmd"][task.repo][task.version]
        command = command[-1] if isinstance(command, list) else command
        directives = " ".join(directives_from_test_patch(task.repo, task.test_patch))
        assert task.test_cmd.endswith(f"{command} {directives}"), task.instance_id
        assert "docs/changes.txt" not in task.test_cmd  # not a test file (swebench drops .txt)
        assert task.log_parser == table["log_parser"][task.repo]
        assert task.metadata["image_source"].startswith("template")
    django = next(t for t in tasks if t.repo == "django/django")
    assert django.test_cmd.endswith("--parallel 1 auth_tests.test_validators")


def test_a_parquet_file_as_the_hub_serves_it_loads_as_the_same_rows_in_jsonl():
    from_jsonl = load_swebench_file(LITE)
    from_parquet = load_swebench_file(LITE.with_suffix(".parquet"))
    assert [dataclasses.replace(t, source_dir="") for t in from_parquet] == [
        dataclasses.replace(t, source_dir="") for t in from_jsonl
    ]


def test_a_file_that_is_not_parquet_is_an_error_naming_it(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_text("not parquet")
    with pytest.raises(TaskError, match=r"broken.parquet.*not a readable Parquet file"):
        load_swebench_file(path)


def test_a_swe_rebench_row_takes_its_image_command_and_parser_from_its_own_fields(tmp_path):
    rebench = row(
        instance_id="octo__widgets-123",
        test_cmd=None,
        log_parser=None,
        docker_image="swerebench/sweb.eval.x86_64.octo_1776_widgets-123",
        install_config={
            "python": "3.10",
            "install": "pip install -e .",
            "test_cmd": "pytest --no-header -rA --tb=no -p no:cacheprovider",
            "log_parser": "parse_log_pytest",
            "pip_packages": ["pytest"],
        },
        meta={"has_test_patch": True, "llm_score": {"difficulty_score": 1}},
        requirements="pytest==8.0\n",
        environment="name: testbed\n",
        license_name="MIT",
        created_at="2024-05-01T10:00:00",
    )
    (task,) = load_swebench_file(write_rows(tmp_path / "rebench.jsonl", rebench))
    assert task.image == "swerebench/sweb.eval.x86_64.octo_1776_widgets-123"
    assert task.test_cmd.endswith("pytest --no-header -rA --tb=no -p no:cacheprovider tests/test_m.py")
    assert task.log_parser == "parse_log_pytest"
    assert task.metadata["test_cmd_source"] == task.metadata["log_parser_source"] == "install_config"
    assert task.metadata["image_source"] == "docker_image"


def test_a_swe_gym_row_loads_with_its_image_spelling_and_the_command_the_user_names(tmp_path):
    gym = row(
        instance_id="getmoto__moto-7365", repo="getmoto/moto", version="5.0", test_cmd=None, log_parser=None
    )
    path = write_rows(tmp_path / "swe-gym.jsonl", gym)
    with pytest.raises(TaskError, match=r"getmoto__moto-7365.*--log-parser"):
        load_swebench_file(path)
    (task,) = load_swebench_file(
        path, image_template=SWEGYM_IMAGE_TEMPLATE, test_cmd="pytest -rA", log_parser="parse_log_pytest"
    )
    assert task.image == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-7365:latest"
    assert task.test_cmd.endswith("&& pytest -rA tests/test_m.py")
    assert task.metadata["test_cmd_source"] == "--test-cmd"
    assert task.metadata["log_parser_source"] == "--log-parser"
    # A repository a spec knows keeps its own command even when the user names one for the others.
    (lite,) = [t for t in load_swebench_file(LITE, test_cmd="pytest -rA") if t.repo == "django/django"]
    assert "runtests.py" in lite.test_cmd and lite.metadata["test_cmd_source"] != "--test-cmd"
