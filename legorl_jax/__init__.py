"""legorl_jax: harness-native reinforcement learning for coding agents, in JAX/Flax.

Importing the package does nothing beyond defining names: no device initialisation, no I/O.
"""

__version__ = "0.1.0"
