"""The demo on real SGLang on this machine's CPU, sync and async under each update policy, and its alignment
figures per step (issue 43; README "Real SGLang on a CPU machine"; BENCHMARKS.md "The demo on real SGLang").

    bash tools/make_sglang_venv.sh                           # .venv-sglang, once
    python tools/check_sglang_demo.py                        # every mode, 2 steps each
    python tools/check_sglang_demo.py --modes sync async-in_place --steps 3 --python /other/venv/bin/python

Each mode is `python train.py experiment=demo engine=sglang` (what `make demo` runs, its engine real SGLang
0.5.23 launched by `engine=sglang` with the CPU arguments below) in its own process, `loop.steps=--steps`,
Aim off, the warm start from `--warm-start-cache` (made by the first job that needs it): `sync`, and
`async-<policy>` (`loop.mode=async engine.update_policy=<policy>`) for drain, abort_resume and in_place.
Printed per mode and step: the trainer-vs-SGLang probability Pearson over the tokens of the trainer's own
version (`align/prob_pearson`, what the loop's health warning reads), the largest log-prob gap over them,
how many tokens of that version there are, the tokens of older versions (`offpolicy/cross_version_tokens`)
with their Pearson, the Pearson over all sampled tokens as it read before the split, and the tokens of the
trainer's version sampled over old K/V (`offpolicy/stale_kv_tokens`, in_place: left out of the gate) with
their Pearson; per mode, the turns whose request was
resumed after an abort, the tokens recorded as sampled over old K/V (`stale_kv_tokens`, in_place), the job's
wall time. Exit status 1 when a step of any mode has no `align/prob_pearson` (none of its tokens judged, which
a step whose trainer's-version tokens all ran over old K/V is said to be) or one under `--min-pearson` (0.99),
or a job fails; 0 otherwise.

`--dtype float32` (with `--kv-cache-dtype auto`, which follows it: SGLang's `--kv-cache-dtype` has no
float32 value) keeps SGLang's weights and K/V in float32, so its log-probs are the trainer's to float
rounding; without it SGLang runs a float32 checkpoint in float16. Slow torch paths: correctness only, never a
speed figure.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODES = {
    "sync": [],
    "async-drain": ["loop.mode=async", "engine.update_policy=drain"],
    "async-abort_resume": ["loop.mode=async", "engine.update_policy=abort_resume"],
    "async-in_place": ["loop.mode=async", "engine.update_policy=in_place"],
}
CPU_ARGS = [
    "--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph",
    "--mem-fraction-static", "0.1", "--max-total-tokens", "16384", "--grammar-backend", "none",
    "--skip-server-warmup", "--dtype", "float32", "--kv-cache-dtype", "auto",
]  # fmt: skip
"""SGLang's arguments on a CPU (tests/engine/test_sglang_real.py uses the same)."""
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
STEP_KEYS = (
    ("pearson", "align/prob_pearson"),
    ("max |dlp|", "align/max_abs_logprob_diff"),
    ("same-version tokens", "align/same_version_tokens"),
    ("older tokens", "offpolicy/cross_version_tokens"),
    ("pearson older", "offpolicy/prob_pearson_cross"),
    ("pearson all", "offpolicy/prob_pearson_all"),
    ("stale-KV tokens", "offpolicy/stale_kv_tokens"),
    ("pearson stale-KV", "offpolicy/prob_pearson_stale_kv"),
)


def default_python() -> str:
    return os.environ.get("LEGORL_SGLANG_PYTHON") or str(ROOT / ".venv-sglang" / "bin" / "python")


def demo_argv(mode: str, steps: int, runs: pathlib.Path, cache: pathlib.Path, python: str) -> list[str]:
    """The `train.py experiment=demo engine=sglang` command line of `mode` (module docstring)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
    return [
        sys.executable,
        str(ROOT / "train.py"),
        "experiment=demo",
        "engine=sglang",
        f"engine.sglang.python={python}",
        f"engine.sglang.extra_args=[{','.join(CPU_ARGS)}]",
        f"rollout.runs_dir={runs}",
        f"rollout.experiment=sg-{mode}",
        f"loop.steps={steps}",
        "tracking.backend=none",
        f"loop.warm_start.cache_dir={cache}",
        *MODES[mode],
    ]


def trial_counts(run: pathlib.Path) -> dict[str, int]:
    """Turns, resumed turns, output tokens and tokens sampled over old K/V in the run's archived trials."""
    counts = {"turns": 0, "resumed turns": 0, "output tokens": 0, "stale-KV tokens": 0}
    for path in run.glob("trials/**/trajectory.json"):
        for turn in json.loads(path.read_text()).get("turns", []):
            counts["turns"] += 1
            counts["resumed turns"] += int(turn.get("resumes", 0) > 0)
            counts["output tokens"] += int(turn.get("output_tokens", 0))
            counts["stale-KV tokens"] += int(turn.get("stale_kv_tokens", 0))
    return counts


