"""Rollout throughput and the orchestrator's own overhead, beside the same trials run by a plain sequential
script.

    python tools/bench_rollout.py [--concurrency 1,4,16] [--trials 16] [--rounds 2] [--harness-trials 4]
    python tools/bench_rollout.py --concurrency 2 --ray-nodes 2 --harness-trials 0   # local vs Ray
    python tools/bench_rollout.py --concurrency 2 --ray-nodes 2 --second-daemon --harness-trials 0

Every trial is the same work: the built-in harness fixes a built-in task through the capture proxy in front
of a scripted engine (the fix's tool calls, 50 ms per call standing in for the model), in a real agent
sandbox, graded by the real verifier in a fresh sandbox. Per configuration:
- ours: `rollout.collect` with the given concurrency (retries, archive, outcome taxonomy, progress);
- plain: the same steps written out in a loop, one trial after another (start sandbox, open session, run
  the harness, diff, grade, close), nothing else: the floor at concurrency 1;
- with `--ray-nodes N`: ours again through `RayExecutor` on a local Ray cluster of N nodes (each its own
  raylet process, ray.cluster_utils; slots enough for the largest concurrency), the same trials at the same
  concurrency, in the same run: the dispatch's cost shows in the overhead and trials / min. With
  `--second-daemon` the nodes after the head run their trials on a second Docker daemon of this machine
  (`tools/second_dockerd.sh`, root; its images persist in /var/lib/legorl-docker2; stopped at the end), as a
  cluster's nodes each have their own; without it every node shares this machine's daemon.
Overhead per trial = wall time minus the time inside engine calls (the proxy's model time), sandbox start,
tool execution (time between model calls), the diff and the sandbox's removal, and grading: what the
orchestrator itself costs. The peer is the plain script measured in the same run; the load average before and
after is printed, and figures taken at a load average of 1 or more are marked as not publishable.

Then one row per installed third-party harness (`HARNESS_SCRIPTS`; `--harness-trials` trials each, one at a
time, `--harnesses` to choose): the harness's scripted fix from its own tests, in its own tool vocabulary,
minus the step that runs the task's tests, through `run_trial`, reward 1 required. Per harness: trials per
minute; its start-up (from `harness.run`'s start to its first model call); and its own time per turn =
(time inside `harness.run` after the first model call - the proxy's model time - sandbox time) / model
calls, where sandbox time is the time inside the sandbox's exec/write calls that no model call started
during (commands the adapter runs from the host; a call that spans model calls is the harness itself
running in the sandbox). Harnesses that run the scripted commands themselves (those inside the sandbox,
SWE-agent through SWE-ReX) keep those commands' time, milliseconds for these scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

TASK_IDS = ("autocomplete-casefold-prefix", "basecodec-base58-leading-zeros")


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def script_for(tasks, tokenizer):
    """Each session replays the fix of the task named in its prompt."""
    fixes = {
        t.problem_statement.strip().splitlines()[0]: [
            call("bash", command="git status --short"),
            call("bash", command=f"git apply <<'PATCH'\n{t.patch}PATCH"),
            call("submit"),
        ]
        for t in tasks
    }

    def script(prompt, rid):
        text = tokenizer.decode(prompt)
        turn = int(rid.rsplit("-", 1)[1])
        for marker, steps in fixes.items():
            if marker in text:
                return steps[min(turn, len(steps) - 1)]
        raise RuntimeError("no task matched the prompt")

    return script


async def plain(tasks, proxy, harness, n: int) -> list[dict[str, float]]:
    """The same trials as a plain loop, one at a time (module docstring)."""
    from legorl_jax.harness.base import LLMEndpoint
    from legorl_jax.tasks.agent_sandbox import agent_sandbox
    from legorl_jax.tasks.verifier import grade

    out = []
    for i in range(n):
        task = tasks[i % len(tasks)]
        t0 = time.monotonic()
        info = proxy.open_session(task.instance_id, f"plain-{i}")
        async with agent_sandbox(task) as (sandbox, workspace):
            t1 = time.monotonic()
            await harness.run(task, sandbox, LLMEndpoint(info.openai_base_url, info.anthropic_base_url))
            t_stop = time.monotonic()
            diff = await sandbox.diff(workspace.base_commit)
        t2 = time.monotonic()
        report = await grade(task, diff)
        t3 = time.monotonic()
        closed = await proxy.close_session(info.session_id)
        assert report.reward == 1.0, report
        counters = closed.counters
        wall = time.monotonic() - t0
        out.append(
            {
                "wall": wall,
                "work": (t1 - t0) + counters["model_s"] + counters["tool_s"] + (t2 - t_stop) + (t3 - t2),
            }
        )
    return out


async def ours(
    tasks, proxy, harness, n: int, concurrency: int, runs: pathlib.Path, executor=None
) -> tuple[float, list[dict[str, float]]]:
    from legorl_jax.config import RolloutConfig
    from legorl_jax.rollout import TrialSettings, collect

    group = max(n // len(tasks), 1)
    config = RolloutConfig(
        concurrency=concurrency, retries=0, runs_dir=str(runs), experiment=f"c{concurrency}-{time.time_ns()}"
    )
    t0 = time.monotonic()
    batch = await collect(
        tasks,
        group_size=group,
        harness=harness,
        proxy=proxy,
        trials=TrialSettings(rollout=config),
        executor=executor,
    )
    wall = time.monotonic() - t0
    assert all(t.reward == 1.0 for t in batch.trajectories), batch.outcomes
    per = [
        {
            "wall": t.timings["trial_s"],
            "work": t.timings["sandbox_start_s"]
            + t.timings["model_s"]
            + t.timings["tool_s"]
            + t.timings["sandbox_stop_s"]
            + t.timings["verifier_s"],
        }
        for t in batch.trajectories
    ]
    return wall, per


async def bench(args: argparse.Namespace) -> None:
    import make_tiny_model
    from scripted_engine import ScriptedEngine

    from legorl_jax.config import ProxyConfig
    from legorl_jax.harness import get_harness
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.proxy import CaptureProxy
    from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_task
    from legorl_jax.tasks.task_image import ensure_task_image

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    model = make_tiny_model.make_tiny_model(tmp / "model", make_tiny_model.TinyModelSpec())
    tokenizer = load_tokenizer(model)
    tasks = [load_builtin_task(SUITE_DIR / t) for t in TASK_IDS]
    for t in tasks:
        ensure_task_image(t)
    engine = ScriptedEngine(tokenizer, script_for(tasks, tokenizer), delay_s=args.engine_ms / 1000)
    engine.max_len = 16384
    proxy = CaptureProxy(
        engine, tokenizer, ProxyConfig(context_length=16384, archive_dir=str(tmp / "sessions"))
    )
    await proxy.start()
    harness = get_harness("builtin")
    cluster, executor = (await start_ray(args)) if args.ray_nodes else (None, None)
    load_before = os.getloadavg()[0]
    rows = []
    try:
        await ours(tasks, proxy, harness, 2, 2, tmp / "runs")  # warm-up: images, imports
        if executor is not None:  # the nodes' workers import the package and find the images
            await ours(tasks, proxy, harness, 2, 2, tmp / "runs", executor)
        plain_runs = []
        results: dict[int, list] = {c: [] for c in args.concurrency}
        on_ray: dict[int, list] = {c: [] for c in args.concurrency}
        for r in range(args.rounds):
            plain_runs += await plain(
                tasks, proxy, harness, args.trials if r == 0 else max(args.trials // 4, 2)
            )
            for c in args.concurrency:
                results[c].append(await ours(tasks, proxy, harness, args.trials, c, tmp / "runs"))
                if executor is not None:
                    on_ray[c].append(
                        await ours(tasks, proxy, harness, args.trials, c, tmp / "runs", executor)
                    )
        plain_wall = [p["wall"] for p in plain_runs]
        plain_over = [1 - p["work"] / p["wall"] for p in plain_runs]
        rows.append(("plain sequential script", 1, len(plain_runs), 60 / statistics.mean(plain_wall),
                     statistics.mean(plain_wall), statistics.mean(plain_over)))  # fmt: skip
        daemons = ", a second Docker daemon" if args.second_daemon else ""
        for name, measured in (
            ("ours (rollout.collect)", results),
            (f"ours through Ray ({args.ray_nodes} local nodes{daemons})", on_ray),
        ):
            for c in args.concurrency:
                if not measured[c]:
                    continue
                walls = [w for w, _ in measured[c]]
                per = [p for _, ps in measured[c] for p in ps]
                n = len(per)
                rows.append(
                    (
                        name,
                        c,
                        n,
                        60 * n / sum(walls),
                        statistics.mean(p["wall"] for p in per),
                        statistics.mean(1 - p["work"] / p["wall"] for p in per),
                    )
                )
        harness_rows = (
            await bench_harnesses(args, tokenizer, tasks[0], tmp) if args.harness_trials > 0 else []
        )
    finally:
        await proxy.stop()
        if executor is not None:
            await executor.close()
        if cluster is not None:
            cluster.shutdown()
        if args.second_daemon:
            from second_daemon import stop_second_daemon

            stop_second_daemon("legorl-docker2")
    load_after = os.getloadavg()[0]
    print(
        f"load average before {load_before:.2f}, after {load_after:.2f}; rounds {args.rounds}; engine "
        f"{args.engine_ms} ms/call"
    )
    print()
    print(
        "| system | concurrent trials | trials | trials / min | mean trial wall s | orchestrator overhead "
        "(share of trial wall) |"
    )
    print("|---|---|---|---|---|---|")
    for name, c, n, tpm, wall, over in rows:
        print(f"| {name} | {c} | {n} | {tpm:.1f} | {wall:.2f} | {100 * over:.1f} % |")
    print()
    print("peer: the same trials as a plain sequential script (no orchestrator), measured in the same run")
    if harness_rows:
        print()
        print(
            "| harness | trials | trials / min | start-up s | harness's own time per turn s "
            "| model calls per trial |"
        )
        print("|---|---|---|---|---|---|")
        for name, n, tpm, startup, own, calls in harness_rows:
            print(f"| {name} | {n} | {tpm:.1f} | {startup:.2f} | {own:.3f} | {calls:.1f} |")
        print(
            "one trial at a time, scripted engine; own time = harness.run after its first model call minus "
            "model time and sandbox calls, per model call"
        )
    quiet = max(load_before, load_after) < 1.0
    print(
        "publishable (load average < 1 before and after):",
        "yes" if quiet else "NO: the host was busy; rerun on a quiet machine",
    )


async def start_ray(args: argparse.Namespace):
    """A local Ray cluster of `args.ray_nodes` nodes (dashboard off, one CPU each) and its executor."""
    from ray.cluster_utils import Cluster
    from second_daemon import add_node_on, start_second_daemon, stop_second_daemon

    from legorl_jax.config import RayConfig, RolloutConfig
    from legorl_jax.rollout.ray_executor import TRIAL_RESOURCE, RayExecutor

    per_node = -(-max(args.concurrency) // args.ray_nodes)
    node = {"num_cpus": 1, "resources": {TRIAL_RESOURCE: per_node}}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        for _ in range(args.ray_nodes - 1):
            if args.second_daemon:
                add_node_on(cluster, start_second_daemon(), **node)
            else:
                cluster.add_node(**node)
        cluster.wait_for_nodes()
        config = RolloutConfig(
            executor="ray", trials_per_node=per_node, ray=RayConfig(address=cluster.address)
        )
        return cluster, await RayExecutor.start(config)
    except BaseException:
        cluster.shutdown()
        if args.second_daemon:
            stop_second_daemon("legorl-docker2")
        raise


HARNESS_SCRIPTS = {
    "mini_swe_agent": "test_mini_swe_agent",
    "swe_agent": "test_swe_agent",
    "claude_code": "test_claude_code",
    "opencode": "test_opencode",
    "terminus_2": "test_terminus_2",
    "openhands": "test_openhands",
    "codex": "test_codex",
}
"""Harness -> the test module whose `fix_script(task)` is its scripted fix (opencode's also answers its title
call: `AgentOrTitle`)."""


class TimedSandbox:
    """The trial's sandbox, recording the wall-clock interval of every exec / write_file call."""

    def __init__(self, sandbox, intervals: list[tuple[float, float]]):
        self._sandbox, self._intervals = sandbox, intervals

    def __getattr__(self, name):
        return getattr(self._sandbox, name)

    async def _timed(self, method, *args, **kwargs):
        t0 = time.time()
        try:
            return await method(*args, **kwargs)
        finally:
            self._intervals.append((t0, time.time()))

    async def exec(self, *args, **kwargs):
        return await self._timed(self._sandbox.exec, *args, **kwargs)

    async def write_file(self, *args, **kwargs):
        return await self._timed(self._sandbox.write_file, *args, **kwargs)


