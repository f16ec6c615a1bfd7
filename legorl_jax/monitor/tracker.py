"""The `Tracker` protocol (docs/style.md rule 20): where metrics, hyper-parameters and trial texts go.

    tracker.log_hparams(flatten_config(cfg))                  # once, the resolved config
    tracker.log({"rollout/reward_mean": 0.4, ...}, step=3)     # names are `stage/name`
    tracker.log_text("trial", text, step=3, context={"task": "calc", "reward": 1.0, "outcome": "submitted"})
    tracker.log_distribution("align/logprob_diff", diffs, step=3)   # a histogram of per-token values
    tracker.close()

Implementations: `AimTracker` (aim_tracker.py); `JsonlTracker` (here: one JSON line per step in the run's
folder, what the run's summary table and curves are made from); `Trackers` sends to several.
A tracker never raises on a value it cannot store: a
non-finite number is skipped and counted (`skipped`), since losing a metric must not stop a training run.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: importing a tracker loads neither numpy nor jaxtyping
    import numpy as np
    from jaxtyping import Float

METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]*(/[A-Za-z0-9_.-]+)+$")


def check_metric_name(name: Any) -> str:
    """`name` if it reads `stage/name` (e.g. `rollout/reward_mean`), else a ValueError naming it."""
    if not isinstance(name, str) or not METRIC_NAME.match(name):
        raise ValueError(f"metric names read 'stage/name' (e.g. 'rollout/reward_mean'), got {name!r}")
    return name


def finite_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, float], list[str]]:
    """(the finite numeric metrics as floats, the names left out because they were not finite numbers)."""
    kept, dropped = {}, []
    for name, value in metrics.items():
        check_metric_name(name)
        try:
            number = float(value)
        except (TypeError, ValueError):
            dropped.append(name)
            continue
        if math.isfinite(number):
            kept[name] = number
        else:
            dropped.append(name)
    return kept, dropped


@runtime_checkable
class Tracker(Protocol):
    """Experiment tracking (module docstring)."""

    def log_hparams(self, hparams: Mapping[str, Any]) -> None: ...

    def log(self, metrics: Mapping[str, Any], *, step: int) -> None: ...

    def log_text(
        self, name: str, text: str, *, step: int, context: Mapping[str, Any] | None = None
    ) -> None: ...

    def log_distribution(self, name: str, values: Float[np.ndarray, " n"], *, step: int) -> None: ...

    def close(self) -> None: ...


class JsonlTracker:
    """Metrics as JSON lines `{"step": s, "metrics": {...}}` appended to `path` (flushed per step)."""

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.skipped = 0

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        (self.path.parent / "hparams.json").write_text(json.dumps(dict(hparams), indent=1, default=str))

    def log(self, metrics: Mapping[str, Any], *, step: int) -> None:
        kept, dropped = finite_metrics(metrics)
        self.skipped += len(dropped)
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, "metrics": kept}) + "\n")

    def log_text(self, name: str, text: str, *, step: int, context: Mapping[str, Any] | None = None) -> None:
        return None  # the trial archive holds every conversation

    def log_distribution(self, name: str, values: Float[np.ndarray, " n"], *, step: int) -> None:
        return None

    def close(self) -> None:
        return None


def read_jsonl_metrics(path: str | os.PathLike) -> dict[int, dict[str, float]]:
    """The metrics a `JsonlTracker` wrote, by step (a step logged twice keeps its last row)."""
    out: dict[int, dict[str, float]] = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[int(row["step"])] = row["metrics"]
    return dict(sorted(out.items()))


class Trackers:
    """Sends every call to each of `trackers`."""

    def __init__(self, *trackers: Tracker):
        self.trackers = trackers

    @property
    def run_hash(self) -> str:
        """The run id of the first tracker that has one (an Aim run's hash), else ''."""
        for t in self.trackers:
            found = getattr(t, "run_hash", None)
            if isinstance(found, str) and found:
                return found
        return ""

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        for t in self.trackers:
            t.log_hparams(hparams)

    def log(self, metrics: Mapping[str, Any], *, step: int) -> None:
        for t in self.trackers:
            t.log(metrics, step=step)

    def log_text(self, name: str, text: str, *, step: int, context: Mapping[str, Any] | None = None) -> None:
        for t in self.trackers:
            t.log_text(name, text, step=step, context=context)

    def log_distribution(self, name: str, values: Float[np.ndarray, " n"], *, step: int) -> None:
        for t in self.trackers:
            t.log_distribution(name, values, step=step)

    def close(self) -> None:
        for t in self.trackers:
            t.close()
