"""Prints an archived proxy session: each branch's conversation with every span marked sampled or context.

    python tools/inspect_trial.py TRIAL_DIR [--model DIR] [--logprobs]

TRIAL_DIR holds `trajectory.json` and `sequences.npz` (legorl_jax/proxy/archive.py). Spans are decoded with
the tokenizer the session recorded (or `--model`, an HF directory); when neither is there the token ids are
shown. A sampled span is printed as `[sampled n=.. mean_lp=.. v<version> x<tokens>]` (with `--logprobs`,
every token's log-prob), a context span as `[context n=..]`. Each branch ends with its routing coverage (the
fraction of (token, layer) rows recorded), its counts and its sampled tokens per weights version number. A
`turns` section lists each model call's weights version(s) with their token counts, marking the calls a
weight update landed in; a trial whose sampled tokens span several versions says so under its header. The
session's flags and counters close the report.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from legorl_jax.proxy.archive import read_archive  # noqa: E402


def _spans(mask: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, value) runs of equal mask values."""
    edges = np.flatnonzero(np.diff(mask)) + 1
    bounds = [0, *edges.tolist(), len(mask)]
    return [(a, b, int(mask[a])) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def _find_tokenizer(model: str | None):
    """The tokenizer of `model`, or None when there is no such HF directory."""
    if not model or not (pathlib.Path(model) / "tokenizer.json").is_file():
        return None
    from legorl_jax.model.tokenizer import load_tokenizer

    return load_tokenizer(model)


def _turn_versions(turn: dict) -> list[tuple[str, int]]:
    """(version, output tokens) runs of one turn of `trajectory.json`, in order."""
    per_token = turn.get("token_weight_versions")
    if per_token is None:
        return [(turn.get("weight_version", "?"), turn.get("output_tokens", 0))]
    runs: list[tuple[str, int]] = []
    for v in per_token:
        if runs and runs[-1][0] == v:
            runs[-1] = (v, runs[-1][1] + 1)
        else:
            runs.append((v, 1))
    return runs


def _versions_section(trajectory: dict) -> tuple[list[str], list[str]]:
    """(header lines, `turns` section lines) about the weights versions the session sampled under."""
    seen: dict[str, None] = {}
    turns = ["", "== turns (weights versions)"]
    for turn in trajectory["turns"]:
        runs = _turn_versions(turn)
        seen.update(dict.fromkeys(v for v, n in runs if n))
        text = ", ".join(f"{v} x{n}" for v, n in runs)
        mark = "  (weights updated mid-call)" if len(runs) > 1 else ""
        turns.append(f"turn {turn['index']} branch {turn['branch']}: {text}{mark}")
    header = []
    if len(seen) > 1:
        header.append(f"spans {len(seen)} weights versions: {', '.join(seen)}")
    return header, turns


def _tokens_per_version(versions: np.ndarray | None, mask: np.ndarray) -> str:
    if versions is None:
        return "not numbered"
    numbers, counts = np.unique(versions[mask == 1], return_counts=True)
    return ", ".join(f"v{int(v)} x{int(c)}" for v, c in zip(numbers, counts, strict=True)) or "none"


def render(trial_dir: str, model: str | None = None, show_logprobs: bool = False) -> str:
    trajectory, arrays = read_archive(trial_dir)
    tok = _find_tokenizer(model or trajectory.get("tokenizer"))
    header, turns = _versions_section(trajectory)
    lines = [
        f"session {trajectory['session_id']}  task {trajectory.get('task_id') or '-'}  trial "
        f"{trajectory.get('trial_id') or '-'}",
        *header,
    ]
    for branch in trajectory["branches"]:
        i = branch["index"]
        data = arrays.get(i)
        lines.append("")
        lines.append(f"== branch {i} ({branch['kind']}, {branch['opened_by']}) turns {branch['turns']} "
                     f"parent {branch['parent']}")  # fmt: skip
        if data is None:
            lines.append("   (no arrays)")
            continue
        ids, mask, lps = data["token_ids"], data["loss_mask"], data["behaviour_logprobs"]
        versions = data.get("token_versions")
        for a, b, value in _spans(mask):
            piece = ids[a:b].tolist()
            text = tok.decode(piece) if tok is not None else " ".join(map(str, piece))
            if value:
                label = f"[sampled n={b - a} mean_lp={float(lps[a:b].mean()):.4f}"
                if versions is not None:
                    label += " " + _tokens_per_version(versions[a:b], mask[a:b])
                label += "]"
                if show_logprobs:
                    label += " " + " ".join(f"{x:.3f}" for x in lps[a:b])
            else:
                label = f"[context n={b - a}]"
            lines.append(f"{label}\n{text}")
        routed = data.get("routed_experts")
        if routed is None:
            coverage = "n/a (dense policy or no routing returned)"
        else:
            rows = routed[:-1] if len(routed) > 1 else routed  # the last token is never an input to a target
            coverage = f"{float((rows >= 0).all(axis=-1).mean()):.3f}"
        lines.append(f"-- routing coverage {coverage}; tokens {len(ids)}, sampled {int(mask.sum())}, "
                     f"shared_masked {branch['shared_masked']}, recomputed {branch['recomputed']}, "
                     f"rerendered_masked {branch['rerendered_masked']}")  # fmt: skip
        per_version = _tokens_per_version(versions, mask)
        names = ", ".join(branch.get("weight_versions", []))
        lines.append(f"-- sampled tokens per weights version {per_version} ({names})")
    lines.extend(turns)
    lines.append("")
    lines.append("flags " + json.dumps(trajectory["flags"]))
    counters = {k: v for k, v in trajectory["counters"].items() if k != "tool_calls_per_turn"}
    lines.append("counters " + json.dumps(counters))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trial_dir")
    p.add_argument("--model", default=None, help="HF model directory to decode token ids")
    p.add_argument("--logprobs", action="store_true", help="print every sampled token's log-prob")
    args = p.parse_args(argv)
    try:
        print(render(args.trial_dir, args.model, args.logprobs))
    except (FileNotFoundError, ValueError) as exc:
        print(f"inspect_trial: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
