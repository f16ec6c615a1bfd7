"""Compiled programs of the embedded engine: which one runs a call, and when a new one is compiled.

The runner (runner.py) calls its prefill and decode programs per bucket key: ("prefill", batch, width,
context, top) or ("decode", batch, context, top). Each key is one XLA program. On CPU a program of even
the tiny model takes ~1.5 s to compile against ~4 ms for a decode step and ~100 ms for a prefill, and an
agent workload keeps meeting new keys for many passes (its turns arrive in new batch combinations, its
contexts grow through the buckets): compiling each key on first use stalls every request in flight each
time. `Programs` decides, per call:

- the key's own program when it is compiled;
- else a *cover*: the cheapest compiled program of the same kind with every bucket dimension at least as
  large (padding rows sit at position -1 and a longer context is masked, so the result is the same up
  to fp32 rounding), if one call of it is cheaper than a compile: its cost (the product of its
  dimensions) is at most `max_cover_cost` times the key's, or its last measured call took less time
  than a compile takes (the mean compile time measured so far; a batch-8 prefill of the tiny model
  runs in tens of milliseconds against a ~1.5 s compile, so a lone request arriving before its batch
  rides it instead of stalling everyone in flight). Covering is renting: each covered call pays the
  extra time of the larger program, estimated as its measured time × (1 - key cost / cover cost) and
  reported back through `ran`. When a key's paid extra reaches the time a compile takes, the key is
  bought: it compiles on the background thread while its calls keep riding the cover (the ski-rental
  rule: a rare key, such as a batch of 3 late turns, never costs more than about twice the better of
  the two choices);
- else it compiles in the caller: a *stall*, counted and logged (waiting for the key's background compile
  when one is under way).

A decode key that runs also queues the next context bucket of its batch (`next_key`) for the background
thread: a conversation growing into it finds it ready (one bucket ahead of use, never a chain; prefill's
grid of keys is too large to compile ahead, covers serve it). Keys stay within the runner's bucket grid,
so the number of programs keeps the bound `ModelRunner.num_programs_bound` states.

Executables are shared by every runner of the same signature (graph, parameter/cache shapes and dtypes,
device), as the module-level `jax.jit` caches were: a second engine on the same model and shapes
compiles nothing. The background thread is one worker for the process. A background compile that fails
is logged, and the call that needs the key compiles it in the caller, where the error surfaces. With
`background=False` there are no covers and no compiles ahead: every missing key compiles in the caller,
as plain `jax.jit` would (the deterministic mode of the tests that check bucket keys).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import math
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

log = logging.getLogger(__name__)

Key = tuple  # ("prefill", batch, width, context, top) | ("decode", batch, context, top)

_WORKER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="legorl-compile")
_LOCK = threading.Lock()
_READY: dict[tuple[Hashable, Key], Any] = {}  # (signature, key) -> compiled executable
_PENDING: dict[tuple[Hashable, Key], concurrent.futures.Future] = {}


def clear() -> None:
    """Forgets every compiled executable, once the background compiles under way have finished (tests start
    from an empty registry with it)."""
    with _LOCK:
        pending = list(_PENDING.values())
    concurrent.futures.wait(pending)
    with _LOCK:
        _READY.clear()


def _dims(key: Key) -> tuple[int, ...]:
    return key[1:-1]  # the bucket sizes: (batch, width, context) or (batch, context)


def _cost(key: Key) -> int:
    return math.prod(_dims(key))


class Programs:
    """The executables of one runner signature (module docstring)."""

    def __init__(
        self,
        signature: Hashable,
        build: Callable[[Key], Any],
        next_key: Callable[[Key], Key | None],
        *,
        background: bool = True,
        max_cover_cost: float = 4.0,
    ):
        """`build(key)` lowers and compiles the key's program (any thread); `next_key(key)` names the key
        to compile ahead when `key` runs (None: none)."""
        if isinstance(max_cover_cost, bool) or not (
            isinstance(max_cover_cost, int | float) and max_cover_cost >= 1
        ):
            raise ValueError(f"max_cover_cost must be a number >= 1, got {max_cover_cost!r}")
        self.signature = signature
        self._build, self._next = build, next_key
        self.background, self.max_cover_cost = background, max_cover_cost
        self.stalls = 0  # calls that waited for a compile
        self.covered = 0  # calls run on a larger compiled program
        self._rent: dict[Key, float] = collections.defaultdict(float)  # extra seconds paid per covered key
        self._last_seconds: dict[Key, float] = {}  # the last measured call of each program that ran
        self._compile_seconds: list[float] = []
        self._ahead_done: set[Key] = set()  # decode keys whose next context bucket is compiled or queued

    @property
    def ready(self) -> frozenset[Key]:
        with _LOCK:
            return frozenset(k for s, k in _READY if s == self.signature)

    @property
    def compiling(self) -> int:
        """Background compiles of this signature queued or under way."""
        with _LOCK:
            return sum(s == self.signature for s, _ in _PENDING)

    def lookup(self, key: Key) -> tuple[Key, Any]:
        """(the key that runs, its executable): `key` itself or a cover (module docstring)."""
        exe = _READY.get((self.signature, key))
        if exe is None and self.background:
            cover = self._cover(key)
            if cover is not None:
                self.covered += 1
                return cover, _READY[(self.signature, cover)]
        if exe is None:
            exe = self._now(key)
        if self.background and key[0] == "decode":
            self._ahead(key)
        return key, exe

    def ran(self, key: Key, used: Key, seconds: float) -> None:
        """Reports a call of `key` that ran on `used` in `seconds`: covered calls pay rent."""
        self._last_seconds[used] = seconds
        if used == key:
            return
        self._rent[key] += seconds * (1 - _cost(key) / _cost(used))
        if self._rent[key] >= self.compile_estimate:
            self._later(key)

    @property
    def compile_estimate(self) -> float:
        """Seconds a compile takes: the mean of those measured by this runner (1 s before any)."""
        return sum(self._compile_seconds) / len(self._compile_seconds) if self._compile_seconds else 1.0

    def _cover(self, key: Key) -> Key | None:
        with _LOCK:
            ready = [k for s, k in _READY if s == self.signature]
        fits = [
            k
            for k in ready
            if k[0] == key[0]
            and k[-1] == key[-1]  # the same program, with or without top log-probs
            and all(a >= b for a, b in zip(_dims(k), _dims(key), strict=True))
        ]
        compile_s = self.compile_estimate
        cheaper_than_a_compile = [
            k
            for k in fits
            if _cost(k) <= self.max_cover_cost * _cost(key) or self._last_seconds.get(k, math.inf) < compile_s
        ]
        return min(cheaper_than_a_compile, key=_cost, default=None)

    def _compile(self, key: Key) -> Any:
        start = time.perf_counter()
        exe = self._build(key)
        self._compile_seconds.append(time.perf_counter() - start)
        with _LOCK:
            _READY[(self.signature, key)] = exe
        return exe

    def _now(self, key: Key) -> Any:
        """Compiles `key` in the caller (or waits for its background compile): a stall."""
        ident = (self.signature, key)
        with _LOCK:
            exe, pending = _READY.get(ident), _PENDING.get(ident)
        if exe is not None:
            return exe
        self.stalls += 1
        log.info(
            "%s %s: no compiled program covers it within a compile's time; calls in flight wait",
            "waiting for the background compile of" if pending is not None else "compiling in the caller",
            key,
        )
        if pending is not None:
            try:
                return pending.result()
            except Exception:  # noqa: BLE001 - logged by the worker; compiled again below to raise here
                pass
        return self._compile(key)

    def _later(self, key: Key) -> None:
        """Queues `key` for the background thread unless it is compiled or queued."""
        ident = (self.signature, key)
        with _LOCK:
            if ident in _READY or ident in _PENDING:
                return
            _PENDING[ident] = _WORKER.submit(self._compile_in_background, key)

    def _compile_in_background(self, key: Key) -> Any:
        try:
            return self._compile(key)
        except Exception:
            log.exception("background compile of %s failed; the call that needs it compiles it", key)
            raise
        finally:
            with _LOCK:
                _PENDING.pop((self.signature, key), None)

    def _ahead(self, key: Key) -> None:
        """Queues `key`'s next context bucket, once per key (this runs on every decode step)."""
        if key in self._ahead_done:
            return
        self._ahead_done.add(key)
        following = self._next(key)
        if following is not None:
            self._later(following)

    def wait(self) -> None:
        """Blocks until no background compile of this signature is queued or under way."""
        while True:
            with _LOCK:
                pending = [f for (s, _), f in _PENDING.items() if s == self.signature]
            if not pending:
                return
            concurrent.futures.wait(pending)
