"""The built-in suite loads into valid tasks; every malformed task file is an error naming task, field and
value."""

from __future__ import annotations

import ast
import collections
import importlib.resources
import shutil
import tomllib
from pathlib import Path

import pytest
from scratch_git import git

from legorl_jax.tasks.builtin import SUITE_DIR, hidden_test_patch, load_builtin_suite, load_builtin_task
from legorl_jax.tasks.schema import TaskError
from legorl_jax.tasks.snapshot import snapshot_files, write_snapshot_repo

SUITE_TASKS = sorted(d.name for d in SUITE_DIR.iterdir() if d.is_dir() and not d.name.startswith("."))
SAMPLE = (
    "csvlet-embedded-quote-roundtrip" if "csvlet-embedded-quote-roundtrip" in SUITE_TASKS else SUITE_TASKS[0]
)


@pytest.fixture(scope="module")
def suite():
    return load_builtin_suite()


def test_the_suite_is_package_data_found_through_importlib_resources():
    found = importlib.resources.files("legorl_jax.tasks").joinpath("vendor", "suite")
    assert SUITE_DIR == found and (SUITE_DIR / "README.md").is_file()
    # A wheel carries every file of it: the package-data glob covers the repositories' .py files too.
    package_data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]
    assert package_data["package-data"]["legorl_jax.tasks"] == ["vendor/suite/**/*"]


def test_the_suite_has_at_least_40_tasks_with_a_fixed_split_and_a_spread_of_difficulties_and_domains(suite):
    assert len(suite) >= 40, f"only {len(suite)} built-in tasks"
    splits = collections.Counter(t.split for t in suite)
    assert set(splits) == {"train", "validation"}
    assert 0.15 <= splits["validation"] / len(suite) <= 0.35, splits
    difficulties = collections.Counter(t.difficulty for t in suite)
    assert all(difficulties[d] >= 3 for d in ("easy", "medium", "hard")), difficulties
    domains = collections.Counter(t.domain for t in suite)
    assert len(domains) >= 6 and max(domains.values()) <= 0.3 * len(suite), domains
    for split in ("train", "validation"):
        assert len({t.domain for t in suite if t.split == split}) >= 3, f"{split} covers too few domains"
    assert [t.split for t in load_builtin_suite()] == [t.split for t in suite]


@pytest.mark.parametrize("task_id", SUITE_TASKS)
def test_each_task_has_a_reproducible_base_commit_and_hidden_tests_that_apply_to_it(task_id, tmp_path):
    task = load_builtin_task(SUITE_DIR / task_id)
    checkout = tmp_path / "checkout"
    assert write_snapshot_repo(SUITE_DIR / task_id / "repo", checkout) == task.base_commit
    assert task.image.endswith(":" + task.base_commit[:12])
    git(checkout, "apply", "-", stdin=task.test_patch)
    hidden = SUITE_DIR / task_id / "hidden_tests"
    for rel in snapshot_files(hidden):
        assert (checkout / rel).read_bytes() == (hidden / rel).read_bytes(), rel
    git(checkout, "apply", "-", stdin=task.patch)  # the gold patch applies on top of the hidden tests


