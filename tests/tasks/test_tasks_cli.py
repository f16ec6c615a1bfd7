"""`python -m legorl_jax.tasks` as a user runs it: list, show, grade, validate, and its exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swebench_fixture import write_jsonl

from legorl_jax.tasks.builtin import SUITE_DIR

SAMPLE = sorted(d.name for d in SUITE_DIR.iterdir() if (d / "task.toml").is_file())[0]


def cli(*args: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "legorl_jax.tasks", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
    )


def test_list_prints_one_line_per_task_of_the_split():
    out = cli("list", "--suite", "builtin", "--split", "validation", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows and all(r["split"] == "validation" for r in rows)
    assert {"id", "difficulty", "domain", "kind", "title"} <= set(rows[0])
    plain = cli("list", "--suite", "builtin")
    assert plain.returncode == 0 and len(plain.stdout.splitlines()) >= len(rows)


def test_show_prints_the_whole_task_with_its_gold_patch():
    out = cli("show", "--suite", "builtin", "--task", SAMPLE, "--json")
    assert out.returncode == 0, out.stderr
    task = json.loads(out.stdout)
    assert task["instance_id"] == SAMPLE and task["patch"] == (SUITE_DIR / SAMPLE / "gold.patch").read_text()
    assert task["test_patch"].startswith("diff --git") and len(task["base_commit"]) == 40


LITE = Path(__file__).parents[1] / "fixtures" / "swebench_lite" / "lite_one_per_repo.jsonl"
# The default install: swebench cannot be imported, whatever this machine has installed. One process runs
# `list` and then `show` for every id it listed, each command's output a JSON line of its own.
WITHOUT_SWEBENCH = """
import contextlib, io, json, sys
sys.modules["swebench"] = None
from legorl_jax.tasks.cli import main
def run(*args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return {"code": code, "out": out.getvalue()}
listed = run("list", "--suite", sys.argv[1], "--json")
print(json.dumps(listed))
for row in json.loads(listed["out"]):
    print(json.dumps(run("show", "--suite", sys.argv[1], "--task", row["id"], "--json")))
"""


def test_a_swebench_lite_file_lists_and_shows_every_row_without_swebench_installed():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_SWEBENCH, str(LITE)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    listed, *shown = [json.loads(line) for line in done.stdout.splitlines()]
    rows = [json.loads(line) for line in LITE.read_text().splitlines()]
    assert listed["code"] == 0 and len({r["repo"] for r in rows}) == 12
    assert [r["id"] for r in json.loads(listed["out"])] == [r["instance_id"] for r in rows]
    assert len(shown) == len(rows)
    for row, result in zip(rows, shown, strict=True):
        assert result["code"] == 0
        task = json.loads(result["out"])
        assert task["instance_id"] == row["instance_id"] and task["patch"] == row["patch"]
        assert task["log_parser"].startswith("parse_log_") and task["test_cmd"]
        assert task["metadata"]["log_parser_source"] == "spec table (swebench 4.1.0)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "--suite", "builtin", "--task", "no-such-task"), "no task with id 'no-such-task'"),
        (("list", "--suite", "/no/such/suite"), "neither 'builtin' nor an existing"),
        (("list", "--suite", "builtin", "--split", "holdout"), "no task has split 'holdout'"),
        (
            ("grade", "--suite", "builtin", "--task", SAMPLE, "--patch", "/no/such.diff"),
            "'/no/such.diff' is not a file",
        ),
        (
            ("grade", "--suite", "builtin", "--task", SAMPLE),
            "one of the arguments --patch --gold is required",
        ),
    ],
)
def test_bad_input_exits_2_with_a_message_naming_it(args, message):
    out = cli(*args)
    assert out.returncode == 2 and message in out.stderr, out.stderr


@pytest.mark.docker
def test_grade_prints_the_report_with_its_reward_for_the_gold_patch_and_for_stdin():
    gold = cli("grade", "--suite", "builtin", "--task", SAMPLE, "--gold", "--json")
    assert gold.returncode == 0, gold.stderr
    assert json.loads(gold.stdout)["reward"] == 1.0
    empty = cli("grade", "--suite", "builtin", "--task", SAMPLE, "--patch", "-", "--json", stdin="")
    assert empty.returncode == 0, empty.stderr
    report = json.loads(empty.stdout)
    assert report["reward"] == 0.0 and report["apply"]["status"] == "empty" and report["failed_tests"]


@pytest.mark.docker
def test_grade_exits_3_when_the_task_image_is_missing(tmp_path):
    rows = write_jsonl(tmp_path / "set.jsonl", "legorl-no-such-image:1", "0" * 40)
    out = cli("grade", "--suite", str(rows), "--task", "legorl__calc-1", "--gold", "--json")
    assert (
        out.returncode == 3
        and "infrastructure failure" in out.stderr
        and "legorl-no-such-image:1" in out.stderr
    )


@pytest.mark.docker
def test_validate_checks_gold_and_empty_for_each_chosen_task(tmp_path):
    out = cli("validate", "--suite", str(SUITE_DIR / SAMPLE), "--concurrency", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"ok     {SAMPLE}" in out.stdout and "1/1 tasks valid" in out.stdout


def test_the_module_entry_point_prints_usage():
    out = cli("--help")
    assert out.returncode == 0 and "validate" in out.stdout and "exit codes" in out.stdout.lower()


def test_list_on_a_harbor_folder_with_multi_step_tasks_lists_the_others_and_warns(tmp_path):
    from harbor_fixture import TASK_TOML, write_harbor_task

    write_harbor_task(tmp_path / "set" / "add")
    # Multi-step as Harbor writes them: `[[steps]]` in task.toml with each step's instruction under steps/
    # (no top-level instruction.md), and a task with a steps/ folder beside its instruction.md.
    per_step = tmp_path / "set" / "two-steps"
    per_step.mkdir(parents=True)
    (per_step / "task.toml").write_text(
        TASK_TOML.replace("legorl/harbor-add", "legorl/two-steps") + '\n[[steps]]\nname = "write"\n'
    )
    (per_step / "steps" / "write").mkdir(parents=True)
    (per_step / "steps" / "write" / "instruction.md").write_text("write it\n")
    steps_dir = write_harbor_task(
        tmp_path / "set" / "steps-dir", task_toml=TASK_TOML.replace("legorl/harbor-add", "legorl/steps-dir")
    )
    (steps_dir / "steps" / "one").mkdir(parents=True)
    out = cli("list", "--suite", str(tmp_path / "set"), "--json")
    assert out.returncode == 0, out.stderr
    assert [r["id"] for r in json.loads(out.stdout)] == ["harbor-add"]
    assert "two-steps" in out.stderr and "steps-dir" in out.stderr and "multi-step" in out.stderr
