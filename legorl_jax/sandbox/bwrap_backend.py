"""The bubblewrap backend: the same protocol as Docker on hosts without a Docker daemon.

Layout. The image's root filesystem (`rootfs.resolve`: a directory, a cached `docker export`, or the base
image's debootstrap tree) is bound read-only at /. The sandbox's writable state lives on the host in
`<state root>/<name>/fs/`: `work` (a copy of the image's workdir, or of a tree image's workdir tree, bound
at `workdir`), `home` (a copy of the user's home) and `tmp` (bound at /tmp). As root, `fs` is a tmpfs of
`disk_mb`, so the three together hold at most `disk_mb` (and their pages count against the memory
cgroup); otherwise it is a plain directory and only single files are capped (RLIMIT_FSIZE = disk_mb,
always set).

With `read_only_root=False` (needs root) the root is instead an overlay mounted on the host: a copy of the
root filesystem (see Hardening) as its lower layer and `fs/upper` as its upper one, so the whole root is
writable, changes persist across execs, and they too count against the `disk_mb` tmpfs.

Each exec is one `bwrap --unshare-all --die-with-parent --new-session` run: new user (the image user's
uid/gid), pid, network (loopback only), ipc, uts and cgroup namespaces, a fresh /proc and a minimal
/dev, a cleared environment.

Hardening (the sandbox must not see or become the host): bubblewrap itself is pid 1 inside, so its own
environment is readable at /proc/1/environ; it is started with an allow-listed environment (`PATH` only),
never this process's. As root, bubblewrap runs as the unprivileged host uid `SANDBOX_HOST_UID`
(`setpriv`), with either kind of root, so the sandbox user is that uid on the host, never root; the
writable state is chowned to it. A writable root's overlay takes as its lower layer a copy of the root
filesystem in which every file belongs to that uid (`rootfs.owned_copy`, made once per image and cached:
the image's size again on disk), so inside the whole root belongs to the sandbox user and is writable, and
what the sandbox creates there is that uid's on the host too. `--disable-userns` forbids nested user
namespaces, and a seccomp filter (`seccomp.py`, Docker's default profile in spirit) refuses mounts,
namespace changes, kernel modules, keyrings, `bpf` and the rest. Consequences: a timeout kills the whole
tree for sure (killing bubblewrap kills its pid namespace, daemons and setsid children included), and
nothing outlives the exec that started it; state carries over only through the files.

Limits (`limits`): with writable cgroups (root) every exec joins the sandbox's memory / pids / cpu
groups (`cgroups.py`), shared across concurrent execs, and exit code 137 is checked against the OOM-kill
counter. Without them ("rlimit"): RLIMIT_AS = memory_mb per process, RLIMIT_NPROC = pids plus the
processes the host user already runs (the kernel counts per user and never limits host root), no CPU
limit, and `oom_killed` is never set.

proxy_only: the only way out of the empty network namespace is a unix socket bound read-only into the
sandbox; a small Python forwarder inside listens on 127.0.0.1:<proxy_port> and relays to it, and this
process relays the socket to 127.0.0.1:<proxy_port> on the host (`relay.py`; `proxy_url_base` =
`http://127.0.0.1:<port>`). It needs python3 in the root filesystem.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

from legorl_jax.sandbox import cgroups, reaper, relay, rootfs, seccomp
from legorl_jax.sandbox.base import SandboxError, SandboxSpec
from legorl_jax.sandbox.exec_sandbox import TIMEOUT_EXIT_CODE, CappedBuffer, ExecSandbox, RawResult, Stdin
from legorl_jax.sandbox.seed import ImageFacts, home_needs_mount

log = logging.getLogger(__name__)

LIMIT_MODES = ("auto", "cgroup", "rlimit")
SANDBOX_HOST_UID = (
    65534  # nobody: owns nothing on the host, so code that escapes the namespaces can do little
)
# bubblewrap's own environment is visible inside as /proc/1/environ: nothing of this process's goes there.
BWRAP_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
_JOIN = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done; exec "$@"'
)
_PROXY_DIR = "/tmp/.legorl-proxy"
FORWARDER = r"""
import os, socket, sys, threading
port, path, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen(64)
if os.fork():
    server.close()
    os.execvp(argv[0], argv)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
