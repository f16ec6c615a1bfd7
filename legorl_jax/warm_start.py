"""A supervised warm start: the trainer on gold-patch demonstrations rendered through the built-in harness.

    report = await warm_start(config.loop.warm_start, tasks, base_dir, same_tasks_as_rl=True,
                              algo=config.algo, train=config.train, harness=config.harness,
                              rollout=config.rollout, proxy=config.proxy, sandbox=config.sandbox,
                              verifier=config.verifier, max_len=config.engine.max_len,
                              dtype=config.model.dtype, seed=config.seed)
    report.model_dir                                                 # an HF directory, cached

A random-initialised tiny model cannot call tools, so RL on it never sees a reward. The warm start makes
demonstrations the way a rollout is made: the real built-in harness runs in a real sandbox against the
capture proxy, whose engine (`TeacherEngine`) replies with the gold patch's edits as the harness's own tool
calls (`str_replace` per hunk, with the fewest context lines that make `old` unique in the file, then
`submit`). With `harness.name` codex the demonstrator is Codex CLI itself, on the proxy's Responses surface:
its shell tool runs `apply_patch` with the gold patch, then a reply without a tool call ends its turn
(`codex_demonstration_replies`); any other harness is demonstrated through the built-in one. The tools really
run, the verifier grades the result, and only demonstrations scored 1 are kept.
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
from typing import Any

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
from legorl_jax.engine.base import SamplingParams, check_generate_args, check_input_ids
from legorl_jax.tasks.patchset import parse_patch, split_lines
from legorl_jax.tasks.schema import Task
from legorl_jax.types import Generation, Trajectory

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
            f"{len(self.kept)} gold-patch demonstrations ({', '.join(self.kept)}) of {where}; "
            f"demonstration NLL per token {self.first_loss:.3f} -> {self.last_loss:.3f}; "
            f"weights {self.model_dir}"
        )


# --------------------------------------------------------------------------------------------------
# demonstrations


def gold_edits(task: Task) -> list[dict[str, str]]:
    """The gold patch as `str_replace` arguments, one per hunk, each `old` unique in its file."""
    repo = pathlib.Path(task.image_context)
    edits = []
    for patch in parse_patch(task.patch):
        if patch.binary or not patch.old_path or not patch.new_path or patch.old_path != patch.new_path:
            raise ValueError(
                f"task {task.instance_id!r}: the gold patch {patch.new_path!r} is not an edit of one file"
            )
        source = (repo / patch.old_path).read_text()
        for old_lines, new_lines in _hunks(patch.text):
            edits.append(
                {
                    "path": patch.new_path,
                    **_smallest_unique(source, old_lines, new_lines, task, patch.new_path),
                }
            )
    if not edits:
        raise ValueError(f"task {task.instance_id!r}: the gold patch has no hunk")
    return edits


def _hunks(text: str) -> list[tuple[list[str], list[str]]]:
    """(old side, new side) lines of every hunk, each line keeping its `-`/`+`/` ` kind as first char."""
    hunks: list[tuple[list[str], list[str]]] = []
    for line in split_lines(text):
        if line.startswith("@@"):
            hunks.append(([], []))
        elif hunks and line[:1] in (" ", "-", "+"):
            kind, body = line[0], line[1:]
            if kind in (" ", "-"):
                hunks[-1][0].append(kind + body)
            if kind in (" ", "+"):
                hunks[-1][1].append(kind + body)
    return hunks


def _smallest_unique(source: str, old: list[str], new: list[str], task: Task, path: str) -> dict[str, str]:
    """`old`/`new` trimmed to the changed lines plus the fewest context lines that keep `old` unique."""
    lead = 0
    while lead < min(len(old), len(new)) and old[lead][0] == " " and new[lead][0] == " ":
        lead += 1
    trail = 0
    while trail < min(len(old), len(new)) - lead and old[-1 - trail][0] == " " and new[-1 - trail][0] == " ":
        trail += 1
    for extra in range(0, max(lead, trail) + 1):
        a, b = max(lead - extra, 0), max(trail - extra, 0)
        old_text = "".join(line[1:] for line in old[a : len(old) - b])
        new_text = "".join(line[1:] for line in new[a : len(new) - b])
        if old_text and source.count(old_text) == 1:
            return {"old": old_text, "new": new_text}
    raise ValueError(f"task {task.instance_id!r}: no unique `old` text for a hunk of {path!r}")


def demonstration_replies(task: Task, render_call: Any) -> list[str]:
    """The assistant texts of the demonstration: one tool call per reply, the edits then `submit`."""
    calls = [("str_replace", edit) for edit in gold_edits(task)] + [("submit", {})]
    return [render_call(name, args) for name, args in calls]


def apply_patch_text(task: Task) -> str:
    """The gold patch in Codex's `apply_patch` format: `*** Add File` / `*** Delete File` / `*** Update File`
    sections, an update's hunks each after a bare `@@` with the diff's own context, `-` and `+` lines (Codex
    finds each hunk's old lines in order in the file, so the diff's context is what places it)."""
    out = ["*** Begin Patch"]
    for patch in parse_patch(task.patch):
        if patch.binary or (patch.old_path and patch.new_path and patch.old_path != patch.new_path):
            raise ValueError(
                f"task {task.instance_id!r}: apply_patch cannot express the gold patch's change of "
                f"{patch.path!r} (binary or renamed)"
            )
        hunks = _hunk_lines(patch.text)
        if patch.old_path is None:
            out.append(f"*** Add File: {patch.new_path}")
            out += [line for hunk in hunks for line in hunk if line.startswith("+")]
        elif patch.new_path is None:
            out.append(f"*** Delete File: {patch.old_path}")
        else:
            out.append(f"*** Update File: {patch.new_path}")
            for hunk in hunks:
                out += ["@@", *hunk]
    out.append("*** End Patch")
    return "\n".join(out)


def _hunk_lines(text: str) -> list[list[str]]:
    """The ` `/`-`/`+` lines of every hunk of one file's diff, without their newlines."""
    hunks: list[list[str]] = []
    for line in split_lines(text):
        if line.startswith("@@"):
            hunks.append([])
        elif hunks and line[:1] in (" ", "-", "+"):
            hunks[-1].append(line.rstrip("\n"))
    return hunks


