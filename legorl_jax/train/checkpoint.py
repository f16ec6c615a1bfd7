"""Orbax checkpoints of the trainer (the only module that imports orbax; docs/style.md rule 19).

Contract of `Checkpointer(config, run_config=...)`:
- `maybe_save(state, cursor=..., weights_version=...)` saves when `state.step` has reached the next
  multiple of `config.every` since the last save (a batch with several updates may step over the exact
  multiple), or when `force=True`; asynchronously when `config.async_save`: the arrays are copied off
  the device before it returns and written by a background thread while training continues.
- One checkpoint holds two items: `state` (the `TrainState` pytree: step, skipped count, params, optimiser
  state, RNG) and `meta` (JSON: the loop cursor, an opaque dict from the loop; the weights version; the
  resolved run config).
- The time budget (`config.max_share`): a due save is put off while the last save's blocking seconds (the
  device-to-host copy, and the wait for the save before it) are `config.cheap_s` or more and exceed
  `max_share` × the seconds since that save ended; the put-off step is remembered (`unsaved_step`), and
  `save_unsaved()` writes it while its arrays are alive (the next update donates them: after it, that step
  is lost, which the bound below allows). So a run saves every step while saving is cheap, and a big model's
  saves stay within ~`max_share` of the time. `force=True` (the run's last step) is never put off. Bound: a
  kill loses at most the steps since the last checkpoint: at most `every` steps or, while saves are put off,
  the steps of last-save-seconds / `max_share`.
- On SIGTERM / SIGINT (`saving_on_signal`): the running loop is cancelled, the put-off step (if alive) saved,
  the background save waited for, and the process exits with 128 + the signal's number.
- Atomic: orbax writes each step into a temporary directory and renames it into place only once every
  byte is on disk, so a crash (even SIGKILL) mid-save leaves at most an unfinished temporary directory that
  is never listed, never restored, and is cleaned up by the next manager. The last `config.keep` steps
  are kept.
- `restore(target, step=None)` reads the latest (or a given) step onto `target`'s shardings: `target` is
  a `TrainState` of arrays or `jax.ShapeDtypeStruct`s carrying the shardings of the run that resumes, which
  may use a different mesh than the run that saved.
- A checkpoint written under another config is refused before any array is read: `CheckpointMismatchError`
  (a `ValueError`) lists every differing field with both values. Fields matching
  `config.ignore_on_resume` (dotted keys, `prefix.*` globs) may differ; the default list is
  `train.total_steps` (extending a run), `train.checkpoint.*` (where and how often to save), `mesh.*`
  (resharding onto another mesh is supported) and `tracking.*` (where metrics go).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fnmatch
import logging
import pathlib
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import orbax.checkpoint as ocp

from legorl_jax.config import CheckpointConfig, flatten_config
from legorl_jax.train.state import TrainState

_ABSENT = "<absent>"
log = logging.getLogger(__name__)


class CheckpointMismatchError(ValueError):
    """The checkpoint was written under a config that differs in fields that must match."""


@dataclasses.dataclass(frozen=True)
class Restored:
    """What `Checkpointer.restore` returns."""

    state: TrainState
    cursor: dict[str, Any]
    weights_version: str
    step: int


def config_differences(saved: dict[str, Any], current: dict[str, Any], ignore: list[str]) -> list[str]:
    """`key: saved -> current` for every dotted key that differs and no `ignore` pattern matches."""
    a, b = flatten_config(saved), flatten_config(current)
    diffs = []
    for key in sorted(set(a) | set(b)):
        if any(fnmatch.fnmatchcase(key, pattern) for pattern in ignore):
            continue
        old, new = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if old != new:
            diffs.append(f"{key}: {old!r} -> {new!r}")
    return diffs


@dataclasses.dataclass
class _Unsaved:
    """A due save the time budget put off: everything `_save` needs."""

    state: TrainState
    cursor: dict[str, Any]
    weights_version: str
    step: int
    prepare: Callable[[], object] | None


def _abstract(target: Any) -> Any:
    def leaf(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))

    return jax.tree.map(leaf, target)


class Checkpointer:
    """Saves and restores `TrainState` + loop cursor + weights version + run config (see module docstring)."""

    def __init__(self, config: CheckpointConfig, *, run_config: dict[str, Any]) -> None:
        if not isinstance(run_config, dict):
            raise TypeError(
                f"run_config must be the resolved config as a plain dict, got {type(run_config).__name__}"
            )
        if config.directory is None:
            raise ValueError(
                "train.checkpoint.directory is null: the run sets it to its folder's checkpoints/ "
                "(give a path)"
            )
        self.config = config
        self.run_config = run_config
        self.directory = pathlib.Path(config.directory).absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=config.keep,
            enable_async_checkpointing=config.async_save,
            cleanup_tmp_directories=True,
            create=True,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))
        self._last_saved = self._manager.latest_step() or 0
        self._save_cost = 0.0  # seconds the last save blocked the caller
        self._saved_at = time.monotonic()  # when the last save returned
        self._unsaved: _Unsaved | None = None

    def should_save(self, step: int) -> bool:
        """Whether `step` is due by `config.every` (the time budget may still put it off)."""
        every = self.config.every
        return every > 0 and step // every > self._last_saved // every

    def within_budget(self) -> bool:
        """Whether a save now keeps saving within `config.max_share` of the time (module docstring)."""
        if self._save_cost < self.config.cheap_s:
            return True
        return self._save_cost <= self.config.max_share * (time.monotonic() - self._saved_at)

    @property
    def unsaved_step(self) -> int | None:
        """The due step the time budget put off and no later save covered, or None."""
        return None if self._unsaved is None else self._unsaved.step

    def maybe_save(
        self,
        state: TrainState,
        *,
        cursor: dict[str, Any],
        weights_version: str,
        force: bool = False,
        step: int | None = None,
        prepare: Callable[[], object] | None = None,
    ) -> bool:
        """Saves `state` under `step` (default: its optimiser step) when due (or `force`) and within the time
        budget (module docstring); True when started. `prepare` runs just before a save is started (the async
        loop writes its ended groups there), never for a step that is not saved.

        The RL loop numbers its checkpoints by loop step, so a step that skipped its update is saved too.
        """
        step = int(jax.device_get(state.step)) if step is None else step
        if step in self._manager.all_steps() or not (force or self.should_save(step)):
            return False
        if not force and not self.within_budget():
            self._unsaved = _Unsaved(state, cursor, weights_version, step, prepare)
            log.info(
                "checkpoint of step %d put off: the last save took %.1f s, over %.0f%% of the %.1f s since "
                "(train.checkpoint.max_share)",
                step,
                self._save_cost,
                100 * self.config.max_share,
                time.monotonic() - self._saved_at,
            )
            return False
        if prepare is not None:
            prepare()
        self._save(state, cursor=cursor, weights_version=weights_version, step=step)
        return True

    def _save(self, state: TrainState, *, cursor: dict[str, Any], weights_version: str, step: int) -> None:
        began = time.monotonic()
        meta = {"cursor": cursor, "weights_version": weights_version, "config": self.run_config, "step": step}
        self._manager.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
        )
        self._last_saved = step
        self._saved_at = time.monotonic()
        self._save_cost = self._saved_at - began
        self._unsaved = None

    def save_unsaved(self) -> int | None:
        """Saves the step the time budget put off, if its arrays are still alive (not donated to a later
        update); returns the step saved, or None."""
        unsaved, self._unsaved = self._unsaved, None
        if unsaved is None or unsaved.step in self._manager.all_steps():
            return None
        if any(getattr(x, "is_deleted", lambda: False)() for x in jax.tree.leaves(unsaved.state)):
            log.warning(
                "the put-off checkpoint of step %d is gone (a later update used its arrays)", unsaved.step
            )
            return None
        if unsaved.prepare is not None:
            unsaved.prepare()
        self._save(
            unsaved.state, cursor=unsaved.cursor, weights_version=unsaved.weights_version, step=unsaved.step
        )
        return unsaved.step

    def _reload(self) -> None:
        # Re-listing the directory while a background save runs drops that step from orbax's list, and its
        # pruning then misses one (keep=3 left 4, and "Unable to find the step 1 for deletion" was logged).
        if not self._manager.is_saving_in_progress():
            self._manager.reload()

    def latest_step(self) -> int | None:
        self._reload()
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        self._reload()
        return list(self._manager.all_steps())

    def move_step(self, step: int, target: pathlib.Path) -> pathlib.Path:
        """Moves checkpoint `step` out of the directory to `target` (kept, never deleted: a resume sets
        aside a checkpoint it will not continue from); the checkpointer then no longer lists it."""
        self.wait()
        (self.directory / str(step)).rename(target)
        self._manager.reload()
        self._last_saved = self._manager.latest_step() or 0
        return target

    def read_meta(self, step: int) -> dict[str, Any]:
        restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(restored["meta"])

    def restore(self, target: TrainState, *, step: int | None = None) -> Restored:
        """The checkpoint at `step` (default: the latest) on `target`'s shardings; refuses another config."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint to restore in {self.directory}")
        meta = self.read_meta(step)
        diffs = config_differences(
            meta.get("config", {}), self.run_config, list(self.config.ignore_on_resume)
        )
        if diffs:
            raise CheckpointMismatchError(
                f"checkpoint {self.directory / str(step)} was written under another config; differing fields "
                f"(saved -> current): {'; '.join(diffs)}. "
                f"Fields allowed to differ: {list(self.config.ignore_on_resume)}"
            )
        restored = self._manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(_abstract(target)))
        )
        return Restored(
            state=restored["state"],
            cursor=dict(meta["cursor"]),
            weights_version=str(meta["weights_version"]),
            step=step,
        )

    def wait(self) -> None:
        """Blocks until the background save (if any) is on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Stopped(SystemExit):
    """The run stopped on a signal after saving what it could (exit status 128 + the signal's number)."""


@contextlib.contextmanager
def saving_on_signal(
    checkpointer: Checkpointer, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)
) -> Iterator[None]:
    """Inside a running asyncio loop: on one of `signals`, the task that entered cancels (the loop stops at
    its next await), then on the way out the put-off step is saved (`save_unsaved`), the background save
    waited for, and `Stopped(128 + signal)` raised. A second signal while that happens is the default one
    (SIGINT: KeyboardInterrupt): a user can always get out."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        if received:
            return
        received.append(signum)
        log.warning("received %s: stopping, saving what is finished", signal.Signals(signum).name)
        for s in signals:  # a second one is the default behaviour again
            loop.remove_signal_handler(s)
        if task is not None:
            task.cancel()

    for s in signals:
        loop.add_signal_handler(s, on_signal, s)
    try:
        yield
    except asyncio.CancelledError:
        if not received:
            raise
        if task is not None:
            task.uncancel()  # the cancellation was ours: the cleanup after this may await normally
    finally:
        if not received:
            for s in signals:
                loop.remove_signal_handler(s)
    if received:
        saved = checkpointer.save_unsaved()
        checkpointer.wait()
        latest = checkpointer.latest_step()
        log.warning(
            "stopped by %s: %s; the last checkpoint is step %s (resume=true continues there)",
            signal.Signals(received[0]).name,
            f"saved the put-off step {saved}" if saved is not None else "no put-off step to save",
            latest,
        )
        raise Stopped(128 + received[0])
