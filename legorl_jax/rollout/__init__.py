"""Rollouts: trials of a harness on tasks against the capture proxy, turned into verified `Trajectory`s.

    from legorl_jax.rollout import TrialSettings, collect
    batch = await collect(
        tasks, group_size=4, harness=get_harness("builtin"), proxy=proxy, trials=TrialSettings.of(cfg)
    )

trial.py (one trial's lifecycle and outcome), collect.py (a batch with bounded concurrency), behaviour.py
(features from the parsed tool calls), progress.py (the live progress line); `python -m legorl_jax.rollout`
is the stand-alone evaluation command (__main__.py).
"""

from __future__ import annotations

from legorl_jax.rollout.collect import Batch, collect, trial_dir
from legorl_jax.rollout.settings import TrialSettings
from legorl_jax.rollout.trial import run_trial

__all__ = ["Batch", "TrialSettings", "collect", "run_trial", "trial_dir"]
