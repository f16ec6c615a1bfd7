"""One process of a multi-process trainer run on the tiny MoE, launched (N times) by test_distributed.py.

    python multiprocess_run.py --process-id I --num-processes N --port P --out DIR [--die-at-step K]

Every process joins the run on 127.0.0.1:P with 8 / N CPU devices (gloo collectives), builds the
trainer on the global cpu8 mesh (fsdp 2 × tensor 2 × expert 2, the layout test_step.py checks on one
process), receives the batch process 0 packs (`distributed.share`) and runs one `Trainer.update` with
routing replayed. Then, together: an orbax checkpoint of the state saved by every process and restored
by every process; the parameters gathered without the optimiser state, which process 0 writes as an HF
directory. Process 0 writes to DIR: metrics.json, params.npz / mu.npz (the updated parameters and
AdamW first moments, leaves in tree order) and hf/, and prints `done`.

With `--follow` process 0 drives the trainer through the `Leading*` classes of train/commands.py, as the loop
does (two updates, a save with orbax's background writer, a publish to an engine that records what it
gets, a wait, then `stop`), and the others run `follow`; process 0 writes published.npz (the host arrays the
engine received) and each process prints the commands it led or followed as its last line.

With `--die-at-step K` the processes repeat the update; process 1 SIGKILLs itself once the batch of
update K has been shared, i.e. in the middle of that step, and process 0 must end on the lost peer.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import signal
import sys

import numpy as np

MESH = {"fsdp": 2, "tensor": 2, "expert": 2}
PEER_TIMEOUT_S = 10.0  # generous: a loaded 2-core box must not starve a heartbeat into a false loss


def step_configs():
    """The trainer configs both the 2-process run and the 1-process reference use."""
    import tiny_run

    return tiny_run.tiny_configs(micro_batch_rows=4, learning_rate=1e-3, routing_agreement_every=1)


def packed_batch(trainer):
    """The batch of the step: 12 trials packed into two micro-batches of 4 rows (test_step.py's)."""
    import tiny_run

    from legorl_jax.train.advantages import trajectory_advantages
    from legorl_jax.train.batch import pack_trajectories

    trajs = tiny_run.make_trajectories(7, n=12, routing=trainer.routing)
    return pack_trajectories(
        trajs,
        trajectory_advantages(trajs),
        max_tokens=tiny_run.MAX_TOKENS,
        row_multiple=trainer.row_multiple,
        routing=trainer.routing,
        min_rows=8,
    )


def collectives_only(processes, *, out: pathlib.Path, die_at_step: int | None) -> None:
    """No model: process 0's batch shared, placed on a 1-D mesh over every device, summed by a jitted
    program, gathered back. Process 0 writes sum.json: the global sum, and the batch every process got."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from legorl_jax.train import distributed
    from legorl_jax.types import TrainBatch

    mesh = Mesh(np.asarray(jax.devices()), ("rows",))
    rows = NamedSharding(mesh, PartitionSpec("rows"))
    total = jax.jit(lambda x: x.sum(), out_shardings=NamedSharding(mesh, PartitionSpec()))
    batch = None
    if processes.is_main:
        grid = np.arange(8 * 4, dtype=np.int32).reshape(8, 4)
        fields = {f: grid + i for i, f in enumerate(("tokens", "targets", "positions", "segment_ids"))}
        floats = {f: grid.astype(np.float32) / (i + 1) for i, f in enumerate(("loss_mask", "advantages"))}
        batch = TrainBatch(
            **fields, **floats, behaviour_logprobs=-grid.astype(np.float32), routed_experts=None
        )
    for step in range(1, 1000 if die_at_step else 2):
        shared = distributed.share_batch(batch)
        if step == die_at_step and processes.process_id == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        tokens = distributed.put(shared.tokens, rows)
        value = int(total(tokens))
        gathered = distributed.to_host(tokens)
        print(f"step {step}", flush=True)
    if processes.is_main and not die_at_step:
        result = {
            "sum": value,
            "gathered_equal": bool(np.array_equal(gathered, batch.tokens)),
            "shared_equal": all(
                np.array_equal(getattr(shared, f), getattr(batch, f)) for f in ("tokens", "advantages")
            ),
            "routed_experts": shared.routed_experts,
            "local_shards": len(tokens.addressable_shards),
        }
        (out / "sum.json").write_text(json.dumps(result))
    print("done", flush=True)


class RecordingEngine:
    """The engine boundary of publishing: keeps what `update_weights` received."""

    def __init__(self):
        self.received = []

    async def update_weights(self, source, version):
        self.received.append((source, version))


def lead_and_follow(processes, trainer, commands, *, out: pathlib.Path) -> None:
    """`--follow` (module docstring)."""
    import asyncio
    import collections

    import jax

    from legorl_jax.config import CheckpointConfig
    from legorl_jax.train.checkpoint import Checkpointer
    from legorl_jax.train.commands import LeadingCheckpointer, LeadingPublisher, follow

    settings = CheckpointConfig(directory=str(out / "ckpt"), every=1, async_save=True)
    state = trainer.init_state(seed=0)
    if not processes.is_main:
        with Checkpointer(settings, run_config={}) as checkpointer:
            followed = follow(commands, trainer, checkpointer, state)
        print(json.dumps(dict(followed.counts)), flush=True)
        return
    batch, stats = packed_batch(trainer)
    engine = RecordingEngine()
    publisher = LeadingPublisher(engine, mode="in_process", commands=commands)
    with LeadingCheckpointer(settings, run_config={}, commands=commands) as checkpointer:
        for version in range(2):  # called as the loop calls it (train_on passes the trainer's version)
            state, _ = trainer.update(state, batch, stats, trainer_version=version)
        checkpointer.maybe_save(state, cursor={"next_step": 2}, weights_version="step-000002", step=2)
        asyncio.run(publisher.publish(state.params, "step-000002"))
        checkpointer.wait()
        commands.send("stop")
    ((params, version),) = engine.received
    leaves = jax.tree.leaves(params)
    assert version == "step-000002" and all(isinstance(x, np.ndarray) for x in leaves), leaves[:1]
    np.savez(out / "published.npz", *leaves)
    led = collections.Counter({"update": 2, "save": 1, "publish": 1, "wait": 1, "stop": 1})
    print(json.dumps(dict(led)), flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--die-at-step", type=int, default=None)
    parser.add_argument("--collectives-only", action="store_true")
    parser.add_argument("--follow", action="store_true")
    parser.add_argument("--mesh", default=None, help="the MeshConfig fields as JSON (default: MESH)")
    args = parser.parse_args(argv)

    from legorl_jax.config import CheckpointConfig, DistributedConfig, MeshConfig
    from legorl_jax.train import distributed

    processes = distributed.initialize(
        DistributedConfig(
            enabled=True,
            coordinator_address=f"127.0.0.1:{args.port}",
            num_processes=args.num_processes,
            process_id=args.process_id,
            cpu_devices=8 // args.num_processes,
            initialization_timeout_s=120,
            peer_timeout_s=PEER_TIMEOUT_S,
        )
    )

    if args.collectives_only:
        collectives_only(processes, out=pathlib.Path(args.out), die_at_step=args.die_at_step)
        return

    import jax
    import optax
    import tiny_run

    from legorl_jax.model import init_policy
    from legorl_jax.model.sharding import rules_from_config
    from legorl_jax.train.checkpoint import Checkpointer
    from legorl_jax.train.publish import export_hf
    from legorl_jax.train.step import Trainer

    mesh_config = MeshConfig(**(MESH if args.mesh is None else json.loads(args.mesh)))
    algo, train = step_configs()
    from legorl_jax.train.commands import Commands, LeadingTrainer

    commands = Commands() if args.follow else None
    trainer_class = Trainer
    if args.follow and processes.is_main:
        trainer_class = functools.partial(LeadingTrainer, commands=commands)
    trainer = trainer_class(
        init_policy(tiny_run.TINY_MOE, seed=0),
        algo,
        train,
        mesh=distributed.global_mesh(mesh_config),
        rules=rules_from_config(mesh_config),
    )
    out = pathlib.Path(args.out)
    if args.follow:
        lead_and_follow(processes, trainer, commands, out=out)
        return
    batch, stats = packed_batch(trainer) if processes.is_main else (None, None)
    state = trainer.init_state(seed=0)

    if args.die_at_step is not None:
        for step in range(1, 1000):
            shared = distributed.share_batch(batch)
            if step == args.die_at_step and args.process_id == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            state, _ = trainer.update(state, shared, stats)
            print(f"step {step}", flush=True)
        return

    state, update = trainer.update(state, distributed.share_batch(batch), stats)
    metrics = update.metrics
    params = jax.tree.map(distributed.to_host, jax.tree.leaves(state.params))
    mu = jax.tree.map(distributed.to_host, jax.tree.leaves(optax.tree_utils.tree_get(state.opt_state, "mu")))

    with Checkpointer(CheckpointConfig(directory=str(out / "ckpt"), every=1), run_config={}) as ckpt:
        ckpt.maybe_save(state, cursor={"next_step": 1}, weights_version="step-000001")
        ckpt.wait()
        restored = ckpt.restore(trainer.abstract_state()).state
    restored_params = [distributed.to_host(x) for x in jax.tree.leaves(restored.params)]
    restored_equal = all(np.array_equal(a, b) for a, b in zip(params, restored_params, strict=True))
    restored_on_mesh = all(
        x.sharding == y.sharding
        for x, y in zip(jax.tree.leaves(restored.params), jax.tree.leaves(state.params), strict=True)
    )

    host_params = distributed.gather_params(state.params)
    if processes.is_main:
        export_hf(trainer.policy_of(host_params), out, "hf", dtype="float32")
        np.savez(out / "params.npz", *params)
        np.savez(out / "mu.npz", *mu)
        summary = {
            "metrics": metrics,
            "restored_equal": restored_equal,
            "restored_on_mesh": restored_on_mesh,
            "process_count": jax.process_count(),
            "local_devices": jax.local_device_count(),
            "devices": jax.device_count(),
        }
        (out / "metrics.json").write_text(json.dumps(summary))
    print("done", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    main(sys.argv[1:])
