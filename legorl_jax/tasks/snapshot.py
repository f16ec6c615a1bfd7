"""A deterministic one-commit git history of a directory: how a built-in task gets its `base_commit`.

The built-in suite ships `repo/` as plain files. Its image holds them at the task's workdir as a git
repository with exactly one commit, made by a fixed identity at a fixed date with a fixed message, so the
commit's sha depends on the file contents and modes alone and can be computed without building anything:

- `snapshot_files(root)` lists the files that make up the snapshot (everything but `.git`, `__pycache__`,
  `*.pyc` and `.pytest_cache`: byproducts of running the tests, not source).
- `snapshot_commit(root)` hashes them as git would (blobs, trees sorted with git's directory rule, one
  parentless commit) in pure Python: listing the suite needs no git and no subprocess.
- `write_snapshot_repo(root, dest)` copies the same files to `dest` and commits them with the host's git
  under `COMMIT_ENV`, leaving no reflog, hooks or index noise behind; it checks that git's sha equals
  `snapshot_commit(root)`, so a disagreement between the two is an error, never a silently wrong task.

`COMMIT_ENV` and `COMMIT_MESSAGE` are also what the agent-sandbox history strip commits with, which is why a
stripped built-in repository keeps the task's `base_commit`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

COMMIT_NAME = "legorl"
COMMIT_EMAIL = "legorl@localhost"
COMMIT_DATE = "946684800 +0000"  # 2000-01-01T00:00:00Z: any fixed instant keeps the sha reproducible
COMMIT_MESSAGE = "base"
COMMIT_ENV = {
    "GIT_AUTHOR_NAME": COMMIT_NAME,
    "GIT_AUTHOR_EMAIL": COMMIT_EMAIL,
    "GIT_AUTHOR_DATE": COMMIT_DATE,
    "GIT_COMMITTER_NAME": COMMIT_NAME,
    "GIT_COMMITTER_EMAIL": COMMIT_EMAIL,
    "GIT_COMMITTER_DATE": COMMIT_DATE,
}
_SKIP_DIRS = frozenset({".git", "__pycache__", ".pytest_cache"})
_SKIP_SUFFIXES = (".pyc", ".pyo")


class SnapshotError(RuntimeError):
    """The host's git produced a different commit than the pure-Python hash (or failed)."""


def snapshot_files(root: Path) -> list[Path]:
    """Repo-relative paths of every file and symlink in the snapshot, sorted."""
    root = Path(root)
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for d in list(dirnames):
            if d in _SKIP_DIRS:
                dirnames.remove(d)
            elif (here / d).is_symlink():
                dirnames.remove(d)
                out.append((here / d).relative_to(root))
        for f in filenames:
            if not f.endswith(_SKIP_SUFFIXES):
                out.append((here / f).relative_to(root))
    return sorted(out)


def _object_id(kind: bytes, body: bytes) -> bytes:
    return hashlib.sha1(kind + b" " + str(len(body)).encode() + b"\0" + body).digest()


def snapshot_tree(root: Path) -> str:
    """The git tree sha of the snapshot of `root` (hex)."""
    root = Path(root)
    nested: dict = {}
    for rel in snapshot_files(root):
        node = nested
        for part in rel.parts[:-1]:
            node = node.setdefault(part, {})
        node[rel.parts[-1]] = root / rel
    return _tree_id(nested).hex()


def _tree_id(node: dict) -> bytes:
    entries: list[tuple[bytes, bytes, bytes]] = []
    for name, child in node.items():
        raw = os.fsencode(name)
        if isinstance(child, dict):
            # git orders a directory as if its name ended in "/".
            entries.append((raw + b"/", b"40000 " + raw, _tree_id(child)))
            continue
        info = os.lstat(child)
        if stat.S_ISLNK(info.st_mode):
            mode, body = b"120000", os.fsencode(os.readlink(child))
        else:
            mode = b"100755" if info.st_mode & stat.S_IXUSR else b"100644"
            body = Path(child).read_bytes()
        entries.append((raw, mode + b" " + raw, _object_id(b"blob", body)))
    entries.sort(key=lambda e: e[0])
    return _object_id(b"tree", b"".join(head + b"\0" + oid for _, head, oid in entries))


def commit_body(tree: str) -> bytes:
    """The commit object `git commit-tree <tree> -m base` writes under `COMMIT_ENV`."""
    who = f"{COMMIT_NAME} <{COMMIT_EMAIL}> {COMMIT_DATE}"
    return f"tree {tree}\nauthor {who}\ncommitter {who}\n\n{COMMIT_MESSAGE}\n".encode()


def snapshot_commit(root: Path) -> str:
    """The sha of the one commit holding the snapshot of `root` (hex)."""
    return _object_id(b"commit", commit_body(snapshot_tree(root))).hex()


def write_snapshot_repo(root: Path, dest: Path) -> str:
    """Copies the snapshot of `root` to `dest` (which must not exist) as a one-commit repository; its sha."""
    root, dest = Path(root), Path(dest)
    dest.mkdir(parents=True)
    for rel in snapshot_files(root):
        src, dst = root / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    env = {**os.environ, **COMMIT_ENV, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    _git(["git", "init", "-q", "-b", "main"], dest, env)
    _git(["git", "add", "-A", "-f"], dest, env)
    tree = _git(["git", "write-tree"], dest, env)
    sha = _git(["git", "commit-tree", "-m", COMMIT_MESSAGE, tree], dest, env)
    _git(["git", "-c", "core.logAllRefUpdates=false", "update-ref", "refs/heads/main", sha], dest, env)
    shutil.rmtree(dest / ".git" / "hooks", ignore_errors=True)
    shutil.rmtree(dest / ".git" / "logs", ignore_errors=True)
    expected = snapshot_commit(root)
    if sha != expected:
        raise SnapshotError(
            f"git committed {root} as {sha} but its content hashes to {expected} (tree {tree})"
        )
    return sha


def _git(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    try:
        out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SnapshotError(f"{' '.join(argv)} in {cwd} failed: {err}") from err
    if out.returncode != 0:
        raise SnapshotError(f"{' '.join(argv)} in {cwd} exited {out.returncode}: {out.stderr.strip()}")
    return out.stdout.strip()
