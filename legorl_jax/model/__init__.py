"""The Flax NNX Qwen3 / Qwen3-MoE policy: architecture, forward (packed, cached, replayed routing),
HF checkpoint I/O and sharding rules. Importing it defines names only (no device, no I/O).

    from legorl_jax.model import load_hf, save_hf, init_policy, Policy, ModelOutput, TokenLogprobs
"""

from legorl_jax.model.architecture import ArchConfig, RopeScaling
from legorl_jax.model.cache import KVCache
from legorl_jax.model.checkpoint_io import load_hf, save_hf
from legorl_jax.model.hf_layout import init_policy
from legorl_jax.model.policy import ModelOutput, Policy, TokenLogprobs

__all__ = [
    "ArchConfig",
    "KVCache",
    "ModelOutput",
    "Policy",
    "RopeScaling",
    "TokenLogprobs",
    "init_policy",
    "load_hf",
    "save_hf",
]
