"""Shared pieces of the trainer tests: the tiny MoE, its trainer, deterministic trials (tiny_run.py)."""

import pytest
import tiny_run

from legorl_jax.model import init_policy
from legorl_jax.train.step import Trainer


@pytest.fixture(scope="module")
def tiny_trainer():
    """A single-device trainer on the tiny MoE (2 rows per micro-batch, lr 1e-2, no agreement pass)."""
    algo, train = tiny_run.tiny_configs()
    return Trainer(init_policy(tiny_run.TINY_MOE, seed=0), algo, train)
