"""The real Codex CLI 0.171.0 (its static executable, mounted into the sandbox) against the real capture
proxy's Responses surface.

The scripted engine (or the warm start's teacher) stands in for the policy only; the proxy (`POST
/v1/responses`, streamed), Codex's agent loop, prompts and tools (its shell, and `apply_patch` run through
it), the proxy_only sandbox and the verifier are all real. The `harness` tests skip, naming the install
command, where `python tools/install_harness.py codex` has not run (make test runs it).
"""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest
from native_trial import (
    assert_every_sampled_token_recorded,
    assert_only_the_proxy_was_reached,
    tool_call,
    trial_with_probe,
)
from scripted_engine import ScriptedEngine

from legorl_jax.harness import LLMEndpoint, get_harness
from legorl_jax.harness.codex import INCOMPLETE, INSTALL_COMMAND, PACKAGE, STOPPED
from legorl_jax.harness.native_agent import installed, json_events
from legorl_jax.teacher import apply_patch_command
from legorl_jax.types import Outcome

TASK = "autocomplete-casefold-prefix"
CONTEXT = 16384  # the window of the harness tests' proxy (conftest.CONTEXT)

needs_install = pytest.mark.skipif(
    installed(PACKAGE) is None, reason=f"Codex is not installed: {INSTALL_COMMAND}"
)


def fix_script(task) -> list[str]:
    """Codex's own shell tool: `apply_patch` with the task's known fix (the warm start's teacher's reply), the
    tests run, then a reply without a tool call, which ends Codex's turn."""
    return [
        tool_call("exec_command", cmd=apply_patch_command(task)),
        tool_call("exec_command", cmd="python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3"),
        "Fixed: normalize_prefix now casefolds, like normalize_key.",
    ]


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_a_scripted_fix_through_codex_scores_reward_one_records_every_token_and_reaches_only_the_proxy(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    script = fix_script(task)
    engine = ScriptedEngine(tokenizer, script)
    proxy = await proxy_on(engine)
    trajectory, record, probe, hits = await trial_with_probe(
        task, get_harness("codex"), proxy, tmp_path, step_limit=8
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.SUBMITTED and trajectory.reward == 1.0, log[-3000:]
    items = [e["item"] for e in json_events(log) if e.get("type") == "item.completed"]
    assert [i["type"] for i in items if i["type"] != "error"] == [
        "file_change",
        "command_execution",
        "agent_message",
    ], log[-3000:]
    assert ".casefold()" in (tmp_path / "trial" / "attempt_0" / "diff.patch").read_text()
    # Every call went through the Responses surface, on one main branch that each turn extended.
    assert {t["surface"] for t in record["turns"]} == {"responses"}
    assert [t["branch"] for t in record["turns"]] == [0, 0, 0]
    assert record["counters"]["main_calls"] == len(script) and record["counters"]["side_calls"] == 0
    assert all(t["routed_experts_rows"] > 0 for t in record["turns"])
    assert not any(record["flags"].values()), record["flags"]
    assert_every_sampled_token_recorded(trajectory, tokenizer, script)
    # ... and the routing of every position the engine forwarded (all but the last token), none left -1.
    (seq,) = trajectory.sequences
    assert (np.asarray(seq.routed_experts)[: len(seq.token_ids) - 1] >= 0).all()
    assert_only_the_proxy_was_reached(probe, hits)


@pytest.mark.harness
@pytest.mark.docker
@needs_install
@pytest.mark.slow  # ~10 s
async def test_codexs_step_limit_is_the_step_limit_outcome(builtin_tasks, tokenizer, proxy_on, tmp_path):
    task = builtin_tasks[TASK]
    proxy = await proxy_on(ScriptedEngine(tokenizer, [tool_call("exec_command", cmd="ls")]))
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("codex"), proxy, tmp_path, step_limit=2
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.STEP_LIMIT and trajectory.reward == 0.0, log[-3000:]
    # Two tool steps, then the watchdog stops Codex. It looks every 0.1 s, and against a scripted engine that
    # answers at once Codex can send a few more requests in that window on a loaded host (4 seen under the
    # full suite), so only the lower bound is exact; the stop is the watchdog's own.
    assert record["counters"]["main_calls"] >= 2 and STOPPED in log, record["counters"]


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_the_warm_starts_teacher_drives_codex_to_a_kept_demonstration(
    builtin_tasks, harness_model_dir, tmp_path
):
    from legorl_jax.config import HarnessConfig, ProxyConfig, SandboxConfig, VerifierConfig
    from legorl_jax.warm_start import record_demonstrations

    task = builtin_tasks[TASK]
    (demo,) = await record_demonstrations(
        [task],
        str(harness_model_dir),
        tmp_path / "demos",
        harness=HarnessConfig(name="codex"),
        proxy=ProxyConfig(context_length=CONTEXT),
        sandbox=SandboxConfig(),
        verifier=VerifierConfig(),
        trial_timeout_s=600,
        max_len=CONTEXT,
    )
    assert demo.reward == 1.0 and demo.outcome is Outcome.SUBMITTED
    (seq,) = demo.sequences
    assert seq.loss_mask.sum() > 0 and len(seq.token_ids) == len(seq.loss_mask)


@pytest.mark.harness
@needs_install
def test_the_preset_points_codex_at_the_sessions_responses_url_with_its_own_config(compose_config):
    cfg = compose_config(["+harness=codex", "harness.step_limit=7", "harness.options.context_tokens=16384"])
    assert cfg.harness.name == "codex" and cfg.harness.step_limit == 7
    harness = get_harness(cfg.harness.name, **cfg.harness.options)
    llm = LLMEndpoint("http://10.0.0.1:9/s/abc/v1", "http://10.0.0.1:9/s/abc", step_limit=7)
    config = tomllib.loads(harness.config_toml(llm))
    provider = config["model_providers"]["capture"]
    assert config["model_provider"] == "capture" and config["model"] == llm.model
    assert provider["base_url"] == "http://10.0.0.1:9/s/abc/v1" and provider["wire_api"] == "responses"
    assert "env_key" not in provider  # no key of anyone's
    assert config["approval_policy"] == "never" and config["sandbox_mode"] == "danger-full-access"
    assert config["web_search"] == "disabled" and config["agents"]["enabled"] is False
    assert config["model_context_window"] == 16384 and harness.network == "proxy_only"
    assert json.loads(json.dumps(harness.mounts)) == {PACKAGE.mount: str(harness.root / "bin")}


@pytest.mark.harness
@pytest.mark.docker
@needs_install
@pytest.mark.slow  # ~10 s
async def test_a_prompt_over_the_context_ends_codex_as_context_overflow(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, [tool_call("exec_command", cmd="ls")])
    # Codex's instructions and tools are several thousand tokens: its first call is refused.
    proxy = await proxy_on(engine, context_length=2048)
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("codex"), proxy, tmp_path, step_limit=8
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.CONTEXT_OVERFLOW and trajectory.reward == 0.0, log[-3000:]
    assert record["flags"]["context_overflow"] and engine.calls == []


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_a_reply_cut_by_its_token_budget_ends_codex_as_a_format_failure_kept_in_the_loss(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    proxy = await proxy_on(ScriptedEngine(tokenizer, ["word " * 50]), max_response_tokens=8)
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("codex"), proxy, tmp_path, step_limit=8
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.FORMAT_FAILURE and trajectory.valid, log[-3000:]
    assert record["turns"][0]["finish_reason"] == "length" and INCOMPLETE in log
