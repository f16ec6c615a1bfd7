"""The Aim implementation of `Tracker`: one Aim run per training job, in one Aim repository per sweep.

    tracker = AimTracker("runs/aim", experiment="demo", run_name="gspo lr=1e-6", tags=["sweep-3"])
    tracker.log_hparams({...}); tracker.log({"train/pg_loss": 0.1}, step=1); tracker.close()
    tracker.run_hash                                    # a resumed job passes it back as resume_hash=
    runs = read_repo("runs/aim")                       # every run, readable (indexes what is not yet)

Metrics go to `run.track(value, name=..., step=...)`; texts (each trial's conversation) to
`run.track(aim.Text(text), name=..., step=..., context=...)` with their context (task, reward, outcome,
harness, step) so Aim's UI can filter them; hyper-parameters to `run["hparams"]`. Aim 3.29 makes a closed
run visible to readers only once its metadata is indexed, which `aim up` does in the background; so
`read_repo` indexes every run first (what `python -m legorl_jax.monitor.compare` and the tests read
through). Aim is imported when a tracker is made, not when this module is.
"""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: importing a tracker loads neither numpy nor jaxtyping
    import numpy as np
    from jaxtyping import Float

from legorl_jax.monitor.tracker import finite_metrics

log = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    """Values Aim stores as hyper-parameters: JSON scalars, lists and dicts of them (others as text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


class AimTracker:
    """Tracks one run in an Aim repository (module docstring)."""

    def __init__(
        self,
        repo: str | os.PathLike,
        *,
        experiment: str,
        run_name: str | None = None,
        tags: Sequence[str] = (),
        resume_hash: str | None = None,
    ):
        import aim

        if not isinstance(experiment, str) or not experiment:
            raise ValueError(f"experiment must be a non-empty string, got {experiment!r}")
        path = pathlib.Path(repo)
        path.mkdir(parents=True, exist_ok=True)
        if not (path / ".aim").is_dir():
            aim.Repo(str(path), init=True)
        self._aim = aim
        self.repo = str(path)
        self.run = aim.Run(
            run_hash=resume_hash,
            repo=str(path),
            experiment=experiment,
            system_tracking_interval=None,
            capture_terminal_logs=False,
        )
        if run_name:
            self.run.name = run_name
        for tag in tags:
            self.run.add_tag(tag)
        self.skipped = 0

    @property
    def run_hash(self) -> str:
        return self.run.hash

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        self.run["hparams"] = _plain(dict(hparams))

    def log(self, metrics: Mapping[str, Any], *, step: int) -> None:
        kept, dropped = finite_metrics(metrics)
        if dropped:
            self.skipped += len(dropped)
            log.warning("step %d: metrics %s are not finite numbers and were not tracked", step, dropped)
        for name, value in kept.items():
            self.run.track(value, name=name, step=step)

    def log_text(self, name: str, text: str, *, step: int, context: Mapping[str, Any] | None = None) -> None:
        ctx = {str(k): _plain(v) for k, v in (context or {}).items()}
        self.run.track(self._aim.Text(text), name=name, step=step, context=ctx)

    def log_distribution(self, name: str, values: Float[np.ndarray, " n"], *, step: int) -> None:
        import numpy as np

        data = np.asarray(values, dtype=np.float64).ravel()
        data = data[np.isfinite(data)]
        if data.size:
            self.run.track(self._aim.Distribution(data, bin_count=64), name=name, step=step)

    def close(self) -> None:
        """Closes the run and ends Aim's work in this process (see `finish_aim`)."""
        self.run.close()
        finish_aim()


def finish_aim() -> None:
    """Runs Aim's clean-up now instead of at interpreter exit.

    Aim registers its clean-up with `atexit`, where it starts a thread; Python 3.12 refuses new threads at
    shutdown, so every process that used Aim would end with a traceback. Call once Aim is no longer used.
    """
    import atexit

    from aim.ext.cleanup import AutoClean

    AutoClean.cleanup()
    atexit.unregister(AutoClean.cleanup)


def read_repo(repo: str | os.PathLike) -> Any:
    """The `aim.Repo` at `repo` with every run indexed (readable), or FileNotFoundError naming the path."""
    import aim
    from aim.sdk.index_manager import RepoIndexManager

    path = pathlib.Path(repo)
    if not (path / ".aim").is_dir():
        raise FileNotFoundError(f"{path} is not an Aim repository (no .aim folder)")
    handle = aim.Repo(str(path))
    manager = RepoIndexManager.get_index_manager(handle)
    for run_hash in handle.list_all_runs():
        manager.index(run_hash)
    return aim.Repo(str(path))
