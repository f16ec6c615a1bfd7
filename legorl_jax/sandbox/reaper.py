"""Who owns a sandbox resource, whether the owner is still alive, and removing what dead owners left.

Every container, network and bubblewrap state directory the sandbox layer creates carries owner labels:
`legorl.owner_host` (the machine id, else the host name), `legorl.owner_boot` (the kernel boot id),
`legorl.owner_pid` and `legorl.owner_start` (the process start time in clock ticks, so a recycled pid is
not mistaken for the owner), plus `legorl.created` and the caller's `run` / `trial` labels. A resource is
an orphan when its host is this machine and either the boot id differs or no process with that pid and
start time exists. Resources of other machines (a shared remote daemon) are never touched.

Three things keep a run from leaking:
- `register(cleanup)` records a synchronous cleanup for each live sandbox; `atexit` and SIGTERM/SIGHUP
  handlers (installed on the first registration, chained to any previous handler) run the ones left.
- every sandbox start reaps orphans first (`reap_docker_orphans`, the bubblewrap backend's own reaper),
  so a driver killed with SIGKILL leaks nothing past the next start on the same machine;
- the Docker backend's containers also stop by themselves when their owner's connection closes;
- a process known dead elsewhere (the slot actors of a lost Ray node) has its containers removed by the one
  that knew it (`reap_owned_by`, from the Ray driver: rollout/ray_executor.py), without waiting for that
  machine's next sandbox start.
"""

from __future__ import annotations

import atexit
import datetime
import itertools
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from legorl_jax.sandbox import daemon

log = logging.getLogger(__name__)

LABEL_PREFIX = "legorl."
OWNER_HOST, OWNER_BOOT, OWNER_PID, OWNER_START = (
    f"{LABEL_PREFIX}owner_{k}" for k in ("host", "boot", "pid", "start")
)
CREATED = f"{LABEL_PREFIX}created"
KIND = f"{LABEL_PREFIX}kind"

_lock = threading.RLock()  # re-entrant: a signal handler may run while the main thread holds it
_cleanups: dict[int, Callable[[], None]] = {}
_ids = itertools.count()
_installed: dict[str, Any] = {"pid": None}


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def host_id() -> str:
    """A stable identifier of this machine."""
    return _read("/etc/machine-id") or socket.gethostname()


def boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


def process_start(pid: int) -> str:
    """The start time of `pid` in clock ticks since boot, or '' when no such process exists."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return ""
    # The command name may contain spaces and parentheses; fields resume after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def owner_labels(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Labels marking a resource as owned by this process, plus the caller's labels (prefixed)."""
    labels = {
        OWNER_HOST: host_id(),
        OWNER_BOOT: boot_id(),
        OWNER_PID: str(os.getpid()),
        OWNER_START: process_start(os.getpid()),
        CREATED: datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    for key, value in (extra or {}).items():
        labels[key if "." in key else f"{LABEL_PREFIX}{key}"] = value
    return labels


def owner_alive(labels: Mapping[str, str]) -> bool | None:
    """True/False for resources of this machine; None when they belong to another machine (unknowable)."""
    if labels.get(OWNER_HOST) != host_id():
        return None
    if labels.get(OWNER_BOOT) != boot_id():
        return False
    pid = labels.get(OWNER_PID, "")
    if not pid.isdigit():
        return False
    return process_start(int(pid)) == labels.get(OWNER_START) != ""


def register(cleanup: Callable[[], None]) -> int:
    """Records a synchronous cleanup to run at exit or on SIGTERM; returns a token for `unregister`."""
    _install_handlers()
    with _lock:
        token = next(_ids)
        _cleanups[token] = cleanup
    return token


def unregister(token: int) -> None:
    with _lock:
        _cleanups.pop(token, None)


def run_cleanups() -> None:
    """Runs (once) every registered cleanup; errors are logged, never raised: this runs while exiting."""
    with _lock:
        pending = list(_cleanups.values())
        _cleanups.clear()
    for cleanup in pending:
        try:
            cleanup()
        except Exception:  # exiting: report and keep removing the rest
            log.exception("sandbox cleanup at exit failed")


def _install_handlers() -> None:
    with _lock:
        if _installed["pid"] == os.getpid():
            return
        _installed["pid"] = os.getpid()
    atexit.register(run_cleanups)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread; atexit still covers normal exits
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(signum)
        if previous is signal.SIG_IGN:
            continue
        signal.signal(signum, _make_handler(signum, previous))


def _make_handler(signum: int, previous: Any) -> Callable[[int, Any], None]:
    def handler(received: int, frame: Any) -> None:
        run_cleanups()
        if callable(previous):
            previous(received, frame)
            return
        # Default action (terminate) once our resources are gone: restore it and re-deliver the signal.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    return handler


def reap_docker_orphans(client: Any) -> list[str]:
    """Removes containers and networks (with their firewall rules) whose owner is dead; returns their names.

    Synchronous (call it through `daemon.call`); safe to run concurrently with other reapers: resources
    another process removed first are skipped.
    """
    import docker

    from legorl_jax.sandbox import docker_network

    removed: list[str] = []
    selector = {"label": [f"{OWNER_HOST}={host_id()}"]}
    for info in client.api.containers(all=True, filters=selector):
        if owner_alive(info.get("Labels") or {}) is False:
            try:
                daemon.remove_container(client.api, info["Id"])
                removed.append(info["Names"][0].lstrip("/") if info.get("Names") else info["Id"][:12])
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: removal already in progress elsewhere
                    raise
    for info in client.api.networks(filters=selector):
        if owner_alive(info.get("Labels") or {}) is False:
            docker_network.remove_network(client, info["Name"])  # takes its firewall rules with it
            removed.append(info["Name"])
    # Rules outlive their network only if an owner died between removing the two: rare enough to sweep
    # once per process rather than fork iptables on every start.
    with _lock:
        first = _installed.get("rules_swept") != os.getpid()
        _installed["rules_swept"] = os.getpid()
    if first:
        docker_network.remove_stale_rules(client)
    return removed


def owner_identity() -> dict[str, str]:
    """The labels that name this process as an owner (host, boot, pid, start): what `reap_owned_by` takes."""
    labels = owner_labels()
    return {k: labels[k] for k in (OWNER_HOST, OWNER_BOOT, OWNER_PID, OWNER_START)}


def reap_owned_by(client: Any, owner: Mapping[str, str]) -> list[str]:
    """Removes the containers on `client`'s daemon that the process `owner` (its `owner_identity()`) made,
    running or exited; returns their names. For an owner the caller knows is gone (a lost Ray node's slot),
    whichever machine it ran on. Synchronous; a container removed meanwhile by another is skipped."""
    import docker

    missing = sorted({OWNER_HOST, OWNER_PID, OWNER_START} - {k for k, v in owner.items() if v})
    if missing:
        raise ValueError(f"an owner must name {missing}, got {dict(owner)!r}")
    selector = {"label": [f"{k}={owner[k]}" for k in (OWNER_HOST, OWNER_PID, OWNER_START)]}
    removed: list[str] = []
    for info in client.api.containers(all=True, filters=selector):
        try:
            daemon.remove_container(client.api, info["Id"])
            removed.append(info["Names"][0].lstrip("/") if info.get("Names") else info["Id"][:12])
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress elsewhere
                raise
    return removed
