"""The `Sandbox` protocol: one isolated, disposable machine per trial (docs/security.md §2).

A sandbox is an async context manager: `async with make_sandbox(spec) as sb:` starts it and always removes
everything on exit, whatever happened inside. Backends (Docker, bubblewrap) implement the same protocol and
the same limits; callers never branch on the backend.

Failures of the infrastructure itself (image missing, container start failure, daemon gone) raise
`SandboxError`: they are never reported as a command's non-zero exit, so a broken trial is dropped, not
taught. A command that runs and fails is an `ExecResult` with its exit code.

A command past its `timeout` is killed together with every process of its session (background children
included) and reported with `timed_out=True` and exit code 124; a command killed by the memory limit has
`oom_killed=True` (exit code 137). `make_sandbox` (in `legorl_jax.sandbox`) picks the backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, Self, runtime_checkable

from legorl_jax.validate import positive_number

NETWORK_MODES = ("none", "proxy_only")


class SandboxError(RuntimeError):
    """The sandbox infrastructure failed (not the command run inside it)."""


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """What one command did. `truncated` is set when stdout or stderr hit the output cap."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0
    oom_killed: bool = False
    """The kernel's OOM killer fired in the sandbox while the command ran (the memory limit was hit)."""


@dataclasses.dataclass(frozen=True)
class SandboxSpec:
    """Everything a backend needs to start one sandbox."""

    image: str
    """Image (Docker tag or image id) holding the task's repository at `workdir`."""
    workdir: str = "/testbed"
    """The repository inside the sandbox; the default working directory of `exec`."""
    network: str = "none"
    """'none', or 'proxy_only': an internal network from which only the capture proxy is reachable."""
    proxy_port: int | None = None
    """With network='proxy_only': the capture proxy's port on the host side of that network."""
    proxy_host: str = "127.0.0.1"
    """Where the relay of a proxy_only sandbox finds the capture proxy: this host's loopback, or the
    proxy's address when the sandbox runs on another machine (a Ray node)."""
    cpus: float = 1.0
    """CPU quota in cores."""
    memory_mb: int = 2048
    """Memory limit (swap included); a process over it is killed."""
    pids: int = 256
    """Maximum number of processes (fork bombs stop here)."""
    disk_mb: int = 2048
    """Writable-layer / workspace size limit."""
    user: str | None = None
    """User commands run as; None = the image's non-root user when it has one, else root."""
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Environment of every command."""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Extra labels (run, trial); the backend adds its owner labels for the reaper."""
    output_limit_bytes: int = 1 << 20
    """Cap on each of stdout / stderr per exec; beyond it the output is cut and `truncated` is set."""
    read_only_root: bool = True
    """Only `workdir`, /tmp and the user's home are writable, each a tmpfs of `disk_mb` (seeded from the
    image); False leaves the image's root filesystem writable, and then only single files are capped."""
    mounts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Read-only bind mounts, sandbox path -> host directory (agent runtimes staged on the host)."""

    def __post_init__(self) -> None:
        if self.network not in NETWORK_MODES:
            raise ValueError(f"network must be one of {NETWORK_MODES}, got {self.network!r}")
        if self.network == "proxy_only" and self.proxy_port is None:
            raise ValueError("network='proxy_only' needs proxy_port, got None")
        if not isinstance(self.proxy_host, str) or not self.proxy_host:
            raise ValueError(f"proxy_host must be a non-empty host name or address, got {self.proxy_host!r}")
        if not isinstance(self.image, str) or not self.image:
            raise ValueError(f"image must be a non-empty string, got {self.image!r}")
        if not isinstance(self.workdir, str) or not self.workdir.startswith("/") or self.workdir == "/":
            raise ValueError(f"workdir must be an absolute path below /, got {self.workdir!r}")
        for name in ("cpus", "memory_mb", "pids", "disk_mb", "output_limit_bytes"):
            positive_number(name, getattr(self, name))
        if self.proxy_port is not None and not (
            isinstance(self.proxy_port, int) and 0 < self.proxy_port < 65536
        ):
            raise ValueError(f"proxy_port must be a TCP port in 1..65535, got {self.proxy_port!r}")
        for name in ("env", "labels"):
            for key, value in dict(getattr(self, name)).items():
                if not isinstance(key, str) or not isinstance(value, str) or not key or "\0" in key + value:
                    raise ValueError(f"{name} must map non-empty strings to strings, got {key!r}: {value!r}")
        for target, source in dict(self.mounts).items():
            if not (
                isinstance(target, str)
                and target.startswith("/")
                and isinstance(source, str)
                and source.startswith("/")
            ):
                raise ValueError(
                    f"mounts must map absolute sandbox paths to absolute host paths, got {target!r}: "
                    f"{source!r}"
                )


@runtime_checkable
class Sandbox(Protocol):
    """One isolated machine. `exec` takes an argv list, or a string that runs as a bash script.

    Backends also expose `base_commit` (the workdir's HEAD when the sandbox started, or None) and, with
    network='proxy_only', `proxy_url_base`: the `http://host:port` the harness inside must use.
    """

    async def start(self) -> None: ...

    async def exec(
        self,
        cmd: Sequence[str] | str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes | str) -> None: ...

    async def upload(self, local_dir: str | Path, remote_dir: str) -> None: ...

    async def diff(self, base_commit: str | None = None) -> str:
        """Binary-safe `git diff` (untracked files included) of everything changed since `base_commit`."""
        ...

    async def close(self) -> None:
        """Removes the sandbox and everything it created; safe to call twice."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...
