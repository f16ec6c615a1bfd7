"""The real OpenHands SDK 1.58.2 (its own venv, its process inside the sandbox on a mounted Python 3.12)
against the real capture proxy.

The scripted engine stands in for the policy only; the proxy (OpenAI chat completions through litellm), the
SDK's agent loop, prompts, terminal and file-editor tools, the proxy_only sandbox and the verifier are all
real. The `harness` tests skip, naming the install command, where `python tools/install_harness.py openhands`
has not run (make test runs it; a failed install does not fail the suite).
"""

from __future__ import annotations

import json

import pytest
from native_trial import (
    assert_every_sampled_token_recorded,
    assert_only_the_proxy_was_reached,
    engine_failure_trial,
    one_hunk_edit,
    tool_call,
    trial_with_probe,
)
from scripted_engine import ScriptedEngine

from legorl_jax.harness import HarnessNotInstalled, LLMEndpoint, get_harness, openhands
from legorl_jax.types import Outcome

TASK = "autocomplete-casefold-prefix"

needs_install = pytest.mark.skipif(
    openhands.installed() is None, reason=f"OpenHands is not installed: {openhands.INSTALL_COMMAND}"
)


def fix_script(task) -> list[str]:
    """OpenHands' own tools for the task's known fix: view the file with `file_editor`, `str_replace` the
    hunk, run the tests in the `terminal`, then the SDK's `finish` tool."""
    path, old, new = one_hunk_edit(task.patch)
    file_path = f"{task.workdir}/{path}"
    return [
        tool_call("file_editor", command="view", path=file_path),
        tool_call("file_editor", command="str_replace", path=file_path, old_str=old, new_str=new),
        tool_call("terminal", command="python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3"),
        tool_call("finish", message="Fixed: normalize_prefix now casefolds, like normalize_key."),
    ]


def harness_log(tmp_path) -> str:
    return (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()


async def run_openhands(task, tokenizer, proxy_on, tmp_path, script, *, step_limit: int, **proxy_config):
    """A real OpenHands trial against a proxy over the scripted engine; (trajectory, record, engine)."""
    engine = ScriptedEngine(tokenizer, script)
    proxy = await proxy_on(engine, **proxy_config)
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("openhands"), proxy, tmp_path, step_limit=step_limit
    )
    return trajectory, record, engine


def driver_result(log: str) -> dict:
    (line,) = [line for line in log.splitlines() if line.startswith(openhands.RESULT_PREFIX)]
    return json.loads(line[len(openhands.RESULT_PREFIX) :])


