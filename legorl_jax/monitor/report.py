"""Tables and curves of runs: the per-step table a job ends with, and the PNG of one or several runs' curves.

    print(step_table(metrics_by_step))                      # reward, solve rate, Pearson, dropped, per step
    plot_curves({"run a": metrics_a, "run b": metrics_b}, "curves.png")

`metrics_by_step` is `{step: {name: value}}`, what `JsonlTracker` writes or what
`python -m legorl_jax.monitor.compare` reads back from Aim. matplotlib draws off-screen (Agg). The
trainer/engine Pearson panel shows 1 - Pearson on a fixed log axis (`PEARSON_FLOOR`).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Any

CURVES = (
    ("rollout/reward_mean", "reward (train trials)"),
    ("rollout/solve_rate", "solve rate (train trials)"),
    ("val/solve_rate", "solve rate (validation)"),
    ("align/prob_pearson", "trainer/engine probability Pearson"),
    ("behaviour/turns_per_trial", "turns per trial"),
    ("behaviour/no_tool_rate", "replies without a tool call"),
)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def dropped_by_reason(metrics: Mapping[str, float]) -> str:
    """`sandbox_failed 1, overlong 2`: trials dropped by the rollout per reason, then those the trainer
    refused whole for being longer than its rows (`batch/overlong`)."""
    parts = [
        f"{k.removeprefix('rollout/dropped/')} {int(v)}"
        for k, v in sorted(metrics.items())
        if k.startswith("rollout/dropped/") and v
    ]
    if metrics.get("batch/overlong"):
        parts.append(f"overlong {int(metrics['batch/overlong'])}")
    return ", ".join(parts) or "none"


def infra_failures(metrics: Mapping[str, float]) -> str:
    """`engine_failed 2, node_failed 1 (retried 3)`: every failed attempt by reason, kept or dropped."""
    prefix = "rollout/infra_failures/"
    parts = [
        f"{k.removeprefix(prefix)} {int(v)}" for k, v in sorted(metrics.items()) if k.startswith(prefix) and v
    ]
    retried = int(metrics.get("rollout/retried", 0))
    return (", ".join(parts) or "none") + (f" (retried {retried})" if retried else "")


def _tokens(metrics: Mapping[str, float]) -> str:
    """`2310 (2544)`: the mean and the longest of a step's scored trials' tokens (prompts and replies)."""
    if "behaviour/tokens_per_trial" not in metrics:
        return "-"
    longest = metrics.get("behaviour/tokens_per_trial_max", 0.0)
    return f"{metrics['behaviour/tokens_per_trial']:.0f} ({longest:.0f})"


def step_table(metrics_by_step: Mapping[int, Mapping[str, float]]) -> str:
    """One Markdown row per step: trials, reward, solve rate, validation, turns and tokens per trial (mean,
    max), Pearson, dropped, infrastructure failures (retried or not), update, time."""
    lines = [
        "| step | trials (scored) | reward | solve rate | val solve rate | turns | tokens/trial (max) "
        "| Pearson | dropped | infra failures | updated | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for step, m in sorted(metrics_by_step.items()):
        updated = "no" if m.get("loop/skipped_update") else "yes"
        lines.append(
            f"| {step} | {int(m.get('rollout/trials', 0))} ({int(m.get('rollout/scored', 0))}) | "
            f"{_fmt(m.get('rollout/reward_mean'))} | {_fmt(m.get('rollout/solve_rate'))} | "
            f"{_fmt(m.get('val/solve_rate'))} | {_fmt(m.get('behaviour/turns_per_trial'), 1)} | "
            f"{_tokens(m)} | {_fmt(m.get('align/prob_pearson'), 4)} | "
            f"{dropped_by_reason(m)} | {infra_failures(m)} | {updated} | {_fmt(m.get('time/total_s'), 0)} |"
        )
    return "\n".join(lines)


RANDOM_MODEL_HINT = (
    "the default model is the tiny random one, whose replies are noise: every trial fails alike. "
    "`make demo` (experiment=demo) warm-starts it on demonstrations so that groups differ and RL learns"
)


def nothing_trained(metrics_by_step: Mapping[int, Mapping[str, float]]) -> str:
    """Why no step updated the policy, or '' when one did (or there were no steps)."""
    steps = list(metrics_by_step.values())
    if not steps or not all(m.get("loop/skipped_update") for m in steps):
        return ""
    if all(not m.get("rollout/scored") for m in steps):
        return "nothing was trained: every trial of every step was dropped (infrastructure failures above)"
    return (
        f"nothing was trained: every group's rewards were equal: nothing to learn (an advantage is a trial's "
        f"reward against its group's; equal rewards give 0). If this is {RANDOM_MODEL_HINT}"
    )


PHASES = ("rollout", "packing", "train_step", "checkpoint", "publish")
ASYNC_PHASES = ("wait_for_groups", *PHASES[1:])
"""An async step has no rollout phase: its trainer waits for groups while trials run all along."""


def phase_line(metrics_by_step: Mapping[int, Mapping[str, float]]) -> str:
    """Seconds per loop phase over all steps, each with its share of the steps' total time (and, for an
    async run, the trainer's and the rollouts' idle shares and the trajectories trained per hour)."""
    steps = list(metrics_by_step.values())
    total = sum(m.get("time/total_s", 0.0) for m in steps)
    phases = ASYNC_PHASES if any("time/wait_for_groups_s" in m for m in steps) else PHASES
    parts = []
    for phase in phases:
        seconds = sum(m.get(f"time/{phase}_s", 0.0) for m in steps)
        parts.append(f"{phase} {seconds:.1f} s ({100 * seconds / total:.0f}%)" if total else f"{phase} -")
    validation = total - sum(sum(m.get(f"time/{p}_s", 0.0) for m in steps) for p in phases)
    line = (
        f"time per phase over {len(steps)} steps ({total:.0f} s): "
        + ", ".join(parts)
        + (f", other (validation, monitoring) {validation:.1f} s" if total else "")
    )
    if steps and "loop/trainer_idle_share" in steps[-1] and total:
        idle = sum(m["loop/trainer_idle_share"] * m.get("time/total_s", 0.0) for m in steps) / total
        rollout_idle = sum(m["loop/rollout_idle_share"] * m.get("time/total_s", 0.0) for m in steps) / total
        line += (
            f"\nasync: trainer idle {100 * idle:.0f}%, rollout slots idle {100 * rollout_idle:.0f}%, "
            f"{steps[-1]['loop/trajectories_per_hour']:.0f} trajectories trained per hour, "
            f"{int(steps[-1].get('loop/stale_groups_total', 0))} stale groups dropped"
        )
    return line


def run_summary(config: Any, summary: Any) -> str:
    """What a job prints at its end: warm start, per-step table, first vs last solve rate, paths."""
    from legorl_jax.monitor.tracker import read_jsonl_metrics

    metrics = read_jsonl_metrics(summary.run_dir / "metrics.jsonl")
    title = f"# {config.rollout.experiment}: {config.loop.steps} steps of {config.algo.loss}"
    lines = [f"{title} with the {config.harness.name} harness", ""]
    weight = config.algo.negative_weight
    if weight != 1.0:
        pushed = "not pushed down at all" if weight == 0 else f"pushed down at {weight:g} of their weight"
        lines += [
            f"advantages: trials worse than their group's mean are {pushed} "
            f"(algo.negative_weight {weight:g})",
            "",
        ]
    if summary.warm_start:
        lines += [summary.warm_start, ""]
    if summary.start_step:
        lines += [f"resumed at step {summary.start_step}", ""]
    lines += [step_table(metrics), ""]
    why = nothing_trained(metrics)
    if why:
        lines += [why, ""]
    if metrics:
        first, last = metrics[min(metrics)], metrics[max(metrics)]
        lines.append(
            f"solve rate: step {min(metrics)} {first.get('rollout/solve_rate', 0.0):.3f} over "
            f"{int(first.get('rollout/scored', 0))} trials -> step {max(metrics)} "
            f"{last.get('rollout/solve_rate', 0.0):.3f} over {int(last.get('rollout/scored', 0))} trials"
        )
        lines.append(phase_line(metrics))
        png = plot_curves({config.rollout.experiment: metrics}, summary.run_dir / "curves.png")
        lines.append(f"curves: {png}")
    lines.append(f"trials: {summary.run_dir / 'trials'}   checkpoints: {summary.run_dir / 'checkpoints'}")
    if summary.aim_repo:
        lines.append(f"browse in Aim: aim up --repo {summary.aim_repo}")
    return "\n".join(lines)


# The trainer/engine Pearson is drawn as 1 - Pearson on a fixed log axis: healthy runs sit at 0.999+, where
# an autoscaled linear axis spreads float noise (1e-7) over the whole panel and reads as movement, and a
# fixed linear [0, 1] flattens a 1e-3 mismatch worth looking at into the top line. On the log axis each
# decade is a grade: ~1e-7 identical numerics, 1e-3 a mismatch, 1e-1 broken. Below float32's resolution
# near 1 (2^-24) a 1 - Pearson is noise, drawn at that floor; the top, 2, is a Pearson of -1.
PEARSON_FLOOR = 2.0**-24
DISTANCE_FROM_ONE = {"align/prob_pearson"}


def curves_figure(runs: Mapping[str, Mapping[int, Mapping[str, float]]]) -> Any:
    """A matplotlib Figure with one panel per curve of `CURVES` that any run has, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [
        (name, title)
        for name, title in CURVES
        if any(name in m for run in runs.values() for m in run.values())
    ]
    if not present:
        raise ValueError(f"none of the runs {sorted(runs)} has any of the metrics {[n for n, _ in CURVES]}")
    cols = min(3, len(present))
    rows = -(-len(present) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, title) in zip(axes.flat, present, strict=False):
        for label, run in runs.items():
            points = [(s, m[name]) for s, m in sorted(run.items()) if name in m]
            if name in DISTANCE_FROM_ONE:
                points = [(s, max(1.0 - v, PEARSON_FLOOR)) for s, v in points]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=label)
        if name in DISTANCE_FROM_ONE:
            title = f"1 - {title} (log)"
            ax.set_yscale("log")
            ax.set_ylim(PEARSON_FLOOR, 2.0)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_curves(
    runs: Mapping[str, Mapping[int, Mapping[str, float]]], path: str | os.PathLike
) -> pathlib.Path:
    """`curves_figure(runs)` written as a PNG to `path`."""
    import matplotlib.pyplot as plt

    fig = curves_figure(runs)
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
