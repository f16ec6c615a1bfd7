"""Public entry point of the fused log-prob op: `token_logprobs`, validated and differentiable.

    logprobs[i] = log_softmax(hidden[i] @ lm_head / temperature)[targets[i]]      float32 [N]
    entropy[i]  = -sum_v p[i, v] log p[i, v]                                        float32 [N]

computed without ever holding the [N, V] logits, forward and backward (except `impl="reference"`, the
oracle, which materialises them on purpose). Implementations:

  "pallas"     `kernel.py`: tiled Pallas kernels. Compiled on GPU (Triton) and TPU (Mosaic); on CPU it
               runs in the Pallas interpreter (slow; for tests). `interpret` overrides the choice.
  "xla"        `xla.py`: `lax.scan` over vocabulary and token chunks with the same online log-sum-exp.
  "reference"  `reference.py`: plain jnp, logits materialised, gradients by JAX autodiff.
  "auto"       "pallas" when `jax.default_backend()` is "gpu" or "tpu" (where Pallas compiles), else "xla".

Gradients: a `jax.custom_vjp` gives d/d hidden and d/d lm_head (never d/d targets, which are integers);
the backward recomputes the logits tile by tile from the saved lse [N] (and mean logit [N]). The entropy
has a correct gradient: with `return_entropy=True` its cotangent flows through the same custom_vjp
(d H / d z_v = p_v (E[z] - z_v)). It is computed only when asked for: without `return_entropy` the
forward keeps three statistics per token instead of four and the backward skips the entropy term.

Checks at the entry raise ValueError / TypeError naming the received value: ranks, dtypes (hidden and
lm_head the same float dtype, float32 / bfloat16 / float16; integer targets), N, D or V of zero,
mismatched N or D, a non-positive or non-finite temperature, unknown impl, block sizes that do not fit,
and targets outside [0, V) when they are concrete. Under `jax.jit` the targets are tracers and cannot be
checked; an out-of-range target then yields a NaN log-prob (never a silently wrapped index).

`temperature`, `return_entropy`, `impl`, `block_sizes` and `interpret` are static (Python values).

Sharding: on a mesh with Auto axes (what `legorl_jax.model.sharding.make_mesh` builds) any input sharding
works and gives the unsharded result; GSPMD gathers what the scans and the Pallas calls need, so the op
itself is not split across devices. With Explicit axes the XLA path's scans reject a sharded token axis;
run it under Auto axes or per shard inside `shard_map`.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from legorl_jax.kernels.logprobs import kernel, online_softmax, reference, xla

IMPLS = ("auto", "pallas", "xla", "reference")
_FLOAT_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
_PALLAS_PLATFORMS = ("gpu", "cuda", "rocm", "tpu")


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Everything static about one call: hashable, so it is the custom_vjp's and jit's static argument."""

    impl: str  # "pallas" | "xla"
    inv_temperature: float
    with_entropy: bool
    sizes: kernel.BlockSizes | xla.ChunkSizes
    platform: str
    interpret: bool


