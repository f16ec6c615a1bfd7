"""Packed-row attention whose memory is linear in the row: `attention` (ops.py), blockwise in XLA
(`xla.BlockSizes` tunes it), Pallas splash attention on TPU (kernel.py), our Pallas (Triton) kernel on GPU
(pallas_gpu.py, `pallas_gpu.BlockSizes`); `reference` is the dense oracle.
"""

from legorl_jax.kernels.attention.ops import attention
from legorl_jax.kernels.attention.xla import BlockSizes

__all__ = ["BlockSizes", "attention"]
