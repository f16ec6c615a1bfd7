"""How much CPU the rest of the machine took while a benchmark ran: the test of a quiet host.

The 1-minute load average counts the benchmark's own processes too (its server, its HF worker, its
proxies), so on a 2-core box a benchmark that keeps both cores busy reads about 2 however quiet the host is,
and one that idles between rounds reads low however busy the neighbours are. What disturbs a figure is the
CPU time *other* processes (and the hypervisor: steal) take while it runs, so that is what is measured:

    meter = ForeignCPU()        # this process and every descendant are the benchmark's
    ... a round ...
    cores = meter.lap()         # cores' worth of CPU the rest of the machine used since the last lap

Read from /proc (Linux): the user + system time of every user-space process outside this process tree, and
the steal time of /proc/stat (`ForeignCPU`). A figure is publishable when every round's foreign CPU is under
`QUIET_CORES` and the 1-minute load average was under 1 before the run began (nothing else was running when
it started).
"""

from __future__ import annotations

import os
import time

QUIET_CORES = 0.15  # at most this many cores' worth of CPU taken by others during any round
QUIET_LOAD = 1.0  # the 1-minute load average before a run starts
_TICK = os.sysconf("SC_CLK_TCK")


def steal_seconds() -> float:
    """CPU seconds the hypervisor has given to other guests since boot (the cpu line's steal column)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    if fields[0] != "cpu":
        raise OSError(f"/proc/stat does not start with the cpu line: {fields[:3]}")
    return int(fields[8]) / _TICK


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system seconds incl. reaped children) of `pid`; None once it has gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    ppid = int(rest[1])
    utime, stime, cutime, cstime = (int(x) for x in rest[11:15])
    return ppid, (utime + stime + cutime + cstime) / _TICK


def process_seconds() -> dict[int, tuple[int, float]]:
    """{pid: (parent pid, CPU seconds)} of every process now alive."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = _stat(int(name))
            if s is not None:
                out[int(name)] = s
    return out


def tree(stats: dict[int, tuple[int, float]], root: int) -> set[int]:
    """`root` and all its live descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in stats and pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


class ForeignCPU:
    """Cores' worth of CPU used outside this process tree between laps (module docstring).

    Counted: every user-space process outside the tree (a process that started during the lap counts from
    zero; one that exited and was reaped by a live process shows in its parent's children time), and the
    hypervisor's steal. Not counted: kernel threads and interrupt time, which on a quiet host are the kernel
    carrying the benchmark's own traffic (loopback sockets, its disk writes)."""

    def __init__(self, root: int | None = None):
        self.root = os.getpid() if root is None else root
        self.load_at_start = os.getloadavg()[0]
        self._mark = self._read()

    def _read(self) -> tuple[float, float, dict[int, float]]:
        stats = process_seconds()
        ours = tree(stats, self.root)
        others = {
            pid: seconds
            for pid, (ppid, seconds) in stats.items()
            if pid not in ours and pid != 2 and ppid != 2  # kthreadd and its kernel threads
        }
        return time.monotonic(), steal_seconds(), others

    def lap(self) -> float:
        """Foreign cores since the last lap (or since the meter was made)."""
        now = self._read()
        (t0, s0, p0), (t1, s1, p1) = self._mark, now
        self._mark = now
        if t1 <= t0:
            return 0.0
        used = sum(max(0.0, seconds - p0.get(pid, 0.0)) for pid, seconds in p1.items())
        return (used + max(0.0, s1 - s0)) / (t1 - t0)


def verdict(meter_start_load: float, foreign: list[float]) -> tuple[bool, str]:
    """(publishable, one line saying why) for a run that began at `meter_start_load` with these laps."""
    worst = max(foreign, default=0.0)
    line = (
        f"load average {meter_start_load:.2f} when the run began; CPU taken by other processes per round: "
        f"max {worst:.3f} cores (limit {QUIET_CORES})"
    )
    quiet = meter_start_load < QUIET_LOAD and worst < QUIET_CORES
    return quiet, line
