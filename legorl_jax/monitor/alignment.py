"""Training–inference alignment figures (docs/alignment.md §3), as pure functions of arrays.

These are the health gate of the whole system: if the trainer's recomputed log-probs drift from the
rollout engine's, every importance weight and every clip decision is wrong, silently. All functions take
target-aligned `[B, T]` arrays (as `TrainBatch`) with a `mask` of the tokens that count (the sampled ones),
and are jittable; they return float32 scalars keyed by their logged names.

`logprob_alignment(train_logprobs, rollout_logprobs, mask)`, with Δ = lp_train − lp_rollout:
- `align/prob_pearson`: Pearson correlation of `exp(lp)` between trainer and rollout (healthy ≥ 0.99; the
  original reports ≈ 0.999 with R3, ≈ 0.75 when replay is broken). NaN when either side is constant.
- `align/k1`: `mean(lp_rollout − lp_train)`, the k1 estimate of KL(rollout ‖ trainer).
- `align/k3`: `mean(exp(Δ) − Δ − 1)`, the non-negative k3 estimate of the same KL.
- `align/max_abs_logprob_diff`, `align/prob_diff_mean`, `align/prob_diff_max`.
- `align/is_ess`: effective sample size fraction of the IS weights `w = exp(Δ)` (untruncated):
  `(Σ w)² / (n Σ w²)`, 1 when trainer and rollout agree, towards 1/n when one token dominates.

`routing_alignment(recorded, native, mask)` over `[L, B, T, K]` expert ids:
- `align/routing_coverage`: fraction of (token, layer) pairs whose routing was recorded (replayed).
- `align/routing_coverage_all`: the same over every non-padding input position (pass `input_mask`).
- `align/routing_agreement`: over recorded pairs, the fraction of recorded experts that the trainer's own
  (native, not replayed) top-k also picks — order-free set overlap / K.

`version_alignment(metrics, train_logprobs, rollout_logprobs, mask, token_versions, trainer_version,
stale_kv=)` (async mode, where a batch mixes weights versions, and `in_place` updates, where a token can be
sampled over K/V of older weights): the trainer's π_old is the policy of `trainer_version` only, computed
over its own K/V, so a token sampled under an older version differs from it by the policy's own movement,
and one sampled over older K/V by a mix of two weights that no recompute reproduces; neither is replay or
numerics. It returns `metrics` with the log-prob figures above recomputed over the sampled tokens whose
version is the trainer's and whose K/V was fresh (without any, the log-prob figures are dropped: nothing was
judged); the same figures over the older tokens as `offpolicy/<name>_cross` (`offpolicy/cross_version_tokens`
counts them, whatever their K/V) and over the trainer's version's tokens sampled over older K/V as
`offpolicy/<name>_stale_kv` (`offpolicy/stale_kv_tokens` counts them). `align/same_version_tokens` counts the
trainer's version's tokens, stale or not (`align/*` judged that count minus `offpolicy/stale_kv_tokens`);
`offpolicy/prob_pearson_all` is the Pearson over every token of a known version, what `align/prob_pearson`
read before the split. Tokens of no known version (-1) go to neither; without known versions (or no trainer
version: the sync loop) every sampled token counts as the trainer's, and a batch with neither a known version
nor a stale token keeps `metrics` as they are. So `align/*` stays the health gate in async mode and under
`in_place`, and the policy lag and the stale K/V show in `offpolicy/*`.

Masks here are positions whose *target* is sampled, so the routing at position t (which produced the
logits of token t + 1) is judged exactly where it mattered; any real dtype, a position counts where > 0.
Shapes in the annotations: l MoE layers, b rows, t positions, k experts per token.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, Real

LOGPROB_KEYS = (
    "align/prob_pearson",
    "align/k1",
    "align/k3",
    "align/max_abs_logprob_diff",
    "align/prob_diff_mean",
    "align/prob_diff_max",
    "align/is_ess",
)
"""The figures of `logprob_alignment` (the ones a token's weights version changes the meaning of)."""


def _masked_mean(x: Float[Array, "b t"], m: Bool[Array, "b t"], n: Float[Array, ""]) -> Float[Array, ""]:
    return jnp.where(m, x, 0.0).sum() / n


def logprob_alignment(
    train_logprobs: Float[Array, "b t"], rollout_logprobs: Float[Array, "b t"], mask: Real[Array, "b t"]
) -> dict[str, Float[Array, ""]]:
    """Trainer vs rollout log-prob agreement over `mask` tokens (see the module docstring)."""
    m = mask > 0
    n = jnp.maximum(m.sum(), 1).astype(jnp.float32)
    lp_t = jnp.where(m, train_logprobs, 0.0).astype(jnp.float32)
    lp_r = jnp.where(m, rollout_logprobs, 0.0).astype(jnp.float32)
    delta = jnp.where(m, lp_t - lp_r, 0.0)
    p_t, p_r = jnp.exp(lp_t), jnp.exp(lp_r)

    mean_t, mean_r = _masked_mean(p_t, m, n), _masked_mean(p_r, m, n)
    cov = _masked_mean((p_t - mean_t) * (p_r - mean_r), m, n)
    var_t = _masked_mean((p_t - mean_t) ** 2, m, n)
    var_r = _masked_mean((p_r - mean_r) ** 2, m, n)
    denom = jnp.sqrt(var_t * var_r)
    pearson = jnp.where(denom > 0, cov / jnp.where(denom > 0, denom, 1.0), jnp.nan)

    # Δ is clamped like the loss's IS ratio so one broken token cannot overflow the ESS sums.
    w = jnp.where(m, jnp.exp(jnp.clip(delta, -20.0, 20.0)), 0.0)
    ess = jnp.square(w.sum()) / jnp.maximum(n * jnp.square(w).sum(), 1e-30)
    abs_prob = jnp.abs(p_t - p_r)
    return {
        "align/prob_pearson": pearson,
        "align/k1": _masked_mean(-delta, m, n),
        "align/k3": _masked_mean(jnp.expm1(delta) - delta, m, n),
        "align/max_abs_logprob_diff": jnp.where(m, jnp.abs(delta), 0.0).max(),
        "align/prob_diff_mean": _masked_mean(abs_prob, m, n),
        "align/prob_diff_max": jnp.where(m, abs_prob, 0.0).max(),
        "align/is_ess": ess,
    }


def routing_alignment(
    recorded: Int[Array, "l b t k"],
    native: Int[Array, "l b t k"] | None,
    mask: Real[Array, "b t"],
    *,
    input_mask: Real[Array, "b t"] | None = None,
) -> dict[str, Float[Array, ""]]:
    """Replay coverage and trainer-vs-recorded routing agreement (`[L, B, T, K]` ids, -1 = not recorded)."""
    layers = recorded.shape[0]
    m = (mask > 0)[None]  # [1, B, T]
    replayed = recorded[..., 0] >= 0  # [L, B, T]; rows are all -1 or all recorded

    def coverage(tokens: Bool[Array, "1 b t"]) -> Float[Array, ""]:
        return (replayed & tokens).sum() / jnp.maximum(tokens.sum() * layers, 1).astype(jnp.float32)

    out = {"align/routing_coverage": coverage(m)}
    if input_mask is not None:
        out["align/routing_coverage_all"] = coverage((input_mask > 0)[None])
    if native is not None:
        # [L, B, T, K, K]: recorded slot i matches some native slot j.
        hit = (recorded[..., :, None] == native[..., None, :]).any(-1).mean(-1)
        judged = replayed & m
        out["align/routing_agreement"] = jnp.where(judged, hit, 0.0).sum() / jnp.maximum(judged.sum(), 1)
    return out


def version_alignment(
    metrics: Mapping[str, float],
    train_logprobs: np.ndarray,
    rollout_logprobs: np.ndarray,
    mask: np.ndarray,
    token_versions: np.ndarray | None,
    trainer_version: int | None,
    *,
    stale_kv: np.ndarray | None = None,
) -> dict[str, float]:
    """`metrics` with the log-prob figures split by weights version and K/V (module docstring): `align/*`
    over the sampled tokens of `trainer_version` sampled over fresh K/V, `offpolicy/*_cross` over older
    ones, `offpolicy/*_stale_kv` over the trainer's version's tokens sampled over older K/V. Arrays are host
    `[B, T]`, target-aligned; `token_versions` is -1 where unknown (None, or `trainer_version` None: no
    version split), `stale_kv` > 0 where stale (None: all fresh). A token newer than the trainer is a
    ValueError."""
    if trainer_version is not None and (
        isinstance(trainer_version, bool) or not isinstance(trainer_version, int) or trainer_version < 0
    ):
        raise ValueError(f"trainer_version must be an int >= 0 or None, got {trainer_version!r}")
    sampled = np.asarray(mask) > 0
    stale = np.zeros_like(sampled) if stale_kv is None else np.asarray(stale_kv) > 0
    if stale.shape != sampled.shape:
        raise ValueError(f"stale_kv has shape {stale.shape}, the mask {sampled.shape}")
    by_version = token_versions is not None and trainer_version is not None
    if by_version:
        versions = np.asarray(token_versions)
        if versions.shape != sampled.shape:
            raise ValueError(f"token_versions has shape {versions.shape}, the mask {sampled.shape}")
        if (sampled & (versions > trainer_version)).any():
            raise ValueError(
                f"a sampled token has version {int(versions[sampled].max())}, newer than the trainer's "
                f"{trainer_version}"
            )
        by_version = bool((sampled & (versions >= 0)).any())  # no version recorded: nothing to split by
    if not by_version and not (sampled & stale).any():
        return dict(metrics)
    if by_version:
        same = sampled & (versions == trainer_version)
        cross = sampled & (versions >= 0) & (versions < trainer_version)
    else:
        same, cross = sampled, np.zeros_like(sampled)
    out = {k: v for k, v in metrics.items() if k not in LOGPROB_KEYS}

    def figures(select: np.ndarray) -> dict[str, float]:
        got = logprob_alignment(
            jnp.asarray(train_logprobs), jnp.asarray(rollout_logprobs), jnp.asarray(select)
        )
        return {k: float(v) for k, v in got.items()}

    def offpolicy(select: np.ndarray, suffix: str) -> dict[str, float]:
        return {f"offpolicy/{k.removeprefix('align/')}_{suffix}": v for k, v in figures(select).items()}

    if (same & ~stale).any():
        out.update(figures(same & ~stale))
    if cross.any():
        out.update(offpolicy(cross, "cross"))
    if (same & stale).any():
        out.update(offpolicy(same & stale, "stale_kv"))
    out["offpolicy/prob_pearson_all"] = figures(same | cross)["align/prob_pearson"]
    out["align/same_version_tokens"] = float(same.sum())
    out["offpolicy/cross_version_tokens"] = float(cross.sum())
    out["offpolicy/stale_kv_tokens"] = float((same & stale).sum())
    return out
