"""One trial: agent sandbox -> proxy session -> harness -> diff -> verifier in a fresh sandbox ->
`Trajectory`.

    trajectory = await run_trial(task, harness=..., proxy=..., trial_id="calc-0", group_id="calc@3",
                                 trial_dir=Path("runs/x/trials/step_3/calc-0"), trials=TrialSettings(...))

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
  attempt is retried `rollout.retries` times with a fresh sandbox and session, once the engine side has
  settled (rollout/retry.py: a dead engine taken out of the router, within `rollout.retry_wait_s`); the last
  one counts. Every attempt's outcome is on the trajectory (`Trajectory.attempts`), so failures that a
  retry made good are counted too (`rollout/infra_failures/<reason>`, `rollout/retried`).

A trial cancelled before it ended (the loop stopped with it in flight) leaves no folder: an `attempt_<k>`
without `trial.json` is never left behind (its session record, if the proxy archived one, stays under
`sessions/`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import pathlib
import shutil
import time
from collections.abc import Callable
from typing import Any

from legorl_jax.config import RolloutConfig, SandboxConfig, VerifierConfig
from legorl_jax.harness.base import Harness, HarnessResult
from legorl_jax.proxy.archive import atomic_write_text
from legorl_jax.proxy.base import Proxy
from legorl_jax.rollout.behaviour import behaviour_features
from legorl_jax.rollout.executor import Attempt, LocalExecutor, NodeLost, Slot, TrialExecutor, Work
from legorl_jax.rollout.retry import wait_before_retry
from legorl_jax.rollout.settings import TrialSettings
from legorl_jax.tasks.agent_sandbox import agent_sandbox_spec
from legorl_jax.tasks.report import VerifierError
from legorl_jax.tasks.schema import Task
from legorl_jax.tasks.task_image import ImageError
from legorl_jax.types import Outcome, SessionFlags, SessionRecord, Trajectory

log = logging.getLogger(__name__)


def policy_outcome(result: HarnessResult, flags: SessionFlags) -> Outcome:
    """The policy outcome of a finished run: the proxy's flags first (they are what the policy did), then
    the harness's."""
    if flags.context_overflow:
        return Outcome.CONTEXT_OVERFLOW
    if flags.no_tool_collapse:
        return Outcome.NO_TOOL_COLLAPSE
    return result.exit_status


async def _attempt(
    task: Task,
    k: int,
    *,
    slot: Slot,
    harness: Harness,
    proxy: Proxy,
    trial_id: str,
    folder: pathlib.Path,
    llm_options: dict[str, Any],
    sandbox_config: SandboxConfig | None,
    verifier_config: VerifierConfig | None,
    sandbox_factory: Callable | None,
) -> Attempt:
    t0 = time.monotonic()
    inside = harness.network == "proxy_only"
    host, _, port = (proxy.base_url or "").removeprefix("http://").rpartition(":")
    spec = agent_sandbox_spec(
        task,
        sandbox_config,
        network="proxy_only" if inside else None,
        proxy_port=int(port) if inside and port else None,
        mounts=harness.mounts,
    )
    if inside and host:  # the slot's relay finds the proxy where it listens (another machine on Ray)
        spec = dataclasses.replace(spec, proxy_host=host)
    if harness.sandbox_user:  # e.g. SWE-agent hard-codes /root: its sandbox runs as root
        spec = dataclasses.replace(spec, user=harness.sandbox_user)
    info = proxy.open_session(task.instance_id, trial_id, {"attempt": k}, trial_dir=folder)
    attempt = Attempt(where=slot.where)
    try:
        try:
            work = Work(harness, info, spec, llm_options, sandbox_factory, verifier_config)
            attempt = await slot.work(task, work)
            attempt.where = slot.where
            flags = proxy.session_flags(info.session_id)
            if flags.engine_failed:
                attempt.outcome, attempt.reason = (
                    Outcome.ENGINE_FAILED,
                    attempt.reason or "the engine failed behind the proxy",
                )
            if attempt.outcome is None and attempt.result is not None:
                t2 = time.monotonic()
                try:
                    attempt.report = await slot.grade(task, attempt.diff, work)
                    attempt.outcome = policy_outcome(attempt.result, flags)
                except VerifierError as exc:
                    attempt.outcome, attempt.reason = Outcome.VERIFIER_FAILED, str(exc)
                attempt.timings["verifier_s"] = time.monotonic() - t2
        except NodeLost as exc:
            attempt.report = None
            attempt.outcome, attempt.reason = Outcome.NODE_FAILED, str(exc)
    finally:
        attempt.closed = await proxy.close_session(info.session_id)
        attempt.timings["trial_s"] = time.monotonic() - t0
    return attempt


