"""The warm start's teacher drives every real harness, unmodified, through the gold fix of a built-in task.

Each demonstration is a real trial: the real harness, the real capture proxy (the teacher is the engine
behind it: it reads only the prompt the proxy rendered), a real sandbox and the verifier. A harness that is
not installed skips with its install command; the heavy ones are `slow` (their start-up takes 20-90 s on
2 loaded cores).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from legorl_jax.config import HarnessConfig, ProxyConfig, SandboxConfig, VerifierConfig
from legorl_jax.harness import HarnessNotInstalled, get_harness
from legorl_jax.tasks.registry import load_suite
from legorl_jax.teacher import (
    DONE_TEXT,
    Prompt,
    Teacher,
    TeacherError,
    compact_patch,
    qwen3_tool_call,
    shell_fix_command,
)
from legorl_jax.types import Outcome

TASK = "ratelimit-slow-rates-never-refill"
CONTEXT = 16384  # Claude Code's, OpenCode's and OpenHands' prompts are 5-12k tokens with the tiny tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_model_tool):
    spec = tiny_model_tool.TinyModelSpec(max_positions=CONTEXT)
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("teacher-moe"), spec, seed=0)


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from legorl_jax.model.tokenizer import load_tokenizer

    return load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def task():
    return {t.instance_id: t for t in load_suite("builtin")}[TASK]


def rendered(tokenizer, tools, system="You are a coding agent.", turns=()) -> str:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Fix the bug."}, *turns]
    return tokenizer.render(messages, tools=tools or None, add_generation_prompt=True)


def function(name: str, **properties) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool",
            "parameters": {"type": "object", "properties": properties, "required": sorted(properties)},
        },
    }


def test_a_request_whose_tools_can_neither_edit_nor_run_a_shell_is_an_error_naming_the_harness(
    tokenizer, task
):
    teacher = Teacher(task, "claude_code", ProxyConfig())
    tools = [function("Read", file_path={"type": "string"}), function("WebSearch", query={"type": "string"})]
    with pytest.raises(TeacherError, match=r"harness 'claude_code': .*no edit tool.*\['Read', 'WebSearch'\]"):
        teacher.reply(rendered(tokenizer, tools))
    assert isinstance(teacher.error, TeacherError)  # kept for the warm start to raise


def test_a_request_without_tools_or_a_known_text_protocol_is_an_error_naming_the_harness(tokenizer, task):
    teacher = Teacher(task, "terminus_2", ProxyConfig())
    with pytest.raises(
        TeacherError, match=r"harness 'terminus_2': the teacher found no tools .*no text protocol"
    ):
        teacher.reply(rendered(tokenizer, None, system="Answer in haiku."))


def test_a_shell_tool_gets_the_gold_fix_then_the_submit_tool_which_repeats_when_asked_again(tokenizer, task):
    teacher = Teacher(task, "swe_agent", ProxyConfig())
    tools = [
        function("bash", command={"type": "string"}),
        function(
            "str_replace_editor",
            command={"type": "string", "enum": ["view", "str_replace"]},
            path={"type": "string"},
            old_str={"type": "string"},
            new_str={"type": "string"},
        ),  # fmt: skip
        {"type": "function", "function": {"name": "submit", "description": "Submit", "parameters": {}}},
    ]
    first = teacher.reply(rendered(tokenizer, tools))
    assert first == qwen3_tool_call("bash", {"command": shell_fix_command(task)})
    done = {"role": "assistant", "content": first}
    second = teacher.reply(rendered(tokenizer, tools, turns=[done, {"role": "user", "content": "ok"}]))
    assert second == qwen3_tool_call("submit", {})
    review = [done, {"role": "user", "content": "ok"}, {"role": "assistant", "content": second}]
    again = teacher.reply(rendered(tokenizer, tools, turns=[*review, {"role": "user", "content": "Review."}]))
    assert again == second and teacher.main_calls == 3 and teacher.side_calls == 0


def test_the_zero_context_patch_holds_only_the_changed_lines_at_their_line_numbers(task):
    assert compact_patch(task) == (
        "--- a/throttle/rate.py\n+++ b/throttle/rate.py\n@@ -31,1 +31,1 @@\n"
        "-        return self.limit // self.period\n+        return self.limit / self.period\n"
    )


def test_a_side_conversation_gets_a_plain_reply_and_leaves_the_main_plan_where_it_was(tokenizer, task):
    teacher = Teacher(task, "opencode", ProxyConfig())
    tools = [function("bash", command={"type": "string"})]
    title = teacher.reply(rendered(tokenizer, None, system=ProxyConfig().side_system_prefixes[0]))
    assert title == "Fix throttle/rate.py" and teacher.side_calls == 1
    assert teacher.reply(rendered(tokenizer, tools)).startswith("<tool_call>\n")
    other = teacher.reply(rendered(tokenizer, None, system="You are a sub-agent " + "x" * 300))
    assert "<tool_call>" not in other and teacher.side_calls == 2 and teacher.main_calls == 1
    # With no tool call in it, the agent's last reply is the end of its turn (Claude Code, OpenCode, Codex).
    turns = [{"role": "assistant", "content": "<tool_call>"}, {"role": "user", "content": "ok"}]
    assert teacher.reply(rendered(tokenizer, tools, turns=turns)) == DONE_TEXT


def test_the_prompt_reader_finds_the_tools_and_turns_the_chat_template_rendered(tokenizer):
    tools = [function("bash", command={"type": "string"}), function("finish", message={"type": "string"})]
    turns = [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "go on"}]
    prompt = Prompt(rendered(tokenizer, tools, turns=turns))
    assert sorted(prompt.tools) == ["bash", "finish"] and prompt.assistant_turns == 1
    assert prompt.tools["finish"]["parameters"]["required"] == ["message"]
    assert prompt.system.startswith("You are a coding agent.")


# Each demonstration's time on 2 cores at load 10-20 (about twice that at load 30): builtin 10 s,
# mini-swe-agent 24 s, Claude Code 7-64 s, Terminus-2 21 s, SWE-agent 42 s, OpenCode 45 s, Codex 48 s,
# OpenHands 157 s (its SDK's imports). builtin and mini-swe-agent (the harness the demo names first) stay in
# the default suite.
HARNESSES = [
    "builtin",
    "mini_swe_agent",
    pytest.param("swe_agent", marks=pytest.mark.slow),
    pytest.param("terminus_2", marks=pytest.mark.slow),
    pytest.param("claude_code", marks=pytest.mark.slow),
    pytest.param("opencode", marks=pytest.mark.slow),
    pytest.param("openhands", marks=pytest.mark.slow),
    pytest.param("codex", marks=pytest.mark.slow),
]


@pytest.mark.docker
@pytest.mark.harness
@pytest.mark.parametrize("name", HARNESSES)
async def test_the_teacher_drives_the_harness_to_reward_one_recording_the_proxys_exact_ids_with_only_its_replies_masked(  # noqa: E501
    name, model_dir, tokenizer, task, tmp_path
):
    from legorl_jax.train.batch import pack_trajectories
    from legorl_jax.warm_start import record_demonstrations

    try:
        get_harness(name)
    except HarnessNotInstalled as exc:
        pytest.skip(str(exc))
    (demo,) = await record_demonstrations(
        [task],
        str(model_dir),
        tmp_path / "demos",
        harness=HarnessConfig(name=name),
        proxy=ProxyConfig(context_length=CONTEXT),
        sandbox=SandboxConfig(),
        verifier=VerifierConfig(),
        trial_timeout_s=600,
        max_len=CONTEXT,
    )
    assert demo.reward == 1.0 and demo.outcome is Outcome.SUBMITTED
    record = json.loads((tmp_path / "demos" / "trials" / TASK / "attempt_0" / "trajectory.json").read_text())
    main = next(b for b in record["branches"] if b["kind"] == "main")
    turns = [t for t in record["turns"] if t["branch"] == main["index"]]
    # The one main-branch sequence: every prompt the engine was given is its prefix, verbatim, and the loss
    # mask is 1 exactly on the teacher's reply tokens (its end-of-turn token included) that follow each.
    (seq,) = demo.sequences
    expected_mask = np.zeros(len(seq.token_ids), np.int8)
    for turn in turns:
        prompt, out = turn["prompt_ids"], turn["output_ids"]
        assert seq.token_ids[: len(prompt)].tolist() == prompt
        assert seq.token_ids[len(prompt) : len(prompt) + len(out)].tolist() == out
        expected_mask[len(prompt) : len(prompt) + len(out)] = 1
    np.testing.assert_array_equal(seq.loss_mask, expected_mask)
    # Side conversations (OpenCode's title generator) are counted on their own branches, not in the batch:
    # the packed rows hold this one sequence, and their targets under the mask are the teacher's main replies.
    side = [t for t in record["turns"] if t["branch"] != main["index"]]
    assert record["counters"]["side_calls"] == len(side) and (name != "opencode" or side)
    batch, _ = pack_trajectories(
        [demo], np.ones(1, np.float32), max_tokens=len(seq.token_ids), row_multiple=1
    )
    masked = np.asarray(batch.targets)[np.asarray(batch.loss_mask) == 1].tolist()
    assert masked == seq.token_ids[expected_mask == 1].tolist()


@pytest.mark.docker
@pytest.mark.harness
@pytest.mark.slow  # ~75 s: Claude Code retries the failed call, and the trial is retried once
async def test_a_real_harness_offering_no_tool_the_teacher_can_use_stops_the_warm_start_naming_it(
    model_dir, task, tmp_path
):
    from legorl_jax.warm_start import record_demonstrations

    try:
        get_harness("claude_code")
    except HarnessNotInstalled as exc:
        pytest.skip(str(exc))
    # Claude Code told to offer the model only its Read tool: nothing edits a file or runs a command.
    with pytest.raises(TeacherError, match=r"harness 'claude_code': .*no edit tool.*\['Read'\]"):
        await record_demonstrations(
            [task],
            str(model_dir),
            tmp_path / "demos",
            harness=HarnessConfig(name="claude_code", options={"tools": "Read"}),
            proxy=ProxyConfig(context_length=CONTEXT),
            sandbox=SandboxConfig(),
            verifier=VerifierConfig(),
            trial_timeout_s=600,
            max_len=CONTEXT,
        )
