"""Rollouts with the built-in harness: real proxy, real sandboxes, real verifier; the engine scripted or
the tiny model."""

from __future__ import annotations

import json
import subprocess
import time

import numpy as np
import pytest
from scripted_engine import ScriptedEngine

from legorl_jax.config import RolloutConfig
from legorl_jax.engine.base import EngineError
from legorl_jax.harness import HarnessCrashed, HarnessResult, get_harness
from legorl_jax.monitor.rollout_metrics import rollout_metrics
from legorl_jax.proxy.archive import read_archive
from legorl_jax.rollout import TrialSettings, collect, run_trial
from legorl_jax.types import Outcome

pytestmark = pytest.mark.docker


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def fix_script(task) -> list[str]:
    """The built-in agent's tool calls of the task's known fix: look, apply the gold patch, run the tests,
    submit."""
    return [
        call("bash", command="git status --short && ls"),
        call("bash", command=f"git apply <<'PATCH'\n{task.patch}PATCH"),
        call("bash", command="python3 -m pytest -q -x 2>&1 | tail -3"),
        call("submit"),
    ]


def rollout_config(tmp_path, **kw) -> RolloutConfig:
    return RolloutConfig(
        runs_dir=str(tmp_path / "runs"), experiment="t", **{"concurrency": 2, "retries": 0, **kw}
    )


async def test_a_scripted_fix_through_the_builtin_harness_scores_reward_one(
    task, tokenizer, proxy_on, tmp_path
):
    engine = ScriptedEngine(tokenizer, fix_script(task))
    engine.max_len = 8192
    proxy = await proxy_on(engine, context_length=8192)
    trajectory = await run_trial(
        task,
        harness=get_harness("builtin"),
        proxy=proxy,
        trial_id="fix-0",
        group_id="g",
        trial_dir=tmp_path / "trial",
        trials=TrialSettings(rollout=rollout_config(tmp_path)),
    )
    assert trajectory.outcome is Outcome.SUBMITTED and trajectory.reward == 1.0
    assert trajectory.verifier_report.resolved and not trajectory.verifier_report.tampering
    (seq,) = trajectory.sequences
    sampled = seq.loss_mask == 1
    assert sampled.sum() == sum(len(tokenizer.encode(t)) + 1 for t in fix_script(task))
    assert np.all(seq.behaviour_logprobs[sampled] < 0)
    assert trajectory.features["turns"] == 4 and trajectory.features["tool_calls"] == 4
    assert trajectory.features["test_runs"] == 1 and trajectory.features["edits"] == 1
    # The archive reads back: the trial summary, the proxy record, the verifier verdict and the diff.
    summary = json.loads((tmp_path / "trial" / "trial.json").read_text())
    assert summary["outcome"] == "submitted" and summary["reward"] == 1.0 and summary["attempts"] == 1
    recorded, arrays = read_archive(tmp_path / "trial" / "attempt_0")
    assert arrays[0]["token_ids"].tolist() == seq.token_ids.tolist()
    assert json.loads((tmp_path / "trial" / "attempt_0" / "verifier.json").read_text())["reward"] == 1.0
    diff = (tmp_path / "trial" / "attempt_0" / "diff.patch").read_text()
    assert diff.strip() and "diff --git" in diff
    assert recorded["task_id"] == task.instance_id


async def test_the_tiny_models_own_sampling_ends_every_trial_in_a_policy_outcome(
    two_tasks, jax_engine, proxy_on, tmp_path
):
    proxy = await proxy_on(jax_engine, max_response_tokens=12, max_consecutive_no_tool=2)
    batch = await collect(
        two_tasks,
        group_size=2,
        harness=get_harness("builtin"),
        proxy=proxy,
        step=0,
        trials=TrialSettings(rollout=rollout_config(tmp_path), step_limit=6),
    )
    assert len(batch.trajectories) == 4 and batch.dropped == {}
    assert {t.outcome for t in batch.trajectories} <= {
        Outcome.NO_TOOL_COLLAPSE,
        Outcome.STEP_LIMIT,
        Outcome.SUBMITTED,
        Outcome.FORMAT_FAILURE,
    }
    assert all(t.reward == 0.0 for t in batch.trajectories)  # random weights fix nothing
    assert sorted(t.group_id for t in batch.trajectories) == sorted(
        f"{t.instance_id}@0" for t in two_tasks for _ in range(2)
    )
    for t in batch.trajectories:
        assert t.sequences and t.sequences[0].num_sampled > 0
        folder = tmp_path / "runs" / "t" / "trials" / "step_0" / t.trial_id
        assert json.loads((folder / "trial.json").read_text())["outcome"] == t.outcome.value