async def _attempt_in_slot(
    slot: Slot,
    task: Task,
    k: int,
    *,
    harness: Harness,
    proxy: Proxy,
    trial_id: str,
    folder: pathlib.Path,
    config: RolloutConfig,
    llm_options: dict[str, Any],
    sandbox_config: SandboxConfig | None,
    verifier_config: VerifierConfig | None,
    sandbox_factory: Callable | None,
) -> Attempt:
    """The image on the slot's place, then the attempt under the wall-clock limit."""
    try:
        await slot.ensure_image(task)
    except ImageError as exc:
        return Attempt(Outcome.SANDBOX_FAILED, f"the task's image is not available: {exc}", where=slot.where)
    except NodeLost as exc:
        return Attempt(Outcome.NODE_FAILED, str(exc), where=slot.where)
    try:
        return await asyncio.wait_for(
            _attempt(
                task,
                k,
                slot=slot,
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
        attempt = Attempt(
            Outcome.TIMEOUT, f"the attempt ran past {config.trial_timeout_s:.0f} s", where=slot.where
        )
        attempt.closed = await _close_leftover(proxy, trial_id, folder)
        return attempt


def _write_attempt(folder: pathlib.Path, attempt: Attempt) -> None:
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
        "where": attempt.where,
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
    trials: TrialSettings | None = None,
    sandbox_factory: Callable | None = None,
    executor: TrialExecutor | None = None,
) -> Trajectory:
    """Runs one trial with retries of infrastructure failures (module docstring); each attempt in a slot of
    `executor` (this process when None)."""
    trials = trials or TrialSettings()
    config = trials.rollout
    trial_dir = pathlib.Path(trial_dir)
    started_at = time.time()
    llm_options = {"model": trials.model, "step_limit": trials.step_limit}
    attempts: list[Attempt] = []
    executor = executor or LocalExecutor()
    existed = trial_dir.exists()
    try:
        for k in range(config.retries + 1):
            folder = trial_dir / f"attempt_{k}"
            async with executor.slot() as slot:
                attempt = await _attempt_in_slot(
                    slot,
                    task,
                    k,
                    harness=harness,
                    proxy=proxy,
                    trial_id=trial_id,
                    folder=folder,
                    config=config,
                    llm_options=llm_options,
                    sandbox_config=trials.sandbox,
                    verifier_config=trials.verifier,
                    sandbox_factory=sandbox_factory,
                )
            _write_attempt(folder, attempt)
            attempts.append(attempt)
            if not attempt.ended.is_infra_failure:
                break
            retry = k < config.retries
            waited = (
                await wait_before_retry(attempt.ended, engine=getattr(proxy, "engine", None), config=config)
                if retry
                else ""
            )
            log.warning(
                "trial %s attempt %d on %s dropped (%s): %s%s",
                trial_id,
                k,
                attempt.where,
                attempt.ended.value,
                attempt.reason[:300],
                f"; retried after waiting for {waited}" if retry else "; no retry left",
            )
    except asyncio.CancelledError:
        if not existed and not (trial_dir / "trial.json").exists():
            shutil.rmtree(trial_dir, ignore_errors=True)  # no attempt folder without its trial.json
        raise
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
        "started_at": started_at,  # unix seconds: when the trial began and ended (every attempt)
        "ended_at": time.time(),
    }
    atomic_write_text(trial_dir / "trial.json", json.dumps(summary, indent=1))
    return trajectory


async def _close_leftover(proxy: Proxy, trial_id: str, folder: pathlib.Path) -> SessionRecord | None:
    """Closes (and archives) the session a timed-out attempt left open."""
    sid = proxy.find_session(trial_id, folder)
    return None if sid is None else await proxy.close_session(sid)


def _trajectory(
    task: Task, trial_id: str, group_id: str, final: Attempt, attempts: list[Attempt]
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
        attempts=tuple(a.ended.value for a in attempts),
    )
