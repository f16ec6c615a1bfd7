"""Logical axes, the rules table that maps them to mesh axes, the mesh, and placing a policy on it.

Contract (docs/style.md rules 9-11):
- Model code names only *logical* axes, from the closed vocabulary `LOGICAL_AXES`. Every parameter carries
  its logical names in the Flax NNX variable metadata key `out_sharding` (written once, by
  `layers.param`); activations are constrained at block boundaries with `constrain`.
- One rules table, `DEFAULT_RULES`, maps each logical axis to an ordered tuple of mesh axes of
  `MESH_AXES = (data, fsdp, tensor, expert, context)`. `MeshConfig.rules` overrides entries
  (`rules_from_config`).
- Resolving a logical spec for an array of a known shape (`logical_to_spec`) drops a mesh axis when an
  earlier dimension already uses it (so activations `[batch, seq, embed]` put fsdp on batch, and the same
  rules put it on embed for weights), when it has size 1, or when the dimension is not divisible by the
  product so far. Shapes that do not divide therefore replicate instead of failing.
- `constrain` is a no-op when no mesh is set (`jax.set_mesh`), and never looks at the platform: the
  8-device CPU tests run the code the accelerators run.
- The rules in force are those of the innermost `use_rules(...)` block (default `DEFAULT_RULES`); they are
  read while tracing, so a jitted function keeps the rules it was traced with.

Usage:
    mesh = make_mesh(MeshConfig(fsdp=2, tensor=2, expert=2))
    rules = rules_from_config(mesh_config)
    place_on_mesh(policy, mesh, rules)
    with jax.set_mesh(mesh), use_rules(rules):
        out = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, tokens)
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from legorl_jax.config import LOGICAL_AXES, MESH_AXES, MeshConfig

Rules = tuple[tuple[str, tuple[str, ...]], ...]

# Weights: fsdp shards the model dimension, tensor the heads / mlp / vocab, expert the experts.
# Context parallelism: context shards the tokens of a row (context_parallel.py).
# Activations: batch takes data, fsdp and expert, so attention is never computed redundantly on the
# expert axis; the MoE block gathers the tokens of its expert group itself (moe.py).
DEFAULT_RULES: Rules = (
    ("batch", ("data", "fsdp", "expert")),
    ("seq", ("context",)),
    ("embed", ("fsdp",)),
    ("heads", ("tensor",)),
    ("kv_heads", ("tensor",)),
    ("head_dim", ()),
    ("mlp", ("tensor",)),
    ("experts", ("expert",)),
    ("vocab", ("tensor",)),
    ("layers", ()),
)

_ACTIVE_RULES: contextvars.ContextVar[Rules] = contextvars.ContextVar(
    "legorl_sharding_rules", default=DEFAULT_RULES
)


def _as_mesh_axes(logical: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    axes = (value,) if isinstance(value, str) else tuple(value)
    for axis in axes:
        if axis not in MESH_AXES:
            raise ValueError(
                f"mesh rule for logical axis {logical!r} names mesh axis {axis!r}, not one of {MESH_AXES}"
            )
    if len(set(axes)) != len(axes):
        raise ValueError(f"mesh rule for logical axis {logical!r} repeats a mesh axis: {axes!r}")
    return axes


def make_rules(overrides: Sequence[Any] | None = None) -> Rules:
    """DEFAULT_RULES with `overrides` ([logical_axis, mesh_axis | [mesh_axes] | None] pairs) applied."""
    table = dict(DEFAULT_RULES)
    for entry in overrides or ():
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise ValueError(f"mesh.rules entries must be [logical_axis, mesh_axes], got {entry!r}")
        logical, value = entry
        if logical not in LOGICAL_AXES:
            raise ValueError(f"mesh.rules names logical axis {logical!r}, not one of {LOGICAL_AXES}")
        table[logical] = _as_mesh_axes(logical, value)
    return tuple(table.items())


def rules_from_config(mesh_config: MeshConfig) -> Rules:
    """The rules table of a `MeshConfig` (its `rules` field overrides the defaults)."""
    return make_rules(mesh_config.rules)


@contextlib.contextmanager
def use_rules(rules: Rules) -> Iterator[Rules]:
    """Makes `rules` the table `constrain` and the MoE block resolve against, inside the block."""
    token = _ACTIVE_RULES.set(make_rules([list(r) for r in rules]))
    try:
        yield _ACTIVE_RULES.get()
    finally:
        _ACTIVE_RULES.reset(token)


def active_rules() -> Rules:
    return _ACTIVE_RULES.get()


def make_mesh(mesh_config: MeshConfig, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A mesh with axes MESH_AXES sized by `mesh_config`; fsdp = -1 takes the devices the others leave.

    The devices: `devices`, else those `mesh_config.devices` names (indices into `jax.devices()`), else all.
    """
    if devices is None and mesh_config.devices is not None:
        every = jax.devices()
        outside = [i for i in mesh_config.devices if i >= len(every)]
        if outside:
            raise ValueError(
                f"mesh.devices {mesh_config.devices} names {outside}, but there are {len(every)} devices"
            )
        devices = [every[i] for i in mesh_config.devices]
    devices = list(jax.devices() if devices is None else devices)
    sizes = {axis: getattr(mesh_config, axis) for axis in MESH_AXES}
    fixed = math.prod(size for axis, size in sizes.items() if size != -1)
    if sizes["fsdp"] == -1:
        if len(devices) % fixed:
            raise ValueError(
                f"mesh: data*tensor*expert*context = {fixed} does not divide the {len(devices)} devices, so "
                "fsdp=-1 has no size"
            )
        sizes["fsdp"] = len(devices) // fixed
    shape = tuple(sizes[axis] for axis in MESH_AXES)
    if math.prod(shape) != len(devices):
        raise ValueError(
            f"mesh: {dict(zip(MESH_AXES, shape, strict=True))} needs {math.prod(shape)} devices, but "
            f"{len(devices)} are available"
        )
    grid = np.asarray(devices, dtype=object).reshape(shape)
    # Auto axes: GSPMD propagates shardings between the constraints (explicit sharding-in-types is not
    # what the model code is written for).
    return Mesh(grid, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))


