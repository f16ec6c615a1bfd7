"""A closed session on disk: `trajectory.json` and `sequences.npz` in its trial folder, written atomically.

    write_archive(trial_dir, trajectory, branches)     # on DELETE /admin/sessions/{id} or close_session()
    trajectory, arrays = read_archive(trial_dir)       # arrays[i]: the token record of branch i

`trajectory.json` holds the messages, every turn (prompt and output ids, behaviour log-probs, tool calls,
weight version, timings), the branches, counters and flags. `sequences.npz` holds, per branch i,
`b{i}_token_ids` int32[T], `b{i}_loss_mask` int8[T], `b{i}_behaviour_logprobs` float32[T],
`b{i}_token_versions` int32[T] (the weights version number each sampled token was sampled under, -1 on the
others; absent when a version had no number, and in archives written before it was recorded),
`b{i}_stale_kv` int8[T] (1 where a sampled token was sampled over K/V of older weights; absent when none
was, and in archives written before it was recorded: read as all fresh) and, for MoE
policies, `b{i}_routed_experts` int16[T, L, K] (-1 = not recorded). Each file is written to a temporary name
in the same folder and renamed over the final one, so a reader sees a whole file or none; the arrays go first,
so a `trajectory.json` present means the arrays beside it are complete.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from typing import Any

import numpy as np
import orjson

TRAJECTORY = "trajectory.json"
ARRAYS = "sequences.npz"


def _atomic_write(path: pathlib.Path, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Writes `text` to `path` (its folder created if missing) through a temporary file and a rename."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes `data` to `path` (its folder created if missing) through a temporary file and a rename."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, lambda f: f.write(data))


def write_archive(
    trial_dir: str | os.PathLike, trajectory: dict[str, Any], branches: list[Any]
) -> pathlib.Path:
    """Writes the session's files into `trial_dir` (created if missing); returns the folder."""
    folder = pathlib.Path(trial_dir)
    folder.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for b in branches:
        arrays[f"b{b.index}_token_ids"] = np.asarray(b.ids, np.int32)
        arrays[f"b{b.index}_loss_mask"] = np.asarray(b.mask, np.int8)
        arrays[f"b{b.index}_behaviour_logprobs"] = np.asarray(b.logprobs, np.float32)
        versions = b.version_array()
        if versions is not None:
            arrays[f"b{b.index}_token_versions"] = versions
        stale = b.stale_kv_array()
        if stale is not None:
            arrays[f"b{b.index}_stale_kv"] = stale
        if b.routing is not None:
            rows = b.routing[: len(b.ids)]
            pad = np.full((len(b.ids) - len(rows), *rows.shape[1:]), -1, np.int16)
            arrays[f"b{b.index}_routed_experts"] = np.concatenate([rows, pad]).astype(np.int16)
    _atomic_write(folder / ARRAYS, lambda f: np.savez_compressed(f, allow_pickle=False, **arrays))
    text = orjson.dumps(
        trajectory,
        option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS,
        default=json_default,
    )
    _atomic_write(folder / TRAJECTORY, lambda f: f.write(text))
    return folder


def json_default(value: Any) -> Any:
    """numpy scalars and arrays as JSON data (the archive's and the pending-group store's encoder)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON data: {type(value).__name__}")


def read_archive(trial_dir: str | os.PathLike) -> tuple[dict[str, Any], dict[int, dict[str, np.ndarray]]]:
    """(trajectory, {branch index: {token_ids, loss_mask, behaviour_logprobs[, token_versions][, stale_kv]
    [, routed_experts]}})."""
    folder = pathlib.Path(trial_dir)
    path = folder / TRAJECTORY
    if not path.is_file():
        raise FileNotFoundError(f"{folder} holds no {TRAJECTORY}: not an archived proxy session")
    try:
        trajectory = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    arrays: dict[int, dict[str, np.ndarray]] = {}
    with np.load(folder / ARRAYS) as data:
        for name in data.files:
            branch, field = name[1:].split("_", 1)
            arrays.setdefault(int(branch), {})[field] = data[name]
    return trajectory, arrays
