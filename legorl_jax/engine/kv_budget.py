"""How big the embedded engine's KV cache may be: slots × positions sized to a memory budget.

The cache is dense (`[L, slots, max_len, K, H]`, model/cache.py), so its size is fixed at start:
`slots × max_len × bytes_per_token`, with `bytes_per_token = 2 (K and V) × layers × kv heads × head dim ×
itemsize`. Sizing it from the model's positions alone (a 32k-position model, 32 running + 32 prefix-cache
slots) asks for more memory than a 24 GiB machine has, and the kernel's out-of-memory killer ends the
server without a word. So, as SGLang (`--mem-fraction-static`) and vLLM (`VLLM_CPU_KVCACHE_SPACE`) do, the
engine takes a budget: `--kv-gib` bytes, or `--mem-fraction` of the memory available when the engine
starts (after its weights are loaded), on the engine's device (`memory_stats()` on an accelerator;
MemAvailable and the cgroup's limit on the host).

`size_kv_cache` then decides, in this order, and says what it did (`KVSizing.describe`):
1. everything as asked fits: keep it;
2. `max_len` was not asked (it defaults to the model's positions): cap it to what the budget gives every
   slot, rounded down to a multiple of 128, but not below `min(floor_len, model positions)`;
3. still too big: give up prefix-cache slots (a cache that only saves prefill), then running slots;
4. not even one running slot of that length fits: refuse with a `KVBudgetError` naming the numbers.
An explicitly asked `max_len` is never shortened: slots go first, then the refusal.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

from legorl_jax.validate import is_int, positive_int

GIB = 1 << 30
ROUND = 128  # a capped max_len is a multiple of this (the engine's context buckets double from 128)
FLOOR_LEN = 4096  # a capped max_len stays at least this (or the model's positions, when fewer)


class KVBudgetError(ValueError):
    """Even one running slot of the asked context does not fit the KV budget."""


@dataclasses.dataclass(frozen=True)
class KVSizing:
    """What the engine allocates: `running + cache_slots` slots of `max_len` positions each."""

    running: int
    cache_slots: int
    max_len: int
    bytes_per_token: int
    budget_bytes: int | None
    source: str
    """Where the budget came from, for the log ("--kv-gib 2", "0.5 of 11.3 GiB available", "no budget")."""
    changed: tuple[str, ...] = ()
    """What was cut to fit, in words (empty: everything as asked)."""

    @property
    def slots(self) -> int:
        return self.running + self.cache_slots

    @property
    def total_bytes(self) -> int:
        return self.slots * self.max_len * self.bytes_per_token

    def describe(self) -> str:
        budget = "" if self.budget_bytes is None else f" of a {self.budget_bytes / GIB:.2f} GiB budget"
        text = (
            f"KV cache: {self.slots} slots ({self.running} running + {self.cache_slots} prefix cache) x "
            f"{self.max_len} tokens x {self.bytes_per_token} B = {self.total_bytes / GIB:.2f} GiB"
            f"{budget} ({self.source})"
        )
        return text + ("; " + "; ".join(self.changed) if self.changed else "")


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, itemsize: int) -> int:
    """Bytes one position of one slot takes in every layer's K and V."""
    for name, value in (
        ("num_layers", num_layers),
        ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim),
        ("itemsize", itemsize),
    ):
        positive_int(name, value)
    return 2 * num_layers * num_kv_heads * head_dim * itemsize


def _cgroup_room() -> int | None:
    """Bytes this process's cgroup (v2) may still take, or None without a limit."""
    try:
        own = pathlib.Path("/proc/self/cgroup").read_text().strip().splitlines()
        rel = next(line.split(":", 2)[2] for line in own if line.startswith("0::"))
        base = pathlib.Path("/sys/fs/cgroup") / rel.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((base / "memory.current").read_text().strip())
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def host_available_bytes() -> int:
    """Memory the host can still give: MemAvailable, lowered to the cgroup's room where that is less."""
    available = None
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    if available is None:  # not Linux: all physical memory, the best guess left
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    room = _cgroup_room()
    return available if room is None else min(available, room)


