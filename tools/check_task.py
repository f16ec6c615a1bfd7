"""Quick host-side check of built-in suite tasks, for authors (the Docker verifier is the real judge).

    python tools/check_task.py legorl_jax/tasks/vendor/suite/<task_id> [more dirs] [--python PY]

For each task, in a scratch copy of repo/ with a fresh git history:
  1. the repo's own tests pass at the base commit;
  2. with hidden_tests/ added, every FAIL_TO_PASS test fails and every PASS_TO_PASS test passes;
  3. gold.patch applies with `git apply` and touches no test file;
  4. with the gold patch and the hidden tests, every listed test passes;
  5. every listed test id exists, and PASS_TO_PASS covers every test in repo/tests.
Exits 1 if any task fails, printing why.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

DEFAULT_PY = os.environ.get("LEGORL_TASK_PYTHON", "/tmp/suite-py311/bin/python")
REQUIRED = ("id", "title", "domain", "difficulty", "split", "FAIL_TO_PASS", "PASS_TO_PASS")


def run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def pytest_statuses(py: str, repo: Path) -> dict[str, str]:
    """Runs the whole tests/ tree, returns {node_id: passed|failed|error|skipped}."""
    report = repo.parent / "junit.xml"
    report.unlink(missing_ok=True)
    run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", "tests"], repo)
    if not report.exists():
        return {}
    out: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        parts = cls.split(".")
        # classname is dotted module path (+ class); rebuild the node id.
        for i in range(len(parts), 0, -1):
            path = Path(*parts[:i]).with_suffix(".py")
            if (repo / path).exists():
                node = "::".join([path.as_posix(), *parts[i:], name])
                break
        else:
            node = f"{cls}::{name}"
        status = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                status = {"failure": "failed"}.get(tag, tag)
        out[node] = status
    return out


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return run(["git", "-c", "user.name=check", "-c", "user.email=check@local", *args], repo)


def check(task_dir: Path, py: str) -> list[str]:
    problems: list[str] = []
    meta = tomllib.loads((task_dir / "task.toml").read_text())
    for key in REQUIRED:
        if key not in meta:
            problems.append(f"task.toml lacks {key!r}")
    if problems:
        return problems
    if meta["id"] != task_dir.name:
        problems.append(f"id {meta['id']!r} differs from the directory name {task_dir.name!r}")
    if meta["difficulty"] not in ("easy", "medium", "hard"):
        problems.append(f"difficulty {meta['difficulty']!r} not easy|medium|hard")
    if meta["split"] not in ("train", "validation"):
        problems.append(f"split {meta['split']!r} not train|validation")
    for f in ("issue.md", "gold.patch", "repo", "hidden_tests"):
        if not (task_dir / f).exists():
            problems.append(f"missing {f}")
    if problems:
        return problems
    patch = (task_dir / "gold.patch").read_text()
    touched = re.findall(r"^diff --git a/(\S+) b/", patch, flags=re.M)
    if not touched:
        problems.append("gold.patch has no 'diff --git' headers")
    for path in touched:
        if (
            path.startswith("tests/")
            or "/tests/" in path
            or Path(path).name.startswith("test_")
            or "conftest" in path
        ):
            problems.append(f"gold.patch touches a test file: {path}")

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(task_dir / "repo", repo)
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "base")
        base = pytest_statuses(py, repo)
        if not base:
            problems.append("repo tests produced no report (collection error?)")
        bad = {k: v for k, v in base.items() if v != "passed"}
        if bad:
            problems.append(f"repo tests not passing at base: {bad}")
        missing_p2p = sorted(set(base) - set(meta["PASS_TO_PASS"]))
        if missing_p2p:
            problems.append(f"PASS_TO_PASS lacks repo tests: {missing_p2p}")

        shutil.copytree(task_dir / "hidden_tests", repo, dirs_exist_ok=True)
        before = pytest_statuses(py, repo)
        for t in meta["FAIL_TO_PASS"]:
            if t not in before:
                problems.append(f"FAIL_TO_PASS test not found: {t}")
            elif before[t] == "passed":
                problems.append(f"FAIL_TO_PASS test already passes at base: {t}")
        for t in meta["PASS_TO_PASS"]:
            if before.get(t) != "passed":
                problems.append(f"PASS_TO_PASS test not passing at base: {t} ({before.get(t, 'not found')})")

        for f in (task_dir / "hidden_tests").rglob("*"):
            if f.is_file():
                rel = f.relative_to(task_dir / "hidden_tests")
                if (task_dir / "repo" / rel).exists():
                    shutil.copy(task_dir / "repo" / rel, repo / rel)
                else:
                    (repo / rel).unlink()
        applied = git(repo, "apply", str((task_dir / "gold.patch").resolve()))
        if applied.returncode != 0:
            problems.append(f"gold.patch does not apply: {applied.stderr.strip()}")
            return problems
        shutil.copytree(task_dir / "hidden_tests", repo, dirs_exist_ok=True)
        after = pytest_statuses(py, repo)
        for t in meta["FAIL_TO_PASS"] + meta["PASS_TO_PASS"]:
            if after.get(t) != "passed":
                problems.append(f"with the gold patch, {t} is {after.get(t, 'not found')}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tasks", nargs="+", type=Path)
    parser.add_argument(
        "--python", default=DEFAULT_PY, help="interpreter with pytest (the image has 3.11 + pytest 7.2)"
    )
    args = parser.parse_args()
    failed = 0
    for task in args.tasks:
        problems = check(task, args.python)
        print(f"{'ok  ' if not problems else 'FAIL'} {task.name}")
        for p in problems:
            print(f"     - {p}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