class CrashingHarness:
    """A harness that works in the sandbox, then fails on its own (the boundary a broken adapter crosses)."""

    name, network, mounts, sandbox_user = "crashing", "none", None, None

    async def run(self, task, sandbox, llm) -> HarnessResult:
        await sandbox.exec(["bash", "-c", "echo partial > partial.txt"])
        raise HarnessCrashed("the harness process exited with code 1: Traceback ... KeyError: 'choices'")


async def test_injected_infrastructure_failures_drop_only_that_trial_with_its_reason(
    two_tasks, tokenizer, proxy_on, tmp_path
):
    broken, healthy = two_tasks
    marker = broken.problem_statement.strip().splitlines()[0]

    def script(prompt, rid):
        if marker in tokenizer.decode(prompt):
            raise EngineError("the engine's decode thread died")
        return call("submit")

    engine = ScriptedEngine(tokenizer, script)
    engine.max_len = 8192
    proxy = await proxy_on(engine, context_length=8192)
    batch = await collect(
        [broken, healthy],
        group_size=1,
        harness=get_harness("builtin"),
        proxy=proxy,
        step=1,
        trials=TrialSettings(rollout=rollout_config(tmp_path, retries=1)),
    )
    by_task = {t.task_id: t for t in batch.trajectories}
    assert (
        by_task[broken.instance_id].outcome is Outcome.ENGINE_FAILED and not by_task[broken.instance_id].valid
    )
    assert (
        by_task[broken.instance_id].timings["attempts"] == 2
    )  # retried once with a fresh sandbox and session
    assert by_task[healthy.instance_id].outcome is Outcome.SUBMITTED
    assert batch.dropped == {"engine_failed": 1} and len(batch.kept) == 1
    # Both attempts are on the trajectory and counted: failures per reason, and the retry.
    assert by_task[broken.instance_id].attempts == ("engine_failed", "engine_failed")
    assert by_task[healthy.instance_id].attempts == ("submitted",)
    figures = rollout_metrics(batch)
    assert figures["rollout/infra_failures/engine_failed"] == 2 and figures["rollout/retried"] == 1
    crashed, reason = await crashed_trial(healthy, CrashingHarness(), proxy, tmp_path, "crash")
    assert crashed.sequences == () and "KeyError" in reason


async def crashed_trial(task, harness, proxy, tmp_path, name):
    """A trial of `harness` that ends harness_crashed, scoring 0; returns it and its attempt's reason."""
    trajectory = await run_trial(
        task,
        harness=harness,
        proxy=proxy,
        trial_id=f"{name}-0",
        group_id="g",
        trial_dir=tmp_path / name,
        trials=TrialSettings(rollout=rollout_config(tmp_path)),
    )
    assert trajectory.outcome is Outcome.HARNESS_CRASHED and not trajectory.valid and trajectory.reward == 0.0
    return trajectory, json.loads((tmp_path / name / "attempt_0" / "attempt.json").read_text())["reason"]


class BuggyAdapter:
    """A harness adapter with a bug of its own: a plain exception from parsing its harness's output."""

    name, network, mounts, sandbox_user = "buggy", "none", None, None

    async def run(self, task, sandbox, llm) -> HarnessResult:
        await sandbox.exec(["bash", "-c", "echo partial > partial.txt"])
        return HarnessResult(Outcome.SUBMITTED, int("2LEGORL_RESULT {}"))


async def test_an_adapter_that_raises_fails_its_trial_as_harness_crashed_not_the_run(
    two_tasks, tokenizer, proxy_on, tmp_path
):
    engine = ScriptedEngine(tokenizer, lambda prompt, rid: call("submit"))
    engine.max_len = 8192
    proxy = await proxy_on(engine, context_length=8192)
    _, reason = await crashed_trial(two_tasks[0], BuggyAdapter(), proxy, tmp_path, "buggy")
    assert reason.startswith("the buggy adapter raised ValueError(") and 'int("2LEGORL_RESULT {}")' in reason


