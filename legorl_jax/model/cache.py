"""The KV cache of the rollout engine: fixed slots, each a sequence of up to `max_len` positions.

Contract (what `Policy.forward_cached` and the engine rely on):
- `KVCache.k` / `.v` are `[L, S, M, K, H]` (all decoder layers, slots, positions, kv heads, head dim), a
  pytree, so it goes through `jax.jit` (and can be donated).
- Token (b, t) with position p >= 0 writes its K/V at `[layer, slots[b], p]` and attends to the entries of
  that slot at indices <= p, including those written by the same call. p = -1 is padding: nothing is
  written (the scatter drops it) and its outputs are unspecified.
- A call may name a static `context` C <= max_len that every position of it lies below: attention then
  reads only the first C entries of each slot, so its cost follows the positions in use, not max_len.
- A slot is reused by overwriting: a new sequence's prefill writes positions 0..P-1 and never looks past
  its own position, so stale entries beyond it are harmless.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from legorl_jax.validate import positive_int


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """Keys and values of every decoder layer for `num_slots` sequences of up to `max_len` positions."""

    k: Float[Array, "l s m k h"]
    v: Float[Array, "l s m k h"]

    @property
    def num_layers(self) -> int:
        return self.k.shape[0]

    @property
    def num_slots(self) -> int:
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        return self.k.shape[2]


def init_kv_cache(
    num_layers: int, num_slots: int, max_len: int, num_kv_heads: int, head_dim: int, dtype: jnp.dtype
) -> KVCache:
    positive_int("num_slots", num_slots)
    positive_int("max_len", max_len)
    shape = (num_layers, num_slots, max_len, num_kv_heads, head_dim)
    return KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype))


def write(
    cache: KVCache,
    layer: Int[Array, ""] | int,
    k: Float[Array, "b t k h"],
    v: Float[Array, "b t k h"],
    positions: Int[Array, "b t"],
    slots: Int[Array, " b"],
) -> KVCache:
    """Scatters each token's K/V to (layer, its row's slot, its position); padding (p < 0) is dropped.

    Only the B*T new entries are written: with the cache donated (or carried through a layer scan) the
    update happens in place, never as a copy of the whole cache.
    """
    # An out-of-range index plus mode="drop" is how a padding token writes nothing.
    where = jnp.where(positions >= 0, positions, cache.max_len)
    rows = jnp.broadcast_to(slots[:, None], positions.shape)
    return KVCache(
        k=cache.k.at[layer, rows, where].set(k.astype(cache.k.dtype), mode="drop"),
        v=cache.v.at[layer, rows, where].set(v.astype(cache.v.dtype), mode="drop"),
    )


def read(
    cache: KVCache, layer: Int[Array, ""] | int, slots: Int[Array, " b"], length: int | None = None
) -> tuple[jax.Array, jax.Array]:
    """The K and V of `layer` for each row's slot, positions [0, length) (default all): two [B, C, K, H]."""
    length = cache.max_len if length is None else length
    return cache.k[layer, slots, :length], cache.v[layer, slots, :length]


def visible(positions: Int[Array, "b t"], max_len: int) -> Bool[Array, "b t m"]:
    """Mask of the first `max_len` cache entries token (b, t) attends to: indices <= its position."""
    index = jnp.arange(max_len, dtype=positions.dtype)
    return (index[None, None, :] <= positions[:, :, None]) & (positions[:, :, None] >= 0)


def check_cached_inputs(
    cache: KVCache, input_ids: jax.Array, positions: jax.Array, slots: jax.Array, context: int | None = None
) -> None:
    """Shape checks always; value checks (slot range, position range, one row per slot) when concrete."""
    if context is not None and (
        not isinstance(context, int) or isinstance(context, bool) or not 1 <= context <= cache.max_len
    ):
        raise ValueError(f"context must be an int in [1, max_len={cache.max_len}] or None, got {context!r}")
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache (from Policy.init_cache), got {type(cache).__name__}")
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be [B, T], got shape {tuple(input_ids.shape)}")
    if tuple(positions.shape) != tuple(input_ids.shape):
        raise ValueError(
            f"positions has shape {tuple(positions.shape)}, input_ids has {tuple(input_ids.shape)}"
        )
    if tuple(slots.shape) != (input_ids.shape[0],):
        raise ValueError(f"slots must have shape ({input_ids.shape[0]},), got {tuple(slots.shape)}")
    for name, array in (("positions", positions), ("slots", slots)):
        if not jnp.issubdtype(array.dtype, jnp.integer):
            raise TypeError(f"{name} must be an integer array, got dtype {array.dtype}")
    if isinstance(positions, jax.core.Tracer) or isinstance(slots, jax.core.Tracer):
        return
    pos, slot = np.asarray(positions), np.asarray(slots)
    limit = cache.max_len if context is None else context
    bad = np.argwhere((pos < -1) | (pos >= limit))
    if bad.size:
        b, t = bad[0]
        name = "max_len" if context is None else "context"
        raise ValueError(f"positions[{b}, {t}] = {pos[b, t]} is outside [-1, {name}={limit})")
    active = (pos >= 0).any(axis=1)
    bad_slots = np.argwhere(active & ((slot < 0) | (slot >= cache.num_slots)))
    if bad_slots.size:
        b = bad_slots[0][0]
        raise ValueError(f"slots[{b}] = {slot[b]} is outside [0, num_slots={cache.num_slots})")
    used = slot[active]
    if len(np.unique(used)) != len(used):
        values, counts = np.unique(used, return_counts=True)
        raise ValueError(f"slot {values[counts > 1][0]} appears in more than one row of this call")
