"""One process of the RL loop on several processes, launched N times by test_distributed_loop.py (N = 1: the
reference run on this process's 8 devices).

    python distributed_loop_run.py MODEL_DIR RUN_DIR --process-id I --num-processes N --port P
        [--steps S] [--resume] [--aim REPO] [--delay-s SECONDS]

Every process runs `legorl_jax.run` as `train` does: process 0 `build_parts` + `run_loop`, the others
`follow_process_0`. The loop is loop_run.py's (the tiny MoE, one built-in task, Docker sandboxes, 2 trials
a step whose replies a `ScriptedEngine` at the engine boundary chooses, so every step's batch is the same
whatever the weights), with the trainer on the cpu8 layout (fsdp 2 × tensor 2 × expert 2) over every
process's devices. Each process prints one JSON line: process 0 its step records, the others the commands
they followed and which of the modules of rollouts, the proxy, sandboxes and Aim they imported.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import faulthandler
import json
import pathlib
import signal
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loop_run  # noqa: E402

from legorl_jax.config import DistributedConfig, MeshConfig, TrackingConfig  # noqa: E402

PEER_TIMEOUT_S = 10.0  # generous: a loaded 2-core box must not starve a heartbeat into a false loss
# What a follower must never open, by the modules that open them (imported only to use them): the proxy's
# sessions, sandboxes of either backend, the engine, the tracker's Aim run.
PROCESS_0_ONLY = (
    "legorl_jax.proxy.app",
    "legorl_jax.sandbox.docker_backend",
    "legorl_jax.sandbox.bwrap_backend",
    "legorl_jax.engine.jax_engine",
    "legorl_jax.monitor.aim_tracker",
    "aim",
)


def config_for(run_dir: pathlib.Path, args: argparse.Namespace):
    config = loop_run.config_for(run_dir, steps=args.steps)
    distributed = DistributedConfig(
        enabled=args.num_processes > 1,
        coordinator_address=f"127.0.0.1:{args.port}",
        num_processes=args.num_processes,
        process_id=args.process_id,
        cpu_devices=8 // args.num_processes,
        initialization_timeout_s=120,
        peer_timeout_s=PEER_TIMEOUT_S,
    )
    tracking = TrackingConfig(
        backend="aim" if args.aim else "none",
        repo=args.aim or TrackingConfig().repo,
        experiment="distributed-loop-test",
        run_name=run_dir.name,
    )
    return dataclasses.replace(
        config,
        mesh=MeshConfig(fsdp=2, tensor=2, expert=2, distributed=distributed),
        train=dataclasses.replace(config.train, micro_batch_rows=4),
        engine=dataclasses.replace(
            config.engine, max_running=2, max_len=loop_run.MAX_LEN, min_prefill_bucket=64
        ),
        proxy=dataclasses.replace(config.proxy, context_length=loop_run.MAX_LEN),
        model=dataclasses.replace(config.model, path=args.model_dir),
        tracking=tracking,
        resume=args.resume,
    )


async def lead(config, *, delay_s: float = 0.0) -> dict:
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.run import build_parts, load_tasks, run_loop

    tasks, _ = load_tasks(config)
    scripted = loop_run.make_engine(load_tokenizer(config.model.path), tasks[0], config.rollout.group_size)
    scripted.delay_s = delay_s
    async with build_parts(config, rollout_engine=scripted) as built:
        records = await run_loop(built.parts, built.state, start_step=built.start_step, cursor=built.cursor)
        version = built.parts.publisher.engine.weight_version
    return {
        "records": [{"step": r.step, "trained": r.trained, "metrics": r.metrics} for r in records],
        "start_step": built.start_step,
        "version": version,
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("run_dir")
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--aim", default=None)
    parser.add_argument("--delay-s", type=float, default=0.0, help="seconds each scripted reply takes")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that times out dumps every stack
    config = config_for(pathlib.Path(args.run_dir), args)

    from legorl_jax.run import train
    from legorl_jax.train import distributed

    if distributed.initialize(config.mesh.distributed).is_main:
        result = asyncio.run(lead(config, delay_s=args.delay_s))
    else:
        assert asyncio.run(train(config)) is None
        result = {"imported": [m for m in PROCESS_0_ONLY if m in sys.modules]}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