def run_mode(mode: str, args: argparse.Namespace, runs: pathlib.Path) -> dict[str, Any]:
    """One mode's job: {"steps": [metrics per step], "counts": trial_counts, "wall_s", "log"}."""
    env = {**os.environ, **CPU_ENV}
    # One device, as `make demo` runs it (the test suite's 8 forced CPU devices would split the trainer).
    flags = env.get("XLA_FLAGS", "").split()
    env["XLA_FLAGS"] = " ".join(f for f in flags if "host_platform_device_count" not in f)
    log = runs / f"{mode}.log"
    started = time.monotonic()
    with open(log, "w") as out:
        done = subprocess.run(
            demo_argv(mode, args.steps, runs, pathlib.Path(args.warm_start_cache), args.python),
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} demo job failed (exit {done.returncode}); its log: {log}")
    run = runs / f"sg-{mode}"
    steps = [json.loads(line)["metrics"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {"steps": steps, "counts": trial_counts(run), "wall_s": wall, "log": str(log)}


def failures(results: dict[str, dict[str, Any]], min_pearson: float) -> list[str]:
    """Each step whose `align/prob_pearson` is missing, NaN or under `min_pearson`, named (a step whose
    tokens of the trainer's version were all sampled over old K/V is named so: the gate judged nothing).

    An async step whose batch holds no token of the trainer's version at all, only older ones (every trial
    of it finished before the update: policy lag, `offpolicy/*_cross`), has nothing for the gate to judge
    and is not a failure; but each mode must have judged a step after its first update, so a mode that
    only ever lagged fails by name too."""
    bad = []
    for mode, result in results.items():
        judged_after_update = False
        for step, metrics in enumerate(result["steps"]):
            value = metrics.get("align/prob_pearson")
            same = metrics.get("align/same_version_tokens")
            older = metrics.get("offpolicy/cross_version_tokens", 0)
            if value is None and same == 0 and older:
                continue  # lag only: nothing of the trainer's version to judge
            judged_after_update |= step >= 1
            if value is None or not value >= min_pearson:
                why = f"{mode} step {step}: align/prob_pearson {value!r} (want >= {min_pearson})"
                stale = metrics.get("offpolicy/stale_kv_tokens", 0)
                if value is None and stale and stale == same:
                    why += (
                        f": all {int(stale)} tokens of the trainer's version ran over old K/V, none to judge"
                    )
                bad.append(why)
        if len(result["steps"]) > 1 and not judged_after_update:
            bad.append(
                f"{mode}: no step after the first update had a token of the trainer's version to judge"
            )
    return bad


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith("_tokens"):
        return str(int(value))
    return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"


def table(results: dict[str, dict[str, Any]]) -> str:
    head = ["mode", "step", *(name for name, _ in STEP_KEYS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mode, result in results.items():
        for step, metrics in enumerate(result["steps"]):
            cells = [mode, str(step), *(_fmt(key, metrics.get(key)) for _, key in STEP_KEYS)]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| mode | " + " | ".join(next(iter(results.values()))["counts"]) + " | job wall s |"]
    lines.append("|" + "---|" * (len(next(iter(results.values()))["counts"]) + 2))
    for mode, result in results.items():
        counts = " | ".join(str(v) for v in result["counts"].values())
        lines.append(f"| {mode} | {counts} | {result['wall_s']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=list(MODES))
    parser.add_argument(
        "--steps",
        type=int,
        default=3,
        help="loop steps per mode (3: async in_place's step 1 often holds only version-0 tokens, lag)",
    )
    parser.add_argument("--python", default=default_python(), help="the SGLang environment's interpreter")
    parser.add_argument("--min-pearson", type=float, default=0.99)
    parser.add_argument("--runs", default=None, help="where the jobs write (default: a new temporary folder)")
    parser.add_argument(
        "--warm-start-cache", default=str(ROOT / "runs" / "warm_start"), help="loop.warm_start.cache_dir"
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    if not os.access(args.python, os.X_OK):
        parser.error(f"--python {args.python!r} is not an interpreter: run tools/make_sglang_venv.sh")
    runs = pathlib.Path(args.runs) if args.runs else pathlib.Path(tempfile.mkdtemp(prefix="sglang-demo-"))
    runs.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f} before; jobs under {runs}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for mode in args.modes:
        results[mode] = run_mode(mode, args, runs)
        print(f"{mode}: done in {results[mode]['wall_s']:.0f} s", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} after\n")
    print(table(results))
    bad = failures(results, args.min_pearson)
    for line in bad:
        print("FAIL:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
