"""The fully-asynchronous loop on the tiny MoE with the built-in harness, the rollouts' replies scripted.

As loop_run.py, but trials run concurrently, so the script picks each reply by the trial the proxy session
belongs to (trial `<task>-0` of every group applies the gold edit and submits, the others submit at once),
and the scripted engine is also what the publisher updates: the versions it stamps on sampled tokens are
the ones the loop published, as a real engine's would be. Everything else is real and built by
`run.build_parts` (`engine=` the scripted engine): the built-in harness, Docker sandboxes, the verifier,
the trainer on the tiny MoE (one device: `mesh.devices=[0]`), the orbax checkpoint and the tracker.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import time

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
from legorl_jax.warm_start import gold_edits, qwen3_tool_call  # noqa: E402

MAX_LEN = 2048
TASK = "ratelimit-slow-rates-never-refill"


def config_for(
    run_dir: pathlib.Path,
    *,
    model_dir: str = "",
    validation: bool = False,
    resume: bool = False,
    **loop: object,
) -> Config:
    # a resumed run may ask for more steps than the first (loop.steps may differ from the checkpoint's)
    ignores = [*CheckpointConfig().ignore_on_resume, "loop.steps"]
    return Config(
        model=ModelConfig(path=model_dir) if model_dir else ModelConfig(),
        mesh=MeshConfig(devices=[0]),
        resume=resume,
        tasks=TasksConfig(ids=[TASK], eval_split="train" if validation else None),
        rollout=RolloutConfig(
            group_size=2,
            concurrency=4,
            retries=0,
            runs_dir=str(run_dir.parent),
            experiment=run_dir.name,
            trial_timeout_s=300,
        ),
        train=TrainConfig(
            learning_rate=1e-3,
            max_tokens=MAX_LEN,
            checkpoint=CheckpointConfig(every=1, keep=3, async_save=False, ignore_on_resume=ignores),
        ),
        engine=EngineConfig(max_running=2, max_len=MAX_LEN, min_prefill_bucket=64),
        tracking=TrackingConfig(backend="none"),
        loop=LoopConfig(**{"mode": "async", "steps": 2, "validate_every": 0, **loop}),
    )


class TrialScript:
    """The reply of each call, chosen by the trial of its proxy session (module docstring)."""

    def __init__(self, tokenizer, task):
        self.tokenizer = tokenizer
        self.fix = [qwen3_tool_call("str_replace", e) for e in gold_edits(task)] + [
            qwen3_tool_call("submit", {})
        ]
        self.proxies: list = []  # [training proxy, validation proxy]
        self.log: list[tuple[float, str, str]] = []  # (unix time, "train" | "eval", trial folder) per call

    def kind(self, rid: str) -> str:
        sid = rid.rpartition("-")[0]
        return "eval" if sid in self.proxies[1].sessions else "train"

    def __call__(self, prompt, rid):
        sid, _, turn = rid.rpartition("-")
        folder = next(str(p.sessions[sid].trial_dir) for p in self.proxies if sid in p.sessions)
        self.log.append((time.time(), self.kind(rid), folder))
        trial_id = next(p.sessions[sid].trial_id for p in self.proxies if sid in p.sessions)
        if trial_id.endswith("-0"):
            return self.fix[min(int(turn), len(self.fix) - 1)]
        return qwen3_tool_call("submit", {})


class FiguresEngine(ScriptedEngine):
    """The scripted engine with figures of its own, as an engine fleet reports them (`engine/<i>/*`,
    engine/base.py `ReportsFigures`): two engines, their requests so far and the versions published."""

    async def metrics(self) -> dict[str, float]:
        return {
            "engine/0/healthy": 1.0,
            "engine/1/healthy": 1.0,
            "engine/0/running": float(len(self.calls)),
            "engine/0/updates": float(len(self.updates)),
        }


@dataclasses.dataclass
class AsyncRun:
    records: list
    engine: ScriptedEngine
    script: TrialScript
    cursor: dict | None  # the last checkpoint's
    steps_saved: list[int]


async def run(
    model_dir: str,
    run_dir: pathlib.Path,
    *,
    resume: bool = False,
    validation: bool = False,
    delay_s: float = 0.0,
    eval_delay_s: float = 0.0,
    engine_figures: bool = False,
    **loop: object,
) -> AsyncRun:
    """Runs (or, with `resume`, continues from its last checkpoint) the async loop of `run_dir`; every call
    takes `delay_s` (a validation trial's `eval_delay_s`); `engine_figures`: the engine reports figures of
    its own (`FiguresEngine`)."""
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.run import build_parts, load_tasks, run_loop

    config = config_for(run_dir, model_dir=model_dir, validation=validation, resume=resume, **loop)
    config = dataclasses.replace(config, proxy=dataclasses.replace(config.proxy, context_length=MAX_LEN))
    tasks, _ = load_tasks(config)
    tokenizer = load_tokenizer(model_dir)
    script = TrialScript(tokenizer, tasks[0])
    engine = (FiguresEngine if engine_figures else ScriptedEngine)(
        tokenizer,
        script,
        delay_s=lambda rid: eval_delay_s if script.kind(rid) == "eval" else delay_s,
        weight_version="default",  # a resume's first publish sets the checkpoint's version
    )
    engine.max_len = MAX_LEN
    async with build_parts(config, engine=engine) as built:
        parts = built.parts
        script.proxies = [parts.proxy, parts.validation_proxy]
        records = await run_loop(parts, built.state, start_step=built.start_step, cursor=built.cursor)
        saved = parts.checkpointer.all_steps()
        last = parts.checkpointer.read_meta(saved[-1])["cursor"] if saved else None
    return AsyncRun(records, engine, script, last, saved)
