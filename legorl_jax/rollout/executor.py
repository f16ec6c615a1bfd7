"""Where a trial attempt's sandbox, harness and grading run: the `TrialExecutor` seam and the local one.

    async with executor.slot() as slot:                # a place with capacity for one attempt
        await slot.ensure_image(task)                 # the task's image on that place's Docker daemon
        work = Work(harness, session, spec, llm_options, verifier_config=...)  # one attempt's record
        attempt = await slot.work(task, work)
        report = await slot.grade(task, attempt.diff, work)

The orchestrator (trial.py) keeps what belongs to the run: the proxy session (opened before `work`, its
flags read and its record closed after), the outcome rules, the retries and the archive. A slot runs the
rest where its sandbox lives: `LocalExecutor` in this process, `RayExecutor` (ray_executor.py) on a Ray
node. A slot whose place went away mid-call (a Ray node died) raises `NodeLost`: the attempt is the
infrastructure failure `node_failed`, retried in another slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import traceback
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from legorl_jax.config import VerifierConfig
from legorl_jax.harness.base import Harness, HarnessCrashed, HarnessResult, LLMEndpoint
from legorl_jax.proxy.base import SessionInfo
from legorl_jax.sandbox.base import SandboxError, SandboxSpec
from legorl_jax.tasks.agent_sandbox import agent_sandbox
from legorl_jax.tasks.report import VerifierReport
from legorl_jax.tasks.schema import Task
from legorl_jax.tasks.task_image import ensure_task_image
from legorl_jax.tasks.verifier import grade
from legorl_jax.types import Outcome, SessionRecord

log = logging.getLogger(__name__)


class NodeLost(RuntimeError):
    """The place running a slot's call went away (a Ray node or its worker died) before it answered."""


@dataclasses.dataclass
class Attempt:
    """One attempt of a trial as it runs: what its sandbox, harness and verifier gave."""

    outcome: Outcome | None = None
    reason: str = ""
    result: HarnessResult | None = None
    diff: str = ""
    report: VerifierReport | None = None
    closed: SessionRecord | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    where: str = ""

    @property
    def ended(self) -> Outcome:
        """The outcome of an attempt that has run (every path through an attempt sets one)."""
        if self.outcome is None:
            raise RuntimeError(f"an attempt ended without an outcome ({self.reason or 'no reason given'})")
        return self.outcome


@dataclasses.dataclass(frozen=True)
class Work:
    """What one attempt needs where its sandbox lives: the harness, its proxy session, the sandbox's spec,
    the harness's endpoint options, (tests) a sandbox factory, and the verifier's settings for grading."""

    harness: Harness
    info: SessionInfo
    spec: SandboxSpec
    llm_options: dict[str, Any]
    sandbox_factory: Callable | None = None
    verifier_config: VerifierConfig | None = None


async def work_in_sandbox(task: Task, work: Work) -> Attempt:
    """The agent's part of an attempt, run where its sandbox lives: start the sandbox, run the harness
    against the session `work.info`, take the diff. Sets `outcome` only on a sandbox failure or a crash."""
    harness, info, spec, sandbox_factory = work.harness, work.info, work.spec, work.sandbox_factory
    attempt = Attempt()
    t0 = time.monotonic()
    inside = spec.network == "proxy_only"
    try:
        async with agent_sandbox(task, sandbox_factory=sandbox_factory, spec=spec) as (sandbox, workspace):
            attempt.timings["sandbox_start_s"] = time.monotonic() - t0
            base = getattr(sandbox, "proxy_url_base", None) if inside else None
            sid = info.session_id
            llm = LLMEndpoint(
                openai_base_url=f"{base}/s/{sid}/v1" if base else info.openai_base_url,
                anthropic_base_url=f"{base}/s/{sid}" if base else info.anthropic_base_url,
                **work.llm_options,
            )
            t1 = time.monotonic()
            try:
                attempt.result = await harness.run(task, sandbox, llm)
            except HarnessCrashed as exc:
                attempt.outcome, attempt.reason = Outcome.HARNESS_CRASHED, str(exc)
            except SandboxError:
                raise  # the sandbox failed under the harness (killed, lost): sandbox_failed, below
            except Exception as exc:  # an adapter's own bug fails its trial, not the whole run
                attempt.outcome = Outcome.HARNESS_CRASHED
                attempt.reason = f"the {harness.name} adapter raised {exc!r}:\n{traceback.format_exc()}"
                log.warning("trial of %s: %s", task.instance_id, attempt.reason)
            attempt.timings["harness_s"] = time.monotonic() - t1
            t_stop = time.monotonic()
            attempt.diff = await sandbox.diff(workspace.base_commit)
        attempt.timings["sandbox_stop_s"] = time.monotonic() - t_stop  # the diff and the sandbox's removal
    except SandboxError as exc:
        if attempt.outcome is None:
            attempt.outcome, attempt.reason = Outcome.SANDBOX_FAILED, str(exc)
    return attempt


class Slot(Protocol):
    """Capacity for one attempt at one place (module docstring)."""

    where: str
    """The place, for the archive and the logs (`local`, or the Ray node's address)."""

    async def ensure_image(self, task: Task) -> None:
        """The task's image on this place's Docker daemon, built or loaded once; raises `ImageError`."""
        ...

    async def work(self, task: Task, work: Work) -> Attempt:
        """`work_in_sandbox` at this place."""
        ...

    async def grade(self, task: Task, diff: str, work: Work) -> VerifierReport:
        """The verifier on `diff` at this place (`work.verifier_config`); raises `VerifierError`."""
        ...


class TrialExecutor(Protocol):
    """Hands out slots; `close` gives back what it started."""

    def slot(self) -> contextlib.AbstractAsyncContextManager[Slot]:
        """A slot with capacity, waiting for one when all are busy."""
        ...

    async def close(self) -> None: ...


class LocalSlot:
    """A slot in this process; on a Ray node the same class is the slot actor (`ray_executor`)."""

    where = "local"

    async def ensure_image(self, task: Task) -> None:
        await asyncio.to_thread(ensure_task_image, task)

    async def work(self, task: Task, work: Work) -> Attempt:
        return await work_in_sandbox(task, work)

    async def grade(self, task: Task, diff: str, work: Work) -> VerifierReport:
        return await grade(task, diff, sandbox_factory=work.sandbox_factory, config=work.verifier_config)

    async def owner(self) -> dict[str, str]:
        """Who owns this slot's sandboxes (sandbox/reaper.py's owner labels) and the Docker daemon they run
        on (`DOCKER_HOST`, '' for the default socket): what the Ray driver reaps when this slot's node is
        lost."""
        import os

        from legorl_jax.sandbox import reaper

        return {**reaper.owner_identity(), "docker_host": os.environ.get("DOCKER_HOST", "")}


class LocalExecutor:
    """Every attempt in this process, on this host's Docker daemon; `rollout.concurrency` bounds them."""

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        yield LocalSlot()

    async def close(self) -> None:
        return None
