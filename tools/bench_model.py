"""Forward throughput of our jitted policy vs HF transformers on the same tiny Qwen3-MoE, in one run.

    python tools/bench_model.py                      # default tiny MoE, batch 4 x 256 tokens
    python tools/bench_model.py --batch 8 --seq 512 --reps 5 --hidden 256 --experts 32

It draws a random Qwen3-MoE with `init_policy`, writes it with `save_hf` (float32) to a temporary
directory, and times:
  ours  `jax.jit` of `nnx.merge(graphdef, state)(input_ids)` (logits included), compile excluded;
  HF    `AutoModelForCausalLM.from_pretrained(dir)` in `.venv-ref` (Python 3.11 + CPU torch +
        transformers, made by tools/make_ref_venv.sh), `torch.no_grad()`, default attention and experts
        implementations, in a subprocess (torch is never a dependency of legorl_jax).
With `--moe-tokens N1,N2,...` it times instead one MoE layer's experts (`moe.grouped_experts`, the
model's sizes, a random routing) at each token count through every CPU implementation (`tiles`,
`all_experts`), alternating them --rounds times (best of --reps each), and prints which one
`default_grouped_impl` picks: the crossover the decode path rests on.

Both see the same token ids. The HF side stays loaded, and --rounds rounds alternate the two (each side
the best of --reps forwards per round, the least disturbed by other load), so a machine whose speed drifts
during the run moves both sides of each round's ratio alike: the table shows tokens/s of each side's
median round, the median of the per-round ratios ours / HF with its spread ((max - min) / median), the
load average before and after, and the largest |logit difference| between the two as a check that they
ran the same model. Without `.venv-ref` it says so and times ours alone.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"

# Runs in .venv-ref: argv = model dir, ids .npy, output .npy for logits; then one line of JSON per line
# read from stdin (a number of forwards to time: the best of them, in seconds).
HF_SIDE = r"""
import json, sys, time
import numpy as np, torch, transformers
from transformers import AutoModelForCausalLM
model_dir, ids_path, logits_path = sys.argv[1], sys.argv[2], sys.argv[3]
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
ids = torch.from_numpy(np.load(ids_path)).long()
with torch.no_grad():
    np.save(logits_path, model(input_ids=ids).logits.float().numpy())
    print(json.dumps({"threads": torch.get_num_threads(), "transformers": transformers.__version__,
                      "torch": torch.__version__, "attn": model.config._attn_implementation}), flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            start = time.perf_counter()
            model(input_ids=ids)
            times.append(time.perf_counter() - start)
        print(json.dumps({"seconds": min(times)}), flush=True)
"""


def _config(args: argparse.Namespace):
    from legorl_jax.model import ArchConfig

    return ArchConfig.from_hf_dict(
        dict(
            architectures=["Qwen3MoeForCausalLM"],
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            intermediate_size=4 * args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            num_key_value_heads=max(1, args.heads // 2),
            head_dim=args.hidden // args.heads,
            rms_norm_eps=1e-6,
            rope_theta=1_000_000.0,
            max_position_embeddings=max(4096, args.seq),
            num_experts=args.experts,
            num_experts_per_tok=args.top_k,
            moe_intermediate_size=args.moe_intermediate,
            norm_topk_prob=True,
        )
    )


def _ours(policy, ids):
    """(a function timing the best of n forwards of our jitted policy, compile seconds, logits)."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(policy)
    forward = jax.jit(lambda state, ids: nnx.merge(graphdef, state)(ids).logits)
    start = time.perf_counter()
    compiled = forward.lower(state, ids).compile()
    compile_s = time.perf_counter() - start
    logits = compiled(state, ids).block_until_ready()

    def best_of(n: int) -> float:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            compiled(state, ids).block_until_ready()
            times.append(time.perf_counter() - start)
        return min(times)

    return best_of, compile_s, logits


class _HF:
    """The HF side in `.venv-ref`, kept running between rounds (loading it again would time torch's start)."""

    def __init__(self, model_dir: pathlib.Path, ids, work: pathlib.Path):
        import numpy as np

        np.save(work / "ids.npy", ids)
        argv = [str(REF_PYTHON), "-c", HF_SIDE, str(model_dir), str(work / "ids.npy"), str(work / "hf.npy")]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.info = self._read()
        self.info["logits"] = np.load(work / "hf.npy")

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(
                f"the HF side failed (exit {self.proc.returncode}):\n{self.proc.stderr.read()[-4000:]}"
            )
        return json.loads(line)

    def best_of(self, n: int) -> float:
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        return self._read()["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def _moe_layer(args: argparse.Namespace) -> int:
    """The `--moe-tokens` table: one MoE layer's experts per implementation and token count."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from legorl_jax.model import moe

    e, d, f, k = args.experts, args.hidden, args.moe_intermediate, args.top_k
    rng = np.random.default_rng(args.seed)
    weights = [
        jnp.asarray(rng.normal(size=s).astype(np.float32) * 0.02) for s in ((e, d, f), (e, d, f), (e, f, d))
    ]
    impls = ("tiles", "all_experts")
    print(
        f"# bench_model --moe-tokens: one MoE layer's experts, D {d}, F {f}, {e} experts top-{k}, float32; "
        f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs; load average "
        f"{os.getloadavg()[0]:.2f} before; best of {args.reps} calls per round, {args.rounds} rounds, "
        "alternating"
    )
    print("| tokens | " + " | ".join(f"{i} (ms)" for i in impls) + " | tiles / all_experts | default |")
    print("|---:|" + "---:|" * len(impls) + "---:|---|")
    for n in args.moe_tokens:
        x = jnp.asarray(rng.normal(size=(n, d)).astype(np.float32))
        ids = jnp.asarray(np.argsort(rng.random((n, e)), axis=1)[:, :k].astype(np.int32))
        gates = jnp.full((n, k), 1.0 / k, jnp.float32)
        fns = {i: jax.jit(lambda *a, i=i: moe.grouped_experts(*a, impl=i)) for i in impls}
        outs = {i: jax.block_until_ready(fn(x, ids, gates, *weights)) for i, fn in fns.items()}
        gap = float(jnp.max(jnp.abs(outs["tiles"] - outs["all_experts"])))
        if not gap <= 1e-4 * max(1.0, float(jnp.max(jnp.abs(outs["tiles"])))):
            raise SystemExit(f"the implementations disagree by {gap:.2e} at {n} tokens")
        best: dict[str, float] = {i: float("inf") for i in impls}
        for _ in range(args.rounds):
            for i, fn in fns.items():
                for _ in range(args.reps):
                    start = time.perf_counter()
                    jax.block_until_ready(fn(x, ids, gates, *weights))
                    best[i] = min(best[i], time.perf_counter() - start)
        pick = moe.default_grouped_impl("cpu", n, e, k)
        print(
            f"| {n} | "
            + " | ".join(f"{best[i] * 1e3:.2f}" for i in impls)
            + f" | {best['tiles'] / best['all_experts']:.2f}x | {pick} |"
        )
    print(f"# load average after: {os.getloadavg()[0]:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5, help="forwards per side per round (the best counts)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds alternating ours and HF")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--moe-intermediate", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--moe-tokens",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[],
        help="time one MoE layer's experts at these token counts per implementation instead",
    )
    args = parser.parse_args(argv)
    for name in (
        "batch",
        "seq",
        "reps",
        "rounds",
        "hidden",
        "layers",
        "heads",
        "experts",
        "top_k",
        "moe_intermediate",
        "vocab",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")

    import jax
    import numpy as np

    from legorl_jax.model import init_policy, save_hf

    if args.moe_tokens:
        return _moe_layer(args)

    config = _config(args)
    policy = init_policy(config, seed=args.seed)
    ids = np.random.default_rng(args.seed).integers(0, args.vocab, (args.batch, args.seq)).astype(np.int32)
    tokens = args.batch * args.seq
    load_before = os.getloadavg()[0]
    ours, hf_runs, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        save_hf(policy, work / "model", dtype="float32")
        ours_best_of, compile_s, ours_logits = _ours(policy, ids)
        hf = _HF(work / "model", ids, work) if REF_PYTHON.exists() else None
        try:
            for _ in range(args.rounds):
                ours.append(ours_best_of(args.reps))
                if hf is not None:
                    hf_runs.append(hf.best_of(args.reps))
                    ratios.append(hf_runs[-1] / ours[-1])
        finally:
            if hf is not None:
                hf.close()
    load_after = os.getloadavg()[0]

    params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(__import__("flax").nnx.state(policy)))
    print(
        f"# bench_model: Qwen3-MoE hidden {args.hidden}, {args.layers} layers, {args.experts} experts "
        f"top-{args.top_k}, vocab {args.vocab}, {params / 1e6:.2f}M params; batch {args.batch} x {args.seq} "
        "tokens, float32"
    )
    print(
        f"# machine: {platform.machine()}, {os.cpu_count()} CPUs; jax {jax.__version__} on "
        f"{jax.default_backend()}; load average {load_before:.2f} before, {load_after:.2f} after"
    )
    print(
        f"# ours: compile {compile_s:.1f} s (excluded); {args.rounds} rounds alternating ours and HF, each "
        f"side the best of {args.reps} forwards per round; tokens/s from each side's median round"
    )
    print("| impl | tokens/s | ms / forward | ours / HF (median of rounds) | spread |")
    print("|---|---:|---:|---:|---:|")
    ours_s = statistics.median(ours)
    if hf is None:
        print(f"| ours (jax.jit) | {tokens / ours_s:,.0f} | {ours_s * 1e3:.1f} | - | - |")
        print(f"# HF side not run: {REF_PYTHON} is absent (create it with `bash tools/make_ref_venv.sh`)")
        return 0
    ratio, hf_s = statistics.median(ratios), statistics.median(hf_runs)
    spread = (max(ratios) - min(ratios)) / ratio
    print(f"| ours (jax.jit) | {tokens / ours_s:,.0f} | {ours_s * 1e3:.1f} | {ratio:.2f}x | {spread:.0%} |")
    info = hf.info
    print(f"| HF transformers {info['transformers']} (torch {info['torch']}, {info['threads']} threads, "
          f"attn {info['attn']}) | {tokens / hf_s:,.0f} | {hf_s * 1e3:.1f} | 1.00x | |")  # fmt: skip
    print("# per-round ours / HF: " + ", ".join(f"{r:.2f}" for r in ratios))
    delta = float(np.max(np.abs(np.asarray(ours_logits) - info["logits"])))
    print(f"# max |logit difference| ours vs HF: {delta:.2e} (same weights, same ids)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
