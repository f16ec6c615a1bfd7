"""Group-relative advantages (GRPO, Dr. GRPO) computed on the host from trial rewards.

Contract: `grpo_advantages(rewards, group_ids, *, valid, std)` returns one float32 advantage per trial,

    A_i = (r_i - mean_g) / (std_g + 1e-6)      std="unbiased" (ddof 1, torch's default, as verl)
                                                 | "biased" (ddof 0)
    A_i =  r_i - mean_g                       std="none" (Dr. GRPO, arXiv:2503.20783)

where the statistics of group g are taken over its *valid* members only. A dropped trial (`valid` False,
an infrastructure failure) gets exactly 0 and never enters its siblings' mean or std.
The ε placement is verl's `(r - mean) / (std + eps)`, so one success in a group of 8 gives
0.875 / (0.35355 + 1e-6) = 2.475 and a group of equal rewards gives 0.

Where this departs from verl: a group with a single valid member gets 0, not its raw reward (verl sets
mean 0, std 1 for singletons). With nobody to compare against there is no relative signal, and a raw
reward of 1 would push the policy as hard as a real 1-of-8 contrast.

`trajectory_advantages(trajectories, std=..., negative_weight=...)` applies the same to `Trajectory`
objects (reward, group_id, valid), which is what the loop calls before packing; `negative_weight` w in
[0, 1] scales the negative advantages (A_i < 0 becomes w * A_i; 1, the default, leaves them), so the
trials worse than their group's mean are pushed down less than the better ones are pushed up.
"""

from __future__ import annotations

from collections.abc import Hashable
from collections.abc import Sequence as SequenceABC

import numpy as np

from legorl_jax.config import ADVANTAGE_STDS
from legorl_jax.types import Trajectory

EPS = 1e-6


def grpo_advantages(
    rewards: SequenceABC[float] | np.ndarray,
    group_ids: SequenceABC[Hashable] | np.ndarray,
    *,
    valid: SequenceABC[bool] | np.ndarray | None = None,
    std: str = "unbiased",
) -> np.ndarray:
    """Group-relative advantages, float32[N]; dropped trials (valid False) get 0."""
    if std not in ADVANTAGE_STDS:
        raise ValueError(f"std must be one of {ADVANTAGE_STDS}, got {std!r}")
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"rewards must be 1-D, got shape {r.shape}")
    groups = list(group_ids.tolist() if isinstance(group_ids, np.ndarray) else group_ids)
    if len(groups) != len(r):
        raise ValueError(f"group_ids has {len(groups)} entries, rewards has {len(r)}")
    keep = np.ones(len(r), dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    if keep.shape != r.shape:
        raise ValueError(f"valid has shape {keep.shape}, rewards has {r.shape}")
    bad = np.flatnonzero(keep & ~np.isfinite(r))
    if bad.size:
        raise ValueError(
            f"rewards must be finite for valid trials; index {int(bad[0])} has {float(r[bad[0]])!r}"
        )

    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        if keep[i]:
            members.setdefault(g, []).append(i)

    out = np.zeros(len(r), dtype=np.float64)
    for idx in members.values():
        if len(idx) < 2:
            continue  # no sibling to compare with: no relative signal (see module docstring)
        values = r[idx]
        centred = values - values.mean()
        if std == "none":
            out[idx] = centred
        else:
            spread = values.std(ddof=1 if std == "unbiased" else 0)
            out[idx] = centred / (spread + EPS)
    return out.astype(np.float32)


def trajectory_advantages(
    trajectories: SequenceABC[Trajectory], *, std: str = "unbiased", negative_weight: float = 1.0
) -> np.ndarray:
    """`grpo_advantages` over trials: groups by `group_id`, drops `not trajectory.valid`; negative
    advantages scaled by `negative_weight` (module docstring)."""
    if isinstance(negative_weight, bool) or not 0.0 <= negative_weight <= 1.0:
        raise ValueError(f"negative_weight must lie in [0, 1], got {negative_weight!r}")
    advantages = grpo_advantages(
        [t.reward if t.valid else 0.0 for t in trajectories],
        [t.group_id for t in trajectories],
        valid=[t.valid for t in trajectories],
        std=std,
    )
    return np.where(advantages < 0, advantages * np.float32(negative_weight), advantages)
