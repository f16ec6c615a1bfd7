"""The Docker backend: one container per sandbox, driven through the `docker` SDK on a thread pool.

Container. Created from the task image with the limits of the spec: `nano_cpus`, memory with swap equal
to it (no swap), `pids_limit`, RLIMIT_FSIZE = disk_mb, no network (`network_mode="none"`) or the
per-sandbox proxy_only network (`docker_network`), IPv6 disabled, `no-new-privileges`, the owner labels
of `reaper`. Its main process, under Docker's init (tini, which reaps orphans), is `SUPERVISOR`: a root
shell loop that reads requests from the container's stdin, which we hold attached. Two reasons:
- a timed-out command is killed from inside by a process that already exists, using only shell builtins
  (no fork), so it works even when a fork bomb has taken every pid the container may have;
- the container is created with StdinOnce: when the attaching process dies (a driver killed with
  SIGKILL), stdin closes, the supervisor exits and the container stops by itself; the reaper removes it.

proxy_only: the container sits alone on its own internal network whose host firewall rules admit only
the gateway address at the proxy port (`docker_network`); `proxy_url_base` is `http://<gateway>:<port>`.
A relay on that address forwards to the proxy on 127.0.0.1 (`relay.py`), unless the proxy listens on
every address itself.

Disk. The daemon here (overlay2 on ext4) refuses `storage_opt size` (it needs xfs with pquota), so the
quota is enforced with tmpfs: with `read_only_root` (default) the image's root is read-only, and the
workdir, the user's home and /tmp are each a tmpfs of `disk_mb`, seeded from the image (`seed`), owned
by the sandbox user. Guarantee: nothing can be written outside those three mounts (and Docker's 64 MB
/dev/shm); each holds at most `disk_mb`; tmpfs pages are charged to the container's memory cgroup, so
everything written plus the processes' memory stays under `memory_mb`; no single file exceeds `disk_mb`.
With `read_only_root=False` the root is the writable overlay and only the single-file cap holds.

Exec. Each command runs as the sandbox user leading its own session (`WRAPPER`), whose id it
reports on its first stderr line (stripped from the output), at nice 19. The output streams are read in a
worker thread and capped (`CappedBuffer`); at the timeout the supervisor sweeps that session or process
group and the result is exit code 124 with `timed_out=True`. A fork bomb defeated a plain SIGKILL sweep:
its processes spin on failed forks, the supervisor shares the container's CPU quota with hundreds of them,
and every pid a kill frees is taken again by a survivor. Hence: the commands run at nice 19 while the
supervisor keeps nice 0 (within the container's CPU group, so nothing else is slowed; neither the sandbox
user nor the container's root can lower a nice value, as Docker grants no CAP_SYS_NICE), and the sweep
first SIGSTOPs every process of the session until none is left running (a stopped process keeps its pid,
so no fork can succeed while the pids limit is reached), then SIGKILLs them all.
Exit code 137 is checked against the cgroup's OOM-kill counter (`oom_killed`).
A process that starts its own session (setsid, a daemon) escapes the per-exec kill, not `close()`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legorl_jax.sandbox import daemon, docker_network, reaper, relay, seed
from legorl_jax.sandbox.base import SandboxError, SandboxSpec
from legorl_jax.sandbox.exec_sandbox import TIMEOUT_EXIT_CODE, CappedBuffer, ExecSandbox, RawResult, Stdin

log = logging.getLogger(__name__)

SUPERVISOR = r"""
if [ "${1:-}" = seed ]; then
  if tar -x -p --numeric-owner -C / -f -; then echo "seeded 0"; else echo "seeded 1"; fi
fi
sweep() {
  for sig in STOP KILL; do
    pass=0
    while [ "$pass" -lt 200 ]; do
      hit=0
      for d in /proc/[0-9]*; do
        { read -r line < "$d/stat"; } 2>/dev/null || continue
        set -- ${line##*") "}
        [ "$1" = Z ] && continue
        [ "$sig$1" = STOPT ] && continue
        if [ "$4" = "$sid" ] || [ "$3" = "$sid" ]; then kill -s "$sig" "${d#/proc/}" 2>/dev/null; hit=1; fi
      done
      [ "$hit" = 0 ] && break
      pass=$((pass + 1))
    done
  done
}
while read -r op sid; do
  case "$op:$sid" in
    kill:*[!0-9]*|kill:) echo "bad $sid" ;;
    kill:*) sweep; echo "killed $sid" ;;
  esac
