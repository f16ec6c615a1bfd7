"""What every backend shares: the lifecycle, argument checks, and file / diff operations built on exec.

A backend implements two coroutines, `_start()` and `_run(argv, ...)` (one command as the sandbox user,
raw bytes out, with the timeout, output cap and process-tree kill), and `_cleanup_sync()` (remove
everything; safe after a partial start; synchronous, so the reaper's atexit / SIGTERM path can run it).
Everything else is here, once:
- `start()` / `close()` / `async with`: a failed start closes what it created and raises `SandboxError`;
  `close()` is idempotent and runs even when the body raised; it stops the proxy relay (`_relay`, if the
  backend opened one) and runs `_cleanup_sync` off the event loop (`_blocking`, a thread by default);
- `exec()` checks its arguments (`TypeError` / `ValueError` naming the received value) and turns a bash
  script string into `bash -c`;
- `read_file`, `write_file` and `upload` stream bytes through exec's stdin/stdout as the sandbox user,
  so they work on read-only roots and tmpfs mounts, give the agent's user ownership, and never follow a
  symlink on the host side (a path is only ever resolved inside the sandbox);
- `diff()` runs `gitdiff.SCRIPT` (see there for why it is safe against a hostile repository).
Relative paths are relative to `spec.workdir`. File reads and diffs are capped at `READ_LIMIT` (64 MiB)
or `disk_mb` if smaller; past it they raise `SandboxError` rather than hold unbounded bytes in memory.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import os
import posixpath
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Self

from legorl_jax.sandbox import gitdiff, reaper
from legorl_jax.sandbox.base import ExecResult, SandboxError, SandboxSpec
from legorl_jax.validate import positive_number

TIMEOUT_EXIT_CODE = 124
"""Exit code reported for a command killed at its timeout (what coreutils `timeout` uses)."""

READ_LIMIT = 64 << 20
"""Bytes `read_file` and `diff` hold in memory at most; a bigger file or diff raises `SandboxError`."""

Stdin = bytes | Path | None
"""What a raw run feeds the command: nothing, bytes, or the contents of a host file (streamed)."""


@dataclasses.dataclass(frozen=True)
class RawResult:
    """A command's outcome with its output still as bytes."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    truncated: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0

    def to_result(self) -> ExecResult:
        return ExecResult(
            exit_code=self.exit_code,
            stdout=self.stdout.decode("utf-8", "replace"),
            stderr=self.stderr.decode("utf-8", "replace"),
            timed_out=self.timed_out,
            truncated=self.truncated,
            duration_s=self.duration_s,
            oom_killed=self.oom_killed,
        )


