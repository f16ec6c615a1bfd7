"""Loader of the built-in suite: `legorl_jax/tasks/vendor/suite/<id>/` directories → `Task` records.

The suite is package data, found with `importlib.resources` (`SUITE_DIR`), so an installed wheel carries
it. It sits under `vendor/` because it is task data, not library code: 41 small repositories, each in the
style of the project it imitates, that tools reading the library (ruff, the duplicate finder) skip.
The on-disk format is `vendor/suite/README.md`'s. For each task directory:

- `base_commit` is the sha of `repo/` as a one-commit history (`snapshot.snapshot_commit`), computed in pure
  Python, so the same files always give the same sha and listing the suite builds nothing;
- `test_patch` is a git diff, relative to `repo/`, that adds (or overwrites) every file of `hidden_tests/`,
  written here with `difflib` (including git's `\\ No newline at end of file` lines), so `git apply` in the
  grading sandbox reproduces `hidden_tests/` byte for byte;
- `image` is `legorl-task-<id>:<first 12 hex of base_commit>`, built on demand FROM the sandbox base image
  (`task_image.ensure_task_image`) with `repo/` and that history at `/testbed`; a changed repo gives a new
  tag;
- `log_parser` is `junit`: the verifier asks pytest for a JUnit report and cross-checks it.

Every malformed field (a missing key, a wrong type, an unknown key, an id that differs from the directory
name, a hidden test that is not UTF-8 text, a gold patch that touches a test file) raises `TaskError` naming
the task, the field and the received value.
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
import re
import tomllib
from pathlib import Path

from legorl_jax.tasks.patchset import PatchError, parse_patch, split_lines
from legorl_jax.tasks.protection import hidden_test_paths, protected_reason
from legorl_jax.tasks.schema import Task, TaskError, Timeouts, require
from legorl_jax.tasks.snapshot import snapshot_commit, snapshot_files


def _suite_dir() -> Path:
    """The suite's folder in the installed package (a real directory: its files are copied into images)."""
    resource = importlib.resources.files("legorl_jax.tasks").joinpath("vendor", "suite")
    if not isinstance(resource, Path):
        raise TaskError("builtin", "suite", f"must be installed as files on disk, got {resource!r}")
    return resource


SUITE_DIR = _suite_dir()
WORKDIR = "/testbed"
DEFAULT_TEST_CMD = "python3 -m pytest -q -p no:cacheprovider"
DIFFICULTIES = ("easy", "medium", "hard")
SPLITS = ("train", "validation")
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_REQUIRED = ("id", "title", "domain", "difficulty", "split", "FAIL_TO_PASS", "PASS_TO_PASS")
_OPTIONAL = ("test_cmd", "timeouts", "protected_paths", "version")
_SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9._\-/]+$")


def is_task_dir(path: Path) -> bool:
    """True for a directory shaped like a built-in task (it has a task.toml and a repo/)."""
    return (path / "task.toml").is_file() and (path / "repo").is_dir()


def load_builtin_suite(suite_dir: Path = SUITE_DIR) -> list[Task]:
    """Every task directory under `suite_dir`, sorted by id."""
    suite_dir = Path(suite_dir)
    if not suite_dir.is_dir():
        raise TaskError(str(suite_dir), "suite", f"is not a directory: {str(suite_dir)!r}")
    return [
        load_builtin_task(d) for d in sorted(suite_dir.iterdir()) if d.is_dir() and not d.name.startswith(".")
    ]


