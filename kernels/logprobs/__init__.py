"""Fused LM head + log-softmax + gather: `token_logprobs` without materialising the [N, V] logits.

`ops.token_logprobs` is the public, differentiable entry point; `kernel.BlockSizes` tunes the Pallas
kernels and `xla.ChunkSizes` the chunked XLA path. `reference` is the plain-jnp oracle.
"""

from legorl_jax.kernels.logprobs.kernel import BlockSizes
from legorl_jax.kernels.logprobs.ops import token_logprobs
from legorl_jax.kernels.logprobs.xla import ChunkSizes

__all__ = ["BlockSizes", "ChunkSizes", "token_logprobs"]