@pytest.mark.harness
@pytest.mark.docker
@needs_install  # not marked slow (~60 s on 2 loaded cores): `make test` runs one real trial per harness
async def test_a_scripted_fix_through_openhands_scores_reward_one_sends_its_temperature_records_every_sampled_token_and_reaches_only_the_proxy(  # noqa: E501
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    script = fix_script(task)
    engine = ScriptedEngine(tokenizer, script)
    proxy = await proxy_on(engine)
    harness = get_harness("openhands", temperature=0.7, top_p=0.9)
    trajectory, record, probe, hits = await trial_with_probe(task, harness, proxy, tmp_path, step_limit=8)
    log = harness_log(tmp_path)
    assert trajectory.outcome is Outcome.SUBMITTED and trajectory.reward == 1.0, log[-3000:]
    result = driver_result(log)
    assert result["status"] == "finished" and result["tools"] == ["file_editor", "file_editor", "terminal",
                                                                   "finish"], result  # fmt: skip
    assert ".casefold()" in (tmp_path / "trial" / "attempt_0" / "diff.patch").read_text()
    # litellm used its bundled cost map (it tries GitHub first unless told not to): nothing fetched at trial
    # time.
    assert "model cost map" not in log
    # Every call was the agent's own conversation, each reply one turn on the one main branch: every sampled
    # token with the engine's log-prob.
    counters = record["counters"]
    assert counters["calls"] == counters["main_calls"] == len(engine.calls) == len(script), counters
    assert counters["side_calls"] == 0 and [b["kind"] for b in record["branches"]] == ["main"]
    assert_every_sampled_token_recorded(trajectory, tokenizer, script)
    assert not any(record["flags"].values()), record["flags"]
    # The configured sampling parameters reached the proxy on every call (the SDK would drop them for a model
    # it assumes reasons).
    assert {(t["requested"]["temperature"], t["requested"]["top_p"]) for t in record["turns"]} == {(0.7, 0.9)}
    # From the sandbox the SDK ran in, nothing but the proxy answers: not the host's other ports, not outside.
    assert_only_the_proxy_was_reached(probe, hits)


@pytest.mark.harness
@pytest.mark.docker
@pytest.mark.slow  # 30-50 s on 2 loaded cores, most of it the SDK's imports
@needs_install
async def test_openhands_max_iterations_is_the_step_limit_outcome(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    script = [tool_call("terminal", command="ls")]
    trajectory, record, _ = await run_openhands(
        builtin_tasks[TASK], tokenizer, proxy_on, tmp_path, script, step_limit=2
    )
    log = harness_log(tmp_path)
    assert trajectory.outcome is Outcome.STEP_LIMIT and trajectory.reward == 0.0, log[-3000:]
    assert (
        record["counters"]["main_calls"] == 2 and "MaxIterationsReached" in driver_result(log)["error_codes"]
    )


@pytest.mark.harness
@pytest.mark.docker
@pytest.mark.slow  # 30-50 s on 2 loaded cores, most of it the SDK's imports
@needs_install
async def test_a_prompt_over_the_context_ends_openhands_as_context_overflow(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    # The SDK's system prompt and tool specs alone are several thousand tokens: its first call is refused.
    script = [tool_call("terminal", command="ls")]
    trajectory, record, engine = await run_openhands(
        builtin_tasks[TASK], tokenizer, proxy_on, tmp_path, script, step_limit=8, context_length=2048
    )
    log = harness_log(tmp_path)
    assert trajectory.outcome is Outcome.CONTEXT_OVERFLOW and trajectory.reward == 0.0, log[-3000:]
    assert record["flags"]["context_overflow"] and not engine.calls


@pytest.mark.harness
@pytest.mark.docker
@pytest.mark.slow  # 30-50 s on 2 loaded cores, most of it the SDK's imports
@needs_install
async def test_an_engine_failure_drops_the_openhands_trial_after_few_retries(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    trajectory, attempt, times = await engine_failure_trial(
        builtin_tasks[TASK], get_harness("openhands"), tokenizer, proxy_on, tmp_path
    )
    assert trajectory.outcome is Outcome.ENGINE_FAILED and not trajectory.sequences
    assert "the scripted engine is down" in attempt["reason"]
    # max_retries 2 (the preset's): 3 calls, 1-2 s apart, not the SDK's default 5 attempts backing off from
    # 8 s to 64 s (2 minutes of waits). Timed between the calls: the SDK's imports before them take 20-100 s
    # on 2 loaded cores.
    assert len(times) == 3 and times[-1] - times[0] < 20, times


@pytest.mark.harness
@pytest.mark.docker
@pytest.mark.slow  # 30-50 s on 2 loaded cores, most of it the SDK's imports
@needs_install
async def test_a_reply_without_a_tool_call_ends_openhands_as_submitted_before_any_no_tool_limit(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    script = ["The bug is in normalize_prefix."]
    trajectory, record, _ = await run_openhands(
        builtin_tasks[TASK], tokenizer, proxy_on, tmp_path, script, step_limit=8, max_consecutive_no_tool=1
    )
    log = harness_log(tmp_path)
    assert trajectory.outcome is Outcome.SUBMITTED and trajectory.reward == 0.0, log[-3000:]
    # The SDK ends its run at the first reply without a tool call, so the proxy's no-tool limit (which
    # terminates the session only past `max_consecutive_no_tool` such replies in a row) is never reached.
    result = driver_result(log)
    assert result["status"] == "finished" and result["last_text"] == script[0], result
    assert record["counters"]["main_calls"] == 1 and not record["flags"]["no_tool_collapse"]


@pytest.mark.harness
@pytest.mark.docker
@pytest.mark.slow  # the JAX engine on a 16k-token window, on loaded cores
@needs_install
async def test_the_tiny_models_own_sampling_through_openhands_ends_in_a_policy_outcome(
    builtin_tasks, jax_engine, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    proxy = await proxy_on(jax_engine, max_response_tokens=16, max_consecutive_no_tool=2)
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("openhands"), proxy, tmp_path, step_limit=3
    )
    log = harness_log(tmp_path)
    assert trajectory.outcome in (
        Outcome.STEP_LIMIT,
        Outcome.SUBMITTED,
        Outcome.NO_TOOL_COLLAPSE,
        Outcome.FORMAT_FAILURE,
    ), log[-3000:]
    assert trajectory.reward == 0.0 and trajectory.sequences and trajectory.sequences[0].num_sampled > 0
    assert 1 <= record["counters"]["main_calls"] <= 3, record["counters"]


def test_without_the_install_openhands_names_its_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("LEGORL_HARNESS_HOME", str(tmp_path))
    with pytest.raises(
        HarnessNotInstalled, match=r"install it with: python tools/install_harness.py openhands$"
    ):
        get_harness("openhands")


@pytest.mark.harness
@needs_install
def test_the_preset_points_openhands_at_the_sessions_openai_url_with_the_step_limit_and_its_sampling(
    compose_config, builtin_tasks
):
    cfg = compose_config(["+harness=openhands", "harness.step_limit=7"])
    assert cfg.harness.name == "openhands" and cfg.harness.step_limit == 7
    harness = get_harness(cfg.harness.name, **cfg.harness.options)
    llm = LLMEndpoint(
        "http://10.0.0.1:9/s/abc/v1", "http://10.0.0.1:9/s/abc", step_limit=cfg.harness.step_limit
    )
    config = harness.config(builtin_tasks[TASK], llm)
    assert config["base_url"] == "http://10.0.0.1:9/s/abc/v1" and config["model"] == "openai/legorl-policy"
    assert config["step_limit"] == 7 and config["temperature"] == 1.0 and config["max_retries"] == 2
    assert harness.network == "proxy_only" and harness.mounts == {
        openhands.MOUNT: str(openhands.install_dir())
    }


def driver_output(**result) -> str:
    base = {"status": "finished", "error": None, "error_codes": [], "steps": 2, "tools": ["terminal"]}
    return openhands.RESULT_PREFIX + json.dumps({**base, "last_text": "", **result}) + "\n"


@pytest.mark.parametrize(
    ("result", "status"),
    [
        ({}, "submitted"),
        ({"last_text": "Session terminated: 3 replies without a tool call"}, "no_tool_collapse"),
        ({"status": "error", "error_codes": ["MaxIterationsReached"]}, "step_limit"),
        ({"status": "stuck"}, "step_limit"),
        (
            {"status": "error", "error": "ConversationRunError (LLMContextWindowExceedError): too long"},
            "context_overflow",
        ),
    ],
)
def test_how_the_openhands_driver_ended_maps_to_a_policy_outcome(result, status):
    stdout = driver_output(**result)
    assert openhands._result(0, stdout, stdout).exit_status is Outcome(status)


@pytest.mark.parametrize(
    ("exit_code", "stdout"),
    [
        (0, driver_output(status="error", error="ConversationRunError (BadGatewayError): the engine failed")),
        (1, "Traceback (most recent call last):\n"),
        (0, driver_output(status="paused")),
    ],
)
def test_an_openhands_error_a_crash_or_an_unknown_status_is_a_harness_crash(exit_code, stdout):
    from legorl_jax.harness import HarnessCrashed

    with pytest.raises(HarnessCrashed):
        openhands._result(exit_code, stdout, stdout)
