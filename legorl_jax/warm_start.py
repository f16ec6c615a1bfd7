"""A supervised warm start: the trainer on gold-patch demonstrations recorded through the run's own harness.

    report = await warm_start(config.loop.warm_start, tasks, base_dir, same_tasks_as_rl=True,
                              algo=config.algo, train=config.train, harness=config.harness,
                              rollout=config.rollout, proxy=config.proxy, sandbox=config.sandbox,
                              verifier=config.verifier, max_len=config.engine.max_len,
                              dtype=config.model.dtype, seed=config.seed)
    report.model_dir                                                 # an HF directory, cached per harness

A random-initialised tiny model cannot call tools, so RL on it never sees a reward. The warm start makes
demonstrations the way a rollout is made: the run's harness (`harness.name`, any of them, unmodified) runs in
a real sandbox against the capture proxy, whose engine is the teacher (`legorl_jax.teacher`): it reads the
tools or the text protocol the harness declared in its request and replies with the gold fix in that
protocol (the built-in harness's `str_replace` per hunk then `submit`; a shell tool's `git apply`, Codex's
`apply_patch`, Terminus-2's keystrokes...), then ends the episode the harness's way. Side conversations get
plausible replies and stay on side branches. A harness the teacher cannot drive is its `TeacherError`. The
tools really run, the verifier grades the result, and only demonstrations scored 1 are kept.
The recorded sequences (the proxy's exact token ids, loss mask on the assistant tokens) are trained on by the
same `Trainer.update` with advantage 1 and no importance weighting: with one update per batch the ratio is
exactly 1, so the policy-gradient step is the log-likelihood gradient; its `nll` is the loss reported. The
result is written as an HF directory under `loop.warm_start.cache_dir`, keyed by the base model, the tasks,
the steps and the rate, and reused.

`report` says exactly what was done (tasks demonstrated, demonstrations kept, steps, final loss), and
whether the demonstrated tasks are the ones RL is measured on (`split: same`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import pathlib
import shutil
import time
from collections.abc import Sequence

import numpy as np

from legorl_jax.config import (
    AlgoConfig,
    HarnessConfig,
    ProxyConfig,
    RolloutConfig,
    SandboxConfig,
    TrainConfig,
    VerifierConfig,
    WarmStartConfig,
)
from legorl_jax.tasks.schema import Task
from legorl_jax.teacher import Teacher, TeacherEngine
from legorl_jax.teacher import gold_edits as gold_edits  # noqa: F401 (tests/loop/loop_run.py)
from legorl_jax.teacher import qwen3_tool_call as qwen3_tool_call  # noqa: F401 (as above)
from legorl_jax.types import Trajectory

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class WarmStartReport:
    """What the warm start did (printed in the run summary)."""

    model_dir: str
    tasks: tuple[str, ...]
    kept: tuple[str, ...]
    steps: int
    learning_rate: float
    first_loss: float
    last_loss: float
    seconds: float
    cached: bool
    same_tasks_as_rl: bool
    stop_below: float | None = None
    harness: str = "builtin"

    def describe(self) -> str:
        where = (
            "the same tasks RL trains and is measured on"
            if self.same_tasks_as_rl
            else "tasks RL is not measured on"
        )
        how = "reused from the cache" if self.cached else f"made in {self.seconds:.0f} s"
        stopped = "" if self.stop_below is None else f" (until the NLL fell below {self.stop_below:g})"
        return (
            f"warm start ({how}): {self.steps} supervised step{'s' * (self.steps != 1)}{stopped} "
            f"at lr {self.learning_rate:g} on "
            f"{len(self.kept)} gold-patch demonstrations through the {self.harness} harness "
            f"({len(self.kept)} of {len(self.tasks)} kept: {', '.join(self.kept)}) of {where}; "
            f"demonstration NLL per token {self.first_loss:.3f} -> {self.last_loss:.3f}; "
            f"weights {self.model_dir}"
        )


# --------------------------------------------------------------------------------------------------
# demonstrations


DEMONSTRATION_STEP_LIMIT = 12
"""The most model calls a demonstration may take, whatever the RL run's step limit (the teacher's plans
take two to four)."""


async def record_demonstrations(
    tasks: Sequence[Task],
    model_dir: str,
    folder: pathlib.Path,
    *,
    harness: HarnessConfig,
    proxy: ProxyConfig,
    sandbox: SandboxConfig,
    verifier: VerifierConfig,
    trial_timeout_s: float,
    max_len: int,
) -> list[Trajectory]:
    """One demonstration trial per task (module docstring); those not scored 1 are left out and logged."""
    from legorl_jax.harness import get_harness
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.proxy import CaptureProxy
    from legorl_jax.rollout.settings import TrialSettings
    from legorl_jax.rollout.trial import run_trial

    tokenizer = load_tokenizer(model_dir)
    eos = tokenizer.token_to_id("<|im_end|>")
    if eos is None:
        raise ValueError(f"warm start: the tokenizer of {model_dir} has no <|im_end|> token to end a reply")
    rollout = RolloutConfig(
        group_size=1,
        concurrency=1,
        trial_timeout_s=trial_timeout_s,
        retries=1,
        runs_dir=str(folder),
        experiment="demonstrations",
    )
    proxy_config = dataclasses.replace(proxy, archive_dir=str(folder / "sessions"), max_consecutive_no_tool=0)
    demonstrator = get_harness(harness.name, **harness.options)
    kept = []
    for task in tasks:
        teacher = Teacher(task, harness.name, proxy_config)
        engine = TeacherEngine(tokenizer, teacher, max_len=max_len, eos_id=eos)
        capture = CaptureProxy(engine, tokenizer, proxy_config)
        await capture.start("127.0.0.1", 0)
        try:
            trajectory = await run_trial(
                task,
                harness=demonstrator,
                proxy=capture,
                trial_id=task.instance_id,
                group_id=task.instance_id,
                trial_dir=folder / "trials" / task.instance_id,
                trials=TrialSettings(
                    rollout=rollout,
                    step_limit=DEMONSTRATION_STEP_LIMIT,  # the whole demonstration, whatever RL's limit
                    model=harness.model,
                    sandbox=sandbox,
                    verifier=verifier,
                ),
            )
        finally:
            await capture.stop()
        if teacher.error is not None:
            raise teacher.error
        if trajectory.valid and trajectory.reward == 1.0:
            kept.append(trajectory)
        else:
            log.warning(
                "warm start: the demonstration of %s through %s scored %s (%s); left out",
                task.instance_id,
                harness.name,
                trajectory.reward,
                trajectory.outcome.value,
            )
    return kept


# --------------------------------------------------------------------------------------------------
# training


def cache_key(
    ws: WarmStartConfig, tasks: Sequence[Task], model_dir: str, *, max_tokens: int, harness: str
) -> str:
    weights = pathlib.Path(model_dir) / "model.safetensors"
    stamp = weights.stat().st_size if weights.exists() else 0
    blob = json.dumps(
        {
            "model": str(pathlib.Path(model_dir).resolve()),
            "weights": stamp,
            "tasks": [t.instance_id for t in tasks],
            "patches": [hashlib.sha256(t.patch.encode()).hexdigest()[:16] for t in tasks],
            "steps": ws.steps,
            "stop_below": ws.stop_below,
            "lr": ws.learning_rate,
            "max_tokens": max_tokens,
            "harness": harness,
            "version": 1,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def supervised_configs(
    ws: WarmStartConfig, algo: AlgoConfig, train: TrainConfig
) -> tuple[AlgoConfig, TrainConfig]:
    """The warm start's trainer settings: advantage 1, no IS weights, native routing, a constant rate.

    The optimiser is AdamW at its schema defaults, not the RL run's settings: the cached warm start depends
    only on what `cache_key` names (model, tasks, steps, rate, row length).
    """
    supervised = AlgoConfig(loss=algo.loss, tis="none", mis="none", kl_coef=0.0, temperature=1.0)
    settings = TrainConfig(
        learning_rate=ws.learning_rate,
        total_steps=ws.steps,
        max_tokens=train.max_tokens,
        routing_replay=False,
        routing_agreement_every=0,
        logprob_impl=train.logprob_impl,
    )
    return supervised, settings


async def warm_start(
    ws: WarmStartConfig,
    tasks: Sequence[Task],
    model_dir: str,
    *,
    same_tasks_as_rl: bool,
    algo: AlgoConfig,
    train: TrainConfig,
    harness: HarnessConfig,
    rollout: RolloutConfig,
    proxy: ProxyConfig,
    sandbox: SandboxConfig,
    verifier: VerifierConfig,
    max_len: int,
    dtype: str,
    seed: int,
) -> WarmStartReport:
    """The warm-started HF directory for `tasks` (made, or taken from the cache), and what was done.

    `algo` and `train` give the loss, the row length and the log-prob op (`supervised_configs`); the
    demonstrations are recorded with `harness`, `proxy`, `sandbox`, `verifier`, the engine's `max_len` and
    `rollout.trial_timeout_s`; the model loads in `dtype`.
    """
    from legorl_jax.model import load_hf
    from legorl_jax.train.batch import pack_trajectories
    from legorl_jax.train.publish import export_hf
    from legorl_jax.train.step import Trainer

    root = pathlib.Path(ws.cache_dir)
    key = cache_key(ws, tasks, model_dir, max_tokens=train.max_tokens, harness=harness.name)
    done = root / key / "model"
    meta_path = root / key / "report.json"
    if done.is_dir() and meta_path.exists():
        return dataclasses.replace(
            WarmStartReport(**{**json.loads(meta_path.read_text()), "cached": True}),
            same_tasks_as_rl=same_tasks_as_rl,
        )
    started = time.monotonic()
    work = root / key / "work"
    shutil.rmtree(work, ignore_errors=True)
    demos = await record_demonstrations(
        tasks,
        model_dir,
        work,
        harness=harness,
        proxy=proxy,
        sandbox=sandbox,
        verifier=verifier,
        trial_timeout_s=rollout.trial_timeout_s,
        max_len=max_len,
    )
    if not demos:
        raise RuntimeError(
            f"warm start: no demonstration of {[t.instance_id for t in tasks]} scored 1; see {work}"
        )
    supervised, settings = supervised_configs(ws, algo, train)
    trainer = Trainer(load_hf(model_dir, dtype), supervised, settings)
    longest = max(len(s.token_ids) for d in demos for s in d.sequences)
    if longest > settings.max_tokens:
        raise ValueError(
            f"warm start: a demonstration through the {harness.name} harness has {longest} tokens, more than "
            f"train.max_tokens={settings.max_tokens}; its prompts need rows (train.max_tokens) and an engine "
            "window (engine.max_len) that hold them (conf/experiment/demo.yaml lists each harness's)"
        )
    batch, stats = pack_trajectories(
        demos,
        np.ones(len(demos), np.float32),
        max_tokens=settings.max_tokens,
        row_multiple=trainer.row_multiple,
    )
    state = trainer.init_state(seed=seed)
    losses = []
    for step in range(ws.steps):
        state, update = await asyncio.to_thread(trainer.update, state, batch, stats)
        losses.append(update.nll)  # the demonstration's NLL per token before this step's update
        done_early = ws.stop_below is not None and losses[-1] < ws.stop_below
        if step % 10 == 0 or step == ws.steps - 1 or done_early:
            log.info(
                "warm start step %d/%d: demonstration NLL per token %.4f", step + 1, ws.steps, losses[-1]
            )
        if done_early:
            break
    export_hf(trainer.policy_of(state.params), root / key, "model", dtype="float32", source_dir=model_dir)
    report = WarmStartReport(
        model_dir=str(done),
        tasks=tuple(t.instance_id for t in tasks),
        kept=tuple(d.task_id for d in demos),
        steps=len(losses),
        learning_rate=ws.learning_rate,
        first_loss=float(losses[0]),
        last_loss=float(losses[-1]),
        seconds=time.monotonic() - started,
        cached=False,
        same_tasks_as_rl=same_tasks_as_rl,
        stop_below=ws.stop_below,
        harness=harness.name,
    )
    meta_path.write_text(json.dumps(dataclasses.asdict(report), indent=1))
    return report
