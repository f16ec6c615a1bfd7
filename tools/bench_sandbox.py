"""Benchmark: our sandboxes beside raw `docker run` / `docker exec` (the CLI) of the same image, one run.

    python tools/bench_sandbox.py                      # concurrency 1, 4, 16; Docker, raw CLI, bubblewrap
    python tools/bench_sandbox.py --concurrency 1 4 --cycles 8 --no-bwrap

For each concurrency c, the systems take turns (rounds of c concurrent cycles, the order rotating each round,
`--cycles` / c rounds, at least 2) so that a change in the shared host's load hits all alike. A cycle is what
a trial costs the sandbox layer: start the task sandbox, write the agent's patch, run `git apply` + the
repository's pytest suite, close. Reported per system and c:
- start: start-to-ready latency (ours: `start()` returned; raw: `docker run -d` returned), p50 / p99;
- exec: round trip of a no-op command (ours: `exec(["true"])`; raw: `docker exec <id> true`), p50 / p99;
- cycles/min: completed cycles per wall-clock minute over all workers;
- ratio: our figure over the raw one (for latencies lower is better; the target is <= 1.2).
The raw peer runs with the same resource flags (--network none, --cpus, --memory/--memory-swap,
--pids-limit) but none of our isolation work (read-only root, tmpfs workspace seeded from the image,
supervisor, owner labels, reaper pass). When the tasks engineer's verifier exists
(`legorl_jax.tasks.verifier.grade`), `--verifier` adds verified trials per minute: the agent sandbox
(`tasks.agent_sandbox`, history stripped) -> the gold patch as the agent's edit -> `diff()` -> `grade()`
in a fresh grading sandbox, per backend; its "start" column is the agent sandbox's start + preparation.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from legorl_jax.sandbox import SandboxSpec, make_sandbox  # noqa: E402
from legorl_jax.sandbox.images import ensure_base_image, ensure_image  # noqa: E402

CORE = "def mean(xs):\n    return sum(xs) / (len(xs) - 1)\n"
FIXED = "def mean(xs):\n    return sum(xs) / len(xs)\n"
TESTS = "".join(
    f"def test_mean_{i}():\n    from stats.core import mean\n    assert mean([{i}, {i + 2}]) == {i + 1}\n\n"
    for i in range(20)
)
PATCH = """diff --git a/stats/core.py b/stats/core.py
--- a/stats/core.py
+++ b/stats/core.py
@@ -1,2 +1,2 @@
 def mean(xs):
-    return sum(xs) / (len(xs) - 1)
+    return sum(xs) / len(xs)
"""
CHECK = "git apply /tmp/agent.patch && python3 -m pytest -q -p no:cacheprovider tests"
LIMITS = {"cpus": 1.0, "memory_mb": 1024, "pids": 256}


def build_trial_image() -> str:
    """A base-image task: a small package with a bug, its tests, and the history at /testbed."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        (repo / "stats").mkdir(parents=True)
        (repo / "tests").mkdir()
        (repo / "stats" / "__init__.py").write_text("")
        (repo / "stats" / "core.py").write_text(CORE)
        (repo / "tests" / "test_core.py").write_text(TESTS)
        dockerfile = (
            f"FROM {ensure_base_image()}\nCOPY --chown=agent:agent repo/ /testbed/\n"
            "RUN cd /testbed && git init -q && git add -A && "
            "git -c user.name=b -c user.email=b@b commit -qm base\n"
        )
        return ensure_image(Path(tmp), dockerfile, "legorl-bench-trial")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def cli(*argv: str, stdin: bytes | None = None) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    if proc.returncode != 0 and argv[:2] != ("docker", "rm"):
        raise RuntimeError(f"{' '.join(argv[:4])}... failed ({proc.returncode}): {err.decode()[-500:]}")
    return out


async def ours_cycle(backend: str, image: str, stats: dict[str, list[float]]) -> None:
    sb = make_sandbox(SandboxSpec(image=image, **LIMITS), backend=backend)
    started = time.perf_counter()
    await sb.start()
    stats["start"].append(time.perf_counter() - started)
    try:
        started = time.perf_counter()
        await sb.exec(["true"])
        stats["exec"].append(time.perf_counter() - started)
        await sb.write_file("/tmp/agent.patch", PATCH)
        result = await sb.exec(CHECK, timeout=120)
        if result.exit_code != 0:
            raise RuntimeError(f"trial failed in {backend}: {result.stdout[-500:]} {result.stderr[-500:]}")
    finally:
        await sb.close()


async def raw_cycle(image: str, stats: dict[str, list[float]]) -> None:
    started = time.perf_counter()
    cid = (
        (
            await cli(
                "docker",
                "run",
                "-d",
                "--network",
                "none",
                "--cpus",
                str(LIMITS["cpus"]),
                "--memory",
                f"{LIMITS['memory_mb']}m",
                "--memory-swap",
                f"{LIMITS['memory_mb']}m",
                "--pids-limit",
                str(LIMITS["pids"]),
                image,
                "sleep",
                "infinity",
            )
        )
        .decode()
        .strip()
    )
    stats["start"].append(time.perf_counter() - started)
    try:
        started = time.perf_counter()
        await cli("docker", "exec", cid, "true")
        stats["exec"].append(time.perf_counter() - started)
        await cli(
            "docker",
            "exec",
            "-i",
            cid,
            "sh",
            "-c",
            f"cat > /tmp/agent.patch && {CHECK}",
            stdin=PATCH.encode(),
        )
    finally:
        await cli("docker", "rm", "-f", cid)


