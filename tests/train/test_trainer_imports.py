"""Importing the trainer's modules defines names only: no device is initialised, nothing is read."""

import subprocess
import sys


def test_importing_the_trainer_initialises_no_jax_backend():
    code = (
        "import legorl_jax.train.advantages, legorl_jax.train.batch, legorl_jax.train.loss, "
        "legorl_jax.train.state, "
        "legorl_jax.train.step, legorl_jax.train.checkpoint, legorl_jax.train.publish, "
        "legorl_jax.monitor.alignment\n"
        "from jax._src import xla_bridge\n"
        "print(bool(xla_bridge._backends))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"
