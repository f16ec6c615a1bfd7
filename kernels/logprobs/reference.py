"""Plain-jnp oracle for the fused log-prob op: it materialises the [N, V] logits, on purpose.

    logprobs[i] = log_softmax(hidden[i] @ lm_head / temperature)[targets[i]]
    entropy[i]  = -sum_v p[i, v] log p[i, v]

Everything is computed in float32 from the inputs' own dtype (bf16 products accumulate in float32, the same
contract as the kernel). Gradients come from JAX's autodiff of these lines, which is what the kernel's
`custom_vjp` is tested against. A target outside [0, V) gives NaN (never a silent wrap-around). No input
checks: `ops.token_logprobs(..., impl="reference")` validates before calling this.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def matmul_precision(dtype: jnp.dtype) -> lax.Precision:
    """HIGHEST for float32 inputs, so no backend silently rounds the logits' products to bf16 or tf32."""
    return lax.Precision.HIGHEST if jnp.dtype(dtype) == jnp.float32 else lax.Precision.DEFAULT


def logits(hidden: jax.Array, lm_head: jax.Array, *, temperature: float) -> jax.Array:
    """float32 [N, V] = hidden [N, D] @ lm_head [D, V] / temperature."""
    scores = jnp.dot(
        hidden, lm_head, preferred_element_type=jnp.float32, precision=matmul_precision(hidden.dtype)
    )
    return scores / temperature


def token_logprobs(
    hidden: jax.Array,
    lm_head: jax.Array,
    targets: jax.Array,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Log-prob of each target (float32 [N]) and, with `return_entropy`, the softmax entropy (float32 [N])."""
    log_probs = jax.nn.log_softmax(logits(hidden, lm_head, temperature=temperature), axis=-1)  # [N, V]
    vocab = lm_head.shape[1]
    in_range = (targets >= 0) & (targets < vocab)
    picked = jnp.take_along_axis(log_probs, jnp.clip(targets, 0, vocab - 1)[:, None], axis=-1)[:, 0]
    result = jnp.where(in_range, picked, jnp.nan)
    if not return_entropy:
        return result
    entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
    return result, entropy
