"""Forward throughput of our jitted policy vs HF transformers on the same tiny Qwen3-MoE, in one run.

    python tools/bench_model.py                      # default tiny MoE, batch 4 x 256 tokens
    python tools/bench_model.py --batch 8 --seq 512 --reps 5 --hidden 256 --experts 32

It draws a random Qwen3-MoE with `init_policy`, writes it with `save_hf` (float32) to a temporary
directory, and times:
  ours  `jax.jit` of `nnx.merge(graphdef, state)(input_ids)` (logits included), compile excluded;
  HF    `AutoModelForCausalLM.from_pretrained(dir)` in `.venv-ref` (Python 3.11 + CPU torch +
        transformers, made by tools/make_ref_venv.sh), `torch.no_grad()`, default attention and experts
        implementations, in a subprocess (torch is never a dependency of legorl_jax).
Both see the same token ids; the table shows tokens/s, ms per forward, the ratio ours / HF, and the
largest |logit difference| between the two as a check that they ran the same model. Each timing is the
best of --reps forwards after one warm-up (the least disturbed by other load on a shared machine).
Without `.venv-ref` it says so and times ours alone.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"

# Runs in .venv-ref: argv = model dir, ids .npy, reps, output .npy for logits.
HF_SIDE = r"""
import json, sys, time
import numpy as np, torch, transformers
from transformers import AutoModelForCausalLM
model_dir, ids_path, reps, logits_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
ids = torch.from_numpy(np.load(ids_path)).long()
with torch.no_grad():
    logits = model(input_ids=ids).logits
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        model(input_ids=ids)
        times.append(time.perf_counter() - start)
np.save(logits_path, logits.float().numpy())
print(json.dumps({"seconds": min(times), "threads": torch.get_num_threads(),
                  "transformers": transformers.__version__, "torch": torch.__version__,
                  "attn": model.config._attn_implementation}))
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


def _time_ours(policy, ids, reps: int) -> tuple[float, float, object]:
    import jax
    from flax import nnx

    graphdef, state = nnx.split(policy)
    forward = jax.jit(lambda state, ids: nnx.merge(graphdef, state)(ids).logits)
    start = time.perf_counter()
    compiled = forward.lower(state, ids).compile()
    compile_s = time.perf_counter() - start
    logits = compiled(state, ids).block_until_ready()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        compiled(state, ids).block_until_ready()
        times.append(time.perf_counter() - start)
    return min(times), compile_s, logits


def _time_hf(model_dir: pathlib.Path, ids, reps: int, work: pathlib.Path) -> dict | None:
    import numpy as np

    if not REF_PYTHON.exists():
        return None
    np.save(work / "ids.npy", ids)
    argv = [
        str(REF_PYTHON),
        "-c",
        HF_SIDE,
        str(model_dir),
        str(work / "ids.npy"),
        str(reps),
        str(work / "hf.npy"),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the HF side failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["logits"] = np.load(work / "hf.npy")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--moe-intermediate", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in (
        "batch",
        "seq",
        "reps",
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

    config = _config(args)
    policy = init_policy(config, seed=args.seed)
    ids = np.random.default_rng(args.seed).integers(0, args.vocab, (args.batch, args.seq)).astype(np.int32)
    tokens = args.batch * args.seq
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        save_hf(policy, work / "model", dtype="float32")
        ours_s, compile_s, ours_logits = _time_ours(policy, ids, args.reps)
        hf = _time_hf(work / "model", ids, args.reps, work)

    params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(__import__("flax").nnx.state(policy)))
    print(
        f"# bench_model: Qwen3-MoE hidden {args.hidden}, {args.layers} layers, {args.experts} experts "
        f"top-{args.top_k}, vocab {args.vocab}, {params / 1e6:.2f}M params; batch {args.batch} x {args.seq} "
        "tokens, float32"
    )
    print(
        f"# machine: {platform.machine()}, {os.cpu_count()} CPUs; jax {jax.__version__} on "
        f"{jax.default_backend()}"
    )
    print(f"# ours: compile {compile_s:.1f} s (excluded); best of {args.reps} forwards after one warm-up")
    print("| impl | tokens/s | ms / forward | ours / HF |")
    print("|---|---:|---:|---:|")
    if hf is None:
        print(f"| ours (jax.jit) | {tokens / ours_s:,.0f} | {ours_s * 1e3:.1f} | - |")
        print(f"# HF side not run: {REF_PYTHON} is absent (create it with `bash tools/make_ref_venv.sh`)")
        return 0
    ratio = hf["seconds"] / ours_s
    print(f"| ours (jax.jit) | {tokens / ours_s:,.0f} | {ours_s * 1e3:.1f} | {ratio:.2f}x |")
    print(f"| HF transformers {hf['transformers']} (torch {hf['torch']}, {hf['threads']} threads, "
          f"attn {hf['attn']}) | {tokens / hf['seconds']:,.0f} | {hf['seconds'] * 1e3:.1f} | 1.00x "
          "|")  # fmt: skip
    delta = float(np.max(np.abs(np.asarray(ours_logits) - hf["logits"])))
    print(f"# max |logit difference| ours vs HF: {delta:.2e} (same weights, same ids)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
