"""One trial: agent sandbox -> proxy session -> harness -> diff -> verifier in a fresh sandbox ->
`Trajectory`.

    trajectory = await run_trial(task, harness=..., proxy=..., trial_id="calc-0", group_id="calc@3",
                                 trial_dir=Path("runs/x/trials/step_3/calc-0"), config=RolloutConfig(), ...)

Each attempt has its own sandbox, its own proxy session and its own folder `<trial_dir>/attempt_<k>/`
(the proxy's `trajectory.json` and `sequences.npz`, `harness.log`, `diff.patch`, `verifier.json` and the
verifier's raw `verifier_output.txt`, `attempt.json`); `<trial_dir>/trial.json` names the attempt that
counts and its outcome. Every file is written atomically, and the attempt's files are complete before the
trajectory is returned for training.

Outcomes (types.Outcome; docs/architecture.md §4):
- the policy's, kept in the loss with the verifier's reward: `submitted`; `step_limit`; `context_overflow`
  (the proxy refused a prompt); `no_tool_collapse`; `format_failure` (the harness stopped on output it
  could not parse). The diff is graded whatever the policy outcome (a step-limited agent may have fixed it).
- infrastructure, dropped and counted: `sandbox_failed` (the agent sandbox did not start or prepare),
  `engine_failed` (the proxy saw the engine fail), `harness_crashed`, `verifier_failed`, `timeout` (the
  attempt ran past `rollout.trial_timeout_s`; its sandbox is removed and the harness cancelled). Such an
  attempt is retried `rollout.retries` times with a fresh sandbox and session; the last one counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import pathlib
import time
from collections.abc import Callable
from typing import Any

from legorl_jax.config import RolloutConfig, SandboxConfig, VerifierConfig
from legorl_jax.harness.base import Harness, HarnessCrashed, HarnessResult, LLMEndpoint
from legorl_jax.proxy.archive import atomic_write_text
from legorl_jax.proxy.base import Proxy
from legorl_jax.rollout.behaviour import behaviour_features
from legorl_jax.sandbox.base import SandboxError
from legorl_jax.tasks.agent_sandbox import agent_sandbox, agent_sandbox_spec
from legorl_jax.tasks.report import VerifierError, VerifierReport
from legorl_jax.tasks.schema import Task
from legorl_jax.tasks.task_image import ImageError, ensure_task_image
from legorl_jax.tasks.verifier import grade
from legorl_jax.types import Outcome, SessionRecord, Trajectory

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Attempt:
    outcome: Outcome | None = None
    reason: str = ""
    result: HarnessResult | None = None
    diff: str = ""
    report: VerifierReport | None = None
    closed: SessionRecord | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def ended(self) -> Outcome:
        """The outcome of an attempt that has run (every path through `_attempt` sets one)."""
        if self.outcome is None:
            raise RuntimeError(f"an attempt ended without an outcome ({self.reason or 'no reason given'})")
        return self.outcome


def policy_outcome(result: HarnessResult, flags: dict[str, bool]) -> Outcome:
    """The policy outcome of a finished run: the proxy's flags first (they are what the policy did), then
    the harness's."""
    if flags.get("context_overflow"):
        return Outcome.CONTEXT_OVERFLOW
    if flags.get("no_tool_collapse"):
        return Outcome.NO_TOOL_COLLAPSE
    return result.exit_status


async def _attempt(
    task: Task,
    k: int,
    *,
    harness: Harness,
    proxy: Proxy,
    trial_id: str,
    folder: pathlib.Path,
    llm_options: dict[str, Any],
    sandbox_config: SandboxConfig | None,
    verifier_config: VerifierConfig | None,
    sandbox_factory: Callable | None,
) -> _Attempt:
    attempt = _Attempt()
    t0 = time.monotonic()
    inside = harness.network == "proxy_only"
    port = int(proxy.base_url.rsplit(":", 1)[1]) if inside and proxy.base_url else None
    spec = agent_sandbox_spec(
        task,
        sandbox_config,
        network="proxy_only" if inside else None,
        proxy_port=port,
        mounts=harness.mounts,
    )
    if harness.sandbox_user:  # e.g. SWE-agent hard-codes /root: its sandbox runs as root
        spec = dataclasses.replace(spec, user=harness.sandbox_user)
    info = proxy.open_session(task.instance_id, trial_id, {"attempt": k}, trial_dir=folder)
    try:
        try:
            async with agent_sandbox(task, sandbox_factory=sandbox_factory, spec=spec) as (
                sandbox,
                workspace,
            ):
                attempt.timings["sandbox_start_s"] = time.monotonic() - t0
                base = getattr(sandbox, "proxy_url_base", None) if inside else None
                sid = info.session_id
                llm = LLMEndpoint(
                    openai_base_url=f"{base}/s/{sid}/v1" if base else info.openai_base_url,
                    anthropic_base_url=f"{base}/s/{sid}" if base else info.anthropic_base_url,
                    **llm_options,
                )
                t1 = time.monotonic()
                try:
                    attempt.result = await harness.run(task, sandbox, llm)
                except HarnessCrashed as exc:
                    attempt.outcome, attempt.reason = Outcome.HARNESS_CRASHED, str(exc)
                attempt.timings["harness_s"] = time.monotonic() - t1
                t_stop = time.monotonic()
                attempt.diff = await sandbox.diff(workspace.base_commit)
            attempt.timings["sandbox_stop_s"] = (
                time.monotonic() - t_stop
            )  # the diff and the sandbox's removal
        except SandboxError as exc:
            if attempt.outcome is None:
                attempt.outcome, attempt.reason = Outcome.SANDBOX_FAILED, str(exc)
        flags = proxy.session_flags(info.session_id)
        if flags.get("engine_failed"):
            attempt.outcome, attempt.reason = (
                Outcome.ENGINE_FAILED,
                attempt.reason or "the engine failed behind the proxy",
            )
        if attempt.outcome is None and attempt.result is not None:
            t2 = time.monotonic()
            try:
                attempt.report = await grade(
                    task, attempt.diff, sandbox_factory=sandbox_factory, config=verifier_config
                )
                attempt.outcome = policy_outcome(attempt.result, flags)
            except VerifierError as exc:
                attempt.outcome, attempt.reason = Outcome.VERIFIER_FAILED, str(exc)
            attempt.timings["verifier_s"] = time.monotonic() - t2
    finally:
        attempt.closed = await proxy.close_session(info.session_id)
        attempt.timings["trial_s"] = time.monotonic() - t0
    return attempt


