"""`load_suite` reaches every task source by name or path, filters splits, and names what is wrong."""

from __future__ import annotations

import json
import shutil

import pytest
from harbor_fixture import write_harbor_task
from test_swebench_loader import row

from legorl_jax.tasks.builtin import SUITE_DIR
from legorl_jax.tasks.log_parsers import (
    UnknownParserError,
    available_parsers,
    check_parser_name,
    resolve_log_parser,
    swebench_parser_for_repo,
)
from legorl_jax.tasks.registry import find_task, load_suite
from legorl_jax.tasks.schema import TaskError

SAMPLE = sorted(d.name for d in SUITE_DIR.iterdir() if (d / "task.toml").is_file())[0]


def test_builtin_by_name_and_one_builtin_task_directory_by_path():
    (task,) = load_suite(SUITE_DIR / SAMPLE)
    assert task.instance_id == SAMPLE and task.kind == "builtin"


def test_a_directory_of_builtin_tasks_and_a_split_filter(tmp_path):
    for name in sorted(d.name for d in SUITE_DIR.iterdir() if (d / "task.toml").is_file())[:3]:
        shutil.copytree(SUITE_DIR / name, tmp_path / name)
    tasks = load_suite(tmp_path)
    assert len(tasks) == 3
    split = tasks[0].split
    assert all(t.split == split for t in load_suite(tmp_path, split))


def test_a_split_no_task_has_is_an_error_listing_the_splits(tmp_path):
    shutil.copytree(SUITE_DIR / SAMPLE, tmp_path / SAMPLE)
    with pytest.raises(TaskError, match=r"split.*'dev'.*\['(train|validation)'\]"):
        load_suite(tmp_path, "dev")


def test_jsonl_and_harbor_sources_are_recognised_by_path(tmp_path):
    (tmp_path / "set.jsonl").write_text(json.dumps(row()) + "\n")
    assert load_suite(tmp_path / "set.jsonl")[0].kind == "swebench"
    write_harbor_task(tmp_path / "harbor" / "add")
    assert load_suite(tmp_path / "harbor" / "add")[0].kind == "harbor"
    assert load_suite(tmp_path / "harbor")[0].kind == "harbor"


@pytest.mark.parametrize("name", ["nonexistent-suite", "/no/such/path.jsonl"])
def test_an_unknown_suite_name_or_path_is_an_error_naming_it(name):
    with pytest.raises(TaskError, match="neither 'builtin' nor an existing"):
        load_suite(name)


def test_a_file_of_the_wrong_kind_is_an_error(tmp_path):
    (tmp_path / "tasks.csv").write_text("a,b\n")
    with pytest.raises(TaskError, match=r"\.jsonl, \.json or \.parquet.*'tasks.csv'"):
        load_suite(tmp_path / "tasks.csv")


def test_a_directory_with_a_half_made_task_is_an_error_naming_it(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "task.toml").write_text("")
    with pytest.raises(TaskError, match="'broken'.*looks like a task"):
        load_suite(tmp_path)


def test_duplicate_ids_across_a_suite_are_an_error(tmp_path):
    write_harbor_task(tmp_path / "a")
    write_harbor_task(tmp_path / "b")
    with pytest.raises(TaskError, match=r"\['harbor-add'\] appear more than once"):
        load_suite(tmp_path)


def test_find_task_suggests_near_names():
    tasks = load_suite(SUITE_DIR / SAMPLE)
    assert find_task(tasks, SAMPLE) is tasks[0]
    with pytest.raises(TaskError, match="did you mean"):
        find_task(tasks, SAMPLE[:-1])


def test_our_pytest_parser_reads_ra_lines_and_verifier_modes_are_not_log_parsers():
    parse = resolve_log_parser("pytest", ("tests/t.py::test_p[a - b]",))
    log = "PASSED tests/t.py::test_a\nFAILED tests/t.py::test_p[a - b] - assert 0\nERROR tests/t.py::test_e\n"
    assert parse(log) == {
        "tests/t.py::test_a": "passed",
        "tests/t.py::test_p[a - b]": "failed",
        "tests/t.py::test_e": "error",
    }
    assert {"junit", "harbor_reward", "pytest"} <= set(available_parsers())
    with pytest.raises(UnknownParserError, match="verifier mode"):
        resolve_log_parser("junit")


def test_an_unknown_parser_name_is_an_error_listing_the_known_ones():
    with pytest.raises(UnknownParserError, match=r"'parse_log_cobol'.*available: \[.*'pytest'"):
        check_parser_name("parse_log_cobol")
    assert swebench_parser_for_repo("octo/widgets") is None
