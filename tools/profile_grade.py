"""Where one grade's time goes: the gold patch of a built-in task graded N times, each sandbox command the
verifier starts counted, timed and put in its phase, and the test process's own CPU time.

    python tools/profile_grade.py --backend bwrap --grades 5      # one JSON line per grade, then medians
    for side in old new; do (cd ../$side && PYTHONPATH=$PWD python ../new/tools/profile_grade.py); done

It imports the verifier of whatever checkout is first on `sys.path`, so one copy of this tool profiles any
commit (the commands are recognised by what they run, not by the verifier's names for them); run the
checkouts in turn, several rounds, to compare them under the same load. Phases: start/close (the grading
sandbox), set-up (scratch folder, stamp, work-tree check), apply (the agent's diff and the checks around
it), hidden (private git folder, hidden tests), clear (emptying the scratch folder, the watch's nonce, the
process list before the run), plant (the canary file), pytest, after (process list, JUnit read), host (the
grade's wall time outside any sandbox command). `pytest_cpu` is the test process's user + system time as
its shell's `times` reports it, so the host's load moves it far less than wall time; the command count is
a number load cannot move at all. The first grade warms caches and is not reported.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence

from legorl_jax.sandbox import make_sandbox
from legorl_jax.tasks import verifier
from legorl_jax.tasks.registry import load_suite

PHASES = ("start/close", "set-up", "apply", "hidden", "clear", "plant", "pytest", "after", "host")
# The test command runs under a shell that prints its children's CPU times after it.
_TIMED = '"$@"; rc=$?; echo "@@TIMES" >&2; times >&2; exit $rc'
_TIMES_RE = re.compile(r"@@TIMES\n.*\n(\d+)m([\d.]+)s (\d+)m([\d.]+)s")


def phase_of(cmd: Sequence[str] | str, applied: int, listed: int) -> str:
    """The phase a verifier command belongs to, from what it runs (`applied`, `listed`: how many `git apply`
    and process-list commands came before it)."""
    argv = [cmd] if isinstance(cmd, str) else list(cmd)
    script = argv[2] if argv[0] == "sh" and len(argv) > 2 else ""
    if argv[0] in ("python", "python3") or argv[0].endswith("/python3"):
        return "pytest"
    if (
        script.startswith("mkdir -p -m 700")
        or argv[:1] in (["mkdir"], ["touch"])
        or argv[1:2] == ["rev-parse"]
    ):
        return "set-up"
    if script.startswith("git init") or argv[1:2] == ["init"]:
        return "hidden"
    if argv[1:2] == ["apply"]:
        return "apply" if applied == 0 else "hidden"
    if script.startswith("find") or (argv[0] == "find" and argv[1] != ".git"):
        return "clear"
    if "/proc/[0-9]" in script:
        return "clear" if listed == 0 else "after"
    if "base64" in script or "kill -9" in script:
        return "after"
    return "apply"  # git status, the .git check, restoring the tree


class _Profiled:
    """The grading sandbox, with every command the verifier starts timed into `phases`."""

    def __init__(self, inner, phases: dict[str, list[float]], cpu: list[float]) -> None:
        self.inner, self.phases, self.cpu = inner, phases, cpu
        self.applied = self.listed = 0

    def _add(self, phase: str, started: float) -> None:
        self.phases[phase][0] += 1
        self.phases[phase][1] += time.perf_counter() - started

    async def __aenter__(self):
        started = time.perf_counter()
        await self.inner.__aenter__()
        self._add("start/close", started)
        return self

    async def __aexit__(self, *exc):
        started = time.perf_counter()
        await self.inner.__aexit__(*exc)
        self._add("start/close", started)

    async def exec(self, cmd, **kwargs):
        phase = phase_of(cmd, self.applied, self.listed)
        started = time.perf_counter()
        if phase == "pytest":
            result = await self.inner.exec(["bash", "-c", _TIMED, "timed", *cmd], **kwargs)
            found = _TIMES_RE.search(result.stderr)
            if found:
                minutes_user, user, minutes_sys, system = found.groups()
                self.cpu.append(60 * int(minutes_user) + float(user) + 60 * int(minutes_sys) + float(system))
                result = dataclasses.replace(result, stderr=result.stderr[: found.start()])
        else:
            result = await self.inner.exec(cmd, **kwargs)
        self._add(phase, started)
        script = cmd[2] if not isinstance(cmd, str) and len(cmd) > 2 else ""
        self.applied += not isinstance(cmd, str) and (cmd[1:2] == ["apply"] or script.startswith("git init"))
        self.listed += "/proc/[0-9]" in script
        return result

    async def write_file(self, path, data):
        started = time.perf_counter()
        await self.inner.write_file(path, data)
        kind = (
            "apply" if path.endswith("agent.patch") else "hidden" if path.endswith("hidden.patch") else None
        )
        self._add(kind or ("plant" if path.endswith(".py") else "clear"), started)

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def profile(task_id: str, backend: str, grades: int) -> list[dict]:
    task = next(t for t in load_suite("builtin") if t.instance_id == task_id)
    rows = []
    for i in range(grades + 1):
        phases: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        cpu: list[float] = []
        started = time.perf_counter()
        report = await verifier.grade(
            task,
            task.patch,
            sandbox_factory=lambda s, p=phases, c=cpu: _Profiled(make_sandbox(s, backend=backend), p, c),
        )
        wall = time.perf_counter() - started
        if report.reward != 1.0:
            raise SystemExit(f"the gold patch of {task_id} graded {report.reward}: {report.tampering}")
        phases["host"][1] = wall - sum(t for _, t in phases.values())
        if i:
            rows.append(
                {
                    "wall_ms": round(1000 * wall),
                    "commands": sum(n for n, _ in phases.values()) - phases["start/close"][0],
                    "pytest_cpu_ms": round(1000 * sum(cpu)),
                    "phases_ms": {
                        p: [phases[p][0], round(1000 * phases[p][1])] for p in PHASES if p in phases
                    },
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="autocomplete-casefold-prefix", help="a built-in task id")
    parser.add_argument("--backend", default="bwrap", choices=("bwrap", "docker"))
    parser.add_argument("--grades", type=int, default=5, help="grades reported (after one warm-up grade)")
    args = parser.parse_args()
    if args.grades < 1:
        parser.error(f"--grades must be at least 1, got {args.grades}")
    rows = asyncio.run(profile(args.task, args.backend, args.grades))
    for row in rows:
        print(json.dumps(row))
    medians = {p: round(statistics.median(r["phases_ms"].get(p, [0, 0])[1] for r in rows)) for p in PHASES}
    print(
        json.dumps(
            {
                "median_wall_ms": round(statistics.median(r["wall_ms"] for r in rows)),
                "commands": rows[0]["commands"],
                "median_pytest_cpu_ms": round(statistics.median(r["pytest_cpu_ms"] for r in rows)),
                "median_phases_ms": medians,
            }
        )
    )


if __name__ == "__main__":
    main()
