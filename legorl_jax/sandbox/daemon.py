"""The connection to the Docker daemon: one client per process and a thread pool for its blocking calls.

The `docker` SDK is synchronous. Every call the sandbox layer makes goes through `call(fn, *args)`, which
runs it on a dedicated thread pool so the event loop never blocks. The pool is ours rather than asyncio's
default executor because an exec holds a thread for as long as its command runs: 16 concurrent sandboxes
would starve the default executor (min(32, cpus + 4) threads, six on a 2-core host) and every other
`to_thread` user with it. The HTTP connection pool is sized to match, so a streaming exec never waits for
a connection held by another.

`client()` is created lazily and re-created after a fork (a socket shared with a parent is unusable).
`available()` tells whether a daemon answers; `make_sandbox(backend="auto")` uses it to choose.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from legorl_jax.sandbox.base import SandboxError

MAX_THREADS = 256
"""Upper bound on concurrent blocking Docker calls (each running exec holds one)."""
PING_TIMEOUT_S = 3.0

_lock = threading.Lock()
_state: dict[str, Any] = {"pid": None, "client": None, "pool": None}
_answered: set[tuple[int, str | None]] = set()


def _ensure() -> tuple[Any, concurrent.futures.ThreadPoolExecutor]:
    with _lock:
        if _state["pid"] != os.getpid():
            _state.update(pid=os.getpid(), client=None, pool=None)
        if _state["pool"] is None:
            _state["pool"] = concurrent.futures.ThreadPoolExecutor(
                MAX_THREADS, thread_name_prefix="legorl-docker"
            )
        if _state["client"] is None:
            import docker  # deferred: importing the SDK is slow and needs no daemon

            try:
                _state["client"] = docker.from_env(max_pool_size=MAX_THREADS, timeout=120)
            except docker.errors.DockerException as exc:
                raise SandboxError(f"cannot reach the Docker daemon: {exc}") from exc
        return _state["client"], _state["pool"]


def client() -> Any:
    """The process's `docker.DockerClient` (raises `SandboxError` when no daemon is configured)."""
    return _ensure()[0]


async def call[T](fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Runs the blocking `fn(*args, **kwargs)` on the Docker thread pool."""
    _, pool = _ensure()
    return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kwargs))


def available() -> bool:
    """True when a Docker daemon answers a ping within `PING_TIMEOUT_S`. A yes holds for the rest of the
    process (per `DOCKER_HOST`): a daemon that answered once and then misses a ping is a busy daemon, and
    answering no then would move `backend="auto"` sandboxes to bubblewrap in the middle of a run, with other
    isolation (no process outlives an exec there, so the verifier's leftover-process check never fires) and
    other limits. A daemon that has really gone fails the next sandbox start with a `SandboxError` instead.
    A no is not remembered: a daemon started later is found by the next call."""
    key = (os.getpid(), os.environ.get("DOCKER_HOST"))
    if key in _answered:
        return True
    try:
        import docker

        probe = docker.from_env(timeout=PING_TIMEOUT_S)
        try:
            answered = bool(probe.ping())
        finally:
            probe.close()
    except Exception:  # any failure to reach the daemon means "not available", which is the answer
        return False
    if answered:
        _answered.add(key)
    return answered


def api_error_types() -> tuple[type[BaseException], ...]:
    """The exceptions a Docker call raises when the daemon (not the command) failed."""
    import docker
    import requests

    return (docker.errors.DockerException, requests.exceptions.RequestException, ConnectionError)


def remove_container(api: Any, ref: str, attempts: int = 3) -> None:
    """Force-removes container `ref` with its anonymous volumes (every removal of the sandbox layer goes
    through here). A container that exits while the daemon kills it (a sandbox's main process ends as its
    supervisor socket closes) makes the daemon answer "Could not kill running
    container ..., cannot remove - Container ... is not running"; it is stopped by then, so the removal is
    tried again (up to `attempts` times, 0.2 s apart) before the error stands."""
    import docker

    for attempt in range(attempts):
        try:
            api.remove_container(ref, force=True, v=True)
            return
        except docker.errors.APIError as exc:
            if "is not running" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.2)
