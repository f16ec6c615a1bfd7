"""Policy-gradient losses as pure functions of `[B, T]` arrays (docs/architecture.md §7).

Inputs are target-aligned like `TrainBatch`: `logprobs` (π_θ, differentiable), `old_logprobs` (π_old,
recomputed by the trainer with routing replayed; None means on-policy, π_old = sg(π_θ)), `behaviour_logprobs`
(μ, the rollout engine's), `advantages`, `loss_mask`, `segment_ids`. A packed row holds several sequences,
so every "per sequence" quantity is per *segment* (row, segment id).

Pieces, each short enough to read whole:

- `rollout_correction`: the trainer/rollout mismatch, all detached. Truncated IS (`tis`):
  token `w_t = min(exp(lp_old - lp_rollout), C)`, or sequence `w = min(exp(Σ_t ...), C)`, log-ratios clamped
  to ±20 as verl does. Masked (rejection) IS (`mis`): token `ρ_t ∈ [lo, hi]`, sequence `Π ρ_t ∈ [lo, hi]`
  or geometric `exp(mean_t log ρ_t) ∈ [lo, hi]`; rejected tokens leave the mask, so they leave the loss's
  numerator *and* its denominators (the slime PR #657 bug kept them in the denominator).
- `importance_stats`: what that correction did over a whole batch, for the logs: the token ratio
  `ρ_t = exp(lp_old − lp_rollout)` (mean, max, min), the share of sampled tokens whose TIS weight was capped
  (`is_clipped_frac`; MIS's rejected share is `policy_loss`'s `is_rejected_frac`) and the effective sample
  size fraction of the weights the loss applies (`is_ess`, `(Σ w)² / (n Σ w²)` over the n sampled tokens,
  a rejected token weighing 0): 1 when every token weighs the same, towards 1/n when one dominates.
- `gspo_token_loss`: GSPO in the straight-through GSPO-token form of the GSPO paper:
  `log s_it = sg[mean_t(lp - lp_old)] + lp - sg[lp]` (clamped at 10), `L = max(-A s, -A clip(s, 1-εl, 1+εh))`.
  Its value and gradient equal sequence-level GSPO when the advantage is constant over the sequence.
- `ppo_clip_loss`: token-level PPO-clip, with verl's dual clip `min(L, -A c)` for A < 0.
- `cispo_loss`: `L = -sg(clip(r, 1-εl, 1+εh)) A lp` (MiniMax-M1): the clipped ratio only weights the
  gradient, no token is dropped.
- `k3_kl`: `exp(ref - lp) - (ref - lp) - 1`, the low-variance KL to a frozen reference.
- `aggregate`: `token-mean` (Σ L / N_tokens), `seq-mean-token-mean` (mean over sequences of each sequence's
  token mean) and `seq-mean-token-sum-norm` (Σ_seq Σ_t L / (N_seq · norm_length), Dr. GRPO's constant
  normaliser; verl divides by the row length only, which makes the loss scale with the batch size).

Micro-batching: `policy_loss` takes a `LossNorm` (the token and sequence counts of the whole mini-batch,
from `loss_norm`); each micro-batch's loss and metrics are then its share of the mini-batch value, and their
sum over micro-batches equals the loss of the whole mini-batch. Every metric returned is additive in this
sense (a token mean divided by the global count).

Shapes in the annotations: b rows, t positions (`t+1`: per-segment tables, index = segment id); masks are
float32 like `TrainBatch.loss_mask`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from legorl_jax.config import ALGO_LOSSES, LOSS_AGGREGATIONS, AlgoConfig

LOG_RATIO_CLAMP = 20.0  # verl's safety clamp on log importance ratios
GSPO_LOG_RATIO_MAX = 10.0  # verl clamps log s_it at 10 before exp


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["tokens", "sequences", "sampled"], meta_fields=[]
)
@dataclasses.dataclass(frozen=True)
class LossNorm:
    """Global normalisers of one mini-batch (counted after rejection)."""

    tokens: Float[Array, ""]  # mask-1 tokens
    sequences: Float[Array, ""]  # segments with at least one mask-1 token
    sampled: Float[Array, ""]  # mask-1 tokens before rejection (for the rejected fraction)


def segment_sum(values: Float[Array, "b t"], segment_ids: Int[Array, "b t"]) -> Float[Array, "b t+1"]:
    """Per-segment sums `[B, T] -> [B, T + 1]` (index = segment id; 0 collects padding)."""
    t = values.shape[-1]
    return jax.vmap(lambda v, s: jax.ops.segment_sum(v, s, num_segments=t + 1))(values, segment_ids)


def segment_broadcast(
    per_segment: Float[Array, "b t+1"], segment_ids: Int[Array, "b t"]
) -> Float[Array, "b t"]:
    """`[B, T + 1]` per-segment values back onto each token `[B, T]`."""
    return jnp.take_along_axis(per_segment, segment_ids, axis=-1)


def loss_norm(
    loss_mask: Float[Array, "b t"],
    segment_ids: Int[Array, "b t"],
    *,
    sampled_mask: Float[Array, "b t"] | None = None,
) -> LossNorm:
    """Counts of a (mini-)batch: tokens and non-empty sequences of `loss_mask`."""
    counts = segment_sum(loss_mask, segment_ids)[:, 1:]
    sampled = loss_mask if sampled_mask is None else sampled_mask
    return LossNorm(
        tokens=loss_mask.sum(), sequences=(counts > 0).sum().astype(jnp.float32), sampled=sampled.sum()
    )


def rollout_correction(
    old_logprobs: Float[Array, "b t"],
    behaviour_logprobs: Float[Array, "b t"],
    loss_mask: Float[Array, "b t"],
    segment_ids: Int[Array, "b t"],
    algo: AlgoConfig,
) -> tuple[Float[Array, "b t"], Float[Array, "b t"]]:
    """(IS weight `[B, T]`, mask after rejection `[B, T]`); both carry no gradient."""
    m = loss_mask > 0
    log_rho = jnp.where(
        m, jnp.clip(old_logprobs - behaviour_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), 0.0
    )
    log_rho = jax.lax.stop_gradient(log_rho)
    seq_log_rho = segment_broadcast(segment_sum(log_rho, segment_ids), segment_ids)
    seq_tokens = segment_broadcast(segment_sum(m.astype(jnp.float32), segment_ids), segment_ids)

    if algo.tis == "token":
        weight = jnp.minimum(jnp.exp(log_rho), algo.tis_cap)
    elif algo.tis == "sequence":
        weight = jnp.minimum(jnp.exp(jnp.clip(seq_log_rho, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)), algo.tis_cap)
    else:
        weight = jnp.ones_like(log_rho)

    lo, hi = jnp.log(algo.mis_lower), jnp.log(algo.mis_high)
    if algo.mis == "token":
        keep = (log_rho >= lo) & (log_rho <= hi)
    elif algo.mis == "sequence":
        keep = (seq_log_rho >= lo) & (seq_log_rho <= hi)
    elif algo.mis == "geometric":
        geo = seq_log_rho / jnp.maximum(seq_tokens, 1.0)
        keep = (geo >= lo) & (geo <= hi)
    else:
        keep = jnp.ones_like(m)
    return jnp.where(m, weight, 0.0), jnp.where(m & keep, loss_mask, 0.0)


def importance_stats(
    old_logprobs: Float[Array, "b t"],
    behaviour_logprobs: Float[Array, "b t"],
    loss_mask: Float[Array, "b t"],
    segment_ids: Int[Array, "b t"],
    algo: AlgoConfig,
) -> dict[str, Float[Array, ""]]:
    """`train/is_*` figures of the rollout correction over the sampled tokens (module docstring); not additive
    over micro-batches (a max, an ESS), so computed on the whole batch."""
    m = loss_mask > 0
    n = jnp.maximum(m.sum(), 1).astype(jnp.float32)
    log_rho = jnp.clip(old_logprobs - behaviour_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    rho = jnp.where(m, jnp.exp(log_rho), 0.0)
    weight, kept = rollout_correction(old_logprobs, behaviour_logprobs, loss_mask, segment_ids, algo)
    if algo.tis == "none":
        capped = jnp.zeros_like(m)
    else:  # the weight is the (token or sequence) ratio truncated at the cap: capped where it equals the cap
        capped = m & (weight >= algo.tis_cap)
    applied = jnp.where(kept > 0, weight, 0.0)
    return {
        "train/is_ratio_mean": rho.sum() / n,
        # ρ > 0, so a masked 0 never wins the max; an empty batch reports 0 for both.
        "train/is_ratio_max": rho.max(),
        "train/is_ratio_min": jnp.where(m.any(), jnp.where(m, rho, jnp.inf).min(), 0.0),
        "train/is_clipped_frac": capped.sum() / n,
        "train/is_ess": jnp.square(applied.sum()) / jnp.maximum(n * jnp.square(applied).sum(), 1e-30),
    }


def gspo_token_loss(
    logprobs: Float[Array, "b t"],
    old_logprobs: Float[Array, "b t"],
    advantages: Float[Array, "b t"],
    mask: Float[Array, "b t"],
    segment_ids: Int[Array, "b t"],
    algo: AlgoConfig,
) -> tuple[Float[Array, "b t"], Float[Array, "b t"]]:
    """Per-token GSPO-token loss and its clipped indicator."""
    delta = jnp.where(mask > 0, logprobs - old_logprobs, 0.0)
    counts = jnp.maximum(segment_sum(mask, segment_ids), 1.0)
    seq_mean = segment_broadcast(segment_sum(delta, segment_ids) / counts, segment_ids)
    log_s = jax.lax.stop_gradient(seq_mean) + logprobs - jax.lax.stop_gradient(logprobs)
    s = jnp.exp(jnp.minimum(log_s, GSPO_LOG_RATIO_MAX))
    unclipped = -advantages * s
    clipped = -advantages * jnp.clip(s, 1.0 - algo.clip_low, 1.0 + algo.clip_high)
    return jnp.maximum(unclipped, clipped), (clipped > unclipped).astype(jnp.float32)


def ppo_clip_loss(
    logprobs: Float[Array, "b t"],
    old_logprobs: Float[Array, "b t"],
    advantages: Float[Array, "b t"],
    algo: AlgoConfig,
) -> tuple[Float[Array, "b t"], Float[Array, "b t"]]:
    """Per-token PPO-clip loss (dual clip for A < 0 when `algo.dual_clip`) and its clipped indicator."""
    r = jnp.exp(jnp.clip(logprobs - old_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    unclipped = -advantages * r
    clipped = -advantages * jnp.clip(r, 1.0 - algo.clip_low, 1.0 + algo.clip_high)
    loss = jnp.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if algo.dual_clip is not None:
        floor = -advantages * algo.dual_clip
        dual = (advantages < 0) & (loss > floor)
        loss = jnp.where(dual, floor, loss)
        was_clipped = was_clipped | dual
    return loss, was_clipped.astype(jnp.float32)


def cispo_loss(
    logprobs: Float[Array, "b t"],
    old_logprobs: Float[Array, "b t"],
    advantages: Float[Array, "b t"],
    algo: AlgoConfig,
) -> tuple[Float[Array, "b t"], Float[Array, "b t"]]:
    """Per-token CISPO loss and the indicator of a clipped (bounded) weight."""
    r = jnp.exp(jnp.clip(jax.lax.stop_gradient(logprobs) - old_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    bounded = jnp.clip(r, 1.0 - algo.clip_low, 1.0 + algo.clip_high)
    return -bounded * advantages * logprobs, (bounded != r).astype(jnp.float32)


def k3_kl(logprobs: Float[Array, "b t"], ref_logprobs: Float[Array, "b t"]) -> Float[Array, "b t"]:
    """Per-token k3 estimate of KL(π_θ ‖ π_ref): `exp(x) - x - 1`, x = ref - lp (non-negative)."""
    x = jnp.clip(ref_logprobs - logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return jnp.exp(x) - x - 1.0


def aggregate(
    values: Float[Array, "b t"],
    mask: Float[Array, "b t"],
    segment_ids: Int[Array, "b t"],
    mode: str,
    norm: LossNorm,
    norm_length: float,
) -> Float[Array, ""]:
    """This (micro-)batch's share of the mini-batch aggregate of per-token `values` (see module docstring)."""
    masked = jnp.where(mask > 0, values, 0.0)
    if mode == "token-mean":
        return masked.sum() / jnp.maximum(norm.tokens, 1.0)
    per_seq = segment_sum(masked, segment_ids)[:, 1:]
    if mode == "seq-mean-token-mean":
        counts = segment_sum(mask, segment_ids)[:, 1:]
        per_seq = jnp.where(counts > 0, per_seq / jnp.maximum(counts, 1.0), 0.0)
        return per_seq.sum() / jnp.maximum(norm.sequences, 1.0)
    if mode == "seq-mean-token-sum-norm":
        return per_seq.sum() / (jnp.maximum(norm.sequences, 1.0) * norm_length)
    raise ValueError(f"loss_agg must be one of {LOSS_AGGREGATIONS}, got {mode!r}")


