"""Per-sandbox control groups for the bubblewrap backend: memory, process count and CPU limits.

`CgroupLimits.create(name, memory_mb, pids, cpus)` makes `legorl/<name>` under each controller (cgroup v1:
`/sys/fs/cgroup/{memory,pids,cpu}/legorl/<name>`; v2: `/sys/fs/cgroup/legorl/<name>`) and writes the
limits: memory with swap equal to it (memsw on v1 when swap accounting exists, `memory.swap.max = 0` on
v2), `pids.max`, and a CFS quota of `cpus` cores. Every command of the sandbox joins them before bubblewrap
starts (`procs_files`), so the limits cover the sandbox as a whole, across concurrent execs.
`oom_kills()` reads the memory controller's OOM-kill counter; `remove()` kills what is left and removes
the groups. It needs write access to the cgroup filesystem (root); `available()` says whether it has it,
and the backend falls back to rlimits (documented there) when it has not.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "legorl"
_V1_CONTROLLERS = ("memory", "pids", "cpu")
_CFS_PERIOD_US = 100_000


def version() -> int | None:
    """2 for a unified hierarchy, 1 for v1 controllers, None when no cgroup filesystem is mounted."""
    if (ROOT / "cgroup.controllers").exists():
        return 2
    if all((ROOT / c).is_dir() for c in _V1_CONTROLLERS):
        return 1
    return None


def available() -> bool:
    """True when this process can create cgroups for all three controllers."""
    v = version()
    if v is None or os.geteuid() != 0:
        return False
    dirs = [ROOT] if v == 2 else [ROOT / c for c in _V1_CONTROLLERS]
    return all(os.access(d, os.W_OK) for d in dirs)


class CgroupLimits:
    """The cgroups of one sandbox; see the module docstring."""

    def __init__(self, name: str, dirs: dict[str, Path]) -> None:
        self.name = name
        self.dirs = dirs  # controller ("memory", "pids", "cpu", or "unified") -> directory

    @classmethod
    def create(cls, name: str, *, memory_mb: int, pids: int, cpus: float) -> CgroupLimits:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise ValueError(f"cgroup name must be [A-Za-z0-9._-]+, got {name!r}")
        memory, quota = memory_mb << 20, max(1000, int(cpus * _CFS_PERIOD_US))
        if version() == 2:
            parent = ROOT / PARENT
            _enable_v2(ROOT)
            parent.mkdir(exist_ok=True)
            _enable_v2(parent)
            group = parent / name
            group.mkdir()
            limits = cls(name, {"unified": group})
            _write(group / "memory.max", str(memory))
            if (group / "memory.swap.max").exists():
                _write(group / "memory.swap.max", "0")
            _write(group / "pids.max", str(pids))
            _write(group / "cpu.max", f"{quota} {_CFS_PERIOD_US}")
            return limits
        dirs = {}
        try:
            for controller in _V1_CONTROLLERS:
                group = ROOT / controller / PARENT / name
                group.mkdir(parents=True)
                dirs[controller] = group
            limits = cls(name, dirs)
            _write(dirs["memory"] / "memory.limit_in_bytes", str(memory))
            if (dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                _write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory))
            _write(dirs["pids"] / "pids.max", str(pids))
            _write(dirs["cpu"] / "cpu.cfs_period_us", str(_CFS_PERIOD_US))
            _write(dirs["cpu"] / "cpu.cfs_quota_us", str(quota))
        except BaseException:
            cls(name, dirs).remove()
            raise
        return limits

    @property
    def procs_files(self) -> list[str]:
        """Where a process writes its pid to join every group."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def oom_kills(self) -> int:
        """How many processes the OOM killer has killed in this sandbox so far."""
        group = self.dirs.get("memory") or self.dirs.get("unified")
        name = "memory.events" if "unified" in self.dirs else "memory.oom_control"
        if group is None:  # no memory controller: nothing counts OOM kills
            return 0
        try:
            text = (group / name).read_text()
        except OSError:
            return 0
        match = re.search(r"^oom_kill (\d+)$", text, re.M)
        return int(match.group(1)) if match else 0

    def remove(self) -> None:
        """Kills the processes still in the groups and removes them (missing groups are fine)."""
        for group in self.dirs.values():
            remove_group(group)


def remove_group(group: Path) -> None:
    for _ in range(50):
        if not group.exists():
            return
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)  # killed processes leave the group asynchronously
    raise OSError(f"cgroup {group} still busy after killing its processes")


def stale_groups(live: set[str]) -> list[Path]:
    """Sandbox groups whose names are not in `live` (for the reaper)."""
    parents = [ROOT / PARENT] if version() == 2 else [ROOT / c / PARENT for c in _V1_CONTROLLERS]
    return [g for p in parents if p.is_dir() for g in p.iterdir() if g.is_dir() and g.name not in live]


def _enable_v2(directory: Path) -> None:
    wanted = {"memory", "pids", "cpu"}
    enabled = set((directory / "cgroup.subtree_control").read_text().split())
    missing = wanted - enabled
    if missing:
        _write(directory / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(missing)))


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)
