"""The real Claude Code 2.1.197 (its native executable, mounted into the sandbox) against the real capture
proxy.

The scripted engine stands in for the policy only; the proxy (Anthropic messages, `?beta=true`, always
streaming), Claude Code's agent loop, prompts and tools, the proxy_only sandbox and the verifier are all
real. The `harness` tests skip, naming the install command, where `python tools/install_harness.py
claude_code` has not run (make test runs it; a failed install does not fail the suite).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from native_trial import engine_failure_trial, one_hunk_edit, tool_call, trial_with_probe
from scripted_engine import ScriptedEngine

from legorl_jax.harness import get_harness
from legorl_jax.harness.claude_code import INSTALL_COMMAND, PACKAGE
from legorl_jax.harness.native_agent import installed
from legorl_jax.types import Outcome

TASK = "autocomplete-casefold-prefix"

needs_install = pytest.mark.skipif(
    installed(PACKAGE) is None, reason=f"Claude Code is not installed: {INSTALL_COMMAND}"
)


def fix_script(task) -> list[str]:
    """Claude Code's own tools for the task's known fix: Read the file (Edit refuses an unread file), Edit it,
    run the tests with Bash, then a reply without a tool call, which ends Claude Code's loop."""
    path, old, new = one_hunk_edit(task.patch)
    file_path = f"{task.workdir}/{path}"
    return [
        tool_call("Read", file_path=file_path),
        tool_call("Edit", file_path=file_path, old_string=old, new_string=new),
        tool_call(
            "Bash",
            command="python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3",
            description="Run the tests",
        ),
        "Fixed: normalize_prefix now casefolds, like normalize_key.",
    ]


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_a_scripted_fix_through_claude_code_scores_reward_one_records_every_sampled_token_and_reaches_only_the_proxy(  # noqa: E501
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    script = fix_script(task)
    engine = ScriptedEngine(tokenizer, script)
    proxy = await proxy_on(engine)
    trajectory, record, probe, hits = await trial_with_probe(
        task, get_harness("claude_code"), proxy, tmp_path, step_limit=8
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.SUBMITTED and trajectory.reward == 1.0, log[-3000:]
    result = json.loads(log.split("\n--- stderr ---")[0].strip().splitlines()[-1])
    assert (
        result["subtype"] == "success"
        and result["num_turns"] == len(script)
        and result["result"] == script[-1]
    )
    # Every call was the agent's own conversation (Claude Code made no side call with non-essential traffic
    # off), each reply one turn on the one main branch: every sampled token with the engine's log-prob.
    counters = record["counters"]
    assert counters["calls"] == counters["main_calls"] == len(engine.calls) == len(script), counters
    assert counters["side_calls"] == 0 and [b["kind"] for b in record["branches"]] == ["main"]
    (seq,) = trajectory.sequences
    sampled = seq.loss_mask == 1
    assert sampled.sum() == sum(len(tokenizer.encode(text)) + 1 for text in script)
    expected = np.asarray([-0.01 * (1 + (t % 97)) for t in seq.token_ids[sampled]], np.float32)
    np.testing.assert_allclose(seq.behaviour_logprobs[sampled], expected, rtol=0, atol=1e-7)
    assert not any(record["flags"].values()), record["flags"]
    # The Edit tool changed the file, through Claude Code's own tool vocabulary.
    assert ".casefold()" in (tmp_path / "trial" / "attempt_0" / "diff.patch").read_text()
    # From the sandbox Claude Code ran in, nothing but the proxy answers: not the host's other ports, not
    # outside.
    reached = probe.reached()
    assert reached and all(v.startswith("closed") for v in reached.values()), probe.output
    assert hits == []


class MainOrSubagent:
    """Replies with the next scripted text to Claude Code's own conversation, and a finding to the sub-agent
    its Agent tool starts (its system prompt is another: `cc_is_subagent=true`, "You are an agent for Claude
    Code")."""

    def __init__(self, tokenizer, script: list[str]):
        self.tokenizer, self.script, self.main_calls, self.subagent_calls = tokenizer, script, 0, 0

    def __call__(self, prompt: list[int], rid: str) -> str:
        if "cc_is_subagent=true" in self.tokenizer.decode(prompt[:100]):
            self.subagent_calls += 1
            return SUBAGENT_REPLY
        text = self.script[min(self.main_calls, len(self.script) - 1)]
        self.main_calls += 1
        return text


SUBAGENT_REPLY = "normalize_prefix lowercases where normalize_key casefolds."


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_a_claude_code_sub_agents_calls_are_a_side_branch_counted_and_not_trained_on(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    script = [
        tool_call(
            "Agent",
            description="Find the bug",
            prompt="Where are typed prefixes normalised?",
            subagent_type="general-purpose",
        ),  # fmt: skip
        "The sub-agent found it: normalize_prefix lowercases instead of casefolding.",
    ]
    replies = MainOrSubagent(tokenizer, script)
    proxy = await proxy_on(ScriptedEngine(tokenizer, replies))
    # The Agent tool also brings Claude Code's mid-conversation `role: system` message (its agent-type list).
    harness = get_harness("claude_code", tools="Bash,Read,Edit,Write,Agent")
    trajectory, record, _, _ = await trial_with_probe(task, harness, proxy, tmp_path, step_limit=8)
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.SUBMITTED, log[-3000:]
    counters = record["counters"]
    assert replies.subagent_calls == counters["side_calls"] == 1 and counters["main_calls"] == len(script), (
        counters
    )
    main, side = sorted(record["branches"], key=lambda b: b["kind"])
    assert (main["kind"], side["kind"]) == ("main", "side") and len(main["turns"]) == len(script)
    (seq,) = trajectory.sequences  # the main branch only
    assert (seq.loss_mask == 1).sum() == sum(len(tokenizer.encode(text)) + 1 for text in script)


@pytest.mark.harness
@pytest.mark.docker
@needs_install
@pytest.mark.slow  # ~10 s
async def test_claude_codes_turn_limit_is_the_step_limit_outcome(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, [tool_call("Bash", command="ls", description="List files")])
    proxy = await proxy_on(engine)
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("claude_code"), proxy, tmp_path, step_limit=2
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.STEP_LIMIT and trajectory.reward == 0.0, log[-3000:]
    assert record["counters"]["main_calls"] == 2 and '"subtype":"error_max_turns"' in log


@pytest.mark.harness
@pytest.mark.docker
@needs_install
@pytest.mark.slow  # ~10 s
async def test_a_prompt_over_the_context_ends_claude_code_as_context_overflow(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, [tool_call("Bash", command="ls", description="List files")])
    # Claude Code's own system prompt and tools alone are ~5k tokens: its first call is refused.
    proxy = await proxy_on(engine, context_length=2048)
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("claude_code"), proxy, tmp_path, step_limit=8
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.CONTEXT_OVERFLOW and trajectory.reward == 0.0, log[-3000:]
    assert '"terminal_reason":"prompt_too_long"' in log and record["flags"]["context_overflow"]
    assert not engine.calls


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_an_engine_failure_drops_the_claude_code_trial_after_few_retries(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    trajectory, attempt, times = await engine_failure_trial(
        builtin_tasks[TASK], get_harness("claude_code"), tokenizer, proxy_on, tmp_path
    )
    assert trajectory.outcome is Outcome.ENGINE_FAILED and not trajectory.sequences
    assert "the scripted engine is down" in attempt["reason"]
    # max_retries 2 (the preset's): 3 calls, seconds apart, not Claude Code's default 10 over ~3 minutes.
    assert len(times) == 3 and attempt["timings"]["harness_s"] < 60, (times, attempt["timings"])


@pytest.mark.harness
@needs_install
def test_the_preset_runs_claude_code_headless_with_the_step_limit_as_its_turn_limit(
    compose_config, builtin_tasks
):
    from legorl_jax.harness import LLMEndpoint

    cfg = compose_config(["+harness=claude_code", "harness.step_limit=7"])
    assert cfg.harness.name == "claude_code" and cfg.harness.step_limit == 7
    harness = get_harness(cfg.harness.name, **cfg.harness.options)
    llm = LLMEndpoint(
        "http://10.0.0.1:9/s/abc/v1", "http://10.0.0.1:9/s/abc", step_limit=cfg.harness.step_limit
    )
    argv = harness.argv(builtin_tasks[TASK], llm)
    assert argv[argv.index("--max-turns") + 1] == "7" and argv[argv.index("--output-format") + 1] == "json"
    assert "-p" in argv and "--tools" in argv and harness.network == "proxy_only"
    env = harness.env(llm)
    assert env["ANTHROPIC_BASE_URL"] == "http://10.0.0.1:9/s/abc"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == env["DISABLE_AUTOUPDATER"] == "1"