def policy_loss(
    logprobs: Float[Array, "b t"],
    old_logprobs: Float[Array, "b t"] | None,
    behaviour_logprobs: Float[Array, "b t"],
    advantages: Float[Array, "b t"],
    loss_mask: Float[Array, "b t"],
    segment_ids: Int[Array, "b t"],
    algo: AlgoConfig,
    *,
    norm_length: float,
    norm: LossNorm | None = None,
    ref_logprobs: Float[Array, "b t"] | None = None,
    entropy: Float[Array, "b t"] | None = None,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """The scalar loss to minimise and its additive `train/*` metrics."""
    old = jax.lax.stop_gradient(logprobs) if old_logprobs is None else jax.lax.stop_gradient(old_logprobs)
    weight, mask = rollout_correction(old, behaviour_logprobs, loss_mask, segment_ids, algo)
    if norm is None:
        norm = loss_norm(mask, segment_ids, sampled_mask=loss_mask)

    if algo.loss == "gspo":
        per_token, clipped = gspo_token_loss(logprobs, old, advantages, mask, segment_ids, algo)
    elif algo.loss == "ppo":
        per_token, clipped = ppo_clip_loss(logprobs, old, advantages, algo)
    elif algo.loss == "cispo":
        per_token, clipped = cispo_loss(logprobs, old, advantages, algo)
    else:
        raise ValueError(f"algo.loss must be one of {ALGO_LOSSES}, got {algo.loss!r}")

    pg = aggregate(per_token * weight, mask, segment_ids, algo.loss_agg, norm, norm_length)
    loss = pg
    metrics = {"train/pg_loss": pg}
    if ref_logprobs is not None:
        kl = aggregate(k3_kl(logprobs, ref_logprobs), mask, segment_ids, algo.loss_agg, norm, norm_length)
        loss = loss + algo.kl_coef * kl
        metrics["train/kl_ref"] = jax.lax.stop_gradient(kl)

    tokens = jnp.maximum(norm.tokens, 1.0)

    def token_mean(x: jax.Array) -> jax.Array:
        return jnp.where(mask > 0, jax.lax.stop_gradient(x), 0.0).sum() / tokens

    metrics["train/clip_frac"] = token_mean(clipped)
    metrics["train/ppo_kl"] = token_mean(old - logprobs)
    metrics["train/is_weight_mean"] = token_mean(weight)
    metrics["train/is_rejected_frac"] = (loss_mask - mask).sum() / jnp.maximum(norm.sampled, 1.0)
    if entropy is not None:
        metrics["train/entropy"] = token_mean(entropy)
    metrics["train/pg_loss"] = jax.lax.stop_gradient(pg)
    return loss, metrics
