"""The supervised warm start: gold-patch demonstrations recorded through the real built-in harness, proxy,
Docker sandbox and verifier, trained on by the same trainer, cached, and stopped early when asked."""

from __future__ import annotations

import dataclasses
import json

import loop_run
import numpy as np
import pytest

from legorl_jax.config import LoopConfig, WarmStartConfig
from legorl_jax.model import load_hf
from legorl_jax.run import warm_start_for

pytestmark = pytest.mark.docker


def warm_config(tmp_path, **warm):
    config = loop_run.config_for(tmp_path / "runs" / "warm")
    ws = WarmStartConfig(enabled=True, learning_rate=1e-2, cache_dir=str(tmp_path / "cache"), **warm)
    return dataclasses.replace(config, loop=LoopConfig(steps=1, validate_every=0, warm_start=ws))


async def test_the_warm_start_learns_the_demonstration_is_cached_and_says_what_it_did(
    loop_model_dir, loop_task, tmp_path
):
    config = warm_config(tmp_path, steps=4)
    report = await warm_start_for(config, [loop_task], str(loop_model_dir), same_tasks_as_rl=True)
    assert report.kept == (loop_task.instance_id,) and report.steps == 4 and not report.cached
    assert report.last_loss < report.first_loss - 0.5  # NLL per token of the demonstration
    text = report.describe()
    assert "4 supervised steps at lr 0.01" in text and "the same tasks RL trains and is measured on" in text
    assert f"through the builtin harness (1 of 1 kept: {loop_task.instance_id})" in text
    # The recorded demonstration is the verified gold fix, through the harness's own tool calls.
    (trial,) = (tmp_path / "cache").glob("*/work/trials/*/trial.json")
    assert json.loads(trial.read_text())["reward"] == 1.0
    # The written weights are the trained ones, not the base model's.
    base, warm = load_hf(loop_model_dir), load_hf(report.model_dir)
    assert not np.allclose(np.asarray(base.embed_tokens[...]), np.asarray(warm.embed_tokens[...]))

    again = await warm_start_for(config, [loop_task], str(loop_model_dir), same_tasks_as_rl=False)
    assert again.cached and again.model_dir == report.model_dir and again.last_loss == report.last_loss
    assert "reused from the cache" in again.describe() and "tasks RL is not measured on" in again.describe()


@pytest.mark.slow  # a second demonstration recording (~45 s); the default suite's budget is near its limit
async def test_stop_below_ends_the_warm_start_once_the_demonstration_nll_is_under_it(
    loop_model_dir, loop_task, tmp_path
):
    # The random model's NLL per token is ~8.3: under 100 after the first step, so one step is taken.
    config = warm_config(tmp_path, steps=50, stop_below=100.0)
    report = await warm_start_for(config, [loop_task], str(loop_model_dir), same_tasks_as_rl=True)
    assert report.steps == 1 and report.stop_below == 100.0 and report.first_loss == report.last_loss
    assert "1 supervised step (until the NLL fell below 100)" in report.describe()


@pytest.mark.parametrize("bad", [0, -1.0, True, "low"])
def test_stop_below_must_be_a_positive_number_or_null(bad):
    with pytest.raises(ValueError, match=rf"stop_below \(or null\) must be a positive number, got {bad!r}"):
        WarmStartConfig(stop_below=bad)


def test_the_codex_teachers_patch_adds_updates_and_deletes_files_in_apply_patch_form(tiny_moe_dir):
    from legorl_jax.config import ProxyConfig
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.tasks.registry import load_suite
    from legorl_jax.teacher import DONE_TEXT, Teacher, apply_patch_command, apply_patch_text, qwen3_tool_call

    gold = (
        "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n"
        "+x = 1\n+EOF\n"
        "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,3 +1,3 @@\n def add(a, b):\n"
        "-    return a - b\n+    return a + b\n \n"
        "@@ -9,2 +9,2 @@\n def neg(a):\n-    return a\n+    return -a\n"
        "diff --git a/old.py b/old.py\ndeleted file mode 100644\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n"
        "-y = 2\n"
    )
    task = dataclasses.replace(load_suite("builtin")[0], patch=gold)
    assert apply_patch_text(task).split("\n") == [
        "*** Begin Patch",
        "*** Add File: new.py",
        "+x = 1",
        "+EOF",
        "*** Update File: calc.py",
        "@@",
        " def add(a, b):",
        "-    return a - b",
        "+    return a + b",
        " ",
        "@@",
        " def neg(a):",
        "-    return a",
        "+    return -a",
        "*** Delete File: old.py",
        "*** End Patch",
    ]
    # Where the request names apply_patch (Codex's instructions do), the teacher runs it through the shell
    # tool (a here-document no patch line can end: each has its prefix), then ends Codex's turn.
    assert apply_patch_command(task) == f"apply_patch <<'EOF'\n{apply_patch_text(task)}\nEOF"
    tokenizer = load_tokenizer(tiny_moe_dir)
    shell = {"type": "function", "function": {"name": "exec_command", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}  # fmt: skip
    system = {"role": "system", "content": "Edit files with apply_patch through the shell."}
    prompt = tokenizer.render([system, {"role": "user", "content": "fix"}], tools=[shell],
                              add_generation_prompt=True)  # fmt: skip
    teacher = Teacher(task, "codex", ProxyConfig())
    assert teacher.reply(prompt) == qwen3_tool_call("exec_command", {"cmd": apply_patch_command(task)})
    assert teacher.plan is not None and teacher.plan[-1] == DONE_TEXT