def device_available_bytes(device: Any) -> int:
    """Free memory of `device` (an accelerator's allocator limit less what it holds; the host's on CPU)."""
    if device is None:
        import jax

        device = jax.devices()[0]
    stats = None
    if device.platform != "cpu":
        try:
            stats = device.memory_stats()
        except Exception:  # a backend without allocator statistics
            stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return host_available_bytes()


def budget_bytes(
    *, kv_gib: float | None, mem_fraction: float | None, device: Any = None
) -> tuple[int | None, str]:
    """(budget in bytes or None, where it came from): `kv_gib` wins over `mem_fraction`; neither: none."""
    if kv_gib is not None:
        if isinstance(kv_gib, bool) or not isinstance(kv_gib, int | float) or not kv_gib > 0:
            raise ValueError(f"kv_gib must be a number > 0, got {kv_gib!r}")
        return int(kv_gib * GIB), f"kv_gib {kv_gib:g}"
    if mem_fraction is None:
        return None, "no budget"
    if (
        isinstance(mem_fraction, bool)
        or not isinstance(mem_fraction, int | float)
        or not 0 < mem_fraction <= 1
    ):
        raise ValueError(f"mem_fraction must lie in (0, 1], got {mem_fraction!r}")
    available = device_available_bytes(device)
    return int(mem_fraction * available), f"{mem_fraction:g} of {available / GIB:.2f} GiB available"


def size_kv_cache(
    *,
    bytes_per_token: int,
    running: int,
    cache_slots: int,
    max_len: int | None,
    model_max_len: int,
    budget: int | None,
    source: str = "no budget",
    floor_len: int = FLOOR_LEN,
) -> KVSizing:
    """The sizing that fits `budget` (module docstring); `max_len` None means "the model's positions"."""
    positive_int("bytes_per_token", bytes_per_token)
    positive_int("max_running", running)
    positive_int("model_max_len", model_max_len)
    if not is_int(cache_slots) or cache_slots < 0:
        raise ValueError(f"cache_slots (prefix cache) must be an int >= 0, got {cache_slots!r}")
    asked = max_len is not None
    length = model_max_len if max_len is None else max_len
    if not is_int(length) or not 2 <= length <= model_max_len:
        raise ValueError(
            f"max_len must be an int in [2, max_position_embeddings={model_max_len}], got {max_len!r}"
        )
    sizing = KVSizing(running, cache_slots, length, bytes_per_token, budget, source)
    if budget is None or sizing.total_bytes <= budget:
        return sizing
    changed: list[str] = []
    if not asked:
        floor = min(floor_len, model_max_len)
        fit = budget // (sizing.slots * bytes_per_token)
        capped = max(floor, min(length, fit // ROUND * ROUND if fit >= ROUND else fit))
        if capped < length:
            changed.append(f"max_len capped from the model's {length} to {capped}")
            length = capped
    per_slot = length * bytes_per_token
    fits = budget // per_slot  # whole slots of this length the budget holds
    if fits < 1:
        raise KVBudgetError(
            f"the KV cache does not fit: one slot of {length} tokens needs {per_slot / GIB:.2f} GiB "
            f"({bytes_per_token} B a token), the budget is {budget / GIB:.2f} GiB ({source}); "
            "raise --kv-gib / --mem-fraction or ask a shorter --max-len"
        )
    if running + cache_slots > fits:
        keep_cache = max(0, min(cache_slots, fits - running))
        keep_running = min(running, fits)
        if keep_cache < cache_slots:
            changed.append(f"prefix-cache slots {cache_slots} -> {keep_cache}")
        if keep_running < running:
            changed.append(f"running slots {running} -> {keep_running}")
        running, cache_slots = keep_running, keep_cache
    return KVSizing(running, cache_slots, length, bytes_per_token, budget, source, tuple(changed))
