"""The real mini-swe-agent package against the real capture proxy, its commands in a real agent sandbox.

The scripted engine stands in for the policy only (it returns chosen tool-call texts as token ids with
known log-probs); the proxy, litellm, mini-swe-agent's agent loop and templates, the sandbox and the
verifier are all real.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from scripted_engine import ScriptedEngine

from legorl_jax.engine.base import EngineError
from legorl_jax.harness import HarnessCrashed, HarnessNotInstalled, LLMEndpoint, get_harness
from legorl_jax.tasks.agent_sandbox import agent_sandbox
from legorl_jax.tasks.verifier import grade
from legorl_jax.types import Outcome

ROOT = pathlib.Path(__file__).parents[2]
TASK = "autocomplete-casefold-prefix"
# (import name, install command): the `harness` tests below skip where the package is missing (conftest.py).
REQUIRED_PACKAGE = ("minisweagent", "python tools/install_harness.py mini_swe_agent")
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def tool_call(name: str, **arguments) -> str:
    """One tool call in the tiny template's (Qwen3 JSON) format, as the policy would sample it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def fix_script(task) -> list[str]:
    """mini-swe-agent's bash calls for the task's known fix, ending with the submission its prompt asks
    for."""
    return [
        tool_call("bash", command="git status --short && ls"),
        tool_call("bash", command=f"git apply <<'PATCH'\n{task.patch}PATCH"),
        tool_call("bash", command="python3 -m pytest -q -x 2>&1 | tail -3"),
        tool_call("bash", command="git diff > /tmp/patch.txt"),
        tool_call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/patch.txt"),
    ]


class _Connections:
    """Every socket address this process connects to or resolves while `recording` (a Python audit hook)."""

    def __init__(self):
        self.recording = False
        self.seen: list[tuple[str, object]] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if self.recording and event in ("socket.connect", "socket.getaddrinfo"):
            self.seen.append((event, args[1] if event == "socket.connect" else args[0]))

    def outside(self) -> list[tuple[str, object]]:
        """Those that would leave this machine (unix sockets and loopback stay on it)."""
        return [(event, target) for event, target in self.seen if not _is_local(target)]


def _is_local(target: object) -> bool:
    host = target[0] if isinstance(target, tuple) else target
    host = host.decode() if isinstance(host, bytes) else host
    return host is None or host in LOOPBACK or (isinstance(host, str) and host.startswith(("/", "\0")))


@pytest.fixture(scope="module")
def connections():
    return _Connections()


async def run_mini(task, engine, proxy_on, step_limit=10, **proxy_config):
    """One trial of the real harness: (HarnessResult, the agent's diff, the closed proxy session)."""
    harness = get_harness("mini_swe_agent")
    proxy = await proxy_on(engine, **proxy_config)
    session = proxy.open_session(task.instance_id, f"{task.instance_id}-mini")
    llm = LLMEndpoint(session.openai_base_url, session.anthropic_base_url, step_limit=step_limit)
    async with agent_sandbox(task) as (sandbox, workspace):
        result = await harness.run(task, sandbox, llm)
        diff = await sandbox.diff(workspace.base_commit)
    return result, diff, await proxy.close_session(session.session_id)


@pytest.mark.harness
@pytest.mark.docker
async def test_a_scripted_fix_through_mini_swe_agent_submits_scores_reward_one_and_records_every_sampled_token(  # noqa: E501
    builtin_tasks, tokenizer, proxy_on, connections
):
    task = builtin_tasks[TASK]
    script = fix_script(task)
    engine = ScriptedEngine(tokenizer, script)
    connections.recording = True
    try:
        result, diff, closed = await run_mini(task, engine, proxy_on)
    finally:
        connections.recording = False
    assert result.exit_status is Outcome.SUBMITTED and result.steps == len(script), result.log[-3000:]
    assert result.features["commands"] == len(script) and result.features["test_runs"] == 1
    # mini-swe-agent's own trajectory: its agent, its exit, the submission it read from the command's output.
    trajectory = json.loads(result.log)
    assert trajectory["info"]["config"]["agent_type"] == "minisweagent.agents.default.DefaultAgent"
    assert trajectory["info"]["exit_status"] == "Submitted"
    submission = trajectory["info"]["submission"]
    assert submission.startswith("diff --git a/typeahead/normalize.py")
    # The same hunk as the sandbox's own (binary-safe, full-index) diff, which also holds pytest's caches.
    assert submission[submission.index("\n@@ ") :] in diff
    report = await grade(task, diff)
    assert report.reward == 1.0 and report.resolved and not report.tampering, report
    # Every reply is one turn on the session's one main branch: its tokens (and the end-of-turn token)
    # are the mask-1 positions, each with the scripted engine's log-prob of that token.
    assert len(engine.calls) == len(script)
    (seq,) = closed.sequences
    sampled = seq.loss_mask == 1
    assert sampled.sum() == sum(len(tokenizer.encode(text)) + 1 for text in script)
    expected = np.asarray([-0.01 * (1 + (t % 97)) for t in seq.token_ids[sampled]], np.float32)
    np.testing.assert_allclose(seq.behaviour_logprobs[sampled], expected, rtol=0, atol=1e-7)
    assert closed.flags.raised() == (), closed.flags
    assert connections.seen and not connections.outside(), connections.outside()


