"""Test processes on this machine: a free loopback port, and the results of a set of processes with one
deadline (tests/train/test_distributed.py, tests/loop/test_distributed_loop.py)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def finish(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str, str]]:
    """(returncode, stdout, stderr) of each process; any still running at `timeout` is killed first."""
    deadline = time.monotonic() + timeout
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
            out, err = proc.communicate()
            pytest.fail(f"process {procs.index(proc)} still running after {timeout} s:\n{err[-3000:]}")
        results.append((proc.returncode, out, err))
    return results
