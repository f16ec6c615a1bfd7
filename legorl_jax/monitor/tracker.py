"""The `Tracker` protocol (STYLE rule 20): where metrics, hyper-parameters and trial texts go.

    tracker.log_hparams(flatten_config(cfg))                  # once, the resolved config
    tracker.log({"rollout/reward_mean": 0.4, ...}, step=3)     # names are `stage/name`
    tracker.log_text("trial", conversation, step=3, context={"task": "calc", "reward": 1.0, "outcome": "submitted"})
    tracker.close()

Implementations: `AimTracker` (aim_tracker.py). A tracker never raises on a value it cannot store: a
non-finite number is skipped and counted (`skipped`), since losing a metric must not stop a training run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

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

    def close(self) -> None: ...