done
"""
"""Runs as root under tini. With `seed`, first unpacks the seed tarball sent on stdin; then each request
`kill <sid>` stops, then SIGKILLs, every process of session / process group <sid>, with shell builtins
only (see Exec in the module docstring)."""

SESSION_MARK = b"\x01legorl-session "
_LEAD = r"""
lead() { read -r s < /proc/$$/stat; set -- ${s##*") "}; S=$4; }
lead
command -v nice >/dev/null 2>&1 && set -- nice -n 19 "$@"
if [ "$S" = "$$" ]; then printf '\001legorl-session %s\n' "$$" >&2; exec "$@"; fi
exec setsid -w /bin/sh -c 'printf "\001legorl-session %s\n" "$$" >&2; exec "$@"' legorl-exec "$@"
"""
WRAPPER = ["/bin/sh", "-c", _LEAD, "legorl-exec"]
"""Prefix of every exec: make sure the command leads its own session (Docker's exec processes already
do; otherwise `setsid`), report the session id on stderr, then become the command at nice 19 (when the
image has `nice`), below the supervisor that must be able to kill it."""

_KILL_WAIT_S = 20.0
_DRAIN_WAIT_S = 5.0
_OOM_READ = "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events"


def _sock(io_obj: Any) -> socket.socket:
    return getattr(io_obj, "_sock", io_obj)


class _Pump:
    """Reads one exec's multiplexed stream in a worker thread into two capped buffers."""

    def __init__(self, stream: Any, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self.stream = stream
        self.stdout = CappedBuffer(limit)
        self.stderr = CappedBuffer(limit)
        self.session: asyncio.Future[int] = loop.create_future()
        self._loop = loop
        self._head = b""
        self._head_done = False

    def _on_stderr(self, data: bytes) -> None:
        if self._head_done:
            self.stderr.add(data)
            return
        self._head += data
        if b"\n" not in self._head and len(self._head) < 64:
            return
        self._head_done = True
        line, _, rest = self._head.partition(b"\n")
        if line.startswith(SESSION_MARK) and line[len(SESSION_MARK) :].isdigit():
            sid = int(line[len(SESSION_MARK) :])
            self._loop.call_soon_threadsafe(self._set_session, sid)
            self.stderr.add(rest)
        else:
            self.stderr.add(self._head)

    def run(self) -> None:
        from docker.utils.socket import frames_iter

        try:
            for stream_id, data in frames_iter(self.stream, tty=False):
                (self.stdout.add if stream_id == 1 else self._on_stderr)(data)
        except OSError:
            pass  # the socket was shut down by a forced stop
        if not self._head_done and self._head:
            self._head_done = True
            self.stderr.add(self._head)

    def _set_session(self, sid: int) -> None:
        if not self.session.done():
            self.session.set_result(sid)


def _feed(stream: Any, stdin: Stdin) -> None:
    raw = _sock(stream)
    try:
        if isinstance(stdin, Path):
            with open(stdin, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    raw.sendall(block)
        elif stdin:
            raw.sendall(stdin)
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the command exited without reading all of its input


class DockerSandbox(ExecSandbox):
    """A sandbox in one Docker container; see the module docstring."""

    backend = "docker"

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self.name = f"legorl-{secrets.token_hex(6)}"
        self.container_id: str | None = None
        self.network: str | None = None
        self._image_facts: seed.ImageFacts | None = None
        self._supervisor: Any = None
        self._supervisor_lock = threading.Lock()
        self._oom_seen = 0

    # -- start / close --------------------------------------------------------------------------------

    async def _start(self) -> None:
        client = daemon.client()
        reap = asyncio.ensure_future(daemon.call(reaper.reap_docker_orphans, client))
        try:
            self._image_facts = await seed.image_facts(
                self.spec.image, self.spec.workdir, self.spec.user, want_seed=self.spec.read_only_root
            )
        finally:
            try:
                await reap
            except Exception:  # a failed sweep of others' orphans must not fail this start
                log.warning("reaping orphaned sandboxes failed", exc_info=True)
        labels = reaper.owner_labels(self.spec.labels) | {reaper.KIND: "docker"}
        self._token = reaper.register(self._cleanup_sync)
        try:
            if self.spec.network == "proxy_only":
                if self.spec.proxy_port is None:
                    raise SandboxError("network='proxy_only' needs spec.proxy_port, got None")
                self.network, gateway = await daemon.call(
                    docker_network.create_network,
                    client,
                    self.name.removeprefix("legorl-"),
                    labels,
                    self.spec.proxy_port,
                )
                self.proxy_url_base = f"http://{gateway}:{self.spec.proxy_port}"
                self._relay = await relay.start_tcp_relay(gateway, self.spec.proxy_port, self.spec.proxy_host)
            self.container_id = await daemon.call(self._create, client, labels)
            self._supervisor = await daemon.call(
                client.api.attach_socket, self.container_id, {"stdin": 1, "stdout": 1, "stream": 1}
            )
            await daemon.call(client.api.start, self.container_id)
            if self._facts.seed:
                # Through the supervisor's stdin rather than an exec: one round trip less per start.
                reply = await daemon.call(self._ask, Path(self._facts.seed), rb"seeded (\d)\n", 600.0)
                if reply != b"0":
                    raise SandboxError(
                        f"seeding {self.spec.workdir} from {self.spec.image!r} failed (tar in the image)"
                    )
        except daemon.api_error_types() as exc:
            raise SandboxError(f"starting container for {self.spec.image!r} failed: {exc}") from exc
        self.base_commit = self._facts.base_commit

    @property
    def _facts(self) -> seed.ImageFacts:
        """What `start` read of the image (user, home, seed, ...)."""
        if self._image_facts is None:
            raise SandboxError(f"sandbox {self.name} is not started")
        return self._image_facts

    def _create(self, client: Any, labels: dict[str, str]) -> str:
        import docker

        spec, facts = self.spec, self._facts
        disk = spec.disk_mb << 20
        tmpfs: dict[str, str] = {}
        if spec.read_only_root:
            owned = f"size={spec.disk_mb}m,exec,uid={facts.uid},gid={facts.gid}"
            tmpfs[spec.workdir] = f"{owned},mode=0755"
            tmpfs["/tmp"] = f"size={spec.disk_mb}m,exec,mode=1777"
            if seed.home_needs_mount(facts, spec.workdir) and facts.home != "/tmp":
                tmpfs[facts.home] = f"{owned},mode=0755"
        host_config = client.api.create_host_config(
            network_mode=self.network or "none",
            nano_cpus=int(spec.cpus * 1e9),
            mem_limit=spec.memory_mb << 20,
            memswap_limit=spec.memory_mb << 20,
            pids_limit=spec.pids,
            ulimits=[docker.types.Ulimit(name="fsize", soft=disk, hard=disk)],
            read_only=spec.read_only_root,
            tmpfs=tmpfs,
            # Mounts, not binds: a missing host directory is an error instead of being created empty.
            mounts=[
                docker.types.Mount(target, source, type="bind", read_only=True)
                for target, source in spec.mounts.items()
            ],
            init=True,
            security_opt=["no-new-privileges"],
            cap_drop=["NET_RAW", "MKNOD", "AUDIT_WRITE"],
            sysctls={"net.ipv6.conf.all.disable_ipv6": "1"},
            log_config=docker.types.LogConfig(type="none"),
        )
        created = client.api.create_container(
            # The entrypoint replaces the image's own, which would otherwise wrap the supervisor.
            facts.image_id,
            entrypoint=["/bin/sh"],
            command=["-c", SUPERVISOR, "legorl-supervisor", "seed" if facts.seed else ""],
            user="root",
            name=self.name,
            hostname="sandbox",
            detach=False,
            stdin_open=True,
            labels=labels,
            host_config=host_config,
            working_dir="/",
        )
        return created["Id"]

    async def _blocking(self, fn: Callable[[], None]) -> None:
        await daemon.call(fn)  # the Docker client's own thread pool

    def _cleanup_sync(self) -> None:
        """Removes the container and network; synchronous so the atexit / SIGTERM path can run it."""
        import docker

        client = daemon.client()
        errors = []
        if self._supervisor is not None:
            raw = _sock(self._supervisor)
            try:
                raw.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._supervisor.close()  # the SocketIO holds a reference; the fd closes with the last one
            raw.close()
            self._supervisor = None
        try:
            daemon.remove_container(client.api, self.container_id or self.name)
        except docker.errors.NotFound:
            pass
        except daemon.api_error_types() as exc:
            if "already in progress" not in str(exc):
                errors.append(f"container {self.name}: {exc}")
        if self.spec.network == "proxy_only":
            try:
                docker_network.remove_network(client, f"{self.name}")
            except SandboxError as exc:
                errors.append(str(exc))
        self._unregister()
        if errors:
            raise SandboxError("closing the sandbox left resources behind: " + "; ".join(errors))

    # -- exec -----------------------------------------------------------------------------------------

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
        raw = await self._exec_once(
            argv, user=self._facts.user, timeout=timeout, workdir=workdir, env=env, stdin=stdin, limit=limit
        )
        if raw.exit_code == 137 or raw.timed_out:
            oom = await self._oom_kills()
            if oom > self._oom_seen:
                self._oom_seen = oom
                raw = RawResult(
                    raw.exit_code, raw.stdout, raw.stderr, raw.timed_out, raw.truncated, True, raw.duration_s
                )
        return raw

    async def _exec_once(
        self,
        argv: list[str],
        *,
        user: str,
        timeout: float | None,
        workdir: str,
        env: dict[str, str],
        stdin: Stdin,
        limit: int,
    ) -> RawResult:
        api = daemon.client().api
        started = time.monotonic()
        try:
            exec_id = (
                await daemon.call(
                    api.exec_create,
                    self.container_id,
                    WRAPPER + argv,
                    stdin=stdin is not None,
                    user=user,
                    environment=[f"{k}={v}" for k, v in env.items()],
                    workdir=workdir,
                )
            )["Id"]
            stream = await daemon.call(api.exec_start, exec_id, socket=True)
        except daemon.api_error_types() as exc:
            raise SandboxError(f"exec in {self.name} failed to start: {exc}") from exc
        pump = _Pump(stream, limit, asyncio.get_running_loop())
        reading = asyncio.ensure_future(daemon.call(pump.run))
        feeding = asyncio.ensure_future(daemon.call(_feed, stream, stdin)) if stdin is not None else None
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(reading), timeout)
        except TimeoutError:
            timed_out = True
            await self._stop(pump, reading)
        except asyncio.CancelledError:
            await asyncio.shield(self._stop(pump, reading))
            raise
        finally:
            if feeding is not None:
                await asyncio.gather(feeding, return_exceptions=True)
            _sock(stream).close()
        exit_code = TIMEOUT_EXIT_CODE if timed_out else await self._exit_code(exec_id)
        return RawResult(
            exit_code,
            pump.stdout.getvalue(),
            pump.stderr.getvalue(),
            timed_out,
            bool(pump.stdout.dropped or pump.stderr.dropped),
            False,
            time.monotonic() - started,
        )

    async def _stop(self, pump: _Pump, reading: asyncio.Future) -> None:
        """Kills the exec's whole session, then waits for its stream to end (forcing it if needed)."""
        try:
            sid = await asyncio.wait_for(asyncio.shield(pump.session), _DRAIN_WAIT_S)
            await daemon.call(self._kill_session, sid)
        except (TimeoutError, SandboxError):
            log.warning("sandbox %s: could not kill a timed-out command's session", self.name, exc_info=True)
        try:
            await asyncio.wait_for(asyncio.shield(reading), _DRAIN_WAIT_S)
        except TimeoutError:
            try:
                _sock(pump.stream).shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            await reading

    def _kill_session(self, sid: int) -> None:
        self._ask(f"kill {sid}\n".encode(), rb"(?:killed|bad) %d\n" % sid, _KILL_WAIT_S)

    def _ask(self, request: bytes | Path, answer: bytes, timeout_s: float) -> bytes:
        """Sends a request to the supervisor and waits for the line matching `answer`; returns group 1."""
        from docker.utils.socket import frames_iter

        with self._supervisor_lock:
            if self._supervisor is None:
                raise SandboxError("the sandbox supervisor is gone")
            raw = _sock(self._supervisor)
            raw.settimeout(timeout_s)
            try:
                if isinstance(request, Path):
                    with open(request, "rb") as handle:
                        for block in iter(lambda: handle.read(1 << 20), b""):
                            raw.sendall(block)
                else:
                    raw.sendall(request)
                seen = b""
                for _, data in frames_iter(self._supervisor, tty=False):
                    seen += data
                    match = re.search(answer, seen)
                    if match:
                        return match.group(1) if match.groups() else match.group(0)
                raise SandboxError("the sandbox supervisor exited")
            except OSError as exc:
                raise SandboxError(f"the sandbox supervisor did not answer: {exc}") from exc

    async def _exit_code(self, exec_id: str) -> int:
        api = daemon.client().api
        for _ in range(50):
            info = await daemon.call(api.exec_inspect, exec_id)
            if info.get("ExitCode") is not None and not info.get("Running"):
                return int(info["ExitCode"])
            await asyncio.sleep(0.05)
        raise SandboxError(f"exec {exec_id[:12]} in {self.name} ended its output but never exited")

    async def _oom_kills(self) -> int:
        raw = await self._exec_once(
            ["sh", "-c", _OOM_READ], user="root", timeout=30, workdir="/", env={}, stdin=None, limit=1 << 16
        )
        match = re.search(rb"oom_kill (\d+)", raw.stdout)
        return int(match.group(1)) if match else 0
