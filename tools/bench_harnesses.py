"""The demo through each installed harness, in one table beside the original's per-harness table.

    python tools/bench_harnesses.py                                  # every installed harness, the full demo
    python tools/bench_harnesses.py --harness mini_swe_agent --out runs/bench-harnesses.md

For each harness: `python train.py experiment=demo +harness=NAME` with the engine window and trainer rows that
harness's prompts need (`DEMO_LENGTHS`, measured with the tiny tokenizer), a fresh warm start (its own cache
folder, so its time is in the wall time), then the row: harness, version, demonstrations kept, solve rate at
the first RL step -> the last (with the trials behind each), tokens per trial (mean, max), wall time.

The original's figures (SWE-bench Verified, Qwen3.5-35B-A3B, GPUs) and ours (the demo's four built-in tasks,
the tiny random MoE warm-started on gold demonstrations, 2 CPU cores) measure different things: the table
puts them side by side only to show every harness going through the same loop, not to compare numbers.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from legorl_jax.harness import HarnessNotInstalled, get_harness  # noqa: E402
from legorl_jax.harness.install import install_dir  # noqa: E402
from legorl_jax.harness.names import HARNESSES  # noqa: E402

ORIGINAL = {
    "openhands": "64.0 -> 70.4",
    "claude_code": "62.4 -> 68.2",
    "opencode": "57.2 -> 66.6",
    "codex": "60.0 -> 67.6",
}
"""The original's SWE-bench Verified solve rate (%) before -> after RL through each harness,
Qwen3.5-35B-A3B."""

DEMO_LENGTHS = {
    "builtin": None,  # the demo preset's own (engine.max_len 2048, train.max_tokens 1024)
    "terminus_2": 3072,
    "mini_swe_agent": 3072,
    "swe_agent": 3072,
    "claude_code": 6144,
    "codex": 12288,
    "openhands": 12288,
    "opencode": 12288,
}
"""Tokens the demo needs through each harness: the longest teacher demonstration the warm start trains on
(all its turns; an RL trial of the demo is one reply, shorter), rounded up; engine.max_len, train.max_tokens
and the model's positions are set to it. Measured with the tiny tokenizer on ratelimit-slow-rates-never-refill
(tests/test_teacher.py; first prompt / whole demonstration, tokens): Terminus-2 1402 / 1897, mini-swe-agent
2089 / 2265, SWE-agent 1820 / 2400, Claude Code 4916 / 5047, Codex 8943 / 9162, OpenHands 9608 / 9980,
OpenCode 10297 / 10423 (plus its 1.2k-token title call, a side branch)."""


DEMO_OVERRIDES = {
    "mini_swe_agent": ["train.learning_rate=5e-4"],
    "terminus_2": ["train.learning_rate=5e-4"],
    "swe_agent": ["train.learning_rate=5e-4"],
}
"""Settings of the demo that differ per harness besides the window. mini-swe-agent: at the preset's 2e-3 its
solve rate fell 0.156 -> 0.031 over 8 steps, at 5e-4 it rose 0.094 -> 0.500; Terminus-2 at 5e-4 rose 0.097
-> 0.375, SWE-agent 0.250 -> 0.375 (one run each, 31-32 trials per step; BENCHMARKS.md). The other harnesses
have not been run through RL here."""


def harness_version(name: str) -> str:
    if name == "builtin":
        return "this repo"
    if name == "mini_swe_agent":
        return importlib.metadata.version("mini-swe-agent")
    path = install_dir(name) / "installed.json"
    if not path.exists():
        return "?"
    return version_in_record(json.loads(path.read_text()))


def version_in_record(record: dict) -> str:
    """The harness's version in its install record (`installed.json`), whichever way its adapter wrote it:
    `version` (npm packages), `swe_agent`, or the pinned `requirement(s)` (pip: 'name==1.2.3')."""
    if "version" in record or "swe_agent" in record:
        return str(record.get("version", record.get("swe_agent")))
    pins = record.get("requirements") or [record.get("requirement", "")]
    found = [str(p).split("==", 1)[1] for p in pins if "==" in str(p)]
    return found[0] if found else "?"


def installed(name: str) -> bool:
    try:
        get_harness(name)
    except HarnessNotInstalled:
        return False
    return True


def overrides(
    name: str, runs: pathlib.Path, steps: int | None, extra: Sequence[str] = (), label: str = ""
) -> list[str]:
    out = [
        "experiment=demo",
        f"rollout.runs_dir={runs}",
        f"rollout.experiment=demo-{name}{label}",
        f"loop.warm_start.cache_dir={runs / 'warm_start'}",
        "tracking.backend=none",
        "overwrite=true",
    ]
    if name != "builtin":
        out.append(f"+harness={name}")
    length = DEMO_LENGTHS.get(name)
    if length:
        out += [f"engine.max_len={length}", f"train.max_tokens={length}"]
        if length > 4096:
            # The default tiny model has 4096 positions; a longer window needs a model made with more.
            out.append(f"model.path={runs / f'tiny-moe-{length}'}")
    if steps is not None:
        out.append(f"loop.steps={steps}")
    return [*out, *DEMO_OVERRIDES.get(name, []), *extra]


def ensure_long_model(runs: pathlib.Path, length: int) -> None:
    """The default tiny MoE with `length` positions (same seed and sizes otherwise)."""
    folder = runs / f"tiny-moe-{length}"
    if (folder / "config.json").exists():
        return
    from legorl_jax.model.tiny import TinyModelSpec, make_tiny_model

    make_tiny_model(folder, TinyModelSpec(max_positions=length))


def row_of(name: str, run_dir: pathlib.Path, seconds: float) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    metrics = [r["metrics"] for r in rows]
    summary = (run_dir / "summary.md").read_text()
    kept = re.search(r"\((\d+) of (\d+) kept", summary)
    first, last = metrics[0], metrics[-1]
    return {
        "harness": name,
        "version": harness_version(name),
        "kept": f"{kept.group(1)}/{kept.group(2)}" if kept else "?",
        "first": (first.get("rollout/solve_rate", 0.0), int(first.get("rollout/scored", 0))),
        "last": (last.get("rollout/solve_rate", 0.0), int(last.get("rollout/scored", 0))),
        "steps": len(metrics),
        "tokens_mean": sum(m.get("behaviour/tokens_per_trial", 0.0) for m in metrics) / len(metrics),
        "tokens_max": max(m.get("behaviour/tokens_per_trial_max", 0.0) for m in metrics),
        "overlong": int(sum(m.get("batch/overlong", 0.0) for m in metrics)),
        "seconds": seconds,
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| harness | version | demos kept | solve rate, first RL step -> last (trials) "
        "| tokens/trial mean (max) | overlong | wall time | original: SWE-bench Verified % before -> after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        (a, n), (b, m) = r["first"], r["last"]
        lines.append(
            f"| {r['harness']} | {r['version']} | {r['kept']} | {a:.3f} ({n}) -> {b:.3f} ({m}) over "
            f"{r['steps']} steps | {r['tokens_mean']:.0f} ({r['tokens_max']:.0f}) | {r['overlong']} | "
            f"{r['seconds'] / 60:.1f} min | {ORIGINAL.get(r['harness'], '-')} |"
        )
    ran = {r["harness"] for r in rows}
    for name, theirs in ORIGINAL.items():
        if name not in ran:
            lines.append(f"| {name} | - | not run here | - | - | - | - | {theirs} |")
    return "\n".join(lines)


def host() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if line.startswith("Model name")
        ),
        platform.processor(),
    )
    return f"{os.cpu_count()} CPUs ({cpu}), load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--harness", nargs="*", default=None, help="default: every installed harness")
    parser.add_argument("--runs", type=pathlib.Path, default=REPO / "runs" / "bench-harnesses")
    parser.add_argument("--steps", type=int, default=None, help="RL steps (default: the demo's 8)")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="also write the table here")
    parser.add_argument(
        "--set", nargs="*", default=[], help="more train.py overrides, e.g. train.learning_rate=5e-4"
    )
    parser.add_argument("--label", default="", help="appended to each run's folder name (demo-NAME<label>)")
    args = parser.parse_args()
    names = args.harness or [n for n in HARNESSES if installed(n)]
    unknown = [n for n in names if n not in HARNESSES]
    if unknown:
        raise SystemExit(f"--harness must be among {sorted(HARNESSES)}, got {unknown}")
    rows = []
    for name in names:
        length = DEMO_LENGTHS.get(name)
        if length and length > 4096:
            ensure_long_model(args.runs, length)
        argv = [
            sys.executable,
            str(REPO / "train.py"),
            *overrides(name, args.runs, args.steps, args.set, args.label),
        ]
        print(f"[{host()}] {' '.join(argv[1:])}", flush=True)
        started = time.monotonic()
        ran = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
        seconds = time.monotonic() - started
        folder = args.runs / f"demo-{name}{args.label}"
        (args.runs / f"{folder.name}.log").write_text(ran.stdout + ran.stderr)
        if ran.returncode != 0:
            print(f"{name}: train.py failed ({ran.returncode}); see {args.runs / f'{folder.name}.log'}")
            print(ran.stderr[-3000:])
            continue
        rows.append(row_of(name, folder, seconds))
        print(table(rows[-1:]), flush=True)
    text = (
        f"{table(rows)}\n\nours: the demo's built-in tasks, the tiny random MoE warm-started on gold "
        f"demonstrations through each harness, {host()}; theirs: SWE-bench Verified, Qwen3.5-35B-A3B, GPUs."
    )
    print("\n" + text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
