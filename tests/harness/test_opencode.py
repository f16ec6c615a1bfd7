"""The real OpenCode 1.18.33 (its native executable, mounted into the sandbox) against the real capture proxy.

The scripted engine stands in for the policy only; the proxy (OpenAI chat completions, always streaming,
`stream_options.include_usage`), OpenCode's agent loop, prompts and tools, its title-generation call, the
proxy_only sandbox and the verifier are all real. The `harness` tests skip, naming the install command,
where `python tools/install_harness.py opencode` has not run (make test runs it).
"""

from __future__ import annotations

import numpy as np
import pytest
from native_trial import one_hunk_edit, tool_call, trial_with_probe
from scripted_engine import ScriptedEngine

from legorl_jax.harness import LLMEndpoint, get_harness
from legorl_jax.harness.native_agent import installed, json_events
from legorl_jax.harness.opencode import INSTALL_COMMAND, PACKAGE, STOPPED
from legorl_jax.types import Outcome

TASK = "autocomplete-casefold-prefix"
TITLE = "Casefold the typed prefix"

needs_install = pytest.mark.skipif(
    installed(PACKAGE) is None, reason=f"OpenCode is not installed: {INSTALL_COMMAND}"
)


def fix_script(task) -> list[str]:
    """OpenCode's own tools for the task's known fix: read the file (its edit refuses an unread file), edit
    it, run the tests with bash, then a reply without a tool call, which ends OpenCode's loop."""
    path, old, new = one_hunk_edit(task.patch)
    file_path = f"{task.workdir}/{path}"
    return [
        tool_call("read", filePath=file_path),
        tool_call("edit", filePath=file_path, oldString=old, newString=new),
        tool_call(
            "bash", command="python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3", description="Run tests"
        ),
        "Fixed: normalize_prefix now casefolds, like normalize_key.",
    ]


class AgentOrTitle:
    """Replies with the next scripted agent text, or a title to OpenCode's title generator (a side call whose
    order against the agent's first call is OpenCode's business)."""

    def __init__(self, tokenizer, script: list[str]):
        self.tokenizer, self.script, self.agent_calls, self.title_calls = tokenizer, script, 0, 0

    def __call__(self, prompt: list[int], rid: str) -> str:
        if "You are a title generator" in self.tokenizer.decode(prompt[:200]):
            self.title_calls += 1
            return TITLE
        text = self.script[min(self.agent_calls, len(self.script) - 1)]
        self.agent_calls += 1
        return text


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_a_scripted_fix_through_opencode_scores_reward_one_keeps_its_title_call_out_and_reaches_only_the_proxy(  # noqa: E501
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    script = fix_script(task)
    replies = AgentOrTitle(tokenizer, script)
    proxy = await proxy_on(ScriptedEngine(tokenizer, replies))
    trajectory, record, probe, hits = await trial_with_probe(
        task, get_harness("opencode"), proxy, tmp_path, step_limit=8
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.SUBMITTED and trajectory.reward == 1.0, log[-3000:]
    events = json_events(log)
    assert [e["part"]["tool"] for e in events if e["type"] == "tool_use"] == ["read", "edit", "bash"]
    assert (
        "Edit applied successfully." in log
        and ".casefold()" in (tmp_path / "trial" / "attempt_0" / "diff.patch").read_text()
    )
    # The title generator's call is a side conversation: counted, on a side branch, not in the training
    # sequence.
    counters = record["counters"]
    assert replies.title_calls == counters["side_calls"] == 1 and counters["main_calls"] == len(script), (
        counters
    )
    assert sorted(b["kind"] for b in record["branches"]) == ["main", "side"]
    (seq,) = trajectory.sequences
    sampled = seq.loss_mask == 1
    assert sampled.sum() == sum(len(tokenizer.encode(text)) + 1 for text in script)
    expected = np.asarray([-0.01 * (1 + (t % 97)) for t in seq.token_ids[sampled]], np.float32)
    np.testing.assert_allclose(seq.behaviour_logprobs[sampled], expected, rtol=0, atol=1e-7)
    assert not any(record["flags"].values()), record["flags"]
    # From the sandbox OpenCode ran in, nothing but the proxy answers: not the host's other ports, not
    # outside.
    reached = probe.reached()
    assert reached and all(v.startswith("closed") for v in reached.values()), probe.output
    assert hits == []


@pytest.mark.harness
@pytest.mark.docker
@needs_install
@pytest.mark.slow  # ~16 s
async def test_opencodes_step_limit_is_the_step_limit_outcome(builtin_tasks, tokenizer, proxy_on, tmp_path):
    task = builtin_tasks[TASK]
    replies = AgentOrTitle(tokenizer, [tool_call("bash", command="ls", description="List files")])
    proxy = await proxy_on(ScriptedEngine(tokenizer, replies))
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("opencode"), proxy, tmp_path, step_limit=2
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.STEP_LIMIT and trajectory.reward == 0.0, log[-3000:]
    # Two steps with tools, then OpenCode's "MAXIMUM STEPS REACHED" request, which the script answers with
    # another tool call: the adapter's watchdog stops OpenCode there instead of letting it run on. It looks
    # every 0.1 s, so OpenCode may have sent one request more by then (a 4th call), never more.
    assert 3 <= record["counters"]["main_calls"] <= 4 and STOPPED in log, record["counters"]


@pytest.mark.harness
@pytest.mark.docker
@needs_install
@pytest.mark.slow  # ~14 s
async def test_a_prompt_over_the_context_ends_opencode_as_context_overflow(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    replies = AgentOrTitle(tokenizer, [tool_call("bash", command="ls", description="List files")])
    # OpenCode's system prompt and tools are ~10k tokens: its agent call is refused (its title call is not).
    proxy = await proxy_on(ScriptedEngine(tokenizer, replies), context_length=4096)
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("opencode"), proxy, tmp_path, step_limit=8
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.CONTEXT_OVERFLOW and trajectory.reward == 0.0, log[-3000:]
    assert '"name":"ContextOverflowError"' in log and record["flags"]["context_overflow"]
    assert replies.agent_calls == 0


@pytest.mark.harness
@needs_install
def test_the_preset_points_opencode_at_the_sessions_openai_url_with_the_step_limit(compose_config):
    cfg = compose_config(["+harness=opencode", "harness.step_limit=7"])
    assert cfg.harness.name == "opencode" and cfg.harness.step_limit == 7
    harness = get_harness(cfg.harness.name, **cfg.harness.options)
    llm = LLMEndpoint(
        "http://10.0.0.1:9/s/abc/v1", "http://10.0.0.1:9/s/abc", step_limit=cfg.harness.step_limit
    )
    config = harness.config(llm)
    assert config["provider"]["capture"]["options"]["baseURL"] == "http://10.0.0.1:9/s/abc/v1"
    assert config["agent"]["build"]["steps"] == 7 and config["autoupdate"] is False
    assert config["permission"]["bash"] == config["permission"]["edit"] == "allow"
    assert harness.env(llm)["OPENCODE_DISABLE_MODELS_FETCH"] == "1" and harness.network == "proxy_only"