def _write_attempt(folder: pathlib.Path, attempt: _Attempt) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "diff.patch", attempt.diff)
    atomic_write_text(folder / "harness.log", attempt.result.log if attempt.result else "")
    if attempt.report is not None:
        report = attempt.report.to_dict()
        atomic_write_text(folder / "verifier_output.txt", report.pop("output", ""))
        atomic_write_text(folder / "verifier.json", json.dumps(report, indent=1, default=str))
    summary = {
        "outcome": attempt.outcome.value if attempt.outcome else None,
        "reason": attempt.reason,
        "reward": attempt.report.reward if attempt.report is not None else None,
        "exit_status": attempt.result.exit_status.value if attempt.result else None,
        "steps": attempt.result.steps if attempt.result else None,
        "timings": attempt.timings,
    }
    atomic_write_text(folder / "attempt.json", json.dumps(summary, indent=1))


async def run_trial(
    task: Task,
    *,
    harness: Harness,
    proxy: Proxy,
    trial_id: str,
    group_id: str,
    trial_dir: str | pathlib.Path,
    config: RolloutConfig | None = None,
    step_limit: int = 30,
    model: str = "legorl-policy",
    sandbox_config: SandboxConfig | None = None,
    verifier_config: VerifierConfig | None = None,
    sandbox_factory: Callable | None = None,
) -> Trajectory:
    """Runs one trial with retries of infrastructure failures (module docstring)."""
    config = config or RolloutConfig()
    trial_dir = pathlib.Path(trial_dir)
    llm_options = {"model": model, "step_limit": step_limit}
    attempts: list[_Attempt] = []
    for k in range(config.retries + 1):
        folder = trial_dir / f"attempt_{k}"
        try:
            await asyncio.to_thread(ensure_task_image, task)
        except ImageError as exc:
            attempt = _Attempt(Outcome.SANDBOX_FAILED, f"the task's image is not available: {exc}")
            _write_attempt(folder, attempt)
            attempts.append(attempt)
            continue
        try:
            attempt = await asyncio.wait_for(
                _attempt(
                    task,
                    k,
                    harness=harness,
                    proxy=proxy,
                    trial_id=trial_id,
                    folder=folder,
                    llm_options=llm_options,
                    sandbox_config=sandbox_config,
                    verifier_config=verifier_config,
                    sandbox_factory=sandbox_factory,
                ),
                timeout=config.trial_timeout_s,
            )
        except TimeoutError:
            attempt = _Attempt(Outcome.TIMEOUT, f"the attempt ran past {config.trial_timeout_s:.0f} s")
            attempt.closed = await _close_leftover(proxy, trial_id, folder)
        _write_attempt(folder, attempt)
        attempts.append(attempt)
        if not attempt.ended.is_infra_failure:
            break
        log.warning(
            "trial %s attempt %d dropped (%s): %s", trial_id, k, attempt.ended.value, attempt.reason[:300]
        )
    final = attempts[-1]
    trajectory = _trajectory(task, trial_id, group_id, final, attempts)
    summary = {
        "trial_id": trial_id,
        "task_id": task.instance_id,
        "group_id": group_id,
        "attempts": len(attempts),
        "final_attempt": len(attempts) - 1,
        "outcome": trajectory.outcome.value,
        "reward": trajectory.reward,
        "dropped_attempts": [a.ended.value for a in attempts[:-1]],
        "features": trajectory.features,
        "timings": trajectory.timings,
    }
    atomic_write_text(trial_dir / "trial.json", json.dumps(summary, indent=1))
    return trajectory


async def _close_leftover(proxy: Proxy, trial_id: str, folder: pathlib.Path) -> SessionRecord | None:
    """Closes (and archives) the session a timed-out attempt left open."""
    sid = proxy.find_session(trial_id, folder)
    return None if sid is None else await proxy.close_session(sid)


def _trajectory(
    task: Task, trial_id: str, group_id: str, final: _Attempt, attempts: list[_Attempt]
) -> Trajectory:
    closed = final.closed
    features = behaviour_features(closed.turns if closed is not None else ())
    if final.result is not None:
        features.update({f"harness_{k}": v for k, v in final.result.features.items()})
    timings = dict(final.timings)
    timings["model_s"] = closed.model_s if closed is not None else 0.0
    timings["tool_s"] = closed.tool_s if closed is not None else 0.0
    timings["attempts"] = float(len(attempts))
    valid = not final.ended.is_infra_failure
    reward = float(final.report.reward) if valid and final.report is not None else 0.0
    return Trajectory(
        trial_id=trial_id,
        task_id=task.instance_id,
        group_id=group_id,
        sequences=tuple(closed.sequences) if closed is not None and valid else (),
        reward=reward,
        outcome=final.ended,
        messages=closed.messages if closed is not None else (),
        features=features,
        timings=timings,
        verifier_report=final.report,
    )