def _test_functions(root: Path) -> set[str]:
    """Node ids (without parameters) of the test functions pytest would collect under `root`/tests."""
    ids = set()
    for path in sorted((root / "tests").rglob("*.py")) if (root / "tests").is_dir() else []:
        rel = path.relative_to(root).as_posix()
        if not (path.name.startswith("test_") or path.name.endswith("_test.py")):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                ids.add(f"{rel}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                methods = [f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
                ids |= {f"{rel}::{node.name}::{f.name}" for f in methods if f.name.startswith("test")}
    return ids


@pytest.mark.parametrize("task_id", SUITE_TASKS)
def test_every_test_of_a_task_is_graded_and_every_graded_test_exists(task_id):
    task = load_builtin_task(SUITE_DIR / task_id)
    own = _test_functions(SUITE_DIR / task_id / "repo")
    hidden = _test_functions(SUITE_DIR / task_id / "hidden_tests")
    assert own, f"{task_id} ships no tests of its own"
    listed = {t.split("[")[0] for t in task.tests}
    p2p = {t.split("[")[0] for t in task.PASS_TO_PASS}
    assert own - hidden <= p2p, f"repo tests never graded: {sorted(own - hidden - p2p)}"
    assert hidden <= listed, f"hidden tests never graded: {sorted(hidden - listed)}"
    assert listed <= own | hidden, f"graded tests that do not exist: {sorted(listed - own - hidden)}"
    assert {t.split("[")[0] for t in task.FAIL_TO_PASS} <= hidden, "a FAIL_TO_PASS test must be a hidden test"


def test_a_hidden_file_that_overwrites_a_repo_file_becomes_a_modification_keeping_a_missing_final_newline(
    tmp_path,
):
    repo, hidden = tmp_path / "repo", tmp_path / "hidden"
    (repo / "tests").mkdir(parents=True)
    (hidden / "tests").mkdir(parents=True)
    (repo / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    (hidden / "tests" / "test_a.py").write_text("def test_a():\n    assert True")
    (hidden / "tests" / "test_new.py").write_text("def test_new():\n    pass\n")
    patch = hidden_test_patch("t", repo, hidden)
    assert "new file mode" not in patch.split("diff --git a/tests/test_new.py")[0]
    assert "\\ No newline at end of file" in patch
    checkout = tmp_path / "checkout"
    write_snapshot_repo(repo, checkout)
    git(checkout, "apply", "-", stdin=patch)
    assert (checkout / "tests" / "test_a.py").read_text() == "def test_a():\n    assert True"
    assert (checkout / "tests" / "test_new.py").exists()


@pytest.fixture
def task_copy(tmp_path) -> Path:
    dest = tmp_path / SAMPLE
    shutil.copytree(SUITE_DIR / SAMPLE, dest)
    return dest


def _edit_toml(task_dir: Path, **changes) -> None:
    meta = tomllib.loads((task_dir / "task.toml").read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    (task_dir / "task.toml").write_text(_dump_toml(meta))


def _dump_toml(meta: dict) -> str:
    def value(v):
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    tables = {k: v for k, v in meta.items() if isinstance(v, dict)}
    lines = [f"{k} = {value(v)}" for k, v in meta.items() if not isinstance(v, dict)]
    for name, table in tables.items():
        lines += [f"[{name}]"] + [f"{k} = {value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("changes", "field", "value"),
    [
        ({"id": None}, "id", "is missing"),
        ({"id": "other-name"}, "id", "'other-name'"),
        ({"difficulty": "trivial"}, "difficulty", "'trivial'"),
        ({"split": "test"}, "split", "'test'"),
        ({"domain": 3}, "domain", "int 3"),
        ({"FAIL_TO_PASS": "tests/test_x.py::t"}, "FAIL_TO_PASS", "'tests/test_x.py::t'"),
        ({"FAIL_TO_PASS": []}, "FAIL_TO_PASS", r"\[\]"),
        ({"PASS_TO_PASS": ["a::b", "a::b"]}, "PASS_TO_PASS", "'a::b'"),
        ({"colour": "blue"}, "task.toml", "'colour'"),
        ({"test_cmd": ""}, "test_cmd", "''"),
        ({"timeouts": {"verify_s": -5}}, "timeouts", "-5"),
        ({"timeouts": {"verify_seconds": 5}}, "timeouts", "verify_seconds"),
        ({"protected_paths": "data/"}, "protected_paths", "'data/'"),
    ],
)
def test_a_bad_task_toml_field_is_an_error_naming_the_task_field_and_value(task_copy, changes, field, value):
    _edit_toml(task_copy, **changes)
    with pytest.raises(TaskError, match=rf"task '{SAMPLE}'.*{field}.*{value}"):
        load_builtin_task(task_copy)


def test_overlapping_test_lists_are_an_error(task_copy):
    meta = tomllib.loads((task_copy / "task.toml").read_text())
    _edit_toml(task_copy, PASS_TO_PASS=meta["PASS_TO_PASS"] + [meta["FAIL_TO_PASS"][0]])
    with pytest.raises(TaskError, match="PASS_TO_PASS.*repeats FAIL_TO_PASS"):
        load_builtin_task(task_copy)


@pytest.mark.parametrize("missing", ["issue.md", "gold.patch", "repo", "hidden_tests", "task.toml"])
def test_a_missing_part_of_the_task_directory_is_named(task_copy, missing):
    target = task_copy / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(TaskError, match=rf"{SAMPLE}.*{missing}.*missing"):
        load_builtin_task(task_copy)


def test_invalid_toml_is_an_error(task_copy):
    (task_copy / "task.toml").write_text("id = \n")
    with pytest.raises(TaskError, match="task.toml.*not valid TOML"):
        load_builtin_task(task_copy)


def test_a_gold_patch_touching_a_test_file_is_rejected(task_copy):
    (task_copy / "gold.patch").write_text(
        "diff --git a/tests/test_writer.py b/tests/test_writer.py\n--- a/tests/test_writer.py\n"
        "+++ b/tests/test_writer.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    with pytest.raises(TaskError, match="gold.patch.*'tests/test_writer.py'.*test file"):
        load_builtin_task(task_copy)


def test_an_unreadable_gold_patch_is_rejected(task_copy):
    (task_copy / "gold.patch").write_text(
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,4 +1,4 @@\n a\n"
    )
    with pytest.raises(TaskError, match="gold.patch.*cannot be parsed.*hunk ends early"):
        load_builtin_task(task_copy)


def test_a_hidden_test_that_is_not_utf8_is_rejected(task_copy):
    (task_copy / "hidden_tests" / "tests" / "blob.py").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TaskError, match="hidden_tests/tests/blob.py.*not UTF-8"):
        load_builtin_task(task_copy)


def test_a_suite_directory_with_a_broken_task_fails_naming_that_task(tmp_path, task_copy):
    (tmp_path / "half-written").mkdir()
    with pytest.raises(TaskError, match="'half-written'.*task.toml.*missing"):
        load_builtin_suite(tmp_path)
