"""The on-disk cache the sandbox layer shares between processes: where it lives, and its locks.

Everything here is keyed by content (a recipe hash, an image id), so a finished entry never changes and
two processes that want the same entry only need to agree on who builds it. `locked(name)` is that
agreement: an exclusive `fcntl.flock` on `<cache>/locks/<name>.lock`, held for the duration of a build;
the caller re-checks whether the entry exists once it holds the lock. Entries are written under a
temporary name in the same directory and renamed into place, so a reader never sees half of one and a
build killed midway leaves only a temporary file that the next build overwrites.

The cache root is `$LEGORL_CACHE` when set, else `~/.cache/legorl`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_LOCK_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def cache_dir() -> Path:
    """Root of the sandbox cache (created on first use)."""
    root = Path(os.environ.get("LEGORL_CACHE") or Path.home() / ".cache" / "legorl")
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """Holds the cross-process lock `name` (blocking until it is free)."""
    if not isinstance(name, str) or not _LOCK_NAME.match(name):
        raise ValueError(f"lock name must match {_LOCK_NAME.pattern}, got {name!r}")
    lock_dir = cache_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """A fresh directory beside `final` that is renamed to `final` when the block succeeds.

    On failure the staging directory is removed and `final` is untouched.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield staging
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@contextlib.contextmanager
def staged_file(final: Path) -> Iterator[Path]:
    """A temporary path beside `final` that is renamed to `final` when the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
    os.close(fd)
    staging = Path(name)
    try:
        yield staging
        os.replace(staging, final)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
