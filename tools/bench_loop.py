"""The RL loop, synchronous beside fully asynchronous (issue 28's targets): trajectories trained per hour,
trainer and rollout idle shares, and the ideal beside them.

    python tools/bench_loop.py scripted                     # the target workload, sync vs async side by side
    python tools/bench_loop.py scripted --quick             # a smoke run (< 3 min)
    python tools/bench_loop.py scripted --modes sync        # one side only
    python tools/bench_loop.py demo --steps 3               # experiment=demo, sync vs async

Workload `scripted` (the target): the real loop (`legorl_jax.run.run_loop`), the real trainer on a tiny MoE
of `legorl_jax.model.tiny` (`--hidden-size`, `--layers`), the real capture proxy, all built by
`run.build_parts` as a training run is (`engine=` the scripted engine, `trainer=` one shared by every run so
that none pays a compile the others skip; `--seed` seeds the trainer's state and the loop), the built-in
harness, the bubblewrap sandbox backend for the agents and the graders, and the real verifier.
Only the engine is scripted (`ScriptedLoopEngine`, the outside boundary): every call takes `--engine-s`
seconds (asyncio.sleep) and answers a tool call. A trial's tool time is drawn from a lognormal of mean
`--tool-mean-s` and log-space sigma `--tool-sigma`, seeded and keyed by (task, group ordinal, trial index in
the group), never by the order trials happen to run in, so sync and async trials with the same identity sleep
the same; it is spent in `--tool-calls` `bash sleep` commands that the real harness runs in the real sandbox.
Trial g of every group then applies the task's gold edit when g is even and submits without one when g is
odd, so every group has rewards 1 and 0 and every step has an advantage to learn from.

Why this path: a bubblewrap sandbox starts in tens of milliseconds of CPU where Docker costs a daemon round
trip of hundreds (BENCHMARKS.md, Sandboxes), the built-in harness is a few HTTP calls in this process and
`sleep` in the sandbox costs no CPU, so the real harness sleeps on demand and no stand-in harness is needed.
What is left of a trial's CPU (sandbox set-up, the proxy, grading: a few tenths of a second) must stay small
beside the trainer's for the two cores not to be the limit, hence a trainer wider than the default tiny MoE
(384 wide, 6 layers: a train step of seconds per trajectory, as on real models the train step outweighs a
trial's orchestration).

Batch and slots: by default 16 trajectories per step (4 tasks x 4) over 8 trial slots, the same for every
mode. At max_staleness 1 the async loop admits a group only while fewer than 2 steps' worth are outstanding
(AReaL's bound; the groups in the update count), so while a step trains only about one step's worth of
groups runs. Taking groups in order, that would be rollout overlapped with training and nothing more: at
best 2x sync (max(train, rollout) against train + rollout). The trainer takes them as they end instead, so a
group held up by a straggler does not hold up the step, and once it is more than max_staleness versions late
it is dropped and counted (`stale groups`); a sync step always waits for its slowest trial. Heavy tails cost
sync that wait every step and async a dropped group now and then; smaller groups make the skip finer. The
issue's target was met with `--group-size 2 --concurrency 12 --trajectories 80 --hidden-size 768 --layers 8
--tool-sigma 2.0 --balance 0.75` (BENCHMARKS.md, "Async training"). Balance: by default
(`--tool-mean-s` unset) the mean trial lasts `--balance` (1) x the train step x slots / batch, so the slots
end as many trajectories as the trainer takes (pipeline balanced; sync then waits a whole rollout phase per
step); the mean tool time is that less a trial's own time (tool time ~0), both measured in the warm-up and
printed.

Modes, each the same loop with only `loop.mode` / `loop.max_staleness` changed and the same number of trained
trajectories (`--trajectories`): `sync`; `async` at max_staleness 1 (the target); `async-s0` at
max_staleness 0 (the reference: no trial outlives the weights it started under). `--rounds` repeats them in
rotating order. Printed per mode: trajectories trained per hour (from the loop's start to its end, measured
here, and over the steps after the first: the async loop's first update waits once for its pipeline to
fill), the ratio to sync, the trainer's idle share (1 - train-step seconds / wall seconds, over the whole run
and after the first step), the rollout idle share (1 - trial seconds / (concurrency x wall seconds)), stale
groups dropped, the trials' solve rate, and the CPU other processes took (`tools/hostload.py`). The ideal
beside it: trials per hour if no slot ever waited (concurrency / mean trial seconds, the trials' own measured
wall time) and the trainer-bound rate (trajectories per step / mean train-step seconds). Targets (issue 28):
async at max_staleness 1 >= 2x sync trajectories per hour, with the trainer idle <= 25 %. On one machine
the async trainer (a worker thread) shares the CPUs with the trials while the sync one has them to itself:
the mean train-step column of each mode shows what that costs.

Workload `demo`: `python train.py experiment=demo` as `make demo` runs it (tiny model, embedded engine,
Docker, built-in harness), one job per mode in its own process, with `loop.steps=--steps`, Aim off and the
warm start from a shared cache folder (`--warm-start-cache`; the first job makes it when absent): per mode
the trained trials, the job's wall time, the loop's (the steps' `time/total_s`), trials per hour, and the
solve rate of every step with the least-squares rise over the run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import logging
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import hostload  # noqa: E402

log = logging.getLogger("bench_loop")

MODES = {"sync": ("sync", 1), "async": ("async", 1), "async-s0": ("async", 0)}
"""Mode name -> (loop.mode, loop.max_staleness)."""
TASKS = (  # the demo's four: each gold patch is a str_replace the built-in harness can apply
    "ratelimit-slow-rates-never-refill",
    "varintkit-ten-byte-varint",
    "wrapwell-exact-width-line",
    "autocomplete-casefold-prefix",
)
MAX_TOKENS = 2048


# ----------------------------------------------------------------------------------------------------
# The workload


@dataclasses.dataclass(frozen=True)
class Workload:
    """The scripted workload's parameters, all printed beside the figures."""

    tasks: tuple[str, ...] = TASKS
    group_size: int = 4
    concurrency: int = 8
    trajectories: int = 128
    engine_s: float = 0.1
    tool_mean_s: float | None = None
    """None: a mean trial of `balance` x the train step x concurrency / trajectories per step (the slots then
    end `1 / balance` times the trajectories the trainer takes), less a trial's own time; both measured in the
    warm-up."""
    tool_sigma: float = 1.0
    tool_calls: int = 2
    balance: float = 1.0
    hidden_size: int = 384
    layers: int = 6
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("group_size", "concurrency", "trajectories", "tool_calls", "hidden_size", "layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("engine_s", "tool_mean_s", "tool_sigma", "balance"):
            value = getattr(self, name)
            if value is None and name == "tool_mean_s":
                continue
            if not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if self.hidden_size % 4:
            raise ValueError(f"hidden_size must be a multiple of 4 (4 heads), got {self.hidden_size!r}")
        if not self.tasks:
            raise ValueError("tasks must name at least one built-in task, got none")
        if self.trajectories % self.per_step:
            raise ValueError(
                f"trajectories ({self.trajectories}) must be a multiple of the trajectories per step "
                f"({len(self.tasks)} tasks x group size {self.group_size} = {self.per_step})"
            )

    @property
    def per_step(self) -> int:
        """Trajectories per trainer update: one group of every task."""
        return len(self.tasks) * self.group_size

    @property
    def steps(self) -> int:
        return self.trajectories // self.per_step

    def model_spec(self) -> Any:
        """The trainer's tiny MoE (`legorl_jax.model.tiny`) at this width and depth: 4 heads, 8 experts."""
        from legorl_jax.model.tiny import TinyModelSpec

        h = self.hidden_size
        return TinyModelSpec(hidden_size=h, num_layers=self.layers, head_dim=h // 4, moe_intermediate_size=h,
                             intermediate_size=2 * h, max_positions=MAX_TOKENS)  # fmt: skip

    def describe(self) -> str:
        mean = "auto" if self.tool_mean_s is None else f"{self.tool_mean_s:.1f} s"
        return (
            f"trainer: tiny MoE hidden {self.hidden_size}, {self.layers} layers, 8 experts top-2; "
            f"tasks {','.join(self.tasks)}; group size {self.group_size}; {self.per_step} trajectories per "
            f"step ({len(self.tasks)} groups); {self.steps} steps = {self.trajectories} trained trajectories "
            f"per mode; concurrency {self.concurrency}; engine {self.engine_s:.2f} s per call; tool time per "
            f"trial lognormal mean {mean} sigma {self.tool_sigma:.2f} over "
            f"{self.tool_calls} `bash sleep` calls; seed {self.seed}; built-in harness, bubblewrap agent and "
            "grading sandboxes, checkpoints and Aim off"
        )


def tool_seconds(workload: Workload, task_id: str, group: int, index: int) -> list[float]:
    """The sleeps of trial `index` of the `group`-th group of `task_id`: one lognormal draw (mean
    `tool_mean_s`) split evenly over `tool_calls`, keyed by the trial's identity, never by order."""
    import numpy as np

    key = f"{workload.seed}:{task_id}:{group}:{index}".encode()
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
    sigma, mean = workload.tool_sigma, workload.tool_mean_s
    if mean is None:
        raise ValueError("the workload's tool_mean_s is still 'auto': calibrate it before drawing tool times")
    total = float(rng.lognormal(math.log(mean) - sigma**2 / 2, sigma)) if mean > 0 else 0.0
    return [total / workload.tool_calls] * workload.tool_calls


def trial_identity(trial_dir: str, trial_id: str, task_id: str, tasks: int) -> tuple[int, int]:
    """(group ordinal of the task, trial index in the group) of a proxy session, from the loop's archive
    layout. Sync: `.../trials/step_<s>/<task>-<g>/attempt_<k>`, one group of every task per step, so the
    ordinal is s. Async: `.../trials/group_<n>/<task>-<g>/...`, group n's task drawn from a permutation of
    the `tasks` train tasks per pass over them, so the ordinal is n // tasks. Either way the n-th group of a
    task is the same n on both sides, whatever order its trials run in."""
    suffix = trial_id.removeprefix(f"{task_id}-")
    for part in reversed(pathlib.Path(trial_dir).parts):
        kind, _, number = part.partition("_")
        if kind in ("step", "group") and number.isdigit() and suffix.isdigit():
            return (int(number) if kind == "step" else int(number) // tasks), int(suffix)
    raise ValueError(
        f"trial {trial_id!r} of task {task_id!r} in {trial_dir!r}: no step_<s> or group_<n> folder and trial "
        "index to key its tool time by"
    )


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as the tiny model's (Qwen3 JSON) template writes it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class ScriptedLoopEngine:
    """An `Engine` at the outside boundary whose every call takes `workload.engine_s` seconds and answers
    the trial's next scripted tool call (module docstring): its `bash sleep`s, then the gold edit (even trial
    index) or nothing, then `submit`.

    It learns which trial a call belongs to from the proxy's session table (`sessions`, set once the proxy
    exists; the rid is `<session>-<turn>`). Its log-probs and routing rows are deterministic functions of the
    tokens, shaped as the policy's (`layers`, `top_k` of `experts`); each call is stamped with the weight
    version last handed to `update_weights`, which the loop's publisher calls (in process: nothing moves)."""

    def __init__(self, tokenizer: Any, workload: Workload, fixes: dict[str, list[str]], routing: Any):
        self.tokenizer, self.workload, self.fixes, self.routing = tokenizer, workload, fixes, routing
        self.sessions: dict[str, Any] = {}
        self.version = "step-000000"
        self.eos = tokenizer.token_to_id("<|im_end|>")
        self.calls = 0
        self.publishes: list[tuple[float, str]] = []

    def script(self, task_id: str, trial_id: str, trial_dir: str, turn: int) -> str:
        """The reply to model call `turn` (from 0) of the trial archived at `trial_dir`."""
        group, index = trial_identity(trial_dir, trial_id, task_id, len(self.workload.tasks))
        sleeps = tool_seconds(self.workload, task_id, group, index)
        steps = [tool_call("bash", {"command": f"sleep {s:.3f}"}) for s in sleeps]
        if index % 2 == 0:
            steps += self.fixes[task_id]
        steps.append(tool_call("submit", {}))
        return steps[min(turn, len(steps) - 1)]

    async def generate(self, input_ids, sampling, *, return_routed_experts=False, routed_experts_start_len=0,
                       rid=None, top_logprobs=0, session_id=None):  # fmt: skip
        import numpy as np

        from legorl_jax.engine.base import check_generate_args, check_input_ids
        from legorl_jax.types import Generation

        prompt = check_input_ids(input_ids)
        rid = check_generate_args(prompt, sampling, return_routed_experts, routed_experts_start_len, rid,
                                  top_logprobs, session_id)  # fmt: skip
        version = self.version
        self.calls += 1
        await asyncio.sleep(self.workload.engine_s)
        session = self.sessions.get(session_id or "")
        if session is None:
            raise ValueError(f"session_id {session_id!r} is no open session of the proxy")
        turn = int(rid.rsplit("-", 1)[1])
        out = self.tokenizer.encode(
            self.script(session.task_id, session.trial_id, str(session.trial_dir), turn)
        )
        out = out[: sampling.max_new_tokens] if len(out) >= sampling.max_new_tokens else [*out, self.eos]
        finish = "length" if out[-1] != self.eos else "stop"
        logprobs = np.asarray([-0.01 * (1 + (t % 97)) for t in out], np.float32)
        routed = (
            self._routing(prompt.tolist() + out, routed_experts_start_len) if return_routed_experts else None
        )
        return Generation(np.asarray(out, np.int32), logprobs, routed, finish, version, len(prompt),
                          routed_experts_start=routed_experts_start_len)  # fmt: skip

    def _routing(self, ids: list[int], start: int):
        import numpy as np

        layers, k, experts = self.routing.num_layers, self.routing.top_k, self.routing.num_experts
        pos = np.arange(start, len(ids) - 1)
        first = (
            np.asarray(ids, np.int64)[pos][:, None] + pos[:, None] + np.arange(layers)[None, :]
        ) % experts
        rows = (first[:, :, None] + np.arange(k)[None, None, :]) % experts  # [rows, L, K], distinct experts
        return rows.astype(np.uint8)

    async def prompt_logprobs(self, input_ids, start, *, temperature=1.0):
        import numpy as np

        return np.asarray([-0.01 * (1 + (t % 97)) for t in list(input_ids)[start:]], np.float32)

    async def update_weights(self, source, version):
        self.version = version
        self.publishes.append((time.monotonic(), version))

    async def health(self):
        return True

    async def abort(self, rid):
        return None


# ----------------------------------------------------------------------------------------------------
# One run of the loop


@dataclasses.dataclass
class ModeResult:
    """What one run of the loop did, measured here and from its own records."""

    mode: str
    wall_s: float
    trained: int
    train_step_s: list[float]
    """Every update's train step (the trainer's busy time)."""
    trial_s: list[float]
    """Every trial that ended, trained or not (the slots' busy time)."""
    steady_s: tuple[float, float]
    """(train-step seconds, wall seconds) of the steps after the first: the first update of the async loop
    waits for its pipeline to fill (its first groups to end), once per run."""
    steady_trained: int
    """Trajectories trained by the steps after the first."""
    loop_trainer_idle: float | None
    stale_groups: int
    solve_rate: float
    foreign_cores: float

    @property
    def per_hour(self) -> float:
        return 3600.0 * self.trained / self.wall_s if self.wall_s > 0 else 0.0


def scripted_config(workload: Workload, mode: str, runs: pathlib.Path, experiment: str) -> Any:
    """The loop's config for `mode` (module docstring): everything but `loop.mode`/`max_staleness` alike."""
    from legorl_jax.config import (
        CheckpointConfig,
        Config,
        HarnessConfig,
        LoopConfig,
        ProxyConfig,
        RolloutConfig,
        SandboxConfig,
        TasksConfig,
        TrackingConfig,
        TrainConfig,
        VerifierConfig,
    )

    loop_mode, staleness = MODES[mode]
    turns = workload.tool_calls + 8  # the sleeps, the gold edit's hunks, submit, and room to spare
    # Limits no draw reaches (a lognormal's 99.99th percentile is 25x its mean at sigma 1): the bench measures
    # waiting, and a trial cut short by a timeout would change what is waited for.
    longest_trial = 30 * (workload.tool_mean_s or 0.0) * math.exp(workload.tool_sigma**2) + 300
    return Config(
        tasks=TasksConfig(ids=list(workload.tasks), eval_split=None),
        rollout=RolloutConfig(
            group_size=workload.group_size,
            concurrency=workload.concurrency,
            retries=0,
            runs_dir=str(runs),
            experiment=experiment,
            trial_timeout_s=longest_trial,
        ),
        sandbox=SandboxConfig(backend="bwrap"),
        verifier=VerifierConfig(backend="bwrap"),
        harness=HarnessConfig(step_limit=turns, options={"command_timeout_s": longest_trial}),
        proxy=ProxyConfig(context_length=MAX_TOKENS),
        train=TrainConfig(learning_rate=1e-4, max_tokens=MAX_TOKENS, checkpoint=CheckpointConfig(every=0)),
        loop=LoopConfig(
            mode=loop_mode,
            steps=workload.steps,
            groups_per_step=len(workload.tasks),
            max_staleness=staleness,
            validate_every=0,
            trial_texts=False,
        ),
        tracking=TrackingConfig(backend="none"),
    )


async def run_mode(
    mode: str, workload: Workload, model_dir: pathlib.Path, trainer: Any, tasks: list[Any], runs: pathlib.Path
) -> ModeResult:
    """One run of the loop in `mode` on a fresh trainer state; timed from the loop's start to its end."""
    from legorl_jax.config import ModelConfig
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.run import build_parts, run_loop
    from legorl_jax.warm_start import gold_edits

    experiment = f"{mode}-{time.time_ns()}"
    config = scripted_config(workload, mode, runs, experiment)
    config = dataclasses.replace(config, model=ModelConfig(path=str(model_dir)), seed=workload.seed)
    folder = runs / experiment
    fixes = {t.instance_id: [tool_call("str_replace", e) for e in gold_edits(t)] for t in tasks}
    engine = ScriptedLoopEngine(load_tokenizer(model_dir), workload, fixes, trainer.routing)
    meter = hostload.ForeignCPU()
    # Built as a training run is (run.build_parts), with the scripted engine and the shared trainer.
    async with build_parts(config, job=mode, engine=engine, trainer=trainer) as built:
        engine.sessions = built.parts.proxy.sessions
        started = time.monotonic()
        records = await run_loop(built.parts, built.state, start_step=built.start_step)
        wall = time.monotonic() - started
    foreign = meter.lap()
    return summarise(mode, workload, records, folder, wall, foreign)


def summarise(
    mode: str, workload: Workload, records: Sequence[Any], folder: pathlib.Path, wall: float, foreign: float
) -> ModeResult:
    """The figures of one run (module docstring) from its records, its trial archive and its wall time."""
    from legorl_jax.types import Outcome

    trained_records = [r for r in records if r.trained]
    last = records[-1].metrics if records else {}

    def trained_by(steps: Sequence[Any]) -> int:
        if steps and "loop/trajectories_trained" in steps[-1].metrics:
            return int(steps[-1].metrics["loop/trajectories_trained"])
        return int(sum(r.metrics.get("rollout/scored", 0.0) for r in steps if r.trained))

    trained = trained_by(records)
    train_s = [r.metrics["time/train_step_s"] for r in trained_records if "time/train_step_s" in r.metrics]
    trials = [json.loads(p.read_text()) for p in sorted((folder / "trials").glob("*/*/trial.json"))]
    trial_s = [t["timings"]["trial_s"] for t in trials if "trial_s" in t.get("timings", {})]
    scored = [t["reward"] for t in trials if not Outcome(t["outcome"]).is_infra_failure]
    later = records[1:]
    return ModeResult(
        mode=mode,
        wall_s=wall,
        trained=trained,
        train_step_s=train_s,
        trial_s=trial_s,
        steady_s=(
            sum(r.metrics.get("time/train_step_s", 0.0) for r in later),
            sum(r.metrics["time/total_s"] for r in later),
        ),
        steady_trained=trained - trained_by(records[:1]),
        loop_trainer_idle=_mean_metric(records, "loop/trainer_idle_share"),
        stale_groups=int(last.get("loop/stale_groups_total", 0)),
        solve_rate=statistics.mean(float(r == 1.0) for r in scored) if scored else 0.0,
        foreign_cores=foreign,
    )


def trainer_idle(results: Sequence[ModeResult]) -> float:
    """1 - train-step seconds / wall seconds over `results`."""
    return 1.0 - sum(sum(r.train_step_s) for r in results) / sum(r.wall_s for r in results)


def steady_trainer_idle(results: Sequence[ModeResult]) -> float:
    """`trainer_idle` over the steps after each run's first (`ModeResult.steady_s`); nan with one step."""
    wall = sum(r.steady_s[1] for r in results)
    return 1.0 - sum(r.steady_s[0] for r in results) / wall if wall > 0 else float("nan")


def rollout_idle(results: Sequence[ModeResult], concurrency: int) -> float:
    """1 - trial seconds / (concurrency x wall seconds): the share of slot time no trial ran in."""
    return 1.0 - sum(sum(r.trial_s) for r in results) / (concurrency * sum(r.wall_s for r in results))


def _mean_metric(records: Sequence[Any], name: str) -> float | None:
    values = [r.metrics[name] for r in records if name in r.metrics]
    return statistics.mean(values) if values else None


# ----------------------------------------------------------------------------------------------------
# The scripted bench


async def bench_scripted(args: argparse.Namespace) -> list[ModeResult]:
    from legorl_jax.model import load_hf
    from legorl_jax.model.tiny import make_tiny_model
    from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_task
    from legorl_jax.train.step import Trainer

    workload = workload_of(args)
    logging.getLogger("legorl_jax.loop").addFilter(ScriptedPearsonFilter())
    print("the scripted engine's logprobs are made up: the trainer/engine Pearson is not a check here")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-loop-"))
    model_dir = make_tiny_model(tmp / "model", workload.model_spec(), seed=0)
    tasks = [load_builtin_task(SUITE_DIR / t) for t in workload.tasks]
    config = scripted_config(workload, "sync", tmp / "runs", "config")
    trainer = Trainer(load_hf(str(model_dir), "float32"), config.algo, config.train)
    load_before = os.getloadavg()[0]
    # Warm-up, not measured: task images and their root filesystems, imports, and the train step's compile
    # (the trainer is shared, so no measured run pays for a compile the others skip). Its second step times
    # the trainer and its trials (tool time ~0) a trial's own cost: the `auto` tool time is set from them.
    warm = dataclasses.replace(workload, trajectories=2 * workload.per_step, tool_mean_s=0.05)
    warmed = await run_mode("sync", warm, model_dir, trainer, tasks, tmp / "warmup")
    train_s, own_s = warmed.train_step_s[-1], statistics.mean(warmed.trial_s)
    calibration = f"warm-up: train step {train_s:.1f} s, a trial's own time (tool time ~0) {own_s:.1f} s"
    if workload.tool_mean_s is None:
        trial = workload.balance * train_s * workload.concurrency / workload.per_step
        if trial - own_s < 0.5:
            log.warning("%s: too short a train step for a %.1f s trial; tool time 0.5 s", calibration, trial)
        workload = dataclasses.replace(workload, tool_mean_s=max(trial - own_s, 0.5))
        calibration += (
            f"; mean trial = {workload.balance} x train step x concurrency {workload.concurrency} / "
            f"{workload.per_step} per step = {trial:.1f} s, so tool time mean {workload.tool_mean_s:.1f} s"
        )
    log.info("%s", calibration)
    results: dict[str, list[ModeResult]] = {m: [] for m in args.modes}
    for r in range(args.rounds):
        order = args.modes[r % len(args.modes) :] + args.modes[: r % len(args.modes)]
        for mode in order:
            result = await run_mode(mode, workload, model_dir, trainer, tasks, tmp / "runs")
            log.info("round %d %s: %.0f trajectories/h over %.0f s", r, mode, result.per_hour, result.wall_s)
            results[mode].append(result)
    print_scripted(workload, calibration, results, load_before, os.getloadavg()[0], args.rounds)
    return [r for rs in results.values() for r in rs]


def workload_of(args: argparse.Namespace) -> Workload:
    return Workload(
        tasks=tuple(args.tasks),
        group_size=args.group_size,
        concurrency=args.concurrency,
        trajectories=args.trajectories,
        engine_s=args.engine_s,
        tool_mean_s=args.tool_mean_s,
        tool_sigma=args.tool_sigma,
        tool_calls=args.tool_calls,
        balance=args.balance,
        hidden_size=args.hidden_size,
        layers=args.layers,
        seed=args.seed,
    )


def verdict(value: float, ok: bool) -> str:
    """'met' / 'NOT met' for a figure the run computed; 'n/a' for one it could not (nan: e.g. "after step 0"
    of a one-step --quick run)."""
    if math.isnan(value):
        return "n/a"
    return "met" if ok else "NOT met"


class ScriptedPearsonFilter(logging.Filter):
    """Drops the loop's trainer/engine Pearson alert: the scripted engine's logprobs are made up, so that
    figure says nothing about replay or numerics here (said once in the bench's own output instead)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "probability Pearson" not in record.getMessage()


def print_scripted(
    workload: Workload,
    calibration: str,
    results: dict[str, list[ModeResult]],
    load_before: float,
    load_after: float,
    rounds: int,
) -> None:
    def rate(rs: list[ModeResult]) -> float:
        return 3600.0 * sum(r.trained for r in rs) / sum(r.wall_s for r in rs)

    def steady_rate(rs: list[ModeResult]) -> float:
        wall = sum(r.steady_s[1] for r in rs)
        return 3600.0 * sum(r.steady_trained for r in rs) / wall if wall > 0 else float("nan")

    sync_rate = rate(results["sync"]) if results.get("sync") else None
    sync_steady = steady_rate(results["sync"]) if results.get("sync") else None
    print()
    print(f"workload: {workload.describe()}")
    print(calibration)
    print(f"load average before {load_before:.2f}, after {load_after:.2f}; rounds {rounds}")
    print()
    print(
        "| mode | loop | trained | wall s | trajectories / h (after step 0) | ratio to sync (after step 0) "
        "| trainer idle (after step 0) "
        "| rollout idle | stale groups | solve rate | mean trial s | mean train step s "
        "| ideal: slots never idle, trials / h | ideal: trainer-bound, trajectories / h "
        "| other processes' CPU, cores |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, rs in results.items():
        if not rs:
            continue
        loop_mode, staleness = MODES[mode]
        trial = statistics.mean(s for r in rs for s in r.trial_s)
        step = [s for r in rs for s in r.train_step_s]
        step_s = statistics.mean(step) if step else float("nan")
        ratio = f"{rate(rs) / sync_rate:.2f} ({steady_rate(rs) / sync_steady:.2f})" if sync_rate else "-"
        loop_idle = [r.loop_trainer_idle for r in rs if r.loop_trainer_idle is not None]
        loop_note = f"; loop's {statistics.mean(loop_idle):.0%}" if loop_idle else ""
        print(
            f"| {mode} | {loop_mode}" + (f", max_staleness {staleness}" if loop_mode == "async" else "")
            + f" | {sum(r.trained for r in rs)} | {sum(r.wall_s for r in rs):.0f} "
            f"| {rate(rs):.0f} ({steady_rate(rs):.0f}) | {ratio} "
            f"| {trainer_idle(rs):.0%} ({steady_trainer_idle(rs):.0%}{loop_note}) "
            f"| {rollout_idle(rs, workload.concurrency):.0%} | {sum(r.stale_groups for r in rs)} "
            f"| {statistics.mean(r.solve_rate for r in rs):.2f} | {trial:.1f} | {step_s:.1f} "
            f"| {3600 * workload.concurrency / trial:.0f} | {3600 * workload.per_step / step_s:.0f} "
            f"| {max(r.foreign_cores for r in rs):.2f} |"
        )  # fmt: skip
    print()
    print(
        "trainer idle = 1 - train-step seconds / wall, over the whole run (and over the steps after the "
        "first, whose wait is the async pipeline filling once; the loop's own figure is the mean of its "
        "per-step shares); rollout idle = 1 - trial seconds / (concurrency x wall); ideal trials / h = "
        "concurrency / mean trial s; trainer-bound = trajectories per step / mean train-step s; solve rate "
        "over every trial that ended"
    )
    if results.get("async") and sync_rate:
        a = results["async"]
        ratio, ratio_steady = rate(a) / sync_rate, steady_rate(a) / sync_steady
        idle, steady = trainer_idle(a), steady_trainer_idle(a)

        print(
            "target (async at max_staleness 1 >= 2x sync trajectories / h, trainer idle <= 25 %): over the "
            f"run ratio {ratio:.2f} ({verdict(ratio, ratio >= 2)}) and trainer idle {idle:.0%} "
            f"({verdict(idle, idle <= 0.25)}); after the first step ratio {ratio_steady:.2f} "
            f"({verdict(ratio_steady, ratio_steady >= 2)}) and trainer idle {steady:.0%} "
            f"({verdict(steady, steady <= 0.25)})"
        )
    quiet = load_before < hostload.QUIET_LOAD and all(
        r.foreign_cores < hostload.QUIET_CORES for rs in results.values() for r in rs
    )
    print(
        f"publishable (load < 1 before, other processes under {hostload.QUIET_CORES} cores in every run):",
        "yes" if quiet else "NO: the host was busy; rerun on a quiet machine",
    )


# ----------------------------------------------------------------------------------------------------
# The demo bench


def demo_argv(mode: str, steps: int, runs: pathlib.Path, cache: pathlib.Path) -> list[str]:
    """`python train.py experiment=demo` (what `make demo` runs) in `mode` for `steps` loop steps. Aim is off
    (metrics.jsonl holds every figure) and the warm start comes from `cache`, made by the first job."""
    loop_mode, staleness = MODES[mode]
    return [
        sys.executable,
        str(ROOT / "train.py"),
        "experiment=demo",
        f"rollout.runs_dir={runs}",
        f"rollout.experiment=demo-{mode}",
        f"loop.steps={steps}",
        f"loop.mode={loop_mode}",
        f"loop.max_staleness={staleness}",
        "tracking.backend=none",
        f"loop.warm_start.cache_dir={cache}",
    ]


def bench_demo(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each mode's demo job in its own process (module docstring); prints the table and returns its rows."""
    import numpy as np

    runs = pathlib.Path(tempfile.mkdtemp(prefix="bench-loop-demo-"))
    env = dict(os.environ)
    # One device, as `make demo` runs it (the test suite's 8 forced CPU devices would split the trainer).
    env["XLA_FLAGS"] = " ".join(
        f
        for f in env.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")
    )
    load_before = os.getloadavg()[0]
    rows: dict[str, dict[str, Any]] = {}
    for mode in args.modes:
        meter = hostload.ForeignCPU()
        started = time.monotonic()
        with open(runs / f"{mode}.log", "w") as out:
            done = subprocess.run(
                demo_argv(mode, args.steps, runs, pathlib.Path(args.warm_start_cache)),
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(
                f"the {mode} demo job failed (exit {done.returncode}); its log: {runs / mode}.log"
            )
        steps = [
            json.loads(line) for line in (runs / f"demo-{mode}" / "metrics.jsonl").read_text().splitlines()
        ]
        metrics = [s["metrics"] for s in steps]
        trained = metrics[-1].get("loop/trajectories_trained") or sum(
            m["rollout/scored"] for m in metrics if not m.get("loop/skipped_update")
        )
        rates = [m["rollout/solve_rate"] for m in metrics]
        rise = (
            float(np.polyfit(np.arange(len(rates)), rates, 1)[0] * (len(rates) - 1))
            if len(rates) > 1
            else 0.0
        )
        loop_s = sum(m["time/total_s"] for m in metrics)
        rows[mode] = {"trained": int(trained), "job_s": wall, "loop_s": loop_s, "rates": rates, "rise": rise,
                      "foreign": meter.lap()}  # fmt: skip
        log.info("demo %s: %d trials trained, loop %.0f s, job %.0f s", mode, trained, loop_s, wall)
    print()
    print(
        f"workload: python train.py experiment=demo loop.steps={args.steps} (tiny MoE, embedded engine, "
        f"Docker, built-in harness; warm start from {args.warm_start_cache}); load average before "
        f"{load_before:.2f}, after {os.getloadavg()[0]:.2f}; rounds 1; logs in {runs}"
    )
    print()
    print(
        "| mode | trained trials | job wall s | loop wall s | trials trained / h (loop) | ratio to sync "
        "| solve rate per step | fitted rise over the run | other processes' CPU, cores |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
    sync = rows.get("sync")
    for mode, r in rows.items():
        per_hour = 3600 * r["trained"] / r["loop_s"]
        ratio = f"{per_hour / (3600 * sync['trained'] / sync['loop_s']):.2f}" if sync else "-"
        print(
            f"| {mode} | {r['trained']} | {r['job_s']:.0f} | {r['loop_s']:.0f} | {per_hour:.0f} | {ratio} "
            f"| {' '.join(f'{x:.3f}' for x in r['rates'])} | {r['rise']:+.2f} | {r['foreign']:.2f} |"
        )
    print()
    print(
        "loop wall = sum of the steps' time/total_s (the job's wall time less start-up, warm start and "
        "summary); on 2 cores rollouts and the trainer share the CPUs, so no target applies (issue 28)"
    )
    return rows


# ----------------------------------------------------------------------------------------------------
# Command line

QUICK = {"tasks": list(TASKS[:2]), "trajectories": 8, "tool_mean_s": 2.0, "hidden_size": 64, "layers": 2,
         "rounds": 1}  # fmt: skip
"""`--quick`: one step of 8 trajectories per mode, the default tiny MoE, short trials (smoke run, < 3 min)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="workload", required=True)
    s = sub.add_parser("scripted", help="the real loop with a scripted engine and heavy-tailed tool times")
    s.add_argument("--modes", type=_modes, default=list(MODES), help=f"comma-separated of {list(MODES)}")
    s.add_argument("--tasks", type=lambda t: t.split(","), default=list(TASKS))
    s.add_argument("--group-size", type=int, default=Workload.group_size)
    s.add_argument("--concurrency", type=int, default=Workload.concurrency)
    s.add_argument("--trajectories", type=int, default=Workload.trajectories, help="trained per mode")
    s.add_argument("--engine-s", type=float, default=Workload.engine_s, help="seconds per engine call")
    s.add_argument(
        "--tool-mean-s",
        type=float,
        default=None,
        help="mean tool seconds per trial (default: auto, see --balance)",
    )
    s.add_argument(
        "--balance",
        type=float,
        default=Workload.balance,
        help="auto tool time: mean trial = this x train step x concurrency / trajectories per step",
    )
    s.add_argument(
        "--hidden-size", type=int, default=Workload.hidden_size, help="the trainer's tiny MoE width"
    )
    s.add_argument("--layers", type=int, default=Workload.layers, help="the trainer's tiny MoE depth")
    s.add_argument("--tool-sigma", type=float, default=Workload.tool_sigma)
    s.add_argument("--tool-calls", type=int, default=Workload.tool_calls)
    s.add_argument("--seed", type=int, default=Workload.seed)
    s.add_argument("--rounds", type=int, default=1)
    s.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    d = sub.add_parser("demo", help="python train.py experiment=demo, sync vs async")
    d.add_argument(
        "--modes", type=_modes, default=["sync", "async"], help=f"comma-separated of {list(MODES)}"
    )
    d.add_argument("--steps", type=int, default=3, help="loop steps per mode (trainer updates)")
    d.add_argument(
        "--warm-start-cache", default=str(ROOT / "runs" / "warm_start"), help="loop.warm_start.cache_dir"
    )
    return p


def _modes(text: str) -> list[str]:
    modes = [m for m in text.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(
            f"modes must be a comma-separated list of {list(MODES)}, got {text!r}"
        )
    return modes


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for noisy in ("absl", "jax._src.xla_bridge", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.workload == "scripted":
        if args.quick:
            for name, value in QUICK.items():
                setattr(args, name, value)
        asyncio.run(bench_scripted(args))
    else:
        bench_demo(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
