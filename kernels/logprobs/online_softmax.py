"""Online softmax statistics over vocabulary tiles: the arithmetic the Pallas kernel and the XLA path share.

A row's log-prob and entropy need only four running numbers per token, updated one tile of logits at a
time (the online normaliser of Milakov & Gimelshein 2018, "Online normalizer calculation for softmax",
as used by FlashAttention and Cut Cross-Entropy):

    m   running max of the logits seen so far
    s   sum_j exp(z_j - m)
    t   sum_j exp(z_j - m) * (z_j - m)        (only when the entropy is asked for)
    zt  the target's logit (the tile that holds the target adds it; the others add 0)

so that lse = m + log s, the mean logit under the softmax is E[z] = m + t / s, the log-prob is zt - lse and
the entropy is H = lse - E[z] = log s - t / s. Keeping t relative to the running max (rather than
sum_j exp(z_j - m) * z_j) avoids the cancellation of two numbers of the size of the logits when a peaked
distribution has H close to 0. Rescaling to a new max m' multiplies s and t by exp(m - m') and shifts t by
(m - m') * s.

Contract for `update`: `logits` is float32 [rows, cols] already divided by the temperature, with every
column that is not a real vocabulary entry (padding, or a column a previous tile already covered) set to
`MASK_VALUE`, and every tile holds at least one real column. The mask is finite so that rescaling never
computes inf - inf; exp(MASK_VALUE - m) underflows to exactly 0, so masked columns contribute exactly 0.

`logit_cotangent` is the backward of (log-prob, entropy) with respect to one tile of logits, recomputed
from the saved lse and mean logit: d logprob / dz_j = [j = target] - p_j and d H / dz_j = p_j (E[z] - z_j).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

# Finite "minus infinity" for masked logits: exp(MASK_VALUE - m) == 0 in float32 and MASK_VALUE - MASK_VALUE
# is 0, never NaN (the same choice as the Pallas flash-attention kernels' DEFAULT_MASK_VALUE).
MASK_VALUE = -1e30


class RunningStats(NamedTuple):
    """Per-row state of the online softmax; every field is float32 [rows] (`shifted_sum` None without
    entropy)."""

    max: jax.Array  # running max m of the logits
    sum_exp: jax.Array  # s = sum exp(z - m)
    shifted_sum: jax.Array | None  # t = sum exp(z - m) * (z - m)
    target_logit: jax.Array  # zt, the target's logit


class RowResult(NamedTuple):
    """What one row's statistics give: the outputs and the residuals the backward needs (float32 [rows])."""

    logprobs: jax.Array
    entropy: jax.Array | None
    lse: jax.Array
    mean_logit: jax.Array | None  # E[z] under the softmax; the entropy's backward needs it


class BackwardRows(NamedTuple):
    """Per-token inputs of the backward, each [rows]; the entropy's two are None when it was not asked for."""

    targets: jax.Array  # int32
    lse: jax.Array
    mean_logit: jax.Array | None
    g_logprobs: jax.Array  # cotangent of the log-probs
    g_entropy: jax.Array | None  # cotangent of the entropy


def init(rows: int, *, with_entropy: bool) -> RunningStats:
    """The state before any tile: an empty sum whose max is the mask value."""
    zeros = jnp.zeros((rows,), jnp.float32)
    return RunningStats(
        max=jnp.full((rows,), MASK_VALUE, jnp.float32),
        sum_exp=zeros,
        shifted_sum=zeros if with_entropy else None,
        target_logit=zeros,
    )


def update(stats: RunningStats, logits: jax.Array, is_target: jax.Array) -> RunningStats:
    """Folds one tile of masked logits [rows, cols] into the state; `is_target` marks each row's target
    column."""
    new_max = jnp.maximum(stats.max, jnp.max(logits, axis=1))
    rescale = jnp.exp(stats.max - new_max)
    shifted = logits - new_max[:, None]
    weights = jnp.exp(shifted)
    sum_exp = rescale * stats.sum_exp + jnp.sum(weights, axis=1)
    shifted_sum = None
    if stats.shifted_sum is not None:
        # sum exp(z - m')(z - m') over the old columns = rescale * (t + (m - m') * s).
        carried = rescale * (stats.shifted_sum + (stats.max - new_max) * stats.sum_exp)
        shifted_sum = carried + jnp.sum(weights * shifted, axis=1)
    target_logit = stats.target_logit + jnp.sum(jnp.where(is_target, logits, 0.0), axis=1)
    return RunningStats(new_max, sum_exp, shifted_sum, target_logit)


def merge(parts: RunningStats) -> RunningStats:
    """Combines states computed over disjoint column ranges; each field is stacked [parts, rows]."""
    new_max = jnp.max(parts.max, axis=0)
    rescale = jnp.exp(parts.max - new_max[None, :])
    shifted_sum = None
    if parts.shifted_sum is not None:
        carried = parts.shifted_sum + (parts.max - new_max[None, :]) * parts.sum_exp
        shifted_sum = jnp.sum(rescale * carried, axis=0)
    return RunningStats(
        max=new_max,
        sum_exp=jnp.sum(rescale * parts.sum_exp, axis=0),
        shifted_sum=shifted_sum,
        target_logit=jnp.sum(parts.target_logit, axis=0),
    )


def finalize(stats: RunningStats) -> RowResult:
    """Turns a complete state (every vocabulary column seen once) into log-probs, entropy and residuals."""
    log_sum = jnp.log(stats.sum_exp)
    lse = stats.max + log_sum
    entropy = mean_logit = None
    if stats.shifted_sum is not None:
        mean_shift = stats.shifted_sum / stats.sum_exp
        entropy = log_sum - mean_shift
        mean_logit = stats.max + mean_shift
    return RowResult(stats.target_logit - lse, entropy, lse, mean_logit)


def logit_cotangent(logits: jax.Array, is_target: jax.Array, rows: BackwardRows) -> jax.Array:
    """d(loss)/d(logits) for one tile [rows, cols] given the rows' cotangents (masked columns get exactly
    0)."""
    probs = jnp.exp(logits - rows.lse[:, None])
    grad = rows.g_logprobs[:, None] * (is_target.astype(jnp.float32) - probs)
    if rows.g_entropy is not None:
        assert rows.mean_logit is not None  # asked for together with the entropy
        # exp(MASK_VALUE - lse) is exactly 0, so the huge (mean - MASK_VALUE) factor multiplies 0, not inf.
        grad = grad + rows.g_entropy[:, None] * probs * (rows.mean_logit[:, None] - logits)
    return grad
