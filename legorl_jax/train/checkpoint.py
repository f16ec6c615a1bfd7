"""Orbax checkpoints of the trainer (the only module that imports orbax; docs/style.md rule 19).

Contract of `Checkpointer(config, run_config=...)`:
- `maybe_save(state, cursor=..., weights_version=...)` saves when `state.step` has reached the next
  multiple of `config.every` since the last save (a batch with several updates may step over the exact
  multiple), or when `force=True`; asynchronously when `config.async_save`: the arrays are copied off
  the device before it returns and written by a background thread while training continues. One
  checkpoint holds two items: `state` (the `TrainState` pytree: step, skipped count, params, optimiser
  state, RNG) and `meta` (JSON: the loop cursor, an opaque dict from the loop; the weights version; the
  resolved run config).
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

import dataclasses
import fnmatch
import pathlib
from typing import Any

import jax
import orbax.checkpoint as ocp

from legorl_jax.config import CheckpointConfig, flatten_config
from legorl_jax.train.state import TrainState

_ABSENT = "<absent>"


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

    def should_save(self, step: int) -> bool:
        every = self.config.every
        return every > 0 and step // every > self._last_saved // every

    def maybe_save(
        self,
        state: TrainState,
        *,
        cursor: dict[str, Any],
        weights_version: str,
        force: bool = False,
        step: int | None = None,
    ) -> bool:
        """Saves `state` under `step` (default: its optimiser step) when due (or `force`); True when started.

        The RL loop numbers its checkpoints by loop step, so a step that skipped its update is saved too.
        """
        step = int(jax.device_get(state.step)) if step is None else step
        if not (force or self.should_save(step)) or step in self._manager.all_steps():
            return False
        meta = {"cursor": cursor, "weights_version": weights_version, "config": self.run_config, "step": step}
        self._manager.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
        )
        self._last_saved = step
        return True

    def latest_step(self) -> int | None:
        self._manager.reload()
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        self._manager.reload()
        return list(self._manager.all_steps())

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