def load_builtin_task(task_dir: Path) -> Task:
    """Reads one task directory (see the module docstring for what each field becomes)."""
    task_dir = Path(task_dir)
    name = task_dir.name
    toml_path = task_dir / "task.toml"
    if not toml_path.is_file():
        raise TaskError(name, "task.toml", f"is missing from {str(task_dir)!r}")
    try:
        meta = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise TaskError(name, "task.toml", f"is not valid TOML: {err}") from None
    unknown = sorted(set(meta) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise TaskError(
            name, "task.toml", f"has unknown keys {unknown}; known: {sorted(_REQUIRED + _OPTIONAL)}"
        )
    task_id = require(name, meta, "id")
    if task_id != name or not _ID_RE.match(task_id):
        raise TaskError(
            name, "id", f"must equal the directory name {name!r} and match {_ID_RE.pattern}, got {task_id!r}"
        )
    difficulty = require(name, meta, "difficulty")
    if difficulty not in DIFFICULTIES:
        raise TaskError(name, "difficulty", f"must be one of {DIFFICULTIES}, got {difficulty!r}")
    split = require(name, meta, "split")
    if split not in SPLITS:
        raise TaskError(name, "split", f"must be one of {SPLITS}, got {split!r}")
    for sub in ("issue.md", "gold.patch"):
        if not (task_dir / sub).is_file():
            raise TaskError(name, sub, f"is missing from {str(task_dir)!r}")
    for sub in ("repo", "hidden_tests"):
        if not (task_dir / sub).is_dir():
            raise TaskError(name, f"{sub}/", f"is missing from {str(task_dir)!r}")
    gold = _read_text(name, task_dir / "gold.patch", "gold.patch")
    test_patch = hidden_test_patch(name, task_dir / "repo", task_dir / "hidden_tests")
    _check_gold(name, gold, hidden_test_paths(test_patch))
    test_cmd = meta.get("test_cmd", DEFAULT_TEST_CMD)
    if not isinstance(test_cmd, str) or not test_cmd.strip():
        raise TaskError(name, "test_cmd", f"must be a non-empty string, got {test_cmd!r}")
    version = meta.get("version", "1")
    if not isinstance(version, str):
        raise TaskError(name, "version", f"must be a string, got {version!r}")
    base_commit = snapshot_commit(task_dir / "repo")
    return Task(
        instance_id=task_id,
        repo=f"legorl-suite/{task_id}",
        base_commit=base_commit,
        problem_statement=_read_text(name, task_dir / "issue.md", "issue.md"),
        patch=gold,
        test_patch=test_patch,
        FAIL_TO_PASS=require(name, meta, "FAIL_TO_PASS", list),
        PASS_TO_PASS=require(name, meta, "PASS_TO_PASS", list),
        version=version,
        environment_setup_commit=base_commit,
        image=f"legorl-task-{task_id}:{base_commit[:12]}",
        workdir=WORKDIR,
        test_cmd=test_cmd,
        log_parser="junit",
        protected_paths=meta.get("protected_paths", []),
        timeouts=Timeouts.from_mapping(name, meta.get("timeouts")),
        kind="builtin",
        split=split,
        difficulty=difficulty,
        domain=require(name, meta, "domain"),
        title=require(name, meta, "title"),
        source_dir=str(task_dir.resolve()),
        image_context=str((task_dir / "repo").resolve()),
    )


def _read_text(task: str, path: Path, field: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise TaskError(task, field, f"is not UTF-8 text ({err})") from None


def _check_gold(task: str, gold: str, hidden: frozenset[str]) -> None:
    try:
        patches = parse_patch(gold)
    except PatchError as err:
        raise TaskError(task, "gold.patch", f"cannot be parsed: {err}") from None
    if not patches:
        raise TaskError(task, "gold.patch", "holds no file change")
    for patch in patches:
        for path in patch.paths:
            reason = protected_reason(path, hidden=hidden, is_new=patch.is_new)
            if reason is not None:
                raise TaskError(task, "gold.patch", f"changes {path!r}, which the verifier drops ({reason})")


def hidden_test_patch(task: str, repo: Path, hidden: Path) -> str:
    """A git diff turning `repo` into `repo` overlaid with `hidden` (empty when they already agree)."""
    repo_files = {p.as_posix() for p in snapshot_files(repo)}
    chunks: list[str] = []
    for rel in snapshot_files(hidden):
        path = rel.as_posix()
        if not _SAFE_PATH_RE.match(path):
            raise TaskError(task, "hidden_tests/", f"file name {path!r} must match {_SAFE_PATH_RE.pattern}")
        if (hidden / rel).is_symlink():
            raise TaskError(task, "hidden_tests/", f"{path!r} is a symbolic link; hidden tests must be files")
        new = _read_text(task, hidden / rel, f"hidden_tests/{path}")
        mode = "100755" if os.stat(hidden / rel).st_mode & 0o100 else "100644"
        if path in repo_files:
            old = _read_text(task, repo / rel, f"repo/{path}")
            if old != new:
                chunks.append(
                    f"diff --git a/{path} b/{path}\n" + _unified(old, new, f"a/{path}", f"b/{path}")
                )
        else:
            body = _unified("", new, "/dev/null", f"b/{path}") if new else ""
            chunks.append(f"diff --git a/{path} b/{path}\nnew file mode {mode}\n" + body)
    return "".join(chunks)


def _unified(old: str, new: str, old_name: str, new_name: str) -> str:
    out: list[str] = []
    for line in difflib.unified_diff(split_lines(old), split_lines(new), old_name, new_name, n=3):
        if line.startswith(("--- ", "+++ ")):
            out.append(line.rstrip("\n") + "\n")
        elif line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)