def _mesh_axis_sizes(mesh: Any) -> dict[str, int]:
    return dict(
        zip(
            mesh.axis_names,
            mesh.axis_sizes if hasattr(mesh, "axis_sizes") else mesh.devices.shape,
            strict=True,
        )
    )


def logical_to_spec(
    axes: Sequence[str | None],
    shape: Sequence[int] | None = None,
    *,
    mesh: Any = None,
    rules: Rules | None = None,
) -> PartitionSpec:
    """The PartitionSpec of logical `axes` under `rules` on `mesh` (see the module docstring)."""
    rules = active_rules() if rules is None else rules
    table = dict(rules)
    sizes = _mesh_axis_sizes(mesh) if mesh is not None else None
    used: set[str] = set()
    spec: list[tuple[str, ...] | None] = []
    for dim, logical in enumerate(axes):
        if logical is None:
            spec.append(None)
            continue
        if logical not in table:
            raise ValueError(f"logical axis {logical!r} has no rule; known: {tuple(table)}")
        chosen: list[str] = []
        product = 1
        for axis in table[logical]:
            if axis in used or (sizes is not None and sizes.get(axis, 1) == 1):
                continue
            size = sizes[axis] if sizes is not None else 1
            if shape is not None and shape[dim] % (product * size):
                continue
            chosen.append(axis)
            product *= size
        used.update(chosen)
        spec.append(tuple(chosen) if chosen else None)
    return PartitionSpec(*spec)


def current_mesh() -> Any | None:
    """The mesh set with `jax.set_mesh`, or None."""
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty else mesh


def constrain(x: jax.Array, axes: Sequence[str | None]) -> jax.Array:
    """A sharding constraint on an activation at a block boundary; identity without a mesh."""
    mesh = current_mesh()
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, logical_to_spec(axes, x.shape, mesh=mesh))


def mesh_axes_of(logical: str, size: int, mesh: Any) -> tuple[str, ...]:
    """The mesh axes a dimension of `size` with logical name `logical` is sharded over on `mesh`."""
    entry = logical_to_spec((logical,), (size,), mesh=mesh)[0]
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _logical_axes_of(variable: nnx.Variable) -> tuple[str | None, ...]:
    axes = variable.get_metadata().get("out_sharding")
    if axes is None:
        raise ValueError(
            f"parameter of shape {variable.shape} has no logical axes (created outside layers.param)"
        )
    return tuple(axes)


def state_shardings(module: nnx.Module, mesh: Mesh, rules: Rules | None = None) -> nnx.State:
    """`nnx.state(module)` with each value replaced by its NamedSharding (usable as jit / orbax shardings)."""
    state = nnx.state(module)

    def sharding_of(variable: nnx.Variable) -> nnx.Variable:
        spec = logical_to_spec(_logical_axes_of(variable), variable.shape, mesh=mesh, rules=rules)
        return variable.replace(NamedSharding(mesh, spec))

    return jax.tree.map(sharding_of, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def place_on_mesh(module: nnx.Module, mesh: Mesh, rules: Rules | None = None) -> nnx.Module:
    """Moves every variable of `module` onto `mesh` with the sharding its logical axes ask for (in place)."""
    placed = jax.device_put(nnx.state(module), state_shardings(module, mesh, rules))
    nnx.update(module, placed)
    return module
