"""Packed attention alone: seconds per forward + backward, our Pallas GPU kernel vs the blockwise XLA op.

    python tools/bench_attention.py                                   # on a GPU: pallas vs xla
    python tools/bench_attention.py --lengths 1024 --impls xla,reference --rounds 3   # CPU side by side

Shapes: one layer of Qwen3-30B-A3B's attention (32 query heads, 4 kv heads, head dim 128, bf16), one packed
row of T tokens cut into segments of T/4 (the causal mask within each). The program: the gradient of
sum(attention(q, k, v)) with respect to q, k and v (what a training step runs per layer), jitted; each
impl's program is compiled first, then the impls alternate for --rounds rounds in one process, each the
best of --reps runs per round; the table gives the median per impl and the median per-round ratio of each
impl to the first one (the peer). Padding-free rows, so "reference" (dense [T, T]) is comparable; leave it
out at long rows (its memory is quadratic).
"""

from __future__ import annotations

import argparse
import statistics
import time


def program(length: int, impl: str):
    import jax
    import jax.numpy as jnp

    from legorl_jax.kernels.attention import attention

    def loss(q, k, v, seg):
        out = attention(q, k, v, q_segment_ids=seg, scale=128**-0.5, impl=impl)
        return out.astype(jnp.float32).sum()

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def inputs(length: int):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(keys[0], (1, length, 32, 128), jnp.bfloat16)
    k, v = (jax.random.normal(key, (1, length, 4, 128), jnp.bfloat16) for key in keys[1:])
    seg = (jnp.arange(length, dtype=jnp.int32) // max(length // 4, 1) + 1)[None]
    return q, k, v, seg


def best_of(fn, args, reps: int) -> float:
    import jax

    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def bench(length: int, impls: list[str], rounds: int, reps: int) -> list[str]:
    args = inputs(length)
    programs = {impl: program(length, impl).lower(*args).compile() for impl in impls}
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    for _ in range(rounds):
        for impl in impls:
            times[impl].append(best_of(programs[impl], args, reps))
    peer = impls[0]
    rows = []
    for impl in impls:
        ratio = statistics.median(t / p for t, p in zip(times[impl], times[peer], strict=True))
        rows.append(f"| {length} | {impl} | {statistics.median(times[impl]) * 1e3:.2f} | {ratio:.2f}x |")
    return rows


def main() -> None:
    import jax

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", default="4096,16384,32768", help="row lengths, comma separated")
    parser.add_argument("--impls", default="pallas,xla", help="impls to compare; the first is the peer")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    args = parser.parse_args()
    impls = args.impls.split(",")
    lines = [
        f"jax {jax.__version__}, {jax.devices()[0].device_kind}, rounds {args.rounds}, best of {args.reps}",
        "",
        f"| tokens | impl | ms per fwd+bwd (median) | ratio to {impls[0]} (median per round) |",
        "|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for length in (int(x) for x in args.lengths.split(",")):
        rows = bench(length, impls, args.rounds, args.reps)
        print("\n".join(rows), flush=True)
        lines += rows
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
