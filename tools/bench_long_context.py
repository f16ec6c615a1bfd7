"""Long context on the tiny MoE: memory and time of the log-prob gradient, dense vs blockwise attention.

    python tools/bench_long_context.py              # memory table, short-row timing, 16k and 32k runs
    python tools/bench_long_context.py --memory 8192,32768 --time 1024 --rounds 5 --run ''

The model: the default `tools/make_tiny_model.py` MoE (vocab 4096, hidden 64, 2 layers, 4 query / 2 kv
heads of 16, 8 experts top-2), float32, random weights. The program: the gradient with respect to every
parameter of the sum of `Policy.token_logprobs` over one packed row of T tokens (4 segments), what the
trainer's step differentiates.

  memory   XLA's compiled temporaries (`compiled.memory_analysis().temp_size_in_bytes`, abstract inputs,
           nothing allocated) per row length, for the dense attention the model had before (`impl=
           "reference"`: [T, T] scores in 4 causal query chunks) and the blockwise op (`impl="auto"`),
           side by side; the dense side only up to --dense-max (its compile itself needs the memory).
  time     seconds per gradient step at the demo's row lengths, the two attentions alternated --rounds
           times in one process (each side the best of --reps per round), median of the per-round ratios.
  prefill  the engine's cached attention of one prefill chunk against a KV cache (4 rows, the tiny MoE's
           heads): the dense `attend` over the context vs the blockwise op (kv index = cache entry), what
           `Attention` runs for a chunk of >= 64 tokens; alternated rounds, median ratio.
  run      one real gradient step at each --run length in its own worker process: wall time of the step
           (compile excluded) and the worker's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def arch():
    from legorl_jax.model.architecture import ArchConfig

    return ArchConfig(
        architectures=("Qwen3MoeForCausalLM",),
        vocab_size=4096,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        max_position_embeddings=131072,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        norm_topk_prob=True,
    )


def gradient_program(length: int):
    """(jitted grad fn, params, ids, segments): d/d params of the row's summed log-probs."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from legorl_jax.model import init_policy

    graphdef, params, rest = nnx.split(init_policy(arch(), seed=0), nnx.Param, ...)

    def loss(params, ids, segments):
        model = nnx.merge(graphdef, params, rest)
        return (
            model.token_logprobs(ids, jnp.roll(ids, -1, axis=1), segment_ids=segments) * (segments > 0)
        ).sum()

    ids = jnp.asarray(np.random.default_rng(0).integers(0, 4096, (1, length)), jnp.int32)
    segments = jnp.asarray(np.minimum(np.arange(length) * 4 // length + 1, 4)[None], jnp.int32)
    return jax.jit(jax.grad(loss)), params, ids, segments


def temporaries(length: int, impl: str) -> float:
    """MiB of XLA temporaries of the gradient program at `length` tokens."""
    import jax

    from legorl_jax.kernels.attention import ops

    fn, params, ids, segments = gradient_program(length)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), (params, ids, segments))
    with ops.default_impl(impl):
        compiled = fn.lower(*abstract).compile()
    return compiled.memory_analysis().temp_size_in_bytes / 2**20


def time_steps(lengths: list[int], rounds: int, reps: int) -> list[tuple[int, float, float, float, float]]:
    """Per length: median seconds dense, blockwise, median ratio blockwise / dense, spread of the ratio."""
    import jax

    from legorl_jax.kernels.attention import ops

    rows = []
    for length in lengths:
        fn, params, ids, segments = gradient_program(length)
        programs = {}
        for impl in ("reference", "xla"):
            with ops.default_impl(impl):
                programs[impl] = fn.lower(params, ids, segments).compile()
        times: dict[str, list[float]] = {"reference": [], "xla": []}
        for _ in range(rounds):
            for impl, program in programs.items():
                best = float("inf")
                for _ in range(reps):
                    start = time.perf_counter()
                    jax.block_until_ready(program(params, ids, segments))
                    best = min(best, time.perf_counter() - start)
                times[impl].append(best)
        ratios = [x / d for x, d in zip(times["xla"], times["reference"], strict=True)]
        median = statistics.median(ratios)
        rows.append(
            (
                length,
                statistics.median(times["reference"]),
                statistics.median(times["xla"]),
                median,
                (max(ratios) - min(ratios)) / median,
            )
        )
    return rows