class CappedBuffer:
    """Collects a stream up to `limit` bytes; the rest is counted and dropped, never held in memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.limit - self._size
        if room > 0:
            self._parts.append(data[:room])
            self._size += min(room, len(data))
        self.dropped += max(0, len(data) - max(room, 0))

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


def _pack(source: Path, tarball: Path) -> None:
    """Tars the contents of `source` (symlinks kept as links) into `tarball`."""
    with tarfile.open(tarball, "w", dereference=False) as archive:
        for entry in sorted(source.iterdir()):
            archive.add(entry, arcname=entry.name)


class ExecSandbox(abc.ABC):
    """The shared half of a backend; see the module docstring for what a subclass provides."""

    backend: str = ""

    def __init__(self, spec: SandboxSpec) -> None:
        if not isinstance(spec, SandboxSpec):
            raise TypeError(f"spec must be a SandboxSpec, got {type(spec).__name__}: {spec!r:.200}")
        self.spec = spec
        self.base_commit: str | None = None
        self.proxy_url_base: str | None = None
        self._started = False
        self._closed = False
        self._relay: asyncio.base_events.Server | None = None  # the proxy relay, when the spec has a proxy
        self._token: int | None = None  # the reaper's registration of _cleanup_sync

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started or self._closed:
            raise SandboxError(f"{self.backend} sandbox for {self.spec.image!r} was already started")
        self._started = True
        try:
            await self._start()
        except BaseException as exc:
            await self._close_quietly()
            if isinstance(exc, (SandboxError, KeyboardInterrupt, SystemExit)) or not isinstance(
                exc, Exception
            ):
                raise
            raise SandboxError(
                f"starting a {self.backend} sandbox for {self.spec.image!r} failed: {exc}"
            ) from exc

    async def close(self) -> None:
        """Removes the sandbox and everything it created; safe to call twice or after a failed start."""
        if self._closed:
            return
        self._closed = True
        await self._close()

    async def _close_quietly(self) -> None:
        try:
            await self.close()
        except Exception:  # the start error is the one worth raising; close errors are secondary here
            pass

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- exec -----------------------------------------------------------------------------------------

    async def exec(
        self,
        cmd: Sequence[str] | str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        if isinstance(cmd, str):
            argv = ["bash", "-c", cmd]
        elif isinstance(cmd, Sequence) and cmd and all(isinstance(a, str) for a in cmd):
            argv = list(cmd)
        else:
            raise TypeError(
                f"cmd must be a bash script string or a non-empty list of strings, got {cmd!r:.200}"
            )
        if any("\0" in a for a in argv):
            raise ValueError(f"cmd must not contain NUL bytes, got {cmd!r:.200}")
        raw = await self._checked_run(
            argv, timeout=timeout, workdir=workdir, env=env, limit=self.spec.output_limit_bytes
        )
        return raw.to_result()

    async def _checked_run(
        self,
        argv: list[str],
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: Stdin = None,
        limit: int | None = None,
    ) -> RawResult:
        if not self._started or self._closed:
            raise SandboxError(f"{self.backend} sandbox is {'closed' if self._closed else 'not started'}")
        if timeout is not None:
            positive_number("timeout", timeout, unit="seconds")
        if workdir is not None and (not isinstance(workdir, str) or not workdir.startswith("/")):
            raise ValueError(f"workdir must be an absolute path, got {workdir!r}")
        merged = dict(self.spec.env)
        for key, value in (env or {}).items():
            if (
                not isinstance(key, str)
                or not isinstance(value, str)
                or not key
                or "=" in key
                or "\0" in key + value
            ):
                raise ValueError(f"env must map variable names to strings, got {key!r}: {value!r}")
            merged[key] = value
        return await self._run(
            argv,
            timeout=timeout,
            workdir=workdir or self.spec.workdir,
            env=merged,
            stdin=stdin,
            limit=limit or self.file_limit,
        )

    @property
    def file_limit(self) -> int:
        """Largest file (and diff) the sandbox hands back: `READ_LIMIT`, or `disk_mb` when that is smaller."""
        return min(self.spec.disk_mb << 20, READ_LIMIT)

    # -- files ----------------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        if not isinstance(path, str) or not path or "\0" in path:
            raise ValueError(f"path must be a non-empty string, got {path!r}")
        return posixpath.normpath(posixpath.join(self.spec.workdir, path))

    async def read_file(self, path: str) -> bytes:
        target = self._path(path)
        raw = await self._checked_run(["cat", "--", target])
        if raw.exit_code != 0:
            message = raw.stderr.decode("utf-8", "replace").strip()
            if "No such file" in message:
                raise FileNotFoundError(f"{target} does not exist in the sandbox")
            raise SandboxError(f"reading {target} failed (exit {raw.exit_code}): {message}")
        if raw.truncated:
            raise SandboxError(f"{target} is larger than the {self.file_limit} byte read limit")
        return raw.stdout

    async def write_file(self, path: str, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")  # round-trips what `diff` decoded
        if not isinstance(data, bytes):
            raise TypeError(f"data must be bytes or str, got {type(data).__name__}")
        target = self._path(path)
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        raw = await self._checked_run(["sh", "-c", script, "sh", target], stdin=data)
        if raw.exit_code != 0:
            raise SandboxError(
                f"writing {target} failed (exit {raw.exit_code}): "
                f"{raw.stderr.decode(errors='replace').strip()}"
            )

    async def upload(self, local_dir: str | Path, remote_dir: str) -> None:
        """Copies the contents of the host directory `local_dir` into `remote_dir` (created if needed)."""
        source = Path(local_dir)
        if not source.is_dir():
            raise ValueError(f"local_dir must be an existing directory, got {str(local_dir)!r}")
        target = self._path(remote_dir)
        fd, name = tempfile.mkstemp(prefix="legorl-upload.", suffix=".tar")
        os.close(fd)
        try:
            await asyncio.to_thread(_pack, source, Path(name))  # a big tree must not stall the event loop
            script = 'mkdir -p -- "$1" && tar -x --no-same-owner -m -C "$1" -f -'
            raw = await self._checked_run(["sh", "-c", script, "sh", target], stdin=Path(name))
        finally:
            os.unlink(name)
        if raw.exit_code != 0:
            raise SandboxError(
                f"upload to {target} failed (exit {raw.exit_code}): "
                f"{raw.stderr.decode(errors='replace').strip()}"
            )

    async def diff(self, base_commit: str | None = None) -> str:
        """Binary-safe diff of the workdir against `base_commit` (default: HEAD when the sandbox started)."""
        base = base_commit if base_commit is not None else self.base_commit
        if base is not None and not gitdiff.is_revision(base):
            raise ValueError(f"base_commit must be a commit sha or ref name, got {base_commit!r}")
        raw = await self._checked_run(["sh", "-c", gitdiff.SCRIPT, "legorl-diff", base or ""])
        if raw.exit_code != 0:
            raise SandboxError(
                f"git diff in {self.spec.workdir} failed (exit {raw.exit_code}): "
                f"{raw.stderr.decode(errors='replace').strip()[-2000:]}"
            )
        if raw.truncated:
            raise SandboxError(f"the diff is larger than the {self.file_limit} byte limit")
        # Non-UTF-8 text files appear byte for byte; surrogateescape keeps them exact in a str.
        return raw.stdout.decode("utf-8", "surrogateescape")

    # -- backend --------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def _start(self) -> None: ...

    @abc.abstractmethod
    async def _run(
        self,
        argv: list[str],
        *,
        timeout: float | None,
        workdir: str,
        env: dict[str, str],
        stdin: Stdin,
        limit: int,
    ) -> RawResult:
        """Runs one command as the sandbox user; stdout/stderr each capped at `limit` bytes."""

    @abc.abstractmethod
    def _cleanup_sync(self) -> None:
        """Removes what the sandbox created (safe after a partial start); calls `_unregister()` at the end."""

    async def _blocking(self, fn: Callable[[], None]) -> None:
        """Runs blocking `fn` off the event loop (a backend with its own thread pool overrides this)."""
        await asyncio.to_thread(fn)

    async def _close(self) -> None:
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        await self._blocking(self._cleanup_sync)

    def _unregister(self) -> None:
        """Withdraws `_cleanup_sync` from the reaper: the sandbox is gone, nothing is left to clean at
        exit."""
        if self._token is not None:
            reaper.unregister(self._token)
            self._token = None