def relay(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
while True:
    inside, _ = server.accept()
    outside = socket.socket(socket.AF_UNIX)
    try:
        outside.connect(path)
    except OSError:
        inside.close()
        continue
    for a, b in ((inside, outside), (outside, inside)):
        threading.Thread(target=relay, args=(a, b), daemon=True).start()
"""
"""Runs inside the sandbox: binds the proxy port before the command starts (no race), then relays."""


def state_root() -> Path:
    """Where sandbox state directories live (`$LEGORL_SANDBOX_STATE`, else /tmp/legorl-bwrap-<uid>)."""
    root = Path(os.environ.get("LEGORL_SANDBOX_STATE") or f"/tmp/legorl-bwrap-{os.geteuid()}")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.geteuid() == 0:
        os.chmod(root, 0o711)  # bubblewrap runs as SANDBOX_HOST_UID and must reach its bind sources
    return root


def _mount_points() -> set[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        return {line.split()[4].replace("\\040", " ") for line in handle if len(line.split()) > 4}


class BwrapSandbox(ExecSandbox):
    """A sandbox run with bubblewrap; see the module docstring."""

    backend = "bwrap"

    def __init__(self, spec: SandboxSpec, *, limits: str = "auto") -> None:
        super().__init__(spec)
        if limits not in LIMIT_MODES:
            raise ValueError(f"limits must be one of {LIMIT_MODES}, got {limits!r}")
        self.limits = limits
        self.name = f"legorl-{secrets.token_hex(6)}"
        self.state: Path | None = None
        self._root_dir: Path | None = None
        self._image_facts: ImageFacts | None = None
        self._cgroup: cgroups.CgroupLimits | None = None
        self._mounted = False
        self._oom_seen = 0

    @property
    def _dir(self) -> Path:
        """The sandbox's state folder (`state`), once `start` made it."""
        if self.state is None:
            raise SandboxError(f"sandbox {self.name} is not started")
        return self.state

    @property
    def _root(self) -> Path:
        """The image's root filesystem, once `start` resolved it."""
        if self._root_dir is None:
            raise SandboxError(f"sandbox {self.name} is not started")
        return self._root_dir

    @property
    def _facts(self) -> ImageFacts:
        """What `start` read of the image (user, home, workdir, ...)."""
        if self._image_facts is None:
            raise SandboxError(f"sandbox {self.name} is not started")
        return self._image_facts

    async def _start(self) -> None:
        if shutil.which("bwrap") is None:
            raise SandboxError("bubblewrap (bwrap) is not installed (tools/system_setup.sh installs it)")
        try:
            await asyncio.to_thread(reap_orphans)
        except OSError:  # a failed sweep of others' orphans must not fail this start
            log.warning("reaping orphaned bubblewrap sandboxes failed", exc_info=True)
        self._root_dir, self._image_facts = await asyncio.to_thread(
            rootfs.resolve, self.spec.image, self.spec.workdir, self.spec.user
        )
        if self.limits == "auto":
            self.limits = "cgroup" if cgroups.available() else "rlimit"
        self._token = reaper.register(self._cleanup_sync)
        await asyncio.to_thread(self._prepare)
        if self.spec.network == "proxy_only":
            if not (self._root / "usr/bin/python3").exists():
                raise SandboxError(f"network='proxy_only' on bubblewrap needs python3 in {self._root}")
            if self.spec.proxy_port is None:
                raise SandboxError("network='proxy_only' needs spec.proxy_port, got None")
            self._relay = await relay.start_unix_relay(
                str(self._dir / "proxy" / "s"), self.spec.proxy_port, self.spec.proxy_host
            )
            if self._host_uid() is not None:
                os.chmod(self._dir / "proxy" / "s", 0o666)  # connect() needs write permission on the socket
            self.proxy_url_base = f"http://127.0.0.1:{self.spec.proxy_port}"
        self.base_commit = self._facts.base_commit

    def _prepare(self) -> None:
        spec, facts = self.spec, self._facts
        self.state = state_root() / self.name
        self.state.mkdir(mode=0o711 if self._host_uid() is not None else 0o700)
        (self._dir / "seccomp.bpf").write_bytes(seccomp.filter_program())
        (self._dir / "owner.json").write_text(json.dumps(reaper.owner_labels(spec.labels)))
        fs = self._dir / "fs"
        fs.mkdir()
        if os.geteuid() == 0:
            _check(
                ["mount", "-t", "tmpfs", "-o", f"size={spec.disk_mb}m,mode=0755", "tmpfs", str(fs)], "mount"
            )
            self._mounted = True
        for part in ("work", "home", "tmp", "proxy", "upper", "overlay-work"):
            (fs / part).mkdir()
        os.chmod(fs / "tmp", 0o1777)
        (self._dir / "proxy").symlink_to(fs / "proxy")
        self._check_mounts()
        if spec.read_only_root:
            source = (
                Path(facts.workdir_source) if facts.workdir_source else self._root / spec.workdir.lstrip("/")
            )
            if source.is_dir():
                shutil.copytree(source, fs / "work", symlinks=True, dirs_exist_ok=True)
            home = self._root / facts.home.lstrip("/")
            if home_needs_mount(facts, spec.workdir) and home.is_dir():
                shutil.copytree(home, fs / "home", symlinks=True, dirs_exist_ok=True)
        else:
            (self._dir / "root").mkdir()
            # The lower layer belongs to the uid bubblewrap runs as (see the module docstring), and so does
            # the upper directory, whose owner the overlay's root directory shows.
            lower = rootfs.owned_copy(self._root, SANDBOX_HOST_UID)
            os.chown(fs / "upper", SANDBOX_HOST_UID, SANDBOX_HOST_UID)
            options = f"lowerdir={lower},upperdir={fs / 'upper'},workdir={fs / 'overlay-work'}"
            _check(
                ["mount", "-t", "overlay", "overlay", "-o", options, str(self._dir / "root")],
                "overlay mount",
            )
            if facts.workdir_source:
                target = self._dir / "root" / spec.workdir.lstrip("/")
                shutil.copytree(facts.workdir_source, target, symlinks=True, dirs_exist_ok=True)
                rootfs.chown_tree(target, SANDBOX_HOST_UID)
        if self._host_uid() is not None:
            os.chmod(fs, 0o711)
            for part in ("work", "home", "tmp", "proxy"):
                rootfs.chown_tree(fs / part, SANDBOX_HOST_UID)
            # The root filesystem and mount sources may lie where that uid cannot reach (root's cache under
            # /root): bind them, read-only, under the state directory it can traverse.
            for i, bound in enumerate([str(self._root), *spec.mounts.values()]):
                bind = self._dir / "binds" / str(i)
                bind.mkdir(parents=True)
                _check(["mount", "--bind", bound, str(bind)], "bind mount")
                _check(["mount", "-o", "remount,bind,ro", str(bind)], "read-only remount")
        if self.limits == "cgroup":
            self._cgroup = cgroups.CgroupLimits.create(
                self.name, memory_mb=spec.memory_mb, pids=spec.pids, cpus=spec.cpus
            )

    def _check_mounts(self) -> None:
        if not self.spec.read_only_root and os.geteuid() != 0:
            raise SandboxError(
                "read_only_root=False on bubblewrap needs root (it mounts an overlay on the host)"
            )
        for target, source in self.spec.mounts.items():
            if not Path(source).is_dir():
                raise SandboxError(f"mount source {source!r} (for {target!r}) is not a directory on the host")
            if self.spec.read_only_root and not (self._root / target.lstrip("/")).is_dir():
                raise SandboxError(
                    f"mount target {target!r} does not exist in the read-only root {self._root}"
                )

    # -- exec -----------------------------------------------------------------------------------------

    def _host_uid(self) -> int | None:
        """The unprivileged host uid bubblewrap runs as, or None when it runs as this process's user."""
        return SANDBOX_HOST_UID if os.geteuid() == 0 else None

    def _argv(self, argv: list[str], workdir: str, env: dict[str, str], seccomp_fd: int) -> list[str]:
        spec, facts, fs = self.spec, self._facts, self._dir / "fs"
        args = [
            "bwrap",
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--uid",
            str(facts.uid),
            "--gid",
            str(facts.gid),
            "--hostname",
            "sandbox",
            "--seccomp",
            str(seccomp_fd),
        ]
        binds = self._dir / "binds"
        root = binds / "0" if self._host_uid() is not None else self._root
        if spec.read_only_root:
            args += [
                "--ro-bind",
                str(root),
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--bind",
                str(fs / "tmp"),
                "/tmp",
                "--bind",
                str(fs / "work"),
                spec.workdir,
            ]
            if home_needs_mount(facts, spec.workdir) and facts.home != "/tmp":
                args += ["--bind", str(fs / "home"), facts.home]
        else:
            args += ["--bind", str(self._dir / "root"), "/", "--dev", "/dev", "--proc", "/proc"]
        for i, (target, source) in enumerate(spec.mounts.items(), start=1):
            args += ["--ro-bind", str(binds / str(i)) if self._host_uid() is not None else source, target]
        # Through sh, so a missing command is exit 127 as on Docker, not a bubblewrap error.
        argv = ["/bin/sh", "-c", 'exec "$@"', "legorl-exec", *argv]
        if spec.network == "proxy_only":
            args += ["--ro-bind", str(fs / "proxy"), _PROXY_DIR]
            argv = ["python3", "-c", FORWARDER, str(spec.proxy_port), f"{_PROXY_DIR}/s", *argv]
        full_env = {**facts.env, "HOME": facts.home, "USER": facts.user.split(":")[0], **env}
        args += ["--chdir", workdir, "--clearenv"]
        for key, value in full_env.items():
            args += ["--setenv", key, value]
        limits = ["prlimit", f"--fsize={spec.disk_mb << 20}"]
        if self.limits == "rlimit":
            limits += [f"--as={spec.memory_mb << 20}", f"--nproc={spec.pids + _user_tasks()}"]
        prefix = []
        if self._cgroup is not None:
            files = self._cgroup.procs_files
            prefix = ["/bin/sh", "-c", _JOIN, "legorl-join", str(len(files)), *files]
        drop = []
        if self._host_uid() is not None:
            uid = str(self._host_uid())
            drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        return [*prefix, *limits, "--", *drop, *args, "--", *argv]

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
        oom_before = self._cgroup.oom_kills() if self._cgroup else 0
        started = time.monotonic()
        filter_fd = os.open(self._dir / "seccomp.bpf", os.O_RDONLY)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(argv, workdir, env, filter_fd),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=BWRAP_ENV,
                pass_fds=(filter_fd,),
            )
        except OSError as exc:
            raise SandboxError(f"starting bubblewrap failed: {exc}") from exc
        finally:
            os.close(filter_fd)
        out, err = CappedBuffer(limit), CappedBuffer(limit)
        assert proc.stdout is not None and proc.stderr is not None  # both PIPE
        io = asyncio.gather(_drain(proc.stdout, out), _drain(proc.stderr, err), _feed(proc, stdin))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(io), timeout)
            await proc.wait()
        except TimeoutError:
            timed_out = True
        finally:
            if proc.returncode is None:
                _kill_group(proc.pid)  # bubblewrap's death takes its whole pid namespace with it
                await asyncio.shield(asyncio.gather(io, return_exceptions=True))
                await asyncio.shield(proc.wait())
        assert proc.returncode is not None  # waited for above
        exit_code = TIMEOUT_EXIT_CODE if timed_out else proc.returncode
        if exit_code < 0:
            exit_code = 128 - exit_code
        oom = (
            self._cgroup is not None
            and exit_code in (137, TIMEOUT_EXIT_CODE)
            and self._cgroup.oom_kills() > oom_before
        )
        self._check_started(exit_code, err)
        return RawResult(
            exit_code,
            out.getvalue(),
            err.getvalue(),
            timed_out,
            bool(out.dropped or err.dropped),
            oom,
            time.monotonic() - started,
        )

    def _check_started(self, exit_code: int, err: CappedBuffer) -> None:
        message = err.getvalue()[:4096].decode(errors="replace")
        if exit_code in (1, 125) and message.startswith(("bwrap:", "prlimit:", "legorl-join:")):
            raise SandboxError(f"bubblewrap could not start the command: {message.strip()}")

    # -- close ----------------------------------------------------------------------------------------

    def _cleanup_sync(self) -> None:
        try:
            if self._cgroup is not None:
                self._cgroup.remove()
                self._cgroup = None
            if self.state is not None:
                remove_state(self.state, self._mounted)
        except OSError as exc:
            raise SandboxError(f"removing bubblewrap sandbox {self.name} failed: {exc}") from exc
        finally:
            self._unregister()