def time_prefill(cases: list[tuple[int, int, int]], rounds: int, reps: int) -> list[tuple]:
    """Per (chunk, context, first position): median ms dense, blockwise, median ratio blockwise / dense."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from legorl_jax.kernels.attention import attention
    from legorl_jax.model import cache as kv
    from legorl_jax.model.attention import attend

    rng = np.random.default_rng(0)
    rows = []
    for t, c, start in cases:
        b = 4
        q = jnp.asarray(rng.standard_normal((b, t, 4, 16)), jnp.float32)
        k = jnp.asarray(rng.standard_normal((b, c, 2, 16)), jnp.float32)
        pos = jnp.broadcast_to(jnp.arange(start, start + t, dtype=jnp.int32), (b, t))
        index = jnp.broadcast_to(jnp.arange(c, dtype=jnp.int32), (b, c))
        programs = {
            "dense": jax.jit(lambda q, k, pos: attend(q, k, k, kv.visible(pos, c), 0.25)),  # noqa: B023
            "blockwise": jax.jit(
                lambda q, k, pos: attention(  # noqa: B023
                    q,
                    k,
                    k,
                    q_segment_ids=(pos >= 0).astype(jnp.int32),
                    kv_segment_ids=jnp.ones((b, c), jnp.int32),  # noqa: B023
                    q_index=pos,
                    kv_index=index,  # noqa: B023
                    scale=0.25,
                )
            ),
        }
        np.testing.assert_allclose(programs["dense"](q, k, pos), programs["blockwise"](q, k, pos), atol=1e-5)
        times: dict[str, list[float]] = {name: [] for name in programs}
        for _ in range(rounds):
            for name, program in programs.items():
                best = float("inf")
                for _ in range(reps):
                    begin = time.perf_counter()
                    jax.block_until_ready(program(q, k, pos))
                    best = min(best, time.perf_counter() - begin)
                times[name].append(best)
        ratio = statistics.median(x / d for x, d in zip(times["blockwise"], times["dense"], strict=True))
        rows.append(
            (
                t,
                c,
                start,
                1000 * statistics.median(times["dense"]),
                1000 * statistics.median(times["blockwise"]),
                ratio,
            )
        )
    return rows


def run_worker(length: int) -> None:
    """One real blockwise gradient step; prints JSON {seconds, peak_rss_mib}."""
    import jax

    fn, params, ids, segments = gradient_program(length)
    program = fn.lower(params, ids, segments).compile()
    start = time.perf_counter()
    jax.block_until_ready(program(params, ids, segments))
    seconds = time.perf_counter() - start
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
    print(json.dumps({"seconds": seconds, "peak_rss_mib": peak}))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memory", type=ints, default=ints("1024,2048,4096,8192,16384,32768"))
    parser.add_argument(
        "--dense-max", type=int, default=8192, help="longest row compiled with dense attention"
    )
    parser.add_argument("--time", type=ints, default=ints("1024,2048"), help="row lengths timed side by side")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--prefill", action="store_true", help="time a prefill chunk's cached attention")
    parser.add_argument("--run", type=ints, default=ints("16384,32768"), help="lengths run once for real")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker)
        return

    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at start")
    if args.memory:
        print("\n| tokens | dense attention MiB | blockwise MiB | dense / blockwise |")
        print("|---:|---:|---:|---:|")
        blockwise = {}
        for length in args.memory:
            dense = temporaries(length, "reference") if length <= args.dense_max else None
            blockwise[length] = temporaries(length, "xla")
            shown = "-" if dense is None else f"{dense:,.1f}"
            ratio = "-" if dense is None else f"{dense / blockwise[length]:.1f}x"
            print(f"| {length:,} | {shown} | {blockwise[length]:,.1f} | {ratio} |", flush=True)
        if 8192 in blockwise and 32768 in blockwise:
            print(f"\nblockwise 8k -> 32k: {blockwise[32768] / blockwise[8192]:.2f}x")
    if args.time:
        print(
            f"\n| tokens | dense s/step | blockwise s/step | blockwise / dense (median of {args.rounds}) "
            "| spread |"
        )
        print("|---:|---:|---:|---:|---:|")
        for length, dense, block, ratio, spread in time_steps(args.time, args.rounds, args.reps):
            print(f"| {length:,} | {dense:.4f} | {block:.4f} | {ratio:.2f} | {spread:.0%} |", flush=True)
    if args.prefill:
        print("\n| chunk | context | first position | dense ms | blockwise ms | blockwise / dense |")
        print("|---:|---:|---:|---:|---:|---:|")
        cases = [(256, 1024, 512), (512, 4096, 3000)]
        for t, c, start, dense, block, ratio in time_prefill(cases, args.rounds, args.reps):
            print(f"| {t} | {c:,} | {start:,} | {dense:.2f} | {block:.2f} | {ratio:.2f} |", flush=True)
    if args.run:
        print("\n| tokens | step s (compile excluded) | peak RSS MiB |")
        print("|---:|---:|---:|")
        for length in args.run:
            done = subprocess.run(
                [sys.executable, __file__, "--worker", str(length)],
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"| {length:,} | {result['seconds']:.2f} | {result['peak_rss_mib']:,.0f} |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