def codex_demonstration_replies(task: Task, render_call: Any) -> list[str]:
    """The assistant texts of a demonstration through Codex: its shell tool (`exec_command`) running
    `apply_patch` with the gold patch (Codex intercepts that command and applies the patch itself), then a
    reply without a tool call, which ends Codex's turn."""
    # Every line of the patch starts with "***", "@@", " ", "-" or "+", so none ends the here-document.
    command = f"apply_patch <<'EOF'\n{apply_patch_text(task)}\nEOF"
    return [render_call("exec_command", {"cmd": command}), "The fix is applied."]


DEMONSTRATIONS = {"builtin": demonstration_replies, "codex": codex_demonstration_replies}
"""Harness name -> its demonstration's replies; any other harness is demonstrated through the built-in one."""


def qwen3_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as a Qwen3 (hermes JSON) model writes it."""
    return (
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "\n</tool_call>"
    )


class TeacherEngine:
    """An `Engine` that replies with fixed texts, one per call: the demonstrator behind the proxy.

    Its log-probs are 0 (nothing is sampled); the warm start never uses them (no importance weighting).
    Asked for the k likeliest tokens, it names its reply's token at log-prob 0 and k - 1 others at -inf.
    """

    def __init__(self, tokenizer: Any, replies: Sequence[str], *, max_len: int, eos_id: int):
        self.tokenizer, self.replies, self.max_len, self.eos_id = tokenizer, list(replies), max_len, eos_id
        self.calls = 0

    async def generate(
        self,
        input_ids: Any,
        sampling: SamplingParams,
        *,
        return_routed_experts: bool = False,
        routed_experts_start_len: int = 0,
        rid: str | None = None,
        top_logprobs: int = 0,
        session_id: str | None = None,
    ) -> Generation:
        prompt = check_input_ids(input_ids)
        check_generate_args(
            prompt,
            sampling,
            return_routed_experts,
            routed_experts_start_len,
            rid,
            top_logprobs=top_logprobs,
            session_id=session_id,
        )
        text = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        out = [*self.tokenizer.encode(text), self.eos_id]
        if len(out) > sampling.max_new_tokens:
            raise ValueError(
                f"a demonstration reply of {len(out)} tokens exceeds max_new_tokens={sampling.max_new_tokens}"
            )
        top_ids = top_lps = None
        if top_logprobs:
            top_ids = np.asarray(
                [[t, *[x for x in range(top_logprobs) if x != t][: top_logprobs - 1]] for t in out], np.int32
            )
            top_lps = np.full(top_ids.shape, -np.inf, np.float32)
            top_lps[:, 0] = 0.0
        return Generation(
            np.asarray(out, np.int32),
            np.zeros(len(out), np.float32),
            None,
            "stop",
            "teacher",
            len(prompt),
            routed_experts_start=routed_experts_start_len,
            output_top_ids=top_ids,
            output_top_logprobs=top_lps,
        )

    async def prompt_logprobs(self, input_ids: Any, start: int, *, temperature: float = 1.0) -> np.ndarray:
        return np.zeros(len(list(input_ids)) - start, np.float32)

    async def update_weights(self, source: Any, version: str) -> None:
        raise ValueError("the teacher engine has no weights")

    async def health(self) -> bool:
        return True

    async def abort(self, rid: str) -> None:
        return None


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
    from legorl_jax.harness.builtin import BuiltinHarness
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
    demonstrator: Any = BuiltinHarness(**harness.options) if harness.name == "builtin" else BuiltinHarness()
    replies_of = DEMONSTRATIONS.get(harness.name, demonstration_replies)
    if harness.name == "codex":
        from legorl_jax.harness.codex import CodexHarness

        demonstrator = CodexHarness(**harness.options)
    kept = []
    for task in tasks:
        replies = replies_of(task, qwen3_tool_call)
        engine = TeacherEngine(tokenizer, replies, max_len=max_len, eos_id=eos)
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
                    step_limit=len(replies),  # the whole demonstration, whatever the RL run's step limit
                    model=harness.model,
                    sandbox=sandbox,
                    verifier=verifier,
                ),
            )
        finally:
            await capture.stop()
        if trajectory.valid and trajectory.reward == 1.0:
            kept.append(trajectory)
        else:
            log.warning(
                "warm start: the demonstration of %s scored %s (%s); left out",
                task.instance_id,
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
            f"warm start: a demonstration has {longest} tokens, more than "
            f"train.max_tokens={settings.max_tokens}"
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
    )
    meta_path.write_text(json.dumps(dataclasses.asdict(report), indent=1))
    return report
