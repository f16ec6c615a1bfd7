"""The real Terminus-2 (terminal-bench 0.2.18, its own venv) against the real capture proxy, typing into a
real tmux pane in the real agent sandbox through our exec API.

The scripted engine stands in for the policy only; the proxy, litellm, Terminus-2's loop, prompts and JSON
parser, terminal-bench's TmuxSession, tmux, the sandbox and the verifier are all real. The `harness` tests
skip, naming the install command, where `python tools/install_harness.py terminus_2` has not run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from native_trial import trial_with_probe
from scripted_engine import ScriptedEngine

from legorl_jax.harness import HarnessNotInstalled, get_harness, terminus_2
from legorl_jax.harness.base import HarnessCrashed
from legorl_jax.types import Outcome

TASK = "autocomplete-casefold-prefix"

needs_install = pytest.mark.skipif(
    terminus_2.installed() is None, reason=f"Terminus-2 is not installed: {terminus_2.INSTALL_COMMAND}"
)


def keystrokes(analysis: str, *commands: str, done: bool = False, duration: float = 1.0) -> str:
    """One Terminus-2 reply: its JSON object of keystrokes for the tmux pane, each waited on `duration` s."""
    return json.dumps(
        {
            "analysis": analysis,
            "plan": analysis,
            "commands": [{"keystrokes": c, "duration": duration} for c in commands],
            "task_complete": done,
        }
    )


def fix_script(task) -> list[str]:
    """Terminus-2's own vocabulary for the task's known fix: type the commands that apply it and run the
    tests, then say task_complete, and confirm it when asked."""
    return [
        keystrokes("Look at the repository.", "git status --short && ls\n"),
        keystrokes("Apply the fix.", f"git apply <<'PATCH'\n{task.patch}PATCH\n"),
        # pytest in the sandbox took over a second on a loaded host: its summary missed the next prompt
        keystrokes(
            "Run the tests.", "python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3\n", duration=8.0
        ),
        keystrokes("The tests pass.", done=True),
        keystrokes("Confirmed.", done=True),
    ]


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_a_scripted_fix_through_terminus_2_scores_reward_one_and_records_every_sampled_token(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    script = fix_script(task)
    engine = ScriptedEngine(tokenizer, script)
    proxy = await proxy_on(engine)
    trajectory, record, probe, hits = await trial_with_probe(
        task, get_harness("terminus_2"), proxy, tmp_path, step_limit=10
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.SUBMITTED and trajectory.reward == 1.0, log[-3000:]
    assert '"episodes": 5' in log
    counters = record["counters"]
    assert counters["calls"] == counters["main_calls"] == len(engine.calls) == len(script), counters
    (seq,) = trajectory.sequences
    sampled = seq.loss_mask == 1
    assert sampled.sum() == sum(len(tokenizer.encode(text)) + 1 for text in script)
    expected = np.asarray([-0.01 * (1 + (t % 97)) for t in seq.token_ids[sampled]], np.float32)
    np.testing.assert_allclose(seq.behaviour_logprobs[sampled], expected, rtol=0, atol=1e-7)
    # The keystrokes ran in the sandbox's tmux pane: pytest's summary came back in a later prompt.
    assert " passed in " in json.dumps([m for m in record["messages"] if m["role"] == "user"])
    # Terminus-2 calls the model from the host; its sandbox (network none) reaches nothing at all.
    reached = probe.reached()
    assert reached and all(v.startswith("closed") for v in reached.values()), probe.output
    assert hits == []


@pytest.mark.harness
@pytest.mark.docker
@needs_install
@pytest.mark.slow  # ~10 s
async def test_replies_terminus_2_cannot_parse_end_at_the_step_limit(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, ["The bug is in the prefix matching; I would lowercase both sides."])
    proxy = await proxy_on(engine, max_consecutive_no_tool=0)
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("terminus_2"), proxy, tmp_path, step_limit=3
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome is Outcome.STEP_LIMIT and trajectory.reward == 0.0, log[-3000:]
    assert record["counters"]["main_calls"] == 3 and "Previous response had parsing errors" in json.dumps(
        record["messages"]
    )


@pytest.mark.harness
@pytest.mark.docker
@pytest.mark.slow  # ~3 min on 2 loaded cores (the JAX engine on a 16k-token window)
@needs_install
async def test_the_tiny_models_own_sampling_through_terminus_2_ends_in_a_policy_outcome(
    builtin_tasks, jax_engine, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    proxy = await proxy_on(jax_engine, max_response_tokens=16, max_consecutive_no_tool=0)
    trajectory, record, _, _ = await trial_with_probe(
        task, get_harness("terminus_2"), proxy, tmp_path, step_limit=3
    )
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome in (Outcome.STEP_LIMIT, Outcome.SUBMITTED) and trajectory.reward == 0.0, log[
        -3000:
    ]
    assert trajectory.sequences and trajectory.sequences[0].num_sampled > 0
    # Its replies are cut off at 16 tokens, which Terminus-2 re-asks without bound; the driver's call cap ends
    # it.
    assert 1 <= record["counters"]["main_calls"] <= terminus_2.CALLS_PER_STEP * 3, record["counters"]


def test_without_the_install_terminus_2_names_its_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("LEGORL_HARNESS_HOME", str(tmp_path))
    with pytest.raises(
        HarnessNotInstalled, match=r"install it with: python tools/install_harness.py terminus_2$"
    ):
        get_harness("terminus_2")


@pytest.mark.harness
@needs_install
def test_the_preset_selects_terminus_2_with_its_timeouts(compose_config):
    cfg = compose_config(["+harness=terminus_2", "harness.step_limit=7"])
    harness = get_harness(cfg.harness.name, **cfg.harness.options)
    assert cfg.harness.step_limit == 7 and harness.network == "none" and harness.command_timeout_s == 180
    assert harness.mounts == {terminus_2.TMUX_MOUNT: str(terminus_2.install_dir() / "tmux")}


# The output of a demo trial (step_limit 1) whose driver printed the call-limit line from litellm's callback
# thread while the main thread printed the result: the two markers on one line.
INTERLEAVED = (
    "LEGORL_CALL_LIMIT 2LEGORL_RESULT "
    '{"total_input_tokens": 1280, "total_output_tokens": 12, "failure_mode": "none", '
    '"timestamped_markers": [[0.0, "Episode 0: 0 commands"]], "episodes": 1}\n\n'
)


def test_a_call_limit_line_run_into_the_result_line_reads_as_the_step_limit():
    result = terminus_2.driver_result(INTERLEAVED, 3, step_limit=1)
    assert result.exit_status is Outcome.STEP_LIMIT and result.steps == 2


def test_the_driver_result_line_decides_between_submitted_and_step_limit():
    line = 'LEGORL_RESULT {"episodes": %d}\n'
    assert terminus_2.driver_result("log\n" + line % 2, 0, step_limit=5).exit_status is Outcome.SUBMITTED
    assert terminus_2.driver_result(line % 5, 0, step_limit=5).exit_status is Outcome.STEP_LIMIT
    assert terminus_2.driver_result(line % 5, 0, step_limit=5).steps == 5


def test_a_driver_without_a_result_or_with_a_bad_count_is_a_crash_naming_its_output():
    with pytest.raises(HarnessCrashed, match="exited 1 without a result:\nTraceback"):
        terminus_2.driver_result("Traceback (most recent call last)\n", 1, step_limit=3)
    with pytest.raises(HarnessCrashed, match="call-limit line has no count: 'LEGORL_CALL_LIMIT x'"):
        terminus_2.driver_result("LEGORL_CALL_LIMIT x\n", 3, step_limit=3)
