"""Token sampling for a batch of rows with per-row parameters, inside the jitted engine programs.

`sample(logits, rows, positions) -> (tokens int32[B], logprobs float32[B])`, and
`top_logprobs(logits, rows, k)` -> the k likeliest tokens of each row under the same distribution:

- Behaviour log-prob (docs/alignment.md §1, SGLang's default): `log_softmax(logits / T)[token]` over the full
  vocabulary, before any top-k / top-p / min-p filter. Greedy rows (T = 0) take `argmax(logits)` and report
  `log_softmax(logits)[token]`.
- Filters (SGLang's `top_k_top_p_min_p_sampling_from_probs_torch` rule, no renormalisation between them):
  in descending-probability order, a token is kept when it is among the first top_k, when the mass
  strictly before it is <= top_p, and when its probability is >= min_p times the largest. The most
  likely token is always kept. A row whose filters are all off keeps every token.
- Sampling is Gumbel-max over the kept log-probs (`gumbel_max`: exact, in two stages over blocks of
  the vocabulary, so a step draws about 2·sqrt(V) random numbers, not V). The noise of a row comes from
  a key derived from (its seed, its position) only, and filters act as a -inf mask in vocabulary order,
  so a row's token depends on nothing else in the batch: the same request with the same seed gives the
  same token alone or among others, filtered neighbours or not (the sort only runs when some row
  filters, and masking a row that filters nothing changes nothing).

Seeds are uint64 split into two uint32 halves (`seed_lo`, `seed_hi`); the key of a token at position p is
`fold_in(fold_in(key(seed_lo), seed_hi), p)`.

Legend: B rows, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, UInt32

from legorl_jax.engine.base import SamplingParams


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SamplingRows:
    """Per-row sampling parameters as device arrays (top_k 0 and top_p 1 and min_p 0 mean off)."""

    temperature: Float[Array, " b"]
    top_p: Float[Array, " b"]
    top_k: Int[Array, " b"]
    min_p: Float[Array, " b"]
    seed_lo: UInt32[Array, " b"]
    seed_hi: UInt32[Array, " b"]

    @staticmethod
    def host(params: list[SamplingParams | None], seeds: list[int]) -> SamplingRows:
        """Numpy rows for `params` (None: an idle row, sampled greedily and discarded)."""
        default = SamplingParams(temperature=0.0)
        ps = [default if p is None else p for p in params]
        seeds = np.asarray(seeds, np.uint64)
        return SamplingRows(
            temperature=np.array([p.temperature for p in ps], np.float32),
            top_p=np.array([p.top_p for p in ps], np.float32),
            top_k=np.array([max(p.top_k, 0) for p in ps], np.int32),
            min_p=np.array([p.min_p for p in ps], np.float32),
            seed_lo=(seeds & np.uint64(0xFFFFFFFF)).astype(np.uint32),
            seed_hi=(seeds >> np.uint64(32)).astype(np.uint32),
        )

    def filters(self) -> jax.Array:
        """bool[B]: rows whose filters remove anything."""
        return (self.top_k > 0) | (self.top_p < 1.0) | (self.min_p > 0.0)


def token_keys(
    seed_lo: UInt32[Array, " b"], seed_hi: UInt32[Array, " b"], positions: Int[Array, " b"]
) -> jax.Array:
    """One PRNG key per row from (seed, position) alone."""

    def key(lo: jax.Array, hi: jax.Array, pos: jax.Array) -> jax.Array:
        return jax.random.fold_in(jax.random.fold_in(jax.random.key(lo), hi), pos)

    return jax.vmap(key)(seed_lo, seed_hi, positions)


def keep_mask(logp: Float[Array, "b v"], rows: SamplingRows) -> jax.Array:
    """bool[B, V] of the tokens the filters keep, in vocabulary order (module docstring)."""
    order = jnp.argsort(-logp, axis=-1, stable=True)  # ties keep vocabulary order
    probs = jnp.exp(jnp.take_along_axis(logp, order, axis=-1))
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    rank = jnp.arange(logp.shape[-1], dtype=jnp.int32)[None, :]
    keep = rank < jnp.where(rows.top_k > 0, rows.top_k, logp.shape[-1])[:, None]
    keep &= (mass_before <= rows.top_p[:, None]) | (rows.top_p[:, None] >= 1.0)
    keep &= probs >= rows.min_p[:, None] * probs[:, :1]
    keep = keep.at[:, 0].set(True)
    batch = jnp.arange(logp.shape[0])[:, None]
    return jnp.zeros(logp.shape, bool).at[batch, order].set(keep)


def block_size(vocab: int) -> int:
    """The power of two nearest above sqrt(vocab): the two Gumbel draws then cost about 2·sqrt(V) numbers."""
    return 1 << max(0, math.ceil(math.log2(math.sqrt(vocab))))


def gumbel_max(scores: Float[Array, "b v"], keys: jax.Array) -> Int[Array, " b"]:
    """argmax(scores + Gumbel noise) in distribution, i.e. a draw from softmax(scores), in two stages.

    The vocabulary is cut into blocks of `block_size(V)`: a Gumbel-max over the blocks' log-masses
    (logsumexp) picks a block, a second one over that block's scores picks the token. P(block) ·
    P(token | block) = P(token), so the draw is exact, and it needs about 2·sqrt(V) random numbers instead
    of V (on CPU the noise for a whole [B, V] step cost more than the model's forward). Each row's draw
    depends only on its scores and its key. Scores of -inf (filtered tokens, padding) are never drawn.
    """
    rows, vocab = scores.shape
    b = block_size(vocab)
    n_blocks = -(-vocab // b)
    padded = jnp.pad(scores, ((0, 0), (0, n_blocks * b - vocab)), constant_values=-jnp.inf)
    blocks = padded.reshape(rows, n_blocks, b)
    mass = jax.nn.logsumexp(blocks, axis=-1)  # [B, n_blocks]; -inf where every token is filtered

    def draw(key: jax.Array, mass: jax.Array, blocks: jax.Array) -> jax.Array:
        outer, inner = jax.random.split(key)
        block = jnp.argmax(mass + jax.random.gumbel(outer, mass.shape, jnp.float32))
        within = jnp.argmax(blocks[block] + jax.random.gumbel(inner, (b,), jnp.float32))
        return block * b + within

    return jax.vmap(draw)(keys, mass, blocks)


def top_logprobs(
    logits: Float[Array, "b v"], rows: SamplingRows, k: int
) -> tuple[Float[Array, "b k"], Int[Array, "b k"]]:
    """The k largest behaviour log-probs of each row (what `sample` reports), most likely first."""
    logits = logits.astype(jnp.float32)
    temperature = jnp.where(rows.temperature == 0.0, 1.0, rows.temperature)
    values, ids = jax.lax.top_k(jax.nn.log_softmax(logits / temperature[:, None], axis=-1), k)
    return values, ids.astype(jnp.int32)


def sample(
    logits: Float[Array, "b v"], rows: SamplingRows, positions: Int[Array, " b"]
) -> tuple[Int[Array, " b"], Float[Array, " b"]]:
    """(token, behaviour log-prob) per row; `positions` is where each sampled token will sit."""
    logits = logits.astype(jnp.float32)
    greedy = rows.temperature == 0.0
    temperature = jnp.where(greedy, 1.0, rows.temperature)
    logp = jax.nn.log_softmax(logits / temperature[:, None], axis=-1)
    keep = jax.lax.cond(
        jnp.any(rows.filters() & ~greedy),
        lambda: keep_mask(logp, rows),
        lambda: jnp.ones(logp.shape, bool),
    )
    keys = token_keys(rows.seed_lo, rows.seed_hi, positions)
    sampled = gumbel_max(jnp.where(keep, logp, -jnp.inf), keys)
    tokens = jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)
    return tokens, jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]
