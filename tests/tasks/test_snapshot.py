"""The pure-Python base commit of a directory is the sha the host's git gives the same files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from scratch_git import GIT_ENV, git

from legorl_jax.tasks.snapshot import COMMIT_ENV, snapshot_commit, snapshot_files, write_snapshot_repo


def _tree(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "m.py").write_text("x = 1")  # no trailing newline
    (root / "pkg-data.txt").write_text("sorts before pkg/ in git's order\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o755)
    os.symlink("pkg/sub/m.py", root / "alias")
    (root / ".gitignore").write_text("*.log\n")
    (root / "kept.log").write_text("ignored by .gitignore but part of the snapshot\n")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\x00")
    return root


def test_the_computed_commit_equals_the_one_host_git_writes(tmp_path):
    root = _tree(tmp_path / "src")
    dest = tmp_path / "dest"
    sha = write_snapshot_repo(root, dest)
    assert sha == snapshot_commit(root)
    assert git(dest, "rev-parse", "HEAD").stdout.strip() == sha
    assert git(dest, "status", "--porcelain").stdout == ""


def test_an_independent_git_commit_of_the_same_files_has_the_same_sha(tmp_path):
    root = _tree(tmp_path / "src")
    other = tmp_path / "other"
    other.mkdir()
    for rel in snapshot_files(root):
        (other / rel).parent.mkdir(parents=True, exist_ok=True)
        if (root / rel).is_symlink():
            os.symlink(os.readlink(root / rel), other / rel)
        else:
            (other / rel).write_bytes((root / rel).read_bytes())
            os.chmod(other / rel, (root / rel).stat().st_mode)
    git(other, "init", "-q")
    git(other, "add", "-A", "-f")
    tree = git(other, "write-tree").stdout.strip()
    env = {**GIT_ENV, **COMMIT_ENV}
    sha = subprocess.run(
        ["git", "commit-tree", tree, "-m", "base"],
        cwd=other,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert sha == snapshot_commit(root)


def test_test_byproducts_are_left_out_and_a_content_change_changes_the_sha(tmp_path):
    root = _tree(tmp_path / "src")
    names = {p.as_posix() for p in snapshot_files(root)}
    assert "pkg/__pycache__/m.cpython-311.pyc" not in names and "kept.log" in names
    before = snapshot_commit(root)
    (root / "pkg" / "sub" / "m.py").write_text("x = 2")
    assert snapshot_commit(root) != before
    os.chmod(root / "pkg" / "sub" / "m.py", 0o755)
    assert len({before, snapshot_commit(root)}) == 2


def test_the_snapshot_repository_has_no_reflog_or_hooks(tmp_path):
    dest = tmp_path / "dest"
    write_snapshot_repo(_tree(tmp_path / "src"), dest)
    assert not (dest / ".git" / "logs").exists()
    assert not (dest / ".git" / "hooks").exists()
    assert git(dest, "rev-list", "--all", "--count").stdout.strip() == "1"
