"""Loop tests: the tiny MoE (trainer and embedded engine), one easy built-in task, Docker sandboxes."""

from __future__ import annotations

import pytest

from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_task

TASK_ID = "ratelimit-slow-rates-never-refill"
MAX_LEN = 2048


@pytest.fixture(scope="session")
def loop_model_dir(tmp_path_factory, tiny_model_tool):
    spec = tiny_model_tool.TinyModelSpec(max_positions=MAX_LEN)
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("loop-moe"), spec, seed=0)


@pytest.fixture(scope="session")
def loop_task():
    return load_builtin_task(SUITE_DIR / TASK_ID)
