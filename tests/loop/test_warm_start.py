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
