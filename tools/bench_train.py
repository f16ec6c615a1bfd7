"""Trainer throughput: training tokens/s and model-FLOPs utilisation against a matmul measured in the same
run.

    python tools/bench_train.py                              # tiny MoE and ~100M MoE, replay on and off
    python tools/bench_train.py --models tiny --steps 5 --markdown out.md
    python tools/bench_train.py --models tiny --processes 2     # the step on 2 processes × 4 vs 1 × 8

For each model (random weights from `init_policy`) and each routing setting it times
`Trainer.train_step` (one optimiser update: forward with `compute_logits=False`, the fused log-prob op,
GSPO loss, backward, AdamW) on a full batch of `rows × tokens` (one sequence per row, every target
sampled), median of `--steps` steps after one compile-and-warm-up step, replay and native steps taken in
alternation with the peer matmul so that all see the same machine load. "replay" feeds the policy's own
routing back as `forced_experts` (what R3 does with the engine's recorded routing); "native" routes
every token itself.

Model FLOPs per token (the "6N" convention, counting only useful work): 3 × forward, forward =
2 × (matmul parameters a token touches: q/k/v/o projections, the router, its top-k experts or the dense
MLP, the LM head) + 4 × H × Dh × (T + 1) / 2 per layer (causal scores and values over the average
context). MFU = model FLOP/s over the rate of a plain fp32 `jnp.dot` of `--matmul` × `--matmul` measured
in the same process once before each timed step of the row (median: the peer of that row). On CPU the
experts run as per-expert tiles of the routed rows (`moe.grouped_experts`, `tiles`; XLA:CPU would lower
`jax.lax.ragged_dot` densely, E / K times the expert FLOPs), whose padding to whole tiles adds up to about
the routed rows again; an accelerator keeps `ragged_dot`'s grouped matmul.

`--processes N` times the sharded step instead (the cpu8 layout: fsdp 2 × tensor 2 × expert 2) on one
process with 8 CPU devices and on N processes with 8 / N each (jax.distributed over 127.0.0.1, gloo),
`--rounds` alternations of the two, median over all: the cost of crossing processes on one machine, not
a scaling figure. "batch feed" is process 0's batch reaching every process (`distributed.share_batch`)
and each placing its shards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

MODELS = {
    # tools/make_tiny_model.py defaults
    "tiny": dict(
        vocab_size=4096,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
    ),
    # the ~100M example of tools/make_tiny_model.py --help
    "100m": dict(
        vocab_size=16384,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        num_experts=32,
        num_experts_per_tok=4,
        moe_intermediate_size=256,
    ),
}
SHAPES = {"tiny": (8, 256), "100m": (2, 256)}  # rows × tokens per step on CPU


def arch_config(name: str):
    from legorl_jax.model import ArchConfig

    return ArchConfig(
        architectures=("Qwen3MoeForCausalLM",),
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        max_position_embeddings=4096,
        norm_topk_prob=True,
        **MODELS[name],
    )


def active_matmul_params(arch) -> int:
    """Matmul parameters one token touches (embedding lookup excluded)."""
    d, h, kv, dh = arch.hidden_size, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    attention = d * h * dh * 2 + d * kv * dh * 2
    total = arch.vocab_size * d  # LM head
    for is_moe in arch.layer_is_moe:
        mlp = (
            d * arch.num_experts + arch.num_experts_per_tok * 3 * d * arch.moe_intermediate_size
            if is_moe
            else 3 * d * arch.intermediate_size
        )
        total += attention + mlp
    return total


def train_flops_per_token(arch, tokens: int) -> float:
    attention = 4 * arch.num_attention_heads * arch.head_dim * (tokens + 1) / 2 * arch.num_hidden_layers
    return 3 * (2 * active_matmul_params(arch) + attention)


def matmul_program(size: int):
    """A jitted fp32 square matmul and its inputs (the peer)."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
    dot = jax.jit(jnp.dot)
    dot(a, b).block_until_ready()
    return lambda: dot(a, b).block_until_ready()