@pytest.mark.harness
@pytest.mark.docker
@pytest.mark.parametrize(("step_limit", "status", "steps"), [(10, "format_failure", 3), (2, "step_limit", 2)])
async def test_replies_without_a_tool_call_end_in_a_policy_outcome_not_a_crash(
    builtin_tasks, tokenizer, proxy_on, step_limit, status, steps
):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, ["The bug is in the prefix matching; I would lowercase both sides."])
    result, diff, closed = await run_mini(task, engine, proxy_on, step_limit=step_limit)
    # mini-swe-agent's max_consecutive_format_errors (3) ends it unless the step limit comes first; the proxy
    # still allows 3 replies without a tool call in a row, so it has not ended the session.
    assert result.exit_status is Outcome(status) and result.steps == steps, result.log[-3000:]
    assert result.features["format_errors"] == steps and result.features["commands"] == 0
    assert diff == "" and not closed.flags.no_tool_collapse


@pytest.mark.harness
@pytest.mark.docker
async def test_a_session_the_proxy_ended_for_missing_tool_calls_is_no_tool_collapse(
    builtin_tasks, tokenizer, proxy_on
):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, ["Thinking about it."])
    result, _, closed = await run_mini(task, engine, proxy_on, max_consecutive_no_tool=1)
    assert result.exit_status is Outcome.NO_TOOL_COLLAPSE, result.log[-3000:]
    assert closed.flags.no_tool_collapse and "Session terminated:" in result.log


@pytest.mark.harness
@pytest.mark.docker
async def test_a_prompt_over_the_context_is_context_overflow(builtin_tasks, tokenizer, proxy_on):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, [tool_call("bash", command="ls")])
    # mini-swe-agent's swebench prompt alone is far over 512 tokens: the first call is refused.
    result, _, closed = await run_mini(task, engine, proxy_on, context_length=512)
    assert result.exit_status is Outcome.CONTEXT_OVERFLOW and result.steps == 1, result.log[-3000:]
    assert closed.flags.context_overflow and not engine.calls


@pytest.mark.harness
@pytest.mark.docker
async def test_an_engine_failure_behind_the_proxy_is_a_harness_crash_naming_the_error(
    builtin_tasks, tokenizer, proxy_on
):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, ["unused"])
    engine.fail_with = EngineError("the scripted engine is down")
    # The agent retries a failed call (3 attempts here, 4 s and 8 s apart), then gives up with litellm's
    # error.
    with pytest.raises(HarnessCrashed, match=r"raised BadGatewayError: .*the scripted engine is down"):
        await run_mini(task, engine, proxy_on)


@pytest.mark.harness
@pytest.mark.docker
async def test_cancelling_a_run_stops_the_agent_thread_during_its_command(builtin_tasks, tokenizer, proxy_on):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, [tool_call("bash", command="sleep 50")])
    proxy = await proxy_on(engine)
    session = proxy.open_session(task.instance_id, "cancelled")
    llm = LLMEndpoint(session.openai_base_url, session.anthropic_base_url, step_limit=5)
    async with agent_sandbox(task) as (sandbox, _):
        run = asyncio.create_task(get_harness("mini_swe_agent").run(task, sandbox, llm))
        while not engine.calls:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # the reply is back and `sleep 50` is running in the sandbox
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        started = time.monotonic()
        while any(t.name.startswith("mini-swe-agent") for t in threading.enumerate()):
            assert time.monotonic() - started < 10, [t.name for t in threading.enumerate()]
            await asyncio.sleep(0.05)
    assert len(engine.calls) == 1


@pytest.mark.harness
def test_the_preset_selects_the_package_swebench_config_in_tool_calling_mode(compose_config):
    cfg = compose_config(["+harness=mini_swe_agent", "harness.step_limit=7"])
    assert cfg.harness.name == "mini_swe_agent" and cfg.harness.step_limit == 7
    harness = get_harness(cfg.harness.name, **cfg.harness.options)
    assert harness.config_path.parts[-2:] == ("benchmarks", "swebench.yaml")
    assert (
        harness.command_timeout_s == 60 and harness.settings["model"]["model_kwargs"]["parallel_tool_calls"]
    )
    # default.yaml asks for ```mswea_bash_command blocks (text mode), which LitellmModel would never see.
    with pytest.raises(
        ValueError, match=r"tool-calling agent config .* got 'default' .*text-mode action blocks: True"
    ):
        get_harness("mini_swe_agent", config="default")


@pytest.mark.harness
def test_installing_it_again_changes_nothing():
    def freeze() -> str:
        return subprocess.run(
            [sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, check=True, timeout=120
        ).stdout

    before = freeze()
    ran = subprocess.run([sys.executable, str(ROOT / "tools" / "install_harness.py"), "mini_swe_agent"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("mini-swe-agent 2.4.") and "is already installed" in ran.stdout
    assert freeze() == before


def test_without_the_package_the_harness_names_its_install_command(monkeypatch):
    for name in [m for m in sys.modules if m == "minisweagent" or m.startswith("minisweagent.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "minisweagent", None)  # what `import` sees when the package is absent
    with pytest.raises(HarnessNotInstalled, match=r"tools/install_harness.py mini_swe_agent"):
        get_harness("mini_swe_agent")