async def verified_cycle(task: object, backend: str, stats: dict[str, list[float]]) -> None:
    """A whole trial without the model: agent sandbox (history stripped), the gold patch applied as the
    agent's edit, `diff()`, then the verifier grades it in a fresh sandbox."""
    from legorl_jax.tasks import verifier
    from legorl_jax.tasks.agent_sandbox import agent_sandbox

    factory = lambda spec: make_sandbox(spec, backend=backend)  # noqa: E731
    started = time.perf_counter()
    async with agent_sandbox(task, sandbox_factory=factory) as (sb, workspace):
        stats["start"].append(time.perf_counter() - started)
        await sb.write_file("/tmp/gold.patch", task.patch)
        applied = await sb.exec(["git", "apply", "/tmp/gold.patch"])
        if applied.exit_code != 0:
            raise RuntimeError(f"gold patch did not apply: {applied.stderr}")
        diff = await sb.diff(workspace.base_commit)
    report = await verifier.grade(task, diff, sandbox_factory=factory)
    if report.reward != 1.0:
        raise RuntimeError(f"gold patch graded {report.reward} for {task.instance_id}: {report.failed_tests}")


async def measure(systems: dict[str, object], concurrency: int, rounds: int) -> dict[str, dict]:
    """Runs every system's cycles in interleaved rounds (c concurrent cycles per round, the order rotating),
    so a change in the host's load during the run hits all systems alike."""
    results = {name: {"stats": {"start": [], "exec": []}, "wall": 0.0, "cycles": 0} for name in systems}
    for cycle in systems.values():
        await cycle({"start": [], "exec": []})  # warm-up: image facts, rootfs export, Python imports
    names = list(systems)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            result = results[name]
            started = time.perf_counter()
            await asyncio.gather(*(systems[name](result["stats"]) for _ in range(concurrency)))
            result["wall"] += time.perf_counter() - started
            result["cycles"] += concurrency
    for result in results.values():
        result["per_min"] = result["cycles"] / result["wall"] * 60
    return results


def row(name: str, c: int, m: dict, raw: dict | None) -> str:
    s = m["stats"]
    cells = [name, str(c)]
    for key in ("start", "exec"):
        if s[key]:
            cells += [f"{statistics.median(s[key]) * 1000:.0f}", f"{quantile(s[key], 0.99) * 1000:.0f}"]
        else:
            cells += ["-", "-"]
    cells.append(f"{m['per_min']:.1f}")
    if raw is not None and s["start"]:
        r = raw["stats"]
        cells += [
            f"{statistics.median(s['start']) / statistics.median(r['start']):.2f}",
            f"{statistics.median(s['exec']) / statistics.median(r['exec']):.2f}",
            f"{raw['per_min'] / m['per_min']:.2f}",
        ]
    else:
        cells += ["", "", ""]
    return "| " + " | ".join(cells) + " |"


async def main(args: argparse.Namespace) -> None:
    image = await asyncio.to_thread(build_trial_image)
    tasks = []
    if args.verifier:
        from legorl_jax.tasks.registry import load_suite

        tasks = [t for t in load_suite("builtin") if t.kind == "builtin"][:1]
        from legorl_jax.tasks.task_image import ensure_task_image

        await asyncio.to_thread(ensure_task_image, tasks[0])
    print(f"image {image}; limits {LIMITS}; cycle = start, write patch, `{CHECK}`, close\n")
    print(
        "| system | concurrency | start p50 ms | start p99 ms | exec p50 ms | exec p99 ms | cycles/min "
        "| start ratio | exec ratio | time/cycle ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in args.concurrency:
        systems = {
            "raw docker CLI": lambda st: raw_cycle(image, st),
            "legorl docker": lambda st: ours_cycle("docker", image, st),
        }
        if not args.no_bwrap:
            systems["legorl bwrap"] = lambda st: ours_cycle("bwrap", image, st)
        for backend in ("docker",) + (() if args.no_bwrap else ("bwrap",)) if tasks else ():
            systems[f"verified trial, {backend} ({tasks[0].instance_id})"] = lambda st, b=backend: (
                verified_cycle(tasks[0], b, st)
            )
        results = await measure(systems, c, max(2, args.cycles // c))
        raw = results["raw docker CLI"]
        for name, result in results.items():
            peer = raw if name.startswith("legorl") else None
            print(row(name, c, result, peer), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--cycles", type=int, default=12, help="cycles per system and level (rounds = cycles / c)"
    )
    parser.add_argument("--no-bwrap", action="store_true", help="skip the bubblewrap rows")
    parser.add_argument(
        "--verifier", action="store_true", help="add verified trials per minute (tasks verifier)"
    )
    asyncio.run(main(parser.parse_args()))
