"""Publishing trained weights to the rollout engine, versioned (docs/architecture.md §3: publish → engine).

Two routes, one call: `await Publisher(engine, ...).publish(params, version)`.

- `mode="disk"` (any engine, SGLang included): the params are written as an HF safetensors directory
  through the model's `save_hf` (bf16 or fp32, the tokenizer and other non-weight files copied from
  `source_dir`), atomically: everything goes to a hidden temporary directory next to the target, which is
  renamed to `<directory>/<version>` only once complete, so the engine never reads a half-written
  checkpoint. Then `await engine.update_weights("<directory>/<version>", version)`. Once the engine has
  switched, only the `keep` most recent version directories stay (by modification time, so versions left
  by an earlier process of a resumed run are pruned too; never the one just served).
  Re-publishing an existing version (a resumed run re-reaching a step) replaces it the same way.
- `mode="in_process"` (the embedded JAX engine): `await engine.update_weights(params, version)` hands
  over the trainer's `nnx.Param` state itself; nothing touches the disk and nothing is copied here. The
  train step donates its state's buffers to the next update, so the engine must have taken its own copy
  by the time `update_weights` returns (`JaxEngine` does: it copies into its own dtype and placement,
  then blocks until the copy is done). It decides how it swaps them in between its decode steps.

Requests in flight when the weights land follow `update_policy` (`engine.update_policy`: drain,
abort_resume or in_place; legorl_jax/engine/weight_update.py applies it around the engine's
`update_weights`). A synchronous loop publishes with nothing in flight, where the three are the same.

`version_of(step)` is the version string the loop uses: `step-000042`; `version_number(version)` reads it
back (42), and gives the engine's initial version (`engine.weight_version`, "default") the number 0. Both
live in the leaf module legorl_jax/versions.py (re-exported here). Importing this module loads no jax (the
model is imported when a checkpoint is written).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from legorl_jax.engine.weight_update import check_update_policy, update_weights
from legorl_jax.validate import positive_int
from legorl_jax.versions import version_number, version_numbers, version_of

__all__ = ["PUBLISH_MODES", "Publisher", "export_hf", "version_number", "version_numbers", "version_of"]

if TYPE_CHECKING:  # annotations only: importing this module loads no jax
    from legorl_jax.engine.base import Engine
    from legorl_jax.model import Policy

PUBLISH_MODES = ("disk", "in_process")
PUBLISH_DTYPES = ("bfloat16", "float32")
_TEMP_PREFIX = ".publishing-"


def export_hf(
    policy: Policy,
    directory: str | os.PathLike,
    version: str,
    *,
    dtype: str = "bfloat16",
    source_dir: str | os.PathLike | None = None,
) -> pathlib.Path:
    """Writes `policy` to `<directory>/<version>` atomically (temporary directory, then rename)."""
    from legorl_jax.model import save_hf

    if dtype not in PUBLISH_DTYPES:
        raise ValueError(f"publish dtype must be one of {PUBLISH_DTYPES}, got {dtype!r}")
    if not version or "/" in version or version.startswith("."):
        raise ValueError(f"version must be a plain directory name, got {version!r}")
    root = pathlib.Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / version
    tmp = root / f"{_TEMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
    try:
        save_hf(policy, tmp, dtype, source_dir=source_dir)
        if final.exists():
            # rename cannot replace a non-empty directory: move the old one aside first, so `final` is
            # at every moment either absent or complete.
            stale = root / f"{_TEMP_PREFIX}stale-{version}-{uuid.uuid4().hex[:8]}"
            os.replace(final, stale)
            os.replace(tmp, final)
            shutil.rmtree(stale, ignore_errors=True)
        else:
            os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


class Publisher:
    """Hands new weights to an engine (module docstring)."""

    def __init__(
        self,
        engine: Engine,
        *,
        mode: str = "disk",
        to_policy: Callable[[Any], Policy] | None = None,
        directory: str | os.PathLike | None = None,
        dtype: str = "bfloat16",
        keep: int = 2,
        source_dir: str | os.PathLike | None = None,
        update_policy: str = "in_place",
    ) -> None:
        if mode not in PUBLISH_MODES:
            raise ValueError(f"publish mode must be one of {PUBLISH_MODES}, got {mode!r}")
        if mode == "disk" and (directory is None or to_policy is None):
            raise ValueError("publish mode 'disk' needs directory= and to_policy= (e.g. Trainer.policy_of)")
        if dtype not in PUBLISH_DTYPES:
            raise ValueError(f"publish dtype must be one of {PUBLISH_DTYPES}, got {dtype!r}")
        positive_int("publish keep", keep)
        if not callable(getattr(engine, "update_weights", None)):
            raise TypeError(f"engine {type(engine).__name__} has no update_weights(source, version)")
        self.update_policy = check_update_policy(update_policy, engine)
        self.engine, self.mode, self.to_policy = engine, mode, to_policy
        self.directory = None if directory is None else pathlib.Path(directory)
        self.dtype, self.keep, self.source_dir = dtype, keep, source_dir
        self.published: list[str] = []

    async def publish(self, params: Any, version: str) -> str | pathlib.Path:
        """Makes the engine serve `params` as `version`; returns the directory written (disk) or the
        version."""
        if self.mode == "in_process":
            await update_weights(self.engine, params, version, self.update_policy)
            self.published.append(version)
            return version
        to_policy, directory = self.to_policy, self.directory
        assert to_policy is not None and directory is not None  # disk mode: checked in __init__
        path = await asyncio.to_thread(  # seconds of writing: the event loop keeps serving the trials
            lambda: export_hf(
                to_policy(params), directory, version, dtype=self.dtype, source_dir=self.source_dir
            )
        )
        await update_weights(self.engine, str(path), version, self.update_policy)
        self.published.append(version)
        self._prune(keep_path=path)
        return path

    def _prune(self, keep_path: pathlib.Path) -> None:
        versions = [p for p in keep_path.parent.iterdir() if p.is_dir() and not p.name.startswith(".")]
        versions.sort(key=lambda p: p.stat().st_mtime_ns)
        for old in versions[: max(0, len(versions) - self.keep)]:
            if old != keep_path:
                shutil.rmtree(old, ignore_errors=True)
