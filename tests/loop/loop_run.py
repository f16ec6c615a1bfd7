"""One or more loop steps on the tiny MoE with the built-in harness, the rollouts' replies scripted.

Used in-process by test_loop.py and as a subprocess (`python loop_run.py MODEL_DIR RUN_DIR --aim REPO`) when
the run is tracked in Aim (never imported into the pytest process: Aim's exit hook prints a traceback there).

The proxy samples from a `ScriptedEngine` (the engine boundary, tests/scripted_engine.py) so that each group
mixes a solved and an unsolved trial: the first trial of a group applies the gold edit and submits, the
others submit at once. Everything else is real and built by `run.build_parts` (`rollout_engine=` the
scripted engine): the built-in harness, Docker sandboxes, the verifier, the trainer on the tiny MoE (one
device: `mesh.devices=[0]`), the orbax checkpoint, publishing into a real `JaxEngine`, and the trackers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from scripted_engine import ScriptedEngine  # noqa: E402

from legorl_jax.config import (  # noqa: E402
    CheckpointConfig,
    Config,
    EngineConfig,
    LoopConfig,
    MeshConfig,
    ModelConfig,
    RolloutConfig,
    TasksConfig,
    TrackingConfig,
    TrainConfig,
)
from legorl_jax.engine.base import EngineError  # noqa: E402
from legorl_jax.warm_start import gold_edits, qwen3_tool_call  # noqa: E402

MAX_LEN = 2048


def config_for(run_dir: pathlib.Path, *, steps: int = 1, group_size: int = 2) -> Config:
    return Config(
        tasks=TasksConfig(ids=["ratelimit-slow-rates-never-refill"], eval_split=None),
        rollout=RolloutConfig(
            group_size=group_size,
            concurrency=1,
            retries=0,
            runs_dir=str(run_dir.parent),
            experiment=run_dir.name,
            trial_timeout_s=300,
        ),
        train=TrainConfig(
            learning_rate=1e-3,
            max_tokens=MAX_LEN,
            checkpoint=CheckpointConfig(every=1, keep=3, async_save=False),
        ),
        loop=LoopConfig(steps=steps, validate_every=0),
    )


class GroupScript:
    """Per call: the first trial of each group fixes the task (edit, submit); the others submit at once.

    With `rollout.concurrency` 1 the calls arrive trial by trial. `fail_trials` are trial indices (in order of
    arrival, from 0) whose calls raise an engine error: an infrastructure failure of that trial only.
    """

    def __init__(self, tokenizer, task, group_size: int, fail_trials: tuple[int, ...] = ()):
        self.tokenizer = tokenizer
        self.fix = [qwen3_tool_call("str_replace", e) for e in gold_edits(task)] + [
            qwen3_tool_call("submit", {})
        ]
        self.group_size, self.fail_trials = group_size, fail_trials
        self.trial, self.turn = -1, 0

    def __call__(self, prompt, rid):
        if "<tool_response>" not in self.tokenizer.decode(prompt):  # a trial's first call: no tool result yet
            self.trial, self.turn = self.trial + 1, 0
        if self.trial in self.fail_trials:
            raise EngineError(f"scripted infrastructure failure of trial {self.trial}")
        first_of_group = self.trial % self.group_size == 0
        text = (
            self.fix[min(self.turn, len(self.fix) - 1)] if first_of_group else qwen3_tool_call("submit", {})
        )
        self.turn += 1
        return text


def make_engine(tokenizer, task, group_size: int, fail_trials: tuple[int, ...] = ()) -> ScriptedEngine:
    engine = ScriptedEngine(tokenizer, GroupScript(tokenizer, task, group_size, fail_trials))
    engine.max_len = MAX_LEN
    return engine


async def run(
    model_dir: str,
    run_dir: pathlib.Path,
    *,
    steps: int = 1,
    group_size: int = 2,
    fail_trials=(),
    aim_repo: str | None = None,
):
    """Runs the loop; returns (records, the engine's weight version, the checkpointed steps, the trainer
    state's step, the Aim run's hash).

    The run is built by run.build_parts: the proxies sample from the scripted engine (`rollout_engine=`),
    and new weights go to the real engine built there. The trainer trains on one device
    (`mesh.devices=[0]`; this process has 8).
    """
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.run import build_parts, load_tasks, run_loop

    config = config_for(run_dir, steps=steps, group_size=group_size)
    tracking = TrackingConfig(
        backend="aim" if aim_repo else "none",
        repo=aim_repo or TrackingConfig().repo,
        experiment="loop-test",
        run_name=run_dir.name,
    )
    config = dataclasses.replace(
        config,
        model=ModelConfig(path=model_dir),
        mesh=MeshConfig(devices=[0]),
        engine=EngineConfig(max_running=2, max_len=MAX_LEN, min_prefill_bucket=64),
        proxy=dataclasses.replace(config.proxy, context_length=MAX_LEN),
        tracking=tracking,
    )
    tasks, _ = load_tasks(config)
    tokenizer = load_tokenizer(model_dir)
    scripted = make_engine(tokenizer, tasks[0], group_size, tuple(fail_trials))
    async with build_parts(config, rollout_engine=scripted) as built:
        parts = built.parts
        records = await run_loop(parts, built.state, start_step=built.start_step)
        steps_saved = parts.checkpointer.all_steps()
        restored = parts.checkpointer.restore(parts.trainer.abstract_state()) if steps_saved else None
        version = parts.publisher.engine.weight_version
        run_hash = parts.tracker.run_hash if aim_repo else None
    state_step = None if restored is None else int(restored.state.step)
    return records, version, steps_saved, state_step, run_hash


if __name__ == "__main__":
    model_dir, run_dir = sys.argv[1], pathlib.Path(sys.argv[2])
    aim = sys.argv[sys.argv.index("--aim") + 1] if "--aim" in sys.argv else None
    records, version, saved, state_step, run_hash = asyncio.run(run(model_dir, run_dir, aim_repo=aim))
    print(
        json.dumps(
            {
                "records": [{"step": r.step, "trained": r.trained, "metrics": r.metrics} for r in records],
                "version": version,
                "checkpoints": saved,
                "optimiser_step": state_step,
                "run_hash": run_hash,
            }
        )
    )
