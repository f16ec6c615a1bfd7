"""How off-policy a step's trials are: staleness counted in weights versions, as pure host functions.

    metrics = staleness_metrics(trajectories, trainer_version)   # {"offpolicy/staleness_0": ..., ...}
    metrics = gap_metrics(gaps, log_ratios)                      # per-token IS figures per version gap

A token's *version gap* is the trainer's version minus the version it was sampled under (version numbers of
`versions.version_number`: optimiser steps; the trainer at version v trains on weights published as
v); a trajectory's *staleness* is its largest gap, the trainer version minus its oldest sampled version
(`Trajectory.oldest_version`, as AReaL and verl's fully-async mode count it). Gaps and staleness are bucketed
0, 1, 2 and 3 or more (`3plus`).

`staleness_metrics` (over the trajectories that sampled anything; infrastructure failures included, since
what they sampled is just as old):
- `offpolicy/staleness_<k>`: trajectories whose staleness is k (share of those counted);
- `offpolicy/tokens_gap_<k>`: sampled tokens whose gap is k (counts);
- `offpolicy/multi_version_share`: share of trajectories whose sampled tokens span two or more versions
  (a weight update landed while they ran);
- `offpolicy/staleness_mean`, `offpolicy/staleness_max`, `offpolicy/trajectories` (those counted).

`gap_metrics(gaps, log_ratios)` (the trainer's, `Trainer.update`): for each gap bucket present, over its
sampled tokens, the mean importance ratio π_old / behaviour (`train/is_ratio_mean_gap_<k>`) and its
effective sample size fraction (`train/is_ess_gap_<k>`, `(Σ w)² / (n Σ w²)`): how much staler tokens
drift from what the trainer now computes.

A token newer than the trainer (a negative gap) means the caller's trainer version is wrong: ValueError.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from legorl_jax.types import Trajectory

BUCKETS = ("0", "1", "2", "3plus")
LOG_RATIO_CLAMP = 20.0  # as the loss clamps its IS log-ratios (train/loss.py)


def bucket(gap: int) -> str:
    """The bucket name of a version gap or staleness (>= 0)."""
    if gap < 0:
        raise ValueError(f"version gap must be >= 0 (trainer version at least the sampled one), got {gap}")
    return BUCKETS[min(gap, len(BUCKETS) - 1)]


def staleness_metrics(trajectories: Sequence[Trajectory], trainer_version: int) -> dict[str, float]:
    """The step's staleness figures (module docstring) for a trainer at `trainer_version`."""
    if isinstance(trainer_version, bool) or not isinstance(trainer_version, int) or trainer_version < 0:
        raise ValueError(f"trainer_version must be an int >= 0, got {trainer_version!r}")
    trajectory_buckets = dict.fromkeys(BUCKETS, 0)
    token_buckets = dict.fromkeys(BUCKETS, 0)
    staleness: list[int] = []
    spanning = 0
    for t in trajectories:
        counts = t.version_tokens
        if not counts:
            continue
        oldest = min(counts)
        if max(counts) > trainer_version:
            raise ValueError(
                f"trajectory {t.trial_id!r} sampled under version {max(counts)}, newer than the trainer's "
                f"{trainer_version}"
            )
        staleness.append(trainer_version - oldest)
        trajectory_buckets[bucket(trainer_version - oldest)] += 1
        spanning += len(counts) >= 2
        for version, tokens in counts.items():
            token_buckets[bucket(trainer_version - version)] += tokens
    n = len(staleness)
    out = {f"offpolicy/staleness_{k}": v / n if n else 0.0 for k, v in trajectory_buckets.items()}
    out.update({f"offpolicy/tokens_gap_{k}": float(v) for k, v in token_buckets.items()})
    out["offpolicy/multi_version_share"] = spanning / n if n else 0.0
    out["offpolicy/staleness_mean"] = float(np.mean(staleness)) if n else 0.0
    out["offpolicy/staleness_max"] = float(max(staleness, default=0))
    out["offpolicy/trajectories"] = float(n)
    return out


def gap_metrics(gaps: np.ndarray, log_ratios: np.ndarray) -> dict[str, float]:
    """Per gap bucket: mean IS ratio and its ESS fraction over the sampled tokens (module docstring).

    `gaps` int[n] and `log_ratios` float[n] (π_old − behaviour log-prob) are over the same sampled tokens."""
    gaps, log_ratios = np.asarray(gaps), np.asarray(log_ratios, np.float64)
    if gaps.shape != log_ratios.shape or gaps.ndim != 1:
        raise ValueError(f"gaps {gaps.shape} and log_ratios {log_ratios.shape} must be the same 1-D shape")
    if gaps.size and gaps.min() < 0:
        raise ValueError(
            f"version gaps must be >= 0 (trainer version at least the sampled one), got {gaps.min()}"
        )
    w = np.exp(np.clip(log_ratios, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    names = np.asarray([BUCKETS[min(int(g), len(BUCKETS) - 1)] for g in gaps], dtype=object)
    out = {}
    for k in BUCKETS:
        sel = w[names == k]
        if sel.size:
            out[f"train/is_ratio_mean_gap_{k}"] = float(sel.mean())
            out[f"train/is_ess_gap_{k}"] = float(sel.sum() ** 2 / (sel.size * np.square(sel).sum()))
    return out
