"""Structured-config dataclasses: the schemas of `conf/` (STYLE rules 6–8).

Each Hydra group `conf/<group>/` has one dataclass here, registered in Hydra's ConfigStore by
`register_configs()` (called by the entry points, never at import). YAML files hold presets only. Every
field has a one-line docstring (the string literal under it); `__post_init__` validates and raises a
`ValueError` naming the received value. Components receive their own sub-config, never the root.

Sections are owned by the issue that builds the group; add fields, never rename them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# ----------------------------------------------------------------------------------------------------
# model/ and mesh/ (foundation issue)
# ----------------------------------------------------------------------------------------------------

_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass
class ModelConfig:
    """Which checkpoint the policy is loaded from and how it computes."""

    path: str = "${oc.env:LEGORL_MODEL,runs/tiny-moe}"
    """HF model directory (config.json + safetensors + tokenizer); any Qwen3 / Qwen3-MoE checkpoint."""
    dtype: str = "float32"
    """Parameter dtype after loading (float32 master weights; bfloat16 for inference-only use)."""
    compute_dtype: str = "float32"
    """Activation/matmul dtype inside the forward (bfloat16 with float32 params = mixed precision)."""
    scan_layers: bool = True
    """Run identical consecutive decoder layers under one `nnx.scan` (off for step-through debugging)."""
    remat: bool = False
    """Recompute each layer's activations in the backward (gradient checkpointing)."""

    def __post_init__(self) -> None:
        for name in ("dtype", "compute_dtype"):
            value = getattr(self, name)
            if value not in _DTYPES:
                raise ValueError(f"model.{name} must be one of {_DTYPES}, got {value!r}")


MESH_AXES = ("data", "fsdp", "tensor", "expert")


@dataclasses.dataclass
class MeshConfig:
    """Device mesh shape and the logical-axis → mesh-axis rules table (STYLE rule 10)."""

    data: int = 1
    """Pure data-parallel replicas."""
    fsdp: int = -1
    """Fully-sharded data parallel; -1 takes every device the other axes leave."""
    tensor: int = 1
    """Tensor (megatron-style) parallelism over heads / mlp / vocab."""
    expert: int = 1
    """Expert parallelism over the MoE experts axis."""
    rules: list[Any] | None = None
    """Overrides of the logical axis rules: a list of [logical_axis, mesh_axis | [mesh_axes] | null]."""

    def __post_init__(self) -> None:
        for name in MESH_AXES:
            value = getattr(self, name)
            if not isinstance(value, int) or (value < 1 and not (name == "fsdp" and value == -1)):
                raise ValueError(f"mesh.{name} must be a positive int (fsdp may be -1), got {value!r}")


# ----------------------------------------------------------------------------------------------------
# Root
# ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Config:
    """The root config: one field per group."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    """The policy checkpoint and its numerics."""
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    """Device mesh for the trainer."""
    seed: int = 0
    """Seed of every random stream in the run."""


def register_configs() -> None:
    """Registers the schemas with Hydra's ConfigStore (idempotent). Call from entry points only."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="model", name="schema", node=ModelConfig)
    cs.store(group="mesh", name="schema", node=MeshConfig)