class TimedHarness:
    """A harness whose sandbox calls are timed (`TimedSandbox`); everything else is the harness's own."""

    def __init__(self, harness):
        self.harness, self.intervals, self.started = harness, [], 0.0
        self.name, self.network, self.mounts = harness.name, harness.network, harness.mounts
        self.sandbox_user = harness.sandbox_user

    async def run(self, task, sandbox, llm):
        self.started = time.time()
        return await self.harness.run(task, TimedSandbox(sandbox, self.intervals), llm)


def harness_script(name: str, task, tokenizer):
    """The harness's scripted fix (`HARNESS_SCRIPTS`) without its test run."""
    import importlib

    module = importlib.import_module(HARNESS_SCRIPTS[name])
    script = [text for text in module.fix_script(task) if "pytest" not in text]
    return module.AgentOrTitle(tokenizer, script) if name == "opencode" else script


def sandbox_seconds(intervals: list[tuple[float, float]], turns: list[dict]) -> float:
    """Time inside sandbox calls during which no model call started (module docstring)."""
    starts = [t["started_at"] for t in turns]
    return sum(b - a for a, b in intervals if not any(a <= s <= b for s in starts))


async def bench_harnesses(args: argparse.Namespace, tokenizer, task, tmp: pathlib.Path) -> list[tuple]:
    """One row per installed harness (module docstring): (name, trials, trials/min, start-up s, own s/turn,
    model calls)."""
    from scripted_engine import ScriptedEngine

    from legorl_jax.config import ProxyConfig, RolloutConfig
    from legorl_jax.harness import HarnessNotInstalled, get_harness
    from legorl_jax.proxy import CaptureProxy
    from legorl_jax.rollout import TrialSettings, run_trial

    sys.path.insert(0, str(ROOT / "tests" / "harness"))
    rows = []
    for name in args.harnesses:
        try:
            harness = get_harness(name)
        except HarnessNotInstalled as exc:
            print(f"{name}: skipped ({exc})")
            continue
        walls, startup, own, turns = [], [], [], []
        for i in range(args.harness_trials):
            engine = ScriptedEngine(
                tokenizer, harness_script(name, task, tokenizer), delay_s=args.engine_ms / 1000
            )
            engine.max_len = 16384
            config = ProxyConfig(context_length=16384, archive_dir=str(tmp / "sessions"))
            proxy = CaptureProxy(engine, tokenizer, config, admin_token="bench-rollout-admin")
            await proxy.start("127.0.0.1", 0)
            timed = TimedHarness(harness)
            folder = tmp / "harnesses" / f"{name}-{i}"
            try:
                trajectory = await run_trial(
                    task,
                    harness=timed,
                    proxy=proxy,
                    trial_id=f"{name}-{i}",
                    group_id=name,
                    trial_dir=folder,
                    trials=TrialSettings(rollout=RolloutConfig(retries=0, runs_dir=str(tmp)), step_limit=12),
                )
            finally:
                await proxy.stop()
            assert trajectory.reward == 1.0, (
                name,
                trajectory.outcome,
                (folder / "attempt_0" / "harness.log"),
            )
            record = json.loads((folder / "attempt_0" / "trajectory.json").read_text())
            calls = record["counters"]["calls"]
            t = trajectory.timings
            walls.append(t["trial_s"])
            first = min(turn["started_at"] for turn in record["turns"])
            after = [(a, b) for a, b in timed.intervals if a >= first]
            startup.append(first - timed.started)
            own.append(
                (t["harness_s"] - startup[-1] - t["model_s"] - sandbox_seconds(after, record["turns"]))
                / calls
            )
            turns.append(calls)
        rows.append((name, len(walls), 60 * len(walls) / sum(walls), statistics.mean(startup),
                     statistics.mean(own), statistics.mean(turns)))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16])
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--engine-ms", type=float, default=50.0)
    p.add_argument("--harness-trials", type=int, default=4, help="trials per third-party harness (0: none)")
    p.add_argument("--harnesses", type=lambda s: s.split(","), default=list(HARNESS_SCRIPTS))
    p.add_argument("--ray-nodes", type=int, default=0, help="also through Ray on a local cluster of N nodes")
    p.add_argument(
        "--second-daemon",
        action="store_true",
        help="with --ray-nodes: nodes after the head run trials on a second Docker daemon (root)",
    )
    args = p.parse_args(argv)
    if args.second_daemon and args.ray_nodes < 2:
        p.error(f"--second-daemon needs --ray-nodes 2 or more, got --ray-nodes {args.ray_nodes}")
    asyncio.run(bench(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
