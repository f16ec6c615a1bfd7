"""Prints an archived proxy session: each branch's conversation with every span marked sampled or context.

    python tools/inspect_trial.py TRIAL_DIR [--model DIR] [--logprobs]

TRIAL_DIR holds `trajectory.json` and `sequences.npz` (legorl_jax/proxy/archive.py). Spans are decoded with
the tokenizer the session recorded (or `--model`, an HF directory); when neither is there the token ids are
shown. A sampled span is printed as `[sampled n=.. mean_lp=..]` (with `--logprobs`, every token's log-prob), a
context span as `[context n=..]`. Each branch ends with its routing coverage (the fraction of (token, layer)
rows recorded) and its counts; the session's flags and counters close the report.
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


def render(trial_dir: str, model: str | None = None, show_logprobs: bool = False) -> str:
    trajectory, arrays = read_archive(trial_dir)
    tok = _find_tokenizer(model or trajectory.get("tokenizer"))
    lines = [
        f"session {trajectory['session_id']}  task {trajectory.get('task_id') or '-'}  trial "
        f"{trajectory.get('trial_id') or '-'}"
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
        for a, b, value in _spans(mask):
            piece = ids[a:b].tolist()
            text = tok.decode(piece) if tok is not None else " ".join(map(str, piece))
            if value:
                label = f"[sampled n={b - a} mean_lp={float(lps[a:b].mean()):.4f}]"
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