def token_logprobs(
    hidden: Float[Array, "N D"],
    lm_head: Float[Array, "D V"],
    targets: Int[Array, " N"],
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
    impl: str = "auto",
    block_sizes: kernel.BlockSizes | xla.ChunkSizes | None = None,
    interpret: bool | None = None,
) -> Float[Array, " N"] | tuple[Float[Array, " N"], Float[Array, " N"]]:
    """log_softmax(hidden @ lm_head / temperature)[targets] (float32 [N]); with entropy, a (logprobs, entropy)
    tuple.

    `block_sizes`: a `kernel.BlockSizes` for "pallas", an `xla.ChunkSizes` for "xla"; None picks the
    backend's defaults. `interpret` (Pallas only): None runs the interpreter exactly when the backend
    cannot compile Pallas (CPU); True forces it; False on CPU is an error.
    """
    hidden, lm_head, targets = _check_arrays(hidden, lm_head, targets)
    temperature = _check_temperature(temperature)
    if not isinstance(return_entropy, bool):
        raise TypeError(f"return_entropy must be a bool, got {return_entropy!r}")
    platform = jax.default_backend()
    impl = _resolve_impl(impl, platform)
    if impl == "reference":
        if block_sizes is not None or interpret is not None:
            raise ValueError(
                f"impl='reference' takes no block_sizes or interpret, got {block_sizes=}, {interpret=}"
            )
        return reference.token_logprobs(
            hidden, lm_head, targets, temperature=temperature, return_entropy=return_entropy
        )
    plan = _Plan(
        impl=impl,
        inv_temperature=1.0 / temperature,
        with_entropy=return_entropy,
        sizes=_check_sizes(impl, block_sizes, hidden.shape[1], platform, interpret),
        platform=platform,
        interpret=_resolve_interpret(impl, interpret, platform),
    )
    if plan.impl == "pallas":
        plan.sizes.check(hidden.shape[1], compiled_for_gpu=not plan.interpret and platform != "tpu")
    return _jitted_fused(hidden, lm_head, targets, plan)


# ----------------------------------------------------------------------------------------------------
# The differentiable core
# ----------------------------------------------------------------------------------------------------


def _run_forward(plan: _Plan, hidden, lm_head, targets):
    if plan.impl == "xla":
        return xla.forward(
            hidden,
            lm_head,
            targets,
            inv_temperature=plan.inv_temperature,
            with_entropy=plan.with_entropy,
            chunks=plan.sizes,
        )
    return kernel.forward(
        hidden,
        lm_head,
        targets,
        inv_temperature=plan.inv_temperature,
        with_entropy=plan.with_entropy,
        sizes=plan.sizes,
        platform=plan.platform,
        interpret=plan.interpret,
    )


def _run_backward(plan: _Plan, hidden, lm_head, rows: online_softmax.BackwardRows):
    if plan.impl == "xla":
        return xla.backward(hidden, lm_head, rows, inv_temperature=plan.inv_temperature, chunks=plan.sizes)
    return kernel.backward(
        hidden,
        lm_head,
        rows,
        inv_temperature=plan.inv_temperature,
        sizes=plan.sizes,
        platform=plan.platform,
        interpret=plan.interpret,
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _fused(hidden, lm_head, targets, plan: _Plan):
    return _fused_fwd(hidden, lm_head, targets, plan)[0]


def _fused_fwd(hidden, lm_head, targets, plan: _Plan):
    result = _run_forward(plan, hidden, lm_head, targets)
    in_range = (targets >= 0) & (targets < lm_head.shape[1])
    logprobs = jnp.where(in_range, result.logprobs, jnp.nan)
    outputs = (logprobs, result.entropy) if plan.with_entropy else logprobs
    return outputs, (hidden, lm_head, targets, result.lse, result.mean_logit)


def _fused_bwd(plan: _Plan, residuals, cotangents):
    hidden, lm_head, targets, lse, mean_logit = residuals
    g_logprobs, g_entropy = cotangents if plan.with_entropy else (cotangents, None)
    rows = online_softmax.BackwardRows(
        targets,
        lse,
        mean_logit,
        g_logprobs.astype(jnp.float32),
        None if g_entropy is None else g_entropy.astype(jnp.float32),
    )
    d_hidden, d_lm_head = _run_backward(plan, hidden, lm_head, rows)
    return d_hidden, d_lm_head, None


_fused.defvjp(_fused_fwd, _fused_bwd)
_jitted_fused = jax.jit(_fused, static_argnums=3)


# ----------------------------------------------------------------------------------------------------
# Entry checks
# ----------------------------------------------------------------------------------------------------


def _as_array(name: str, x) -> jax.Array:
    if isinstance(x, jax.Array):
        return x
    if isinstance(x, np.ndarray) or np.isscalar(x) or isinstance(x, (list, tuple)):
        return jnp.asarray(x)
    raise TypeError(f"{name} must be an array, got {type(x).__name__}")


def _check_arrays(hidden, lm_head, targets) -> tuple[jax.Array, jax.Array, jax.Array]:
    hidden, lm_head, targets = (
        _as_array("hidden", hidden),
        _as_array("lm_head", lm_head),
        _as_array("targets", targets),
    )
    if hidden.ndim != 2:
        raise ValueError(f"hidden must be [N, D], got {hidden.shape=}")
    if lm_head.ndim != 2:
        raise ValueError(f"lm_head must be [D, V], got {lm_head.shape=}")
    if targets.ndim != 1:
        raise ValueError(f"targets must be [N], got {targets.shape=}")
    (n, d), v = hidden.shape, lm_head.shape[1]
    if lm_head.shape[0] != d:
        raise ValueError(f"{hidden.shape=} and {lm_head.shape=} disagree on D")
    if targets.shape[0] != n:
        raise ValueError(f"{targets.shape=} and {hidden.shape=} disagree on N")
    if 0 in (n, d, v):
        raise ValueError(
            f"N, D and V must be positive, got N={n}, D={d}, V={v} ({hidden.shape=}, {lm_head.shape=})"
        )
    for name, x in (("hidden", hidden), ("lm_head", lm_head)):
        if x.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"{name} must be float32, bfloat16 or float16, got {name}.dtype={x.dtype}")
    if hidden.dtype != lm_head.dtype:
        raise TypeError(
            f"hidden and lm_head must share a dtype, got hidden.dtype={hidden.dtype} and "
            f"lm_head.dtype={lm_head.dtype}"
        )
    if not jnp.issubdtype(targets.dtype, jnp.integer):
        raise TypeError(f"targets must be integer token ids, got targets.dtype={targets.dtype}")
    targets = targets.astype(jnp.int32)
    if not isinstance(targets, jax.core.Tracer):
        ids = np.asarray(targets)
        bad = np.flatnonzero((ids < 0) | (ids >= v))
        if bad.size:
            raise ValueError(
                f"targets must lie in [0, V={v}), got targets[{bad[0]}]={ids[bad[0]]} ({bad.size} out of "
                "range)"
            )
    return hidden, lm_head, targets