def full_batch(trainer, rows: int, tokens: int, vocab: int):
    import numpy as np

    from legorl_jax.train.batch import pack_trajectories
    from legorl_jax.types import Outcome, Sequence, Trajectory

    rng = np.random.default_rng(0)
    trajs = [
        Trajectory(
            trial_id=str(i),
            task_id="bench",
            group_id=str(i // 2),
            sequences=(
                Sequence(
                    rng.integers(0, vocab, tokens).astype(np.int32),
                    np.ones(tokens, np.int8),
                    np.full(tokens, -8.0, np.float32),
                    None,
                ),
            ),
            reward=float(i % 2),
            outcome=Outcome.SUBMITTED,
        )
        for i in range(rows)
    ]
    adv = np.where(np.arange(rows) % 2, 1.0, -1.0).astype(np.float32)
    batch, _ = pack_trajectories(
        trajs, adv, max_tokens=tokens, row_multiple=trainer.row_multiple, routing=trainer.routing
    )
    return batch


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_model(name: str, steps: int, matmul: int) -> list[dict]:
    """Replay and native set up side by side, then timed in alternation with the peer matmul, so all three
    see the same machine load (the shared box's load moves by 2x within minutes)."""
    import dataclasses

    import jax
    from flax import nnx

    from legorl_jax.config import AlgoConfig, TrainConfig
    from legorl_jax.model import init_policy
    from legorl_jax.train.step import Trainer

    arch = arch_config(name)
    rows, tokens = SHAPES[name]
    peer = matmul_program(matmul)
    setups = []
    for replay in (True, False):
        policy = init_policy(arch, seed=0)
        params = sum(x.size for x in jax.tree.leaves(nnx.state(policy, nnx.Param)))
        train = TrainConfig(
            learning_rate=1e-6,
            max_tokens=tokens,
            micro_batch_rows=rows,
            routing_replay=replay,
            routing_agreement_every=0,
        )
        trainer = Trainer(policy, AlgoConfig(), train)
        batch = full_batch(trainer, rows, tokens, arch.vocab_size)
        if replay:  # the policy's own routing, as the engine would have recorded it
            native = trainer.native_routing(trainer.initial_params, trainer.device_batch(batch))
            batch = dataclasses.replace(batch, routed_experts=jax.device_get(native))
        setup = {
            "trainer": trainer,
            "state": trainer.init_state(seed=0),
            "batch": trainer.device_batch(batch),
            "replay": replay,
            "params": params,
            "times": [],
            "peer": [],
        }
        setup["first"] = timed(lambda s=setup: step(s))
        setups.append(setup)
    for _ in range(steps):
        for setup in setups:
            setup["peer"].append(timed(peer))
            setup["times"].append(timed(lambda s=setup: step(s)))
    out = []
    for s in setups:
        step_s = statistics.median(s["times"])
        rate = 2 * matmul**3 / statistics.median(s["peer"])
        tok_s = rows * tokens / step_s
        flops = tok_s * train_flops_per_token(arch, tokens)
        out.append(
            dict(
                model=name,
                params=s["params"],
                active=active_matmul_params(arch),
                routing="replay" if s["replay"] else "native",
                shape=f"{rows}×{tokens}",
                first=s["first"],
                step=step_s,
                tok_s=tok_s,
                flops=flops,
                rate=rate,
                mfu=flops / rate,
            )
        )
    return out


def step(setup: dict) -> None:
    import jax

    state, _, lp = setup["trainer"].train_step(setup["state"], setup["batch"])
    jax.block_until_ready((state, lp))
    setup["state"] = state


def table(rows: list[dict], matmul: int) -> str:
    lines = [
        "| model | params (active matmul) | routing | rows × tokens | compile + 1st step s | step s | "
        f"tokens/s | model GFLOP/s | peer: fp32 {matmul}² matmul GFLOP/s | MFU vs peer |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['params'] / 1e6:.1f}M ({r['active'] / 1e6:.1f}M) | {r['routing']} | "
            f"{r['shape']} | {r['first']:.1f} | {r['step']:.3f} | {r['tok_s']:,.0f} | "
            f"{r['flops'] / 1e9:,.2f} | {r['rate'] / 1e9:,.1f} | {r['mfu']:.1%} |"
        )
    return "\n".join(lines)


# --processes: the 8 CPU devices of the test suite's cpu8 layout, as 1 process or split over several.
PROCESS_MESH = {"fsdp": 2, "tensor": 2, "expert": 2}


def process_worker(args: argparse.Namespace) -> None:
    """One process of a `--processes` row: the sharded step on the cpu8 layout over every process's
    devices; process 0 prints one JSON line of its timings."""
    import json

    import jax

    from legorl_jax.config import AlgoConfig, DistributedConfig, MeshConfig, TrainConfig
    from legorl_jax.train import distributed

    n = args.worker_processes
    if n == 1:
        jax.config.update("jax_num_cpu_devices", 8)
    else:
        distributed.initialize(
            DistributedConfig(
                enabled=True,
                coordinator_address=f"127.0.0.1:{args.port}",
                num_processes=n,
                process_id=args.process_id,
                cpu_devices=8 // n,
            )
        )
    from legorl_jax.model import init_policy
    from legorl_jax.model.sharding import rules_from_config
    from legorl_jax.train.step import Trainer

    (name,) = args.models.split(",")
    arch = arch_config(name)
    rows, tokens = SHAPES[name]
    mesh_config = MeshConfig(**PROCESS_MESH)
    train = TrainConfig(
        learning_rate=1e-6, max_tokens=tokens, micro_batch_rows=rows, routing_agreement_every=0
    )
    trainer = Trainer(
        init_policy(arch, seed=0),
        AlgoConfig(),
        train,
        mesh=distributed.global_mesh(mesh_config),
        rules=rules_from_config(mesh_config),
    )
    host = full_batch(trainer, rows, tokens, arch.vocab_size) if jax.process_index() == 0 else None
    setup = {"trainer": trainer, "state": trainer.init_state(seed=0)}
    feeds = []

    def feed() -> None:
        setup["batch"] = trainer.device_batch(distributed.share_batch(host))
        jax.block_until_ready(setup["batch"])

    feeds.append(timed(feed))
    first = timed(lambda: step(setup))
    times = []
    for _ in range(args.steps):
        feeds.append(timed(feed))
        times.append(timed(lambda: step(setup)))
    if jax.process_index() == 0:
        result = dict(first=first, step=statistics.median(times), feed=statistics.median(feeds))
        print("RESULT " + json.dumps(result), flush=True)


def bench_processes(name: str, processes: int, steps: int, rounds: int) -> list[dict]:
    """1 process × 8 devices and `processes` × 8 / `processes`, the same step, taken in alternation."""
    import json
    import socket
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [root, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "", "PYTHONPATH": os.pathsep.join(paths)}

    def run(n: int) -> dict:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--models",
                    name,
                    "--steps",
                    str(steps),
                    "--worker-processes",
                    str(n),
                ]
                + ["--process-id", str(i), "--port", str(port)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(n)
        ]
        outs = [p.communicate(timeout=1800) for p in procs]
        for i, (p, (_, err)) in enumerate(zip(procs, outs, strict=True)):
            if p.returncode != 0:
                raise SystemExit(f"--processes {n}: process {i} failed ({p.returncode}):\n{err[-3000:]}")
        (line,) = [x for x in outs[0][0].splitlines() if x.startswith("RESULT ")]
        return json.loads(line.removeprefix("RESULT "))

    results: dict[int, list[dict]] = {1: [], processes: []}
    for _ in range(rounds):
        for n in (1, processes):
            results[n].append(run(n))
    rows, tokens = SHAPES[name]
    out = []
    for n, runs in results.items():
        step_s = statistics.median(r["step"] for r in runs)
        out.append(
            dict(
                model=name,
                layout=f"{n} × {8 // n}",
                shape=f"{rows}×{tokens}",
                first=statistics.median(r["first"] for r in runs),
                step=step_s,
                tok_s=rows * tokens / step_s,
                feed=statistics.median(r["feed"] for r in runs),
            )
        )
    return out