async def _drain(stream: asyncio.StreamReader, buffer: CappedBuffer) -> None:
    while data := await stream.read(1 << 16):
        buffer.add(data)


async def _feed(proc: asyncio.subprocess.Process, stdin: Stdin) -> None:
    if stdin is None:
        return
    assert proc.stdin is not None  # PIPE when there is input
    try:
        if isinstance(stdin, Path):
            with open(stdin, "rb") as handle:
                while block := handle.read(1 << 20):
                    proc.stdin.write(block)
                    await proc.stdin.drain()
        else:
            proc.stdin.write(stdin)
            await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command exited without reading all of its input


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _user_tasks() -> int:
    """Tasks (threads) the host user runs now: RLIMIT_NPROC counts them all, not just the sandbox's."""
    uid, count = os.getuid(), 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(entry / "task"))
            except OSError:
                continue
    return count


def _check(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise SandboxError(f"{what} failed: {proc.stderr.strip()}")


def remove_state(state: Path, mounted: bool | None = None) -> None:
    """Unmounts (when mounted) and deletes a sandbox state directory."""
    fs = state / "fs"
    if os.path.ismount(state / "root"):
        subprocess.run(["umount", "-l", str(state / "root")], capture_output=True, timeout=60)
    # A bind mount of a directory on the same filesystem is invisible to os.path.ismount: unmount each one
    # unconditionally (they are read-only, so rmtree below can never reach into the root filesystem).
    binds = sorted((state / "binds").glob("*")) if (state / "binds").is_dir() else []
    for bind in binds:
        subprocess.run(["umount", "-l", str(bind)], capture_output=True, timeout=60)
    still = _mount_points() & {str(b) for b in binds}
    if still:  # never rmtree through a mount of the root filesystem cache
        raise OSError(f"could not unmount {sorted(still)}")
    if mounted or (mounted is None and os.path.ismount(fs)):
        subprocess.run(["umount", "-l", str(fs)], capture_output=True, timeout=60)
    shutil.rmtree(state, ignore_errors=True)
    if state.exists():
        raise OSError(f"could not remove {state}")


def reap_orphans() -> list[str]:
    """Removes state directories and cgroups of bubblewrap sandboxes whose owner is dead."""
    removed = []
    root = state_root()
    for state in sorted(root.glob("legorl-*")):
        try:
            labels = json.loads((state / "owner.json").read_text())
        except (OSError, ValueError):
            # Created but not yet labelled (or labelling crashed): only a stale one is an orphan. It may
            # also have been closed by its owner since the listing.
            try:
                if time.time() - state.stat().st_mtime < 60:
                    continue
            except FileNotFoundError:
                continue
            labels = {}
        if labels and reaper.owner_alive(labels) is not False:
            continue  # alive, or another machine's state on a shared directory
        try:
            remove_state(state)
            removed.append(state.name)
        except OSError:
            continue
    if cgroups.available():
        # Groups are listed before state directories: a sandbox creates its directory first, so a group
        # seen here without a directory listed afterwards really lost its owner.
        groups = cgroups.stale_groups(set())
        live = {p.name for p in root.glob("legorl-*")}
        for group in groups:
            if group.name not in live:
                try:
                    cgroups.remove_group(group)
                except OSError:
                    log.warning("could not remove the orphaned cgroup %s", group, exc_info=True)
    return removed
