"""A tiny MoE training run, used in-process by the step tests and as a subprocess by the resume test.

As a script: `python tiny_run.py --steps N --checkpoint DIR [--resume] --out FILE.npz` trains N steps on
batches that are a pure function of the step index (so a resumed run sees exactly the batches an
uninterrupted one does), checkpoints every step asynchronously, prints `step K` after each, and writes
the final parameters to FILE.npz.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from legorl_jax.config import AlgoConfig, CheckpointConfig, TrainConfig
from legorl_jax.model import ArchConfig, init_policy
from legorl_jax.train.advantages import trajectory_advantages
from legorl_jax.train.batch import RoutingSpec, pack_trajectories
from legorl_jax.types import Outcome, Sequence, Trajectory


def update(trainer, state, batch, stats=None):
    """`Trainer.update`'s new state and its metrics (what most step tests compare)."""
    state, result = trainer.update(state, batch, stats)
    return state, result.metrics


TINY_MOE = ArchConfig(
    architectures=("Qwen3MoeForCausalLM",),
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    max_position_embeddings=256,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    norm_topk_prob=True,
)
MAX_TOKENS = 32


def make_trajectories(
    seed: int, n: int = 6, *, routing: RoutingSpec | None = None, lengths=(5, 15)
) -> list[Trajectory]:
    """n single-sequence trials in groups of 3: prompt of 3 tokens, then sampled tokens; random routing
    rows."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = int(rng.integers(*lengths))
        tokens = rng.integers(1, TINY_MOE.vocab_size, t).astype(np.int32)
        mask = np.r_[np.zeros(3), np.ones(t - 3)].astype(np.int8)
        lp = np.where(mask > 0, rng.normal(-4.0, 0.3, t), 0.0).astype(np.float32)
        routed = None
        if routing is not None:
            first = rng.integers(0, routing.num_experts, (t, routing.num_layers))
            routed = np.stack([first, (first + 1) % routing.num_experts], axis=-1).astype(np.int16)
            routed[t - 1] = -1  # the last token is never forwarded
        out.append(
            Trajectory(
                trial_id=f"{seed}-{i}",
                task_id=f"task{i // 3}",
                group_id=f"g{seed}-{i // 3}",
                sequences=(Sequence(tokens, mask, lp, routed),),
                reward=float(rng.integers(0, 2)),
                outcome=Outcome.SUBMITTED,
            )
        )
    return out


def tiny_configs(**train_overrides) -> tuple[AlgoConfig, TrainConfig]:
    train = dict(learning_rate=1e-2, max_tokens=MAX_TOKENS, micro_batch_rows=2, routing_agreement_every=0)
    train.update(train_overrides)
    return AlgoConfig(), TrainConfig(**train)


def batch_for_step(trainer, step: int):
    trajs = make_trajectories(1000 + step, routing=trainer.routing)
    return pack_trajectories(
        trajs,
        trajectory_advantages(trajs),
        max_tokens=MAX_TOKENS,
        row_multiple=trainer.row_multiple,
        routing=trainer.routing,
    )


def main(argv: list[str]) -> None:
    import jax

    from legorl_jax.train.checkpoint import Checkpointer
    from legorl_jax.train.step import Trainer

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    algo, train = tiny_configs(checkpoint=CheckpointConfig(directory=args.checkpoint, every=1, keep=3))
    trainer = Trainer(init_policy(TINY_MOE, seed=0), algo, train)
    run_config = {"algo": {"loss": algo.loss}, "train": {"learning_rate": train.learning_rate}}
    with Checkpointer(train.checkpoint, run_config=run_config) as ckpt:
        state, start = trainer.init_state(seed=0), 0
        if args.resume:
            restored = ckpt.restore(trainer.abstract_state())
            state, start = restored.state, restored.cursor["next_step"]
            print(f"resumed {start}", flush=True)
        for step in range(start, args.steps):
            batch, stats = batch_for_step(trainer, step)
            state, _ = trainer.update(state, batch, stats)
            ckpt.maybe_save(state, cursor={"next_step": step + 1}, weights_version=f"step-{step + 1}")
            print(f"step {step + 1}", flush=True)
        ckpt.wait()
    leaves = jax.tree.leaves(jax.device_get(state.params))
    np.savez(args.out, *[np.asarray(x) for x in leaves])


if __name__ == "__main__":
    main(sys.argv[1:])
