"""What each `train.remat` policy costs and saves on the tiny model: compiled temporaries and time of the
trainer's gradient (token log-probs of one packed row through every layer, routing native), per policy.

    python tools/bench_remat.py                       # rows of 1k, 4k tokens, 5 timed rounds each
    python tools/bench_remat.py --tokens 2048 --rounds 9

The model is `make_tiny_model`'s default architecture (the demo's: 2 MoE layers, hidden 64, 8 experts
top 2, vocab 4096), float32 as the demo trains it. Memory is XLA's `temp_size_in_bytes` of the compiled
value-and-gradient (what remat changes: the activations kept from forward to backward); time is the median
wall time of the jitted call after one warm-up. The peer ratio is each policy against `none`.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from legorl_jax.config import REMAT_POLICIES  # noqa: E402
from legorl_jax.model import init_policy  # noqa: E402
from legorl_jax.model.architecture import ArchConfig  # noqa: E402
from legorl_jax.model.tiny import TinyModelSpec  # noqa: E402


def tiny_arch() -> ArchConfig:
    spec = TinyModelSpec()
    return ArchConfig.from_hf_dict(
        dict(
            architectures=["Qwen3MoeForCausalLM"],
            vocab_size=spec.vocab_size,
            hidden_size=spec.hidden_size,
            intermediate_size=spec.intermediate_size,
            num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_heads,
            num_key_value_heads=spec.num_kv_heads,
            head_dim=spec.head_dim,
            rms_norm_eps=1e-6,
            rope_theta=spec.rope_theta,
            max_position_embeddings=spec.max_positions,
            num_experts=spec.num_experts,
            num_experts_per_tok=spec.top_k,
            moe_intermediate_size=spec.moe_intermediate_size,
            norm_topk_prob=spec.norm_topk_prob,
        )
    )


def measure(arch: ArchConfig, remat: str, tokens: int, rounds: int) -> tuple[int, float]:
    """(compiled temporaries in bytes, median seconds) of one gradient on a row of `tokens`."""
    policy = init_policy(arch, seed=0, remat=remat)
    graphdef, params = nnx.split(policy)
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(0, arch.vocab_size, (1, tokens)), jnp.int32)
    targets = jnp.roll(ids, -1, axis=1)
    # Segments of 512 tokens, as a packed row of several trials.
    segments = jnp.asarray(1 + np.arange(tokens) // 512, jnp.int32)[None]

    def loss(p):
        return -jnp.mean(nnx.merge(graphdef, p).token_logprobs(ids, targets, segment_ids=segments))

    step = jax.jit(jax.value_and_grad(loss))
    temp = step.lower(params).compile().memory_analysis().temp_size_in_bytes
    jax.block_until_ready(step(params))
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        jax.block_until_ready(step(params))
        times.append(time.perf_counter() - t)
    return int(temp), statistics.median(times)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    arch = tiny_arch()
    print("| tokens | remat | temporaries (MiB) | vs none | step (ms) | vs none |")
    print("|---|---|---|---|---|---|")
    for tokens in args.tokens:
        base = None
        for remat in REMAT_POLICIES:
            temp, seconds = measure(arch, remat, tokens, args.rounds)
            base = base or (temp, seconds)
            memory, speed = temp / base[0], seconds / base[1]
            print(
                f"| {tokens:,} | {remat} | {temp / 2**20:.1f} | {memory:.2f}x | "
                f"{seconds * 1e3:.1f} | {speed:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
