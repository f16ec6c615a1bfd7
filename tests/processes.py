"""Test processes on this machine: a free loopback port, the results of a set of processes with one
deadline (tests/train/test_distributed.py, tests/loop/test_distributed_loop.py), and engine servers of ours
started and healthy (the fleet and engine-loss tests)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
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


async def start_engine_servers(
    model_dir,
    count: int,
    tmp_path,
    *extra: str,
    max_len: int = 256,
    min_bucket: int = 16,
    name: str = "engine",
):
    """`count` of our engine servers (`python -m legorl_jax.engine.serve`, 4 slots, flags `extra`) on free
    ports, each logging to `tmp_path/<name>-<i>.log`, returned once all are healthy (all stopped if not)."""
    from legorl_jax.engine.sglang_launcher import ServerProcess

    servers = []
    for i in range(count):
        port = free_port()
        argv = [sys.executable, "-m", "legorl_jax.engine.serve", "--model", str(model_dir), "--port",
                str(port), "--max-running", "4", "--max-len", str(max_len), "--min-bucket", str(min_bucket),
                *extra]  # fmt: skip
        server = ServerProcess(argv, f"http://127.0.0.1:{port}", log_file=tmp_path / f"{name}-{i}.log")
        server.start()
        servers.append(server)
    try:
        await asyncio.gather(*(server.wait_healthy(300) for server in servers))
    except BaseException:
        for server in servers:
            server.stop(5)
        raise
    return servers