def _check_temperature(temperature) -> float:
    if isinstance(temperature, jax.core.Tracer):
        raise TypeError("temperature must be a static Python number, got a traced value")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.floating, np.integer)):
        raise TypeError(f"temperature must be a real number, got {temperature!r}")
    temperature = float(temperature)
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be finite and > 0, got {temperature!r}")
    return temperature


def _resolve_impl(impl, platform: str) -> str:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        return "pallas" if platform in _PALLAS_PLATFORMS else "xla"
    return impl


def _resolve_interpret(impl: str, interpret, platform: str) -> bool:
    if interpret is not None and not isinstance(interpret, bool):
        raise TypeError(f"interpret must be None or a bool, got {interpret!r}")
    if impl != "pallas":
        if interpret is not None:
            raise ValueError(f"interpret applies to impl='pallas' only, got {interpret=} with impl={impl!r}")
        return False
    compiles = platform in _PALLAS_PLATFORMS
    if interpret is False and not compiles:
        raise ValueError(
            f"Pallas compiles only on GPU or TPU, not on backend {platform!r}: pass interpret=True or "
            "impl='xla'"
        )
    return not compiles if interpret is None else interpret


def _check_sizes(impl: str, block_sizes, hidden_dim: int, platform: str, interpret):
    expected = kernel.BlockSizes if impl == "pallas" else xla.ChunkSizes
    if block_sizes is None:
        if impl == "xla":
            return xla.ChunkSizes()
        compiled_platform = "cpu" if interpret else platform
        return kernel.BlockSizes.for_platform(compiled_platform, hidden_dim)
    if not isinstance(block_sizes, expected):
        raise TypeError(
            f"impl={impl!r} takes block_sizes of type {expected.__name__}, got {type(block_sizes).__name__}"
        )
    return block_sizes
