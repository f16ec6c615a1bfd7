"""The embedded engine's decode with scanned vs unrolled decoder layers, alternating in one process.

    python tools/bench_layout.py --model runs/moe-85m --concurrency 1,8,32      # prompt 32, 64 new tokens
    python tools/bench_layout.py --model runs/tiny48 --compile-only             # compile seconds only

Two `JaxEngine`s on the same checkpoint, one per layer layout (`scan_layers`, engine/runner.py), each warmed
(every program the workload needs compiled in the caller: `compile_in_background=False`). Per concurrency c,
rounds alternate scanned, unrolled, scanned, ...: c distinct prompts of `--prompt-len` ids in flight at
once, each generating exactly `--new-tokens` at temperature 1, the batch repeated for at least `--round-s`
seconds; a round's figure is generated tokens / wall seconds. Printed: each round's tokens/s per layout, the
median of the per-round ratios unrolled / scanned, and the 1-minute load average before and after (a shared
box moves both sides of a round alike, so the ratios, not the rates, are the finding). Then, with the
engines closed, their runners' decode step alone at c rows (positions 40, context 128), the best of
`--steps` calls per side and round, alternating: the least disturbed step, the figure that survives a loaded
box. `--compile-only` times instead the compile of one decode program (batch 8, context 128) and one prefill
program (batch 8, 32 tokens) per layout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

LAYOUTS = {"scanned": True, "unrolled": False}


def engines(args: argparse.Namespace) -> dict:
    from legorl_jax.engine.jax_engine import JaxEngine

    return {
        name: JaxEngine.from_dir(
            args.model,
            max_running=max(args.concurrency),
            max_len=args.max_len,
            scan_layers=scan,
            compile_in_background=False,
        )  # fmt: skip
        for name, scan in LAYOUTS.items()
    }


def compile_seconds(args: argparse.Namespace) -> None:
    for name, engine in engines(args).items():
        for key in (("decode", 8, 128, 0), ("prefill", 8, 32, 128, 0)):
            start = time.perf_counter()
            engine.runner.programs.lookup(key)
            print(f"{name}: {key[0]} program compiled in {time.perf_counter() - start:.2f} s", flush=True)
        engine.close()


async def batch(engine, prompts: list[list[int]], new_tokens: int, seconds: float = 0.0) -> float:
    """Generated tokens / s of the prompts in flight at once, repeated for at least `seconds` (every reply
    checked for its length)."""
    from legorl_jax.engine import SamplingParams

    sampling = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, ignore_eos=True)
    start, tokens = time.perf_counter(), 0
    while tokens == 0 or time.perf_counter() - start < seconds:
        gens = await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])
        if any(len(g.output_ids) != new_tokens for g in gens):
            raise SystemExit(f"a reply does not have {new_tokens} tokens")
        tokens += len(prompts) * new_tokens
    return tokens / (time.perf_counter() - start)


async def decode(args: argparse.Namespace) -> None:
    from bench_engine import prompts_for

    vocab = json.loads((args.model / "config.json").read_text())["vocab_size"]
    built = engines(args)
    try:
        for c in args.concurrency:
            prompts = prompts_for(c, args.prompt_len, vocab, seed=c)
            for engine in built.values():  # warm-up: every program of this workload compiled
                await batch(engine, prompts, args.new_tokens)
            before, rates = os.getloadavg()[0], {name: [] for name in built}
            for _ in range(args.rounds):
                for name, engine in built.items():
                    rates[name].append(await batch(engine, prompts, args.new_tokens, args.round_s))
            ratios = [u / s for u, s in zip(rates["unrolled"], rates["scanned"], strict=True)]
            shown = {name: ", ".join(f"{r:.0f}" for r in rs) for name, rs in rates.items()}
            per_round = ", ".join(f"{r:.2f}" for r in ratios)
            print(
                f"c={c}: scanned {shown['scanned']} | unrolled {shown['unrolled']} tokens/s; unrolled / "
                f"scanned median {statistics.median(ratios):.2f}x (rounds {per_round}); "
                f"load {before:.2f} -> {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    finally:
        for engine in built.values():
            engine.close()
    for c in args.concurrency:
        before, best = os.getloadavg()[0], {name: [] for name in built}
        for _ in range(args.rounds):
            for name, engine in built.items():
                best[name].append(step_seconds(engine.runner, c, args.steps))
        shown = {name: ", ".join(f"{1e3 * t:.1f}" for t in ts) for name, ts in best.items()}
        ratio = statistics.median(s / u for s, u in zip(best["scanned"], best["unrolled"], strict=True))
        print(
            f"c={c} decode step, best of {args.steps}: scanned {shown['scanned']} | unrolled "
            f"{shown['unrolled']} ms; scanned / unrolled median {ratio:.2f}x; "
            f"load {before:.2f} -> {os.getloadavg()[0]:.2f}",
            flush=True,
        )


def step_seconds(runner, rows: int, calls: int) -> float:
    """The fastest of `calls` decode steps of the runner over `rows` live rows."""
    import numpy as np

    from legorl_jax.engine import SamplingParams
    from legorl_jax.engine.sampler import SamplingRows

    sampling = SamplingRows.host([SamplingParams(temperature=1.0)] * rows, list(range(rows)))
    ids, positions = np.arange(rows, dtype=np.int32), np.full(rows, 40, np.int32)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        runner.decode(ids, positions, ids, sampling, want_routing=False)
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=pathlib.Path, required=True, help="HF checkpoint directory")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[8])
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=256, help="the engines' context")
    parser.add_argument("--round-s", type=float, default=2.0, help="each side repeats its batch this long")
    parser.add_argument(
        "--rounds", type=int, default=4, help="rounds per concurrency, each side once a round"
    )
    parser.add_argument("--steps", type=int, default=20, help="decode steps per side and round (best kept)")
    parser.add_argument("--compile-only", action="store_true", help="time one decode, one prefill compile")
    args = parser.parse_args(argv)
    if args.prompt_len + args.new_tokens > args.max_len:
        raise SystemExit(f"--prompt-len + --new-tokens must fit --max-len {args.max_len}")
    if args.compile_only:
        compile_seconds(args)
    else:
        asyncio.run(decode(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
