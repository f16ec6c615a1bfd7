"""Benchmark of a weight update while requests are in flight, per update policy (engine/weight_update.py).

    python tools/bench_update.py                      # tiny MoE, 8 requests in flight, 3 rounds (< 2 min)
    python tools/bench_update.py --requests 16 --new-tokens 256 --rounds 5 --markdown out.md

Workload: the tiny MoE (tools/make_tiny_model.py, seed 0; the update loads the seed-1 model's weights) in an
embedded `JaxEngine` with `--requests` slots. `--requests` requests start together, each with a prompt of
`--prompt-len` ids and a reply length drawn once from a lognormal (median `--new-tokens` / 2, capped at
`--new-tokens`; seeded, the same draws for every policy), as agent replies are heavy-tailed. Once the first
has sampled `--at` tokens, `Publisher(engine, mode="in_process", update_policy=P).publish(...)` runs.
abort_resume's requests go through `generate_resuming` as the proxy sends them (engine/resume.py).

Reported per policy, median of `--rounds` rounds after one untimed round (it compiles what the policy
meets, e.g. the re-issued prompts' prefill buckets): publish → serving (the publish call's time: when it
returns the engine serves the new version to every new request; the engine is one, so "every engine" is
it), the in-flight batch's wall time from its start to its last reply, re-issues and the extra prefill
tokens they cost (positions forwarded again), and tokens sampled over K/V of the old weights (in_place).
The peer row is the synchronous loop's publish: nothing in flight. Load: the 1-minute load average before
and after is printed; on a loaded host the figures are not for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

POLICIES = ("in_place", "drain", "abort_resume")
IDLE = "none in flight (sync loop)"


def uptime() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def reply_lengths(args: argparse.Namespace) -> list[int]:
    rng = np.random.default_rng(args.seed)
    drawn = rng.lognormal(np.log(args.new_tokens / 2), 0.6, size=args.requests)
    return [int(n) for n in np.clip(drawn, args.at + 1, args.new_tokens)]


async def one_round(engine, publisher, params, version: str, policy: str, args, lengths) -> dict:
    """Starts the requests (none for the idle peer), publishes once the first has `--at` tokens, waits."""
    from legorl_jax.engine import SamplingParams
    from legorl_jax.engine.resume import generate_resuming

    rng = np.random.default_rng(args.seed + 1)
    prompts = [rng.integers(300, engine.config.vocab_size, args.prompt_len).tolist() for _ in lengths]
    began = time.monotonic()
    calls = []
    if policy != IDLE:
        for i, (prompt, n) in enumerate(zip(prompts, lengths, strict=True)):
            sampling = SamplingParams(max_new_tokens=n, seed=i, ignore_eos=True)
            rid = f"{version}-{i}"
            if policy == "abort_resume":
                call = generate_resuming(engine, prompt, sampling, max_resumes=8, rid=rid)
            else:
                call = engine.generate(prompt, sampling, rid=rid)
            calls.append(asyncio.ensure_future(call))
        while max((len(r.output_ids) for r in list(engine.scheduler.by_rid.values())), default=0) < args.at:
            await asyncio.sleep(0.001)
    published = time.monotonic()
    await publisher.publish(params, version)
    serving = time.monotonic() - published
    results = await asyncio.gather(*calls)
    wall = time.monotonic() - began
    gens = [getattr(r, "generation", r) for r in results]
    return {
        "serving_s": serving,
        "wall_s": wall if calls else float("nan"),
        "resumes": sum(getattr(r, "resumes", 0) for r in results),
        "prefill": sum(getattr(r, "prefill_tokens", 0) for r in results),
        "stale_kv": sum(g.stale_kv_tokens for g in gens),
        "tokens": sum(len(g.output_ids) for g in gens),
    }


async def main(args: argparse.Namespace) -> str:
    import make_tiny_model
    from flax import nnx

    from legorl_jax.engine.jax_engine import JaxEngine
    from legorl_jax.model import load_hf
    from legorl_jax.train.publish import Publisher

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-update-"))
    max_len = args.prompt_len + args.new_tokens + 1
    spec = make_tiny_model.TinyModelSpec(max_positions=max_len)
    weights = [
        nnx.state(load_hf(make_tiny_model.make_tiny_model(work / f"v{s}", spec, seed=s)), nnx.Param)
        for s in (0, 1)
    ]
    lengths = reply_lengths(args)
    load_before = uptime()
    engine = JaxEngine.from_dir(work / "v0", max_running=args.requests, max_len=max_len, min_bucket=16)
    rows: dict[str, list[dict]] = {}
    count = 0
    try:
        for policy in (IDLE, *POLICIES):
            publisher = Publisher(
                engine, mode="in_process", update_policy="in_place" if policy == IDLE else policy
            )
            for k in range(args.rounds + 1):  # round 0 compiles and is not kept
                count += 1
                row = await one_round(
                    engine, publisher, weights[count % 2], f"u{count}", policy, args, lengths
                )
                if k:
                    rows.setdefault(policy, []).append(row)
    finally:
        engine.close()
    lines = [
        f"Weight update with {args.requests} requests in flight (tiny MoE, embedded JaxEngine, in-process "
        f"publish): prompts {args.prompt_len} tokens, replies {min(lengths)}-{max(lengths)} tokens "
        f"(lognormal, cap {args.new_tokens}), publish when the first has {args.at}; median of {args.rounds} "
        f"rounds; load average before {load_before}, after {uptime()}",
        "",
        "| policy | publish -> serving s | in-flight batch wall s | re-issues | extra prefill tokens "
        "| tokens over old K/V | tokens out |",
        "|---|---|---|---|---|---|---|",
    ]
    for policy in (IDLE, *POLICIES):
        r = rows[policy]

        def med(key: str, r: list[dict] = r) -> float:
            return statistics.median(x[key] for x in r)

        wall = "-" if policy == IDLE else f"{med('wall_s'):.2f}"
        lines.append(
            f"| {policy} | {med('serving_s'):.3f} | {wall} | {med('resumes'):.0f} | {med('prefill'):.0f} | "
            f"{med('stale_kv'):.0f} | {med('tokens'):.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=8, help="requests in flight (and engine slots)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128, help="longest reply")
    parser.add_argument("--at", type=int, default=16, help="publish once the first request has this many")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per policy (median kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", type=pathlib.Path, default=None)
    arguments = parser.parse_args()
    if not 0 < arguments.at < arguments.new_tokens:
        parser.error(f"--at must lie in (0, --new-tokens={arguments.new_tokens}), got {arguments.at}")
    table = asyncio.run(main(arguments))
    print(table)
    if arguments.markdown:
        arguments.markdown.write_text(table + "\n")