class ContainerKiller:
    """A harness whose sandbox disappears under it (the container is killed from outside)."""

    name, network, mounts, sandbox_user = "killed", "none", None, None

    async def run(self, task, sandbox, llm) -> HarnessResult:
        ids = subprocess.run(
            [
                "docker",
                "ps",
                "-q",
                "--filter",
                "label=legorl.role=agent",
                "--filter",
                f"label=legorl.task={task.instance_id}",
            ],
            capture_output=True,
            text=True,
        ).stdout.split()
        subprocess.run(["docker", "kill", *ids], capture_output=True, check=True)
        await sandbox.exec(["bash", "-c", "ls"])
        return HarnessResult(Outcome.SUBMITTED, 1)


async def test_a_killed_sandbox_is_a_dropped_sandbox_failure(task, tokenizer, proxy_on, tmp_path):
    proxy = await proxy_on(ScriptedEngine(tokenizer, ["x"]))
    t = await run_trial(
        task,
        harness=ContainerKiller(),
        proxy=proxy,
        trial_id="killed-0",
        group_id="g",
        trial_dir=tmp_path / "killed",
        trials=TrialSettings(rollout=rollout_config(tmp_path)),
    )
    assert t.outcome is Outcome.SANDBOX_FAILED and not t.valid


async def test_a_trial_over_its_wall_clock_limit_is_timeout_and_leaves_nothing_behind(
    task, tokenizer, proxy_on, tmp_path
):
    engine = ScriptedEngine(tokenizer, [call("bash", command="sleep 37.25")], delay_s=0.0)
    engine.max_len = 8192
    proxy = await proxy_on(engine, context_length=8192)
    t = await run_trial(
        task,
        harness=get_harness("builtin"),
        proxy=proxy,
        trial_id="slow-0",
        group_id="g",
        trial_dir=tmp_path / "slow",
        trials=TrialSettings(rollout=rollout_config(tmp_path, trial_timeout_s=8.0)),
    )
    assert t.outcome is Outcome.TIMEOUT and not t.valid
    assert proxy.sessions == {}  # the attempt's session was closed and archived
    assert (tmp_path / "slow" / "attempt_0" / "trajectory.json").is_file()
    left = subprocess.run(
        [
            "docker",
            "ps",
            "-aq",
            "--filter",
            "label=legorl.role=agent",
            "--filter",
            f"label=legorl.task={task.instance_id}",
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert left.strip() == ""
    # The container's processes go with it; the kernel may take a moment to reap them after the removal.
    for _ in range(50):
        procs = subprocess.run(["pgrep", "-f", "sleep 37.25"], capture_output=True, text=True).stdout
        if not procs.strip():
            break
        time.sleep(0.2)
    assert procs.strip() == ""


PROBE = """
import socket, sys, urllib.request
url, others = sys.argv[1], sys.argv[2:]
print("proxy", urllib.request.urlopen(url, timeout=5).status)
for target in others:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        print(target, "open")
    except OSError as exc:
        print(target, "closed", type(exc).__name__)
"""


class InsideProbe:
    """A harness that runs inside the sandbox (network proxy_only) and tries the proxy and the host's other
    ports."""

    name, network, mounts, sandbox_user = "inside-probe", "proxy_only", None, None

    def __init__(self, others):
        self.others, self.output = others, ""

    async def run(self, task, sandbox, llm) -> HarnessResult:
        host = llm.openai_base_url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)[0]
        targets = [f"{host}:{port}" for port in self.others] + [f"127.0.0.1:{port}" for port in self.others]
        result = await sandbox.exec(["python3", "-c", PROBE, llm.anthropic_base_url, *targets], timeout=60)
        self.output = result.stdout + result.stderr
        return HarnessResult(Outcome.SUBMITTED, 0)


async def test_a_harness_inside_the_sandbox_reaches_the_proxy_and_nothing_else(
    task, tokenizer, proxy_on, tmp_path
):
    import asyncio

    hits = []

    async def other_server(reader, writer):
        hits.append(1)
        writer.close()

    server = await asyncio.start_server(other_server, "0.0.0.0", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = await proxy_on(ScriptedEngine(tokenizer, ["x"]))
    probe = InsideProbe([port])
    try:
        t = await run_trial(
            task,
            harness=probe,
            proxy=proxy,
            trial_id="probe-0",
            group_id="g",
            trial_dir=tmp_path / "probe",
            trials=TrialSettings(rollout=rollout_config(tmp_path)),
        )
    finally:
        server.close()
    lines = dict(line.split(" ", 1) for line in probe.output.strip().splitlines())
    assert lines.pop("proxy") == "200", probe.output  # the session's URL, through the sandbox's proxy route
    assert lines and all(v.startswith("closed") for v in lines.values()), probe.output
    assert hits == [] and t.outcome is Outcome.SUBMITTED
