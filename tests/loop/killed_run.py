"""A whole run as `train.py` builds it (`run.build_parts`, `run_loop`, the signal handler), with the rollouts'
replies scripted, as a subprocess a test can kill -9 and start again:

    python killed_run.py MODEL_DIR RUN_DIR --steps 3 --mode sync [--resume] [--overwrite]

Everything is the real run's: the refusal or resume of the run folder, the checkpointer and its policy, the
trainer on the tiny MoE, the embedded engine the weights are published to, the proxies, the built-in harness,
Docker sandboxes, the verifier, the metrics file. Only the engine the proxies sample from is scripted (the
outside boundary, tests/scripted_engine.py): by trial id, trial `<task>-0` of every group applies the gold
edit and submits, the others submit at once, so every group has an advantage and every step trains. Its
replies depend on nothing but the trial, so a resumed run sees the batches an uninterrupted one sees.

Prints one JSON line at the end: the steps run, and a digest of the last checkpoint's parameters.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import logging
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from scripted_engine import ScriptedEngine  # noqa: E402

from legorl_jax.config import (  # noqa: E402
    CheckpointConfig,
    Config,
    EngineConfig,
    LoopConfig,
    RolloutConfig,
    TasksConfig,
    TrackingConfig,
    TrainConfig,
)
from legorl_jax.warm_start import gold_edits, qwen3_tool_call  # noqa: E402

MAX_LEN = 2048
TASK = "ratelimit-slow-rates-never-refill"


def config_for(run_dir: pathlib.Path, *, steps: int, mode: str, resume: bool, overwrite: bool) -> Config:
    config = Config(
        tasks=TasksConfig(ids=[TASK], eval_split=None),
        rollout=RolloutConfig(
            group_size=2,
            concurrency=1,
            retries=0,
            runs_dir=str(run_dir.parent),
            experiment=run_dir.name,
            trial_timeout_s=300,
        ),
        train=TrainConfig(
            learning_rate=1e-3, max_tokens=MAX_LEN, checkpoint=CheckpointConfig(every=1, keep=3)
        ),
        engine=EngineConfig(max_running=2, max_len=MAX_LEN, min_prefill_bucket=64),
        tracking=TrackingConfig(backend="none"),
        # The scripted engine stamps every token with its initial version (the weights go to the embedded
        # engine), so async staleness would grow with the step: a bound no group reaches keeps every group.
        loop=LoopConfig(steps=steps, mode=mode, validate_every=0, max_staleness=100, trial_texts=False),
        resume=resume,
        overwrite=overwrite,
    )
    return dataclasses.replace(config, proxy=dataclasses.replace(config.proxy, context_length=MAX_LEN))


class ByTrial:
    """The reply of each call, chosen by the trial its proxy session belongs to (module docstring)."""

    def __init__(self, tokenizer, task):
        self.fix = [qwen3_tool_call("str_replace", e) for e in gold_edits(task)] + [
            qwen3_tool_call("submit", {})
        ]
        self.proxies: list = []

    def __call__(self, prompt, rid):
        sid, _, turn = rid.rpartition("-")
        trial_id = next(p.sessions[sid].trial_id for p in self.proxies if sid in p.sessions)
        if trial_id.endswith("-0"):
            return self.fix[min(int(turn), len(self.fix) - 1)]
        return qwen3_tool_call("submit", {})


def params_digest(state) -> str:
    import jax

    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(state.params):
        digest.update(np.asarray(leaf).tobytes())
    return digest.hexdigest()


async def main(args: argparse.Namespace) -> dict:
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.run import build_parts, load_tasks, run_loop
    from legorl_jax.train.checkpoint import saving_on_signal

    config = config_for(
        pathlib.Path(args.run_dir),
        steps=args.steps,
        mode=args.mode,
        resume=args.resume,
        overwrite=args.overwrite,
    )
    tasks, _ = load_tasks(config)
    tokenizer = load_tokenizer(args.model_dir)
    script = ByTrial(tokenizer, tasks[0])
    scripted = ScriptedEngine(tokenizer, script, weight_version="default")
    scripted.max_len = MAX_LEN
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, path=args.model_dir))
    async with build_parts(config, rollout_engine=scripted) as built:
        script.proxies = [built.parts.proxy, built.parts.validation_proxy]
        with saving_on_signal(built.parts.checkpointer):
            records = await run_loop(
                built.parts, built.state, start_step=built.start_step, cursor=built.cursor
            )
        ckpt = built.parts.checkpointer
        ckpt.wait()
        restored = ckpt.restore(built.parts.trainer.abstract_state())
    return {
        "start_step": built.start_step,
        "steps": [r.step for r in records],
        "trained": [r.trained for r in records],
        "checkpoint": restored.step,
        "optimiser_step": int(restored.state.step),
        "params": params_digest(restored.state),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--mode", default="sync")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--overwrite", action="store_true")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    print(json.dumps(asyncio.run(main(parser.parse_args()))), flush=True)