def process_table(rows: list[dict]) -> str:
    lines = [
        "| model | processes × CPU devices | rows × tokens | compile + 1st step s | step s | tokens/s | "
        "batch feed s |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['layout']} | {r['shape']} | {r['first']:.1f} | {r['step']:.3f} | "
            f"{r['tok_s']:,.0f} | {r['feed']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny,100m", help="comma-separated: " + ",".join(MODELS))
    parser.add_argument("--steps", type=int, default=3, help="timed steps per row (median)")
    parser.add_argument("--matmul", type=int, default=2048, help="side of the square peer matmul")
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument(
        "--processes", type=int, default=1, help="N > 1: the cpu8 step on N processes × 8/N devices vs 1 × 8"
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --processes: alternations of 1 and N")
    parser.add_argument("--worker-processes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_processes is not None:
        process_worker(args)
        return
    if args.processes < 1 or 8 % args.processes:
        raise SystemExit(f"--processes must divide the 8 CPU devices, got {args.processes}")
    if args.processes > 1:
        names = [n for n in args.models.split(",") if n]
        load = os.getloadavg()[0]
        rows = [r for n in names for r in bench_processes(n, args.processes, args.steps, args.rounds)]
        text = process_table(rows)
        print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")
        print(text)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(text + "\n")
        return
    names = [n for n in args.models.split(",") if n]
    for n in names:
        if n not in MODELS:
            raise SystemExit(f"--models: unknown model {n!r}; known: {', '.join(MODELS)}")
    if args.steps < 1:
        raise SystemExit(f"--steps must be >= 1, got {args.steps}")

    import jax

    rows = [r for n in names for r in bench_model(n, args.steps, args.matmul)]
    text = table(rows, args.matmul)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"backend {jax.default_backend()}, {jax.device_count()} device(s), load average {load:.1f}")
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
