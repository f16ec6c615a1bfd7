"""Finished trials kept across a restart: a list of `Trajectory` written to one folder and read back whole.

    save_trajectories(folder, trajectories)       # trajectories.json + arrays.npz, each written atomically
    trajectories = load_trajectories(folder)      # equal to what was saved, field by field

The async loop (legorl_jax/async_loop.py) writes the groups that ended but were not trained yet beside each
checkpoint, so a run killed with trials in flight resumes with them (nothing finished is lost). The JSON holds
every field but the sequences' arrays (ids, outcome, reward, messages, features, timings, the verifier's
report); `arrays.npz` holds each sequence's arrays as `t{i}_s{j}_{field}`. The arrays are written first and
the JSON last, so a folder with `trajectories.json` is complete.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
from collections.abc import Sequence as SequenceABC

import numpy as np

from legorl_jax.proxy.archive import atomic_write_bytes, atomic_write_text, json_default
from legorl_jax.tasks.report import VerifierReport
from legorl_jax.types import Outcome, Sequence, Trajectory

INDEX = "trajectories.json"
ARRAYS = "arrays.npz"
_ARRAY_FIELDS = (
    "token_ids",
    "loss_mask",
    "behaviour_logprobs",
    "routed_experts",
    "token_versions",
    "stale_kv",
)


def save_trajectories(folder: str | os.PathLike, trajectories: SequenceABC[Trajectory]) -> pathlib.Path:
    """Writes `trajectories` into `folder` (created if missing; earlier files replaced); returns it."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    rows = []
    for i, t in enumerate(trajectories):
        for j, seq in enumerate(t.sequences):
            for name in _ARRAY_FIELDS:
                value = getattr(seq, name)
                if value is not None:
                    arrays[f"t{i}_s{j}_{name}"] = np.asarray(value)
        rows.append(
            {
                "trial_id": t.trial_id,
                "task_id": t.task_id,
                "group_id": t.group_id,
                "reward": t.reward,
                "outcome": t.outcome.value,
                "sequences": [{"weight_versions": list(s.weight_versions)} for s in t.sequences],
                "messages": list(t.messages),
                "features": dict(t.features),
                "timings": dict(t.timings),
                "attempts": list(t.attempts),
                "verifier_report": None if t.verifier_report is None else t.verifier_report.to_dict(),
            }
        )
    buffer = io.BytesIO()
    np.savez_compressed(buffer, allow_pickle=False, **arrays)
    atomic_write_bytes(folder / ARRAYS, buffer.getvalue())
    atomic_write_text(folder / INDEX, json.dumps(rows, default=json_default))
    return folder


def load_trajectories(folder: str | os.PathLike) -> list[Trajectory]:
    """What `save_trajectories(folder, ...)` wrote; a folder without it is a FileNotFoundError naming it."""
    folder = pathlib.Path(folder)
    index = folder / INDEX
    if not index.is_file():
        raise FileNotFoundError(f"{folder} holds no {INDEX}: no trajectories were saved there")
    try:
        rows = json.loads(index.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{index} is not valid JSON: {exc}") from None
    with np.load(folder / ARRAYS) as data:
        arrays = {name: data[name] for name in data.files}
    out = []
    for i, row in enumerate(rows):
        sequences = []
        for j, seq in enumerate(row["sequences"]):
            field = {name: arrays.get(f"t{i}_s{j}_{name}") for name in _ARRAY_FIELDS}
            sequences.append(
                Sequence(
                    token_ids=arrays[f"t{i}_s{j}_token_ids"],
                    loss_mask=arrays[f"t{i}_s{j}_loss_mask"],
                    behaviour_logprobs=arrays[f"t{i}_s{j}_behaviour_logprobs"],
                    routed_experts=field["routed_experts"],
                    weight_versions=tuple(seq["weight_versions"]),
                    token_versions=field["token_versions"],
                    stale_kv=field["stale_kv"],  # absent before it was recorded: all fresh
                )
            )
        report = row["verifier_report"]
        out.append(
            Trajectory(
                trial_id=row["trial_id"],
                task_id=row["task_id"],
                group_id=row["group_id"],
                sequences=tuple(sequences),
                reward=float(row["reward"]),
                outcome=Outcome(row["outcome"]),
                messages=tuple(row["messages"]),
                features=dict(row["features"]),
                timings=dict(row["timings"]),
                attempts=tuple(row.get("attempts", ())),
                verifier_report=None if report is None else VerifierReport.from_dict(report),
            )
        )
    return out
