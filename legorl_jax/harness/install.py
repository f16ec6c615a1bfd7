"""Where third-party harnesses are installed, and the steps every harness installer shares.

    root = install_dir("swe_agent")           # $LEGORL_HARNESS_HOME/swe_agent, else in the user cache
    clear(root, ("installed.json", "venv"))   # a half-finished earlier install leaves nothing behind
    run_command([python, "-m", "venv", str(root / "venv")], "creating the virtualenv")
    write_record(root, {"version": ...})      # last: its presence is what "installed" means
    record = install_record(root)             # None until write_record ran

Each adapter that needs an install (`native_agent` for the npm-published agents, `swe_agent`, `terminus_2`,
`openhands`) lays its own files out under `install_dir(NAME)` and decides from `install_record` plus the
files it needs whether it is installed; an installer fails with `SystemExit` carrying the failed command and
the tail of its output, because it runs from `tools/install_harness.py`, never inside a trial.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

RECORD = "installed.json"


def install_dir(name: str) -> pathlib.Path:
    """Where harness `name` is installed: `$LEGORL_HARNESS_HOME/name` when set (tests point it at an empty
    folder), else the user cache."""
    home = os.environ.get("LEGORL_HARNESS_HOME")
    if home:
        return pathlib.Path(home) / name
    cache = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(cache) / "legorl_jax" / "harness" / name


def install_record(root: pathlib.Path) -> dict[str, Any] | None:
    """`root/installed.json` (written last by every installer), or None when it is missing or unreadable."""
    try:
        return json.loads((root / RECORD).read_text())
    except (OSError, ValueError):
        return None


def clear(root: pathlib.Path, entries: Iterable[str]) -> None:
    """Makes `root` and removes `entries` (files or folders) from it, so that a re-install starts clean."""
    root.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        path = root / entry
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def run_command(argv: list[str], what: str) -> str:
    """Runs `argv` (no shell) and returns its stdout; `SystemExit` naming `what`, the command and the tail of
    its output when it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n"
            f"{(proc.stdout + proc.stderr).strip()[-3000:]}"
        )
    return proc.stdout


def write_record(root: pathlib.Path, record: dict[str, Any]) -> None:
    """Writes `root/installed.json`; called last, once everything the harness needs is in place."""
    (root / RECORD).write_text(json.dumps(record, indent=2) + "\n")
