"""One or more loop steps on the tiny MoE with the built-in harness, the rollouts' replies scripted.

Used in-process by test_loop.py and as a subprocess (`python loop_run.py MODEL_DIR RUN_DIR --aim REPO`) when
the run is tracked in Aim (never imported into the pytest process: Aim's exit hook prints a traceback there).

The proxy samples from a `ScriptedEngine` (the engine boundary, tests/scripted_engine.py) so that each group
mixes a solved and an unsolved trial: the first trial of a group applies the gold edit and submits, the
others submit at once. Everything else is real: the built-in harness, Docker sandboxes, the verifier, the
trainer on the tiny MoE, the orbax checkpoint, publishing into a real `JaxEngine`, and the trackers.
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
            learning_rate=1e-3, max_tokens=MAX_LEN, checkpoint=CheckpointConfig(every=1, keep=3)
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
    tracker=None,
):
    """Runs the loop; returns (records, the engine's weight version, the trainer state's step).

    The engine, the proxies, the harness and the trackers are built as run.build_parts builds them; the
    proxies sample from the scripted engine, and new weights go to the real one. The trainer is built here
    on one device (build_parts' trainer takes a mesh over every device, and this process has 8).
    """
    from legorl_jax.engine import open_engine
    from legorl_jax.harness import get_harness
    from legorl_jax.loop_step import LoopSettings, Parts
    from legorl_jax.model import load_hf
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.run import load_tasks, make_tracker, run_loop, serving_proxies
    from legorl_jax.train.checkpoint import Checkpointer
    from legorl_jax.train.publish import Publisher
    from legorl_jax.train.step import Trainer

    config = config_for(run_dir, steps=steps, group_size=group_size)
    tracking = TrackingConfig(
        backend="aim" if aim_repo else "none",
        repo=aim_repo or TrackingConfig().repo,
        experiment="loop-test",
        run_name=run_dir.name,
    )
    config = dataclasses.replace(
        config,
        engine=EngineConfig(max_running=2, max_len=MAX_LEN, min_prefill_bucket=64),
        proxy=dataclasses.replace(config.proxy, context_length=MAX_LEN),
        tracking=tracking,
    )
    tasks, _ = load_tasks(config)
    tokenizer = load_tokenizer(model_dir)
    trainer = Trainer(load_hf(model_dir, "float32"), config.algo, config.train)
    tracker = tracker or make_tracker(config, run_dir, job="", resume_hash=None)
    checkpoint = CheckpointConfig(directory=str(run_dir / "checkpoints"), every=1, keep=3, async_save=False)
    scripted = make_engine(tokenizer, tasks[0], group_size, tuple(fail_trials))
    try:
        async with (
            open_engine(config.engine, model_dir) as engine,
            serving_proxies(config, scripted, model_dir, run_dir) as (proxy, _),
        ):
            with Checkpointer(checkpoint, run_config={"test": "loop"}) as ckpt:
                parts = Parts(
                    LoopSettings.of(config),
                    trainer,
                    proxy,
                    get_harness(config.harness.name, **config.harness.options),
                    tasks,
                    [],
                    ckpt,
                    Publisher(engine, mode="in_process"),
                    tracker,
                )
                records = await run_loop(parts, trainer.init_state(seed=0), start_step=0)
                steps_saved = ckpt.all_steps()
                restored = ckpt.restore(trainer.abstract_state()) if steps_saved else None
            version = engine.weight_version
    finally:
        tracker.close()
    state_step = None if restored is None else int(restored.state.step)
    run_hash = getattr(tracker.trackers[-1], "run_hash", None) if aim_repo else None
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
