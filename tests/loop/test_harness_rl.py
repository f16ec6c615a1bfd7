"""Two RL steps through mini-swe-agent, unmodified: its own prompt, bash tool and exit, the real proxy,
sandbox, verifier, trainer, checkpoint and publishing (`run.build_parts`), the rollouts' replies from the
engine boundary: in each group the first trial gets the teacher's fix (in mini-swe-agent's own protocol,
read from its prompt) and the others a command that changes nothing, so every group has a solved and an
unsolved trial and every step updates the policy on the tokens mini-swe-agent's conversation was recorded as.

Slow: 150 s on 2 cores at load average 20 (four mini-swe-agent trials, and the trainer compiled for rows
of 3072 tokens, which mini-swe-agent's ~2.1k-token prompt needs); under the default suite's budget it does
not fit.
"""

from __future__ import annotations

import dataclasses
import json

import loop_run
import numpy as np
import pytest
from scripted_engine import ScriptedEngine

from legorl_jax.config import (
    EngineConfig,
    HarnessConfig,
    MeshConfig,
    ModelConfig,
    ProxyConfig,
    TrackingConfig,
)
from legorl_jax.harness import HarnessNotInstalled, get_harness
from legorl_jax.teacher import Teacher, qwen3_tool_call

pytestmark = [pytest.mark.docker, pytest.mark.harness, pytest.mark.slow]
MAX_LEN = 3072  # mini-swe-agent's swebench prompt is ~2.1k tokens with the tiny tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_model_tool):
    spec = tiny_model_tool.TinyModelSpec(max_positions=4096)
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("harness-rl-moe"), spec, seed=0)


class TeacherOrNothing:
    """Per call: a trial's first call (no assistant turn yet) starts the next trial; the first trial of each
    group is the teacher's, the others run `ls`."""

    def __init__(self, tokenizer, task, group_size: int):
        self.tokenizer, self.task, self.group_size = tokenizer, task, group_size
        self.trial, self.teacher = -1, None

    def __call__(self, prompt, rid):
        text = self.tokenizer.decode(prompt)
        if text.count("<|im_start|>assistant") == 1:
            self.trial += 1
            self.teacher = Teacher(self.task, "mini_swe_agent", ProxyConfig())
        if self.trial % self.group_size == 0:
            return self.teacher.reply(text)
        return qwen3_tool_call("bash", {"command": "ls"})


async def test_two_rl_steps_through_mini_swe_agent_train_on_its_recorded_tokens(model_dir, tmp_path):
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.run import build_parts, load_tasks, run_loop

    try:
        get_harness("mini_swe_agent")
    except HarnessNotInstalled as exc:
        pytest.skip(str(exc))
    run_dir = tmp_path / "runs" / "mini-rl"
    config = loop_run.config_for(run_dir, steps=2, group_size=2)
    config = dataclasses.replace(
        config,
        model=ModelConfig(path=str(model_dir)),
        mesh=MeshConfig(devices=[0]),
        engine=EngineConfig(max_running=2, max_len=MAX_LEN, min_prefill_bucket=64),
        proxy=dataclasses.replace(config.proxy, context_length=MAX_LEN),
        train=dataclasses.replace(config.train, max_tokens=MAX_LEN),
        harness=HarnessConfig(name="mini_swe_agent", step_limit=1),
        tracking=TrackingConfig(backend="none"),
    )
    tasks, _ = load_tasks(config)
    tokenizer = load_tokenizer(model_dir)
    engine = ScriptedEngine(tokenizer, TeacherOrNothing(tokenizer, tasks[0], group_size=2))
    engine.max_len = MAX_LEN
    async with build_parts(config, rollout_engine=engine) as built:
        records = await run_loop(built.parts, built.state, start_step=built.start_step)
        saved = built.parts.checkpointer.all_steps()
    assert [r.step for r in records] == [0, 1] and all(r.trained for r in records), records
    for record in records:
        m = record.metrics
        assert m["rollout/scored"] == 2 and m["rollout/solve_rate"] == 0.5, m
        assert m["batch/overlong"] == 0 and m["behaviour/tokens_per_trial"] > 2000, m
        assert np.isfinite(m["train/loss"]), m
    assert saved and max(saved) == 2
    # The trials were mini-swe-agent's own: its trajectory, with the teacher's fix as its bash command.
    trial = run_dir / "trials" / "step_0" / f"{tasks[0].instance_id}-0" / "attempt_0"
    log = json.loads((trial / "harness.log").read_text())
    assert log["info"]["config"]["agent_type"] == "minisweagent.agents.default.DefaultAgent"
    assert "git apply --unidiff-zero" in json.dumps(log["messages"])
