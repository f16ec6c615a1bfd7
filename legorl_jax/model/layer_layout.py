"""The two layouts of a policy's decoder layers, and parameters moved from one into the other.

A `LayerRun` (decoder.py) holds its `count` layers scanned, every parameter stacked on a leading `layers`
axis (state path `runs/<r>/layers/<name...>`, shape [count, ...]), or unrolled, one array per layer
(`runs/<r>/layers/<j>/<name...>`). The weights and the results are the same (decoder.py); the costs are
not. XLA:CPU copies each layer's slice of a stacked weight out before its matmuls (the scan's
dynamic-slice: ~50 MB a layer and decode step on the 85M MoE of BENCHMARKS.md, issue 42, half its decode
forward), while an unrolled program compiles in time growing with the layers. The trainer scans; the
embedded engine serves unrolled on CPU and takes the trainer's scanned parameters (engine/runner.py).

    plan = layout_plan(source, target)                      # nnx.States; target's leaves may be abstract
    leaves = apply_plan(jax.tree.leaves(source), plan)      # traceable; in jax.tree.leaves(target) order

A plan has one `Gather` per leaf of `target`: the source pieces it is made of, each a source leaf and,
when that leaf is a stack, the layer taken from it; `stack` says whether the target leaf is itself a
stack of the pieces. Parameters outside the layer runs (embedding, final norm, head) map one to one.
`layout_plan` refuses a source that does not hold exactly the target's parameters with their shapes
(ValueError naming the first parameter missing, unexpected or mis-shaped, as `runs/0/layers/2/mlp/gate`:
per layer, in either layout).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

Keys = tuple[str | int, ...]


class Gather(NamedTuple):
    """How one target leaf is made: `pieces` (source leaf index, layer index in it or None), stacked or
    not."""

    pieces: tuple[tuple[int, int | None], ...]
    stack: bool


def _keys(path: Sequence[Any]) -> Keys:
    """A jax key path as plain keys, without the trailing `value` of an nnx Variable."""
    keys: list[str | int] = []
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey):
            keys.append(entry.key)
        elif isinstance(entry, jax.tree_util.SequenceKey):
            keys.append(entry.idx)
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            keys.append(entry.name)
        else:
            keys.append(str(entry))
    if keys and keys[-1] == "value":
        keys.pop()
    return tuple(keys)


def _is_stack(keys: Keys) -> bool:
    """`runs/<r>/layers/<name>...`: a scanned run's parameter (an unrolled one has a layer index there)."""
    return len(keys) > 3 and keys[0] == "runs" and keys[2] == "layers" and isinstance(keys[3], str)


def _layer(keys: Keys, j: int) -> Keys:
    return (*keys[:3], j, *keys[3:])


def _name(keys: Keys) -> str:
    return "/".join(str(k) for k in keys)


def _leaves(state: Any) -> list[tuple[Keys, tuple[int, ...]]]:
    return [(_keys(path), tuple(leaf.shape)) for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]]


def layout_plan(source: Any, target: Any) -> tuple[Gather, ...]:
    """The plan that builds `target`'s leaves from `source`'s (module docstring), or a ValueError."""
    held: dict[Keys, tuple[tuple[int, int | None], tuple[int, ...]]] = {}
    for i, (keys, shape) in enumerate(_leaves(source)):
        if _is_stack(keys) and shape:
            held.update({_layer(keys, j): ((i, j), shape[1:]) for j in range(shape[0])})
        else:
            held[keys] = ((i, None), shape)
    plan, used, missing, misshaped = [], set(), [], []
    for keys, shape in _leaves(target):
        stack = _is_stack(keys) and bool(shape)
        wanted = [(_layer(keys, j), shape[1:]) for j in range(shape[0])] if stack else [(keys, shape)]
        pieces = []
        for key, expected in wanted:
            if key not in held:
                missing.append(key)
                continue
            piece, received = held[key]
            used.add(key)
            if received != expected:
                misshaped.append(f"{_name(key)} has shape {received}, expected {expected}")
            pieces.append(piece)
        plan.append(Gather(tuple(pieces), stack))
    unexpected = sorted((k for k in held if k not in used), key=_name)
    problems = []
    if missing:
        problems.append(f"parameter {_name(missing[0])} is missing ({len(missing)} missing)")
    if unexpected:
        problems.append(f"parameter {_name(unexpected[0])} is unexpected ({len(unexpected)} unexpected)")
    if misshaped:
        problems.append(f"parameter {misshaped[0]} ({len(misshaped)} mis-shaped)")
    if problems:
        raise ValueError("; ".join(problems))
    return tuple(plan)


def apply_plan(leaves: Sequence[jax.Array], plan: tuple[Gather, ...]) -> list[jax.Array]:
    """The target's leaves from the source's `leaves` (traceable: slices and stacks only)."""

    def piece(i: int, j: int | None) -> jax.Array:
        return leaves[i] if j is None else leaves[i][j]

    return [jnp.stack([piece(*p) for p in g.pieces]) if g.stack else piece(*g.pieces[0]) for g in plan]
