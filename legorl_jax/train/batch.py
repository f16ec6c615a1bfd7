"""Packing trials into a fixed-shape `TrainBatch` (docs/architecture.md §4, the alignment of `TrainBatch`).

Contract of `pack_trajectories(trajectories, advantages, *, max_tokens, ...)`:

- Every `Sequence` of every trial becomes one *segment* of a row of `max_tokens` tokens. Rows are filled
  first-fit, longest sequence first (first-fit decreasing; ties keep arrival order, so packing is
  deterministic). Segment ids count 1, 2, ... within a row; 0 is padding. Positions restart at 0 in each
  segment.
- Alignment: position t holds an *input* token; `targets[b, t]` is the next token of the same segment and
  `loss_mask`, `behaviour_logprobs` and `advantages` at t describe that target, so the logits at t line up
  with every per-token field without shifting. The last token of a segment has no target (mask 0).
- `token_versions` is target-aligned too: the weights version number the target at t was sampled under
  (`Sequence.token_versions`), -1 where there is no sampled target. A sequence that records no per-token
  versions gets its one `weight_versions` entry's number on every sampled target, or -1 throughout when that
  cannot be numbered (several versions, or a name that is not a version of this run).
- `stale_kv` is target-aligned the same way: 1 where the target at t was sampled over K/V of older weights
  (`Sequence.stale_kv`), 0 elsewhere and for sequences that record none (all fresh).
- Routed experts are copied row for row, never shifted: `Sequence.routed_experts[i]` (the experts that
  processed input position i) lands at the packed position of token i, transposed to `[L, B, T, K]`.
  Sequences without routing, padding, and rows recorded as -1 stay -1 (route natively).
- Dropped trials (`not trajectory.valid`, infrastructure failures) are left out of the batch entirely
  (counted in `batch/dropped_trials`), so they contribute exactly nothing: not to the policy loss or its
  normalisers, and not to the MoE load-balancing loss either, which the model takes over every real token
  of the forward, not over the loss mask (a dropped trial packed with a zero mask would still pull the
  router). Where this departs from verl/lego-rl: they keep such rows with a zeroed advantage to keep the
  batch shape (their tokens then still reach the KL); our shapes are bucketed anyway.
- A trajectory with a sequence longer than the window (`max_tokens`) is refused whole, never cut: none of
  its sequences is packed (a cut sequence would train on a prefix whose tail, often the final answer and
  the tokens the reward is about, silently leaves the loss). The refused trials are returned in
  `PackStats.refused` (trial id and length of its longest sequence), counted in `batch/overlong` every step
  and logged with their lengths. Advantages were computed from the full trial's reward before packing, so
  a refused trial still counts in its group's statistics, as a dropped one does. Raise `train.max_tokens`
  to train such trials.
- Shapes are fixed per bucket: the row count is `row_multiple × 2^k`, the smallest such that holds every
  segment and at least `min_rows` rows, so the jitted step compiles at most log2(max rows) times (once,
  when `min_rows` covers every batch). `row_multiple` is the trainer's mini-batches × rows per
  micro-batch (`Trainer.row_multiple`), so every micro-batch divides evenly over the mesh.

`sequence_from_generation(prompt_ids, generation)` and `trajectories_from_generations(...)` build the
single-turn case (a prompt and one engine `Generation`), which is all a test or a simple task needs to go
from (generations, rewards) to trials to a batch.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence as SequenceABC

import jax
import numpy as np

from legorl_jax.types import Generation, Outcome, Sequence, TrainBatch, Trajectory
from legorl_jax.validate import is_int, positive_int
from legorl_jax.versions import version_number, version_numbers

log = logging.getLogger(__name__)

# The trainer's programs take a TrainBatch as it is (types.py stays jax-free, so it is registered here,
# where batches are made; every module that hands one to jax imports this one).
jax.tree_util.register_dataclass(
    TrainBatch, data_fields=[f.name for f in dataclasses.fields(TrainBatch)], meta_fields=[]
)


@dataclasses.dataclass(frozen=True)
class RoutingSpec:
    """The routing layout of an MoE policy: L MoE layers, top-K of E experts."""

    num_layers: int
    top_k: int
    num_experts: int

    def __post_init__(self) -> None:
        for name in ("num_layers", "top_k", "num_experts"):
            positive_int(f"RoutingSpec.{name}", getattr(self, name))
        if self.top_k > self.num_experts:
            raise ValueError(f"RoutingSpec.top_k={self.top_k} exceeds num_experts={self.num_experts}")


@dataclasses.dataclass(frozen=True)
class PackStats:
    """What packing did, reported every step (never a silent truncation or drop)."""

    rows: int
    rows_used: int
    row_tokens: int
    sequences: int
    dropped_trials: int
    overlong: int  # trials refused whole: a sequence longer than the row (module docstring)
    sampled_tokens: int
    filled_tokens: int
    zero_behaviour_logprobs: int
    # (trial id, tokens of its longest sequence) of each refused trial; not a metric.
    refused: tuple[tuple[str, int], ...] = ()

    @property
    def fill(self) -> float:
        """Fraction of the batch's token slots holding a real token (the rest is padding)."""
        return self.filled_tokens / (self.rows * self.row_tokens)

    def as_metrics(self) -> dict[str, float]:
        metrics = {
            f"batch/{f.name}": float(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name != "refused"
        }
        metrics["batch/fill"] = self.fill
        return metrics


@dataclasses.dataclass(frozen=True)
class _Segment:
    trial: int
    sequence: Sequence
    length: int


def pack_trajectories(
    trajectories: SequenceABC[Trajectory],
    advantages: SequenceABC[float] | np.ndarray,
    *,
    max_tokens: int,
    row_multiple: int = 1,
    routing: RoutingSpec | None = None,
    min_rows: int = 1,
) -> tuple[TrainBatch, PackStats]:
    """Packs trials into a `TrainBatch` of numpy arrays `[B, max_tokens]` (see the module docstring)."""
    if not is_int(max_tokens) or max_tokens < 2:
        raise ValueError(f"max_tokens must be an int >= 2, got {max_tokens!r}")
    positive_int("row_multiple", row_multiple)
    positive_int("min_rows", min_rows)
    if len(trajectories) == 0:
        raise ValueError("pack_trajectories got no trajectories")
    adv = np.asarray(advantages, dtype=np.float32)
    if adv.shape != (len(trajectories),):
        raise ValueError(f"advantages has shape {adv.shape}, expected ({len(trajectories)},) (one per trial)")
    if not np.all(np.isfinite(adv)):
        raise ValueError(f"advantages must be finite, got {adv[~np.isfinite(adv)][:4].tolist()}")

    segments: list[_Segment] = []
    refused: list[tuple[str, int]] = []
    for i, traj in enumerate(trajectories):
        if not traj.valid:
            continue  # nothing of a dropped trial is used, so whatever it recorded is not checked either
        for j, seq in enumerate(traj.sequences):
            _check_sequence(seq, routing, where=f"trajectory {traj.trial_id!r} sequence {j}")
        longest = max((len(seq.token_ids) for seq in traj.sequences), default=0)
        if longest > max_tokens:
            refused.append((traj.trial_id, longest))
            continue
        segments.extend(_Segment(i, seq, len(seq.token_ids)) for seq in traj.sequences if len(seq.token_ids))
    if refused:
        log.warning(
            "%d trial(s) refused, longer than a row of train.max_tokens=%d tokens (trial id, tokens): %s",
            len(refused),
            max_tokens,
            ", ".join(f"{trial} {n}" for trial, n in refused),
        )

    order, rows_of = _first_fit_decreasing([s.length for s in segments], max_tokens)
    rows_used = max(rows_of, default=-1) + 1
    rows = row_multiple * _next_power_of_two(-(-max(rows_used, min_rows) // row_multiple))
    arrays = _empty_arrays(rows, max_tokens, routing)
    fill = np.zeros(rows, dtype=np.int64)
    next_segment_id = np.ones(rows, dtype=np.int32)
    sampled = zero_lp = 0
    for k in order:  # placement order = packing order, so each row holds its segments longest first
        seg, b = segments[k], rows_of[k]
        s_sampled, s_zero = _place(arrays, seg, b, int(fill[b]), int(next_segment_id[b]), adv[seg.trial])
        sampled += s_sampled
        zero_lp += s_zero
        fill[b] += seg.length
        next_segment_id[b] += 1

    batch = TrainBatch(**arrays)
    stats = PackStats(
        rows=rows,
        rows_used=rows_used,
        row_tokens=max_tokens,
        sequences=len(segments),
        dropped_trials=sum(1 for t in trajectories if not t.valid),
        overlong=len(refused),
        sampled_tokens=sampled,
        filled_tokens=int(fill.sum()),
        zero_behaviour_logprobs=zero_lp,
        refused=tuple(refused),
    )
    return batch, stats


def _check_sequence(seq: Sequence, routing: RoutingSpec | None, *, where: str) -> None:
    mask = np.asarray(seq.loss_mask)
    if mask.size and not np.isin(mask, (0, 1)).all():
        raise ValueError(f"{where}: loss_mask must hold only 0 and 1, got {np.unique(mask).tolist()}")
    ids = np.asarray(seq.token_ids)
    if ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0):
        raise ValueError(
            f"{where}: token_ids must be non-negative ints, got dtype {ids.dtype} min {ids.min()}"
        )
    lp = np.asarray(seq.behaviour_logprobs, dtype=np.float64)
    bad = np.flatnonzero((mask == 1) & ~np.isfinite(lp))
    if bad.size:
        raise ValueError(
            f"{where}: behaviour_logprobs at sampled position {int(bad[0])} is {float(lp[bad[0]])!r}"
        )
    stale = None if seq.stale_kv is None else np.asarray(seq.stale_kv)
    if stale is not None and stale.size and not np.isin(stale, (0, 1)).all():
        raise ValueError(f"{where}: stale_kv must hold only 0 and 1, got {np.unique(stale).tolist()}")
    versions = None if seq.token_versions is None else np.asarray(seq.token_versions)
    if (
        versions is not None
        and versions.size
        and (not np.issubdtype(versions.dtype, np.integer) or versions.min() < -1)
    ):
        raise ValueError(
            f"{where}: token_versions must be version numbers >= -1, got dtype {versions.dtype} "
            f"min {versions.min()}"
        )
    if seq.routed_experts is None:
        return
    if routing is None:
        raise ValueError(
            f"{where} carries routed_experts but pack_trajectories got routing=None; pass a RoutingSpec"
        )
    re = np.asarray(seq.routed_experts)
    expected = (len(ids), routing.num_layers, routing.top_k)
    if re.shape != expected:
        raise ValueError(f"{where}: routed_experts has shape {re.shape}, expected {expected} [T, L, K]")
    if re.size and (re.min() < -1 or re.max() >= routing.num_experts):
        raise ValueError(
            f"{where}: routed_experts ids must lie in [-1, {routing.num_experts}), "
            f"got [{re.min()}, {re.max()}]"
        )
    recorded = re >= 0
    mixed = np.argwhere(recorded.any(-1) & ~recorded.all(-1))
    if mixed.size:
        t, layer = (int(v) for v in mixed[0])
        raise ValueError(
            f"{where}: routed_experts row {t} layer {layer} mixes -1 with expert ids: {re[t, layer]}"
        )


def _first_fit_decreasing(lengths: list[int], capacity: int) -> tuple[list[int], list[int]]:
    """(placement order, row of each item): longest first, each in the first row with room."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    free: list[int] = []
    row_of = [0] * len(lengths)
    for i in order:
        for r, room in enumerate(free):
            if room >= lengths[i]:
                row_of[i] = r
                free[r] -= lengths[i]
                break
        else:
            row_of[i] = len(free)
            free.append(capacity - lengths[i])
    return order, row_of


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _empty_arrays(rows: int, width: int, routing: RoutingSpec | None) -> dict[str, np.ndarray | None]:
    shape = (rows, width)
    return {
        "tokens": np.zeros(shape, np.int32),
        "targets": np.zeros(shape, np.int32),
        "positions": np.zeros(shape, np.int32),
        "segment_ids": np.zeros(shape, np.int32),
        "loss_mask": np.zeros(shape, np.float32),
        "advantages": np.zeros(shape, np.float32),
        "behaviour_logprobs": np.zeros(shape, np.float32),
        "token_versions": np.full(shape, -1, np.int32),
        "stale_kv": np.zeros(shape, np.int8),
        "routed_experts": None
        if routing is None
        else np.full((routing.num_layers, rows, width, routing.top_k), -1, np.int32),
    }


def _place(
    arrays: dict[str, np.ndarray | None], seg: _Segment, b: int, o: int, sid: int, adv: float
) -> tuple[int, int]:
    """Writes one segment at row b, offset o; returns (sampled targets kept, zero behaviour log-probs)."""
    n = seg.length
    seq = seg.sequence
    ids = np.asarray(seq.token_ids[:n], np.int32)
    arrays["tokens"][b, o : o + n] = ids
    arrays["positions"][b, o : o + n] = np.arange(n, dtype=np.int32)
    arrays["segment_ids"][b, o : o + n] = sid
    # Target-aligned fields: position t describes token t + 1 of the same segment.
    arrays["targets"][b, o : o + n - 1] = ids[1:]
    mask = np.asarray(seq.loss_mask[1:n], np.float32)
    lp = np.asarray(seq.behaviour_logprobs[1:n], np.float32)
    arrays["loss_mask"][b, o : o + n - 1] = mask
    arrays["behaviour_logprobs"][b, o : o + n - 1] = np.where(mask > 0, lp, 0.0)
    arrays["advantages"][b, o : o + n - 1] = adv
    versions = _versions_of(seq)
    if versions is not None:
        arrays["token_versions"][b, o : o + n - 1] = np.where(mask > 0, versions[1:n], -1)
    if seq.stale_kv is not None:
        arrays["stale_kv"][b, o : o + n - 1] = np.where(mask > 0, np.asarray(seq.stale_kv[1:n]) > 0, 0)
    if seq.routed_experts is not None:
        arrays["routed_experts"][:, b, o : o + n, :] = np.asarray(seq.routed_experts[:n], np.int32).transpose(
            1, 0, 2
        )
    return int(mask.sum()), int(((mask > 0) & (lp == 0.0)).sum())


def _versions_of(seq: Sequence) -> np.ndarray | None:
    """int32[T] version numbers of a sequence's tokens (module docstring), or None when unknown."""
    if seq.token_versions is not None:
        return np.asarray(seq.token_versions, np.int32)
    if len(seq.weight_versions) != 1:
        return None
    try:
        number = version_number(seq.weight_versions[0])
    except ValueError:
        return None
    return np.where(np.asarray(seq.loss_mask) == 1, number, -1).astype(np.int32)


def sequence_from_generation(
    prompt_ids: SequenceABC[int] | np.ndarray, generation: Generation, *, initial_version: str = "default"
) -> Sequence:
    """The training sequence of one single-turn call: prompt (mask 0) then the sampled output (mask 1).

    `generation.routed_experts` rows cover input positions `[routed_experts_start, P + N - 1)`; they are
    placed at those positions unchanged. Rows before the start and the last position (the final sampled
    token is never forwarded) are -1. Each output token's version (`token_weight_versions`, else
    `weight_version`) is numbered from `initial_version` into `token_versions` (None when one has no number);
    `token_stale_kv` becomes `stale_kv`.
    """
    prompt = np.asarray(prompt_ids, np.int32)
    out = np.asarray(generation.output_ids, np.int32)
    p, n = len(prompt), len(out)
    if p == 0:
        raise ValueError("prompt_ids is empty: the first sampled token needs a context")
    tokens = np.concatenate([prompt, out])
    mask = np.concatenate([np.zeros(p, np.int8), np.ones(n, np.int8)])
    logprobs = np.concatenate([np.zeros(p, np.float32), np.asarray(generation.output_logprobs, np.float32)])
    routed = None
    if generation.routed_experts is not None:
        rec = np.asarray(generation.routed_experts)
        start = generation.routed_experts_start
        if rec.ndim != 3 or rec.shape[0] != p + n - 1 - start:
            raise ValueError(
                f"generation.routed_experts has shape {rec.shape}; expected {p + n - 1 - start} rows "
                f"(P={p} + N={n} - 1 - routed_experts_start={start})"
            )
        routed = np.full((p + n, rec.shape[1], rec.shape[2]), -1, np.int16)
        routed[start : p + n - 1] = rec.astype(np.int16)
    per_token = generation.token_weight_versions or (generation.weight_version,) * n
    if len(per_token) != n:
        raise ValueError(
            f"generation.token_weight_versions has {len(per_token)} entries for {n} output tokens"
        )
    numbers = version_numbers([None] * p + list(per_token), initial=initial_version)
    stale = generation.token_stale_kv
    return Sequence(
        tokens,
        mask,
        logprobs,
        routed,
        weight_versions=tuple(dict.fromkeys(per_token or (generation.weight_version,))),
        token_versions=numbers,
        stale_kv=None
        if stale is None
        else np.concatenate([np.zeros(p, np.int8), np.asarray(stale, np.int8)]),
    )


def trajectories_from_generations(
    prompts: SequenceABC[SequenceABC[int] | np.ndarray],
    generations: SequenceABC[Generation],
    rewards: SequenceABC[float],
    group_ids: SequenceABC[str],
    *,
    task_ids: SequenceABC[str] | None = None,
) -> list[Trajectory]:
    """Single-turn trials: one `Trajectory` (outcome submitted) per (prompt, generation, reward, group)."""
    n = len(generations)
    for name, values in (("prompts", prompts), ("rewards", rewards), ("group_ids", group_ids)):
        if len(values) != n:
            raise ValueError(f"{name} has {len(values)} entries, generations has {n}")
    tasks = task_ids if task_ids is not None else group_ids
    return [
        Trajectory(
            trial_id=f"{group_ids[i]}/{i}",
            task_id=str(tasks[i]),
            group_id=str(group_ids[i]),
            sequences=(sequence_from_generation(prompts[i], generations[i]),),
            reward=float(rewards[i]),
            outcome=Outcome.SUBMITTED,
        )
        for i in range(n)
    ]
