"""`python -m legorl_jax.monitor.compare [RUN ...] [--repo PATH] [--png PATH]`: runs side by side.

Reads the Aim repository (default `runs/aim`), takes the given runs (hash, hash prefix or name; default: every
run), and prints one row per run: the harness it trained through (always: per-harness runs are the comparison
the project exists for), the other config fields in which the runs differ, final and best train reward,
final and best solve rate (train and validation), mean alignment Pearson, and steps. Writes a PNG of their
curves (`legorl_jax.monitor.report.plot_curves`). `aim up --repo PATH` browses the same runs interactively.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from legorl_jax.config import flatten_config
from legorl_jax.monitor.report import CURVES, plot_curves

HARNESS = "harness.name"
COLUMNS = ("rollout/reward_mean", "rollout/solve_rate", "val/solve_rate", "align/prob_pearson")


@dataclasses.dataclass
class RunView:
    """One Aim run as the comparison sees it."""

    hash: str
    name: str
    hparams: dict[str, Any]
    metrics: dict[int, dict[str, float]]
    created: float = 0.0


def read_runs(repo: str, selectors: Sequence[str] = ()) -> list[RunView]:
    """The runs of the Aim repository `repo` matching `selectors` (all when empty), oldest first."""
    from legorl_jax.monitor.aim_tracker import read_repo

    handle = read_repo(repo)
    names = {n for n, _ in CURVES} | set(COLUMNS)
    views = []
    for run in handle.iter_runs():
        name = run.name or run.hash
        if selectors and not any(run.hash.startswith(s) or name == s for s in selectors):
            continue
        metrics: dict[int, dict[str, float]] = {}
        for sequence in run.metrics():
            if sequence.name not in names:
                continue
            steps, (values, *_) = sequence.data.items_list()  # (steps, [values, epochs, timestamps])
            for step, value in zip(steps, values, strict=True):
                metrics.setdefault(int(step), {})[sequence.name] = float(value)
        views.append(
            RunView(
                run.hash,
                name,
                flatten_config(dict(run.get("hparams") or {})),
                metrics,
                float(run.creation_time or 0),
            )
        )
    views.sort(key=lambda v: v.created)
    missing = [s for s in selectors if not any(v.hash.startswith(s) or v.name == s for v in views)]
    if missing:
        raise ValueError(f"no run in {repo} matches {missing} (runs: {[v.name for v in views] or 'none'})")
    return views


def differing_fields(runs: Sequence[RunView]) -> list[str]:
    """Config keys whose values are not the same in every run."""
    keys = sorted({k for r in runs for k in r.hparams})
    return [k for k in keys if len({repr(r.hparams.get(k)) for r in runs}) > 1]


def _series(run: RunView, name: str) -> list[float]:
    return [m[name] for _, m in sorted(run.metrics.items()) if name in m and math.isfinite(m[name])]


def table(runs: Sequence[RunView]) -> str:
    """The side-by-side Markdown table (module docstring)."""
    fields = [
        f
        for f in differing_fields(runs)
        if f != HARNESS and not f.startswith(("rollout.experiment", "tracking."))
    ]
    head = [
        "run",
        "harness",
        *fields,
        "steps",
        "reward final / best",
        "solve final / best",
        "val solve final / best",
        "Pearson mean",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs:
        cells = [
            run.name,
            str(run.hparams.get(HARNESS, "-")),
            *(str(run.hparams.get(f, "-")) for f in fields),
            str(len(run.metrics)),
        ]
        for name in ("rollout/reward_mean", "rollout/solve_rate", "val/solve_rate"):
            values = _series(run, name)
            cells.append(f"{values[-1]:.3f} / {max(values):.3f}" if values else "-")
        pearson = _series(run, "align/prob_pearson")
        cells.append(f"{sum(pearson) / len(pearson):.4f}" if pearson else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m legorl_jax.monitor.compare", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("runs", nargs="*", help="run hashes (or prefixes) or names; default: every run")
    p.add_argument("--repo", default="runs/aim", help="the Aim repository (default runs/aim)")
    p.add_argument("--png", default=None, help="where the curves go (default <repo>/compare.png)")
    args = p.parse_args(argv)
    try:
        runs = read_runs(args.repo, args.runs)
    except (FileNotFoundError, ValueError) as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    finally:
        if pathlib.Path(args.repo, ".aim").is_dir():
            from legorl_jax.monitor.aim_tracker import finish_aim

            finish_aim()
    if not runs:
        print(f"compare: the Aim repository {args.repo} holds no run", file=sys.stderr)
        return 2
    print(table(runs))
    png = pathlib.Path(args.png or pathlib.Path(args.repo) / "compare.png")
    labels = {}
    for run in runs:
        labels[run.name if run.name not in labels else f"{run.name} ({run.hash[:8]})"] = run.metrics
    if any(run.metrics for run in runs):
        print(f"\ncurves: {plot_curves(labels, png)}")
    print(f"browse: aim up --repo {args.repo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
