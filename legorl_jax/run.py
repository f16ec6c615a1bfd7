"""One training job from a resolved `Config`: build the parts, resume or start, run the loop, summarise.

    summary = asyncio.run(train(config, job="algo=cispo"))      # what train.py calls
    async with build_parts(config) as built:                    # the same parts, without the loop
        records = await run_loop(built.parts, built.state, start_step=built.start_step, cursor=built.cursor)

`run_loop` picks the loop of `loop.mode`: loop.py (sync) or async_loop.py (async); both end their steps
through loop_step.finish_step.

Layout of a run (`<rollout.runs_dir>/<rollout.experiment>/`): `checkpoints/` (orbax), `trials/step_<s>/`
(every trial's archive), `validation/`, `weights/` (disk publishing), `metrics.jsonl`, `summary.md` and
`curves.png`. Aim runs go to `tracking.repo` (one repository for all jobs of a sweep).

On several processes (`mesh.distributed.enabled`), process 0 runs all of the above; the others build the same
trainer and start state and follow its trainer calls (`follow_process_0`, train/commands.py); `train` returns
None there.

Starting where a run already is (trials, metrics, checkpoints: run_folder.py) is refused unless `resume=true`
or `overwrite=true` (which moves the old run aside, never deletes it); with `resume=true` the last
checkpoint's state, loop cursor and Aim run continue, and the trial archive of steps after it (collected,
never trained on) is moved aside to `trials/step_<s>.abandoned-<time>`. The engines and router the run starts
log into `logs/`; SIGTERM / SIGINT stop the run after saving what it finished (train/checkpoint.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import pathlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from legorl_jax.async_loop import run_async_loop, set_aside_unfinished_groups
from legorl_jax.config import Config
from legorl_jax.loop import run_sync_loop
from legorl_jax.loop_step import LoopCursor, LoopSettings, Parts, StepRecord
from legorl_jax.monitor.tracker import Trackers
from legorl_jax.rollout.executors import open_executor, proxy_host
from legorl_jax.run_folder import (
    claim_run_folder,
    log_paths,
    set_aside_uncommitted_checkpoints,
    with_logs_under,
)
from legorl_jax.tasks.schema import Task

if TYPE_CHECKING:
    from legorl_jax.engine.base import Engine
    from legorl_jax.proxy import CaptureProxy
    from legorl_jax.train.checkpoint import Checkpointer, Restored
    from legorl_jax.train.commands import Commands, Followed
    from legorl_jax.train.distributed import Processes
    from legorl_jax.train.state import TrainState
    from legorl_jax.train.step import Trainer
    from legorl_jax.warm_start import WarmStartReport

log = logging.getLogger(__name__)
DEFAULT_TINY_MODEL = "runs/tiny-moe"


@dataclasses.dataclass
class RunSummary:
    """What a job did: its folder, its steps, the warm start (if any), and the Aim run."""

    run_dir: pathlib.Path
    records: list[StepRecord]
    warm_start: str
    aim_repo: str | None
    run_id: str
    start_step: int


def run_dir(config: Config) -> pathlib.Path:
    return pathlib.Path(config.rollout.runs_dir) / config.rollout.experiment


def ensure_model(path: str) -> str:
    """`path` if it is an HF directory; the default tiny model is made on first use; else an error."""
    folder = pathlib.Path(path)
    if (folder / "config.json").is_file():
        return str(folder)
    if folder.as_posix().rstrip("/").endswith(DEFAULT_TINY_MODEL):
        from legorl_jax.model.tiny import make_tiny_model

        log.info("making the tiny random Qwen3-MoE at %s (legorl_jax/model/tiny.py)", folder)
        make_tiny_model(folder)
        return str(folder)
    raise FileNotFoundError(f"model.path {path!r} is not an HF model directory (no config.json)")


def load_tasks(config: Config) -> tuple[list[Task], list[Task]]:
    """(train tasks, validation tasks) of `tasks`, with `tasks.ids` applied to the train split."""
    from legorl_jax.tasks.registry import find_task, load_suite

    tc = config.tasks
    rows = {"image_template": tc.image_template, "test_cmd": tc.test_cmd, "log_parser": tc.log_parser}
    train = load_suite(tc.suite, tc.split, **rows)
    if tc.ids:
        train = [find_task(train, i) for i in tc.ids]
    if not train:
        raise ValueError(f"tasks: the suite {tc.suite!r} has no task in split {tc.split!r}")
    validation = load_suite(tc.suite, tc.eval_split, **rows) if tc.eval_split else []
    return train, validation


def set_aside_uncommitted_trials(folder: pathlib.Path, next_step: int) -> list[pathlib.Path]:
    """Moves `step_<s>` archives and metrics rows with s >= next_step (never checkpointed) aside.

    Returns the new paths. Aim keeps a re-done step's first values too (a run's tracked values are not
    deleted); `metrics.jsonl`, the summary's source, holds each step once.
    """
    moved = []
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for kind in ("trials", "validation/trials"):
        root = folder / kind
        if not root.is_dir():
            continue
        for step_dir in sorted(root.glob("step_*")):
            suffix = step_dir.name.removeprefix("step_")
            if suffix.isdigit() and int(suffix) >= next_step:
                target = step_dir.with_name(f"{step_dir.name}.abandoned-{stamp}")
                step_dir.rename(target)
                moved.append(target)
    metrics = folder / "metrics.jsonl"
    if metrics.is_file():  # rows of steps logged but never checkpointed leave the run's record, kept aside
        kept: list[str] = []
        later: list[str] = []
        for line in metrics.read_text().splitlines():
            if line.strip():
                (kept if json.loads(line)["step"] < next_step else later).append(line)
        if later:
            aside = folder / f"metrics.abandoned-{stamp}.jsonl"
            aside.write_text("\n".join(later) + "\n")
            moved.append(aside)
            metrics.write_text("".join(f"{line}\n" for line in kept))
    return moved


def make_tracker(config: Config, folder: pathlib.Path, *, job: str, resume_hash: str | None) -> Trackers:
    """The run's trackers: `metrics.jsonl` in `folder`, and with `tracking.backend=aim` the Aim run (last;
    continued when `resume_hash` names it)."""
    from legorl_jax.monitor.tracker import JsonlTracker, Tracker

    trackers: list[Tracker] = [JsonlTracker(folder / "metrics.jsonl")]
    if config.tracking.backend == "aim":
        from legorl_jax.monitor.aim_tracker import AimTracker

        trackers.append(
            AimTracker(
                config.tracking.repo,
                experiment=config.tracking.experiment or config.rollout.experiment,
                run_name=config.tracking.run_name or job or config.rollout.experiment,
                tags=[f"harness:{config.harness.name}"],  # Aim's UI groups and filters runs by it
                resume_hash=resume_hash,
            )
        )
    return Trackers(*trackers)


def run_config_of(config: Config) -> dict[str, Any]:
    """The config a checkpoint records and a resume must match (minus the resume switch itself)."""
    plain = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    plain.pop("resume", None)
    plain.pop("overwrite", None)
    return plain


@dataclasses.dataclass
class Built:
    """A run's parts and where it starts: the state and loop step (a resume's), the warm start's account, and
    the checkpoint's loop cursor (None on a fresh run; the async loop continues from it)."""

    parts: Parts
    state: TrainState
    start_step: int
    warm_start: str
    cursor: LoopCursor | None = None


def open_checkpointer(config: Config, commands: Commands | None = None) -> Checkpointer:
    """The run's checkpointer (a `LeadingCheckpointer` when `commands` go to other processes); refuses a
    folder that holds a run unless `resume=true`, and `resume=true` without a checkpoint."""
    from legorl_jax.train.checkpoint import Checkpointer
    from legorl_jax.train.commands import LeadingCheckpointer

    folder = run_dir(config)
    settings = config.train.checkpoint
    if settings.directory is None:
        settings = dataclasses.replace(settings, directory=str(folder / "checkpoints"))
    if commands is None:
        checkpointer = Checkpointer(settings, run_config=run_config_of(config))
    else:
        checkpointer = LeadingCheckpointer(settings, run_config=run_config_of(config), commands=commands)
    latest = checkpointer.latest_step()
    if latest is not None and not config.resume:
        checkpointer.close()
        raise FileExistsError(
            f"{folder} already holds a run (checkpoint step {latest}): pass resume=true to continue it, "
            f"or choose another rollout.experiment"
        )
    if config.resume and latest is None:
        checkpointer.close()
        raise FileNotFoundError(
            f"resume=true but {folder / 'checkpoints'} holds no checkpoint to resume from"
        )
    return checkpointer


def make_trainer(config: Config, model_dir: str, commands: Commands | None = None) -> Trainer:
    """The trainer of `model_dir` on the mesh over every process's devices (a `LeadingTrainer` when
    `commands` go to other processes)."""
    from legorl_jax.model import load_hf
    from legorl_jax.model.sharding import rules_from_config
    from legorl_jax.train import distributed
    from legorl_jax.train.commands import LeadingTrainer
    from legorl_jax.train.step import Trainer

    policy = load_hf(model_dir, config.model.dtype)
    mesh, rules = distributed.global_mesh(config.mesh), rules_from_config(config.mesh)
    if commands is None:
        return Trainer(policy, config.algo, config.train, mesh=mesh, rules=rules)
    return LeadingTrainer(policy, config.algo, config.train, mesh=mesh, rules=rules, commands=commands)


def start_state(config: Config, trainer: Trainer, checkpointer: Checkpointer) -> Restored:
    """The trainer's state at step 0, or on `resume=true` the last checkpoint (state, cursor, step)."""
    from legorl_jax.train.checkpoint import Restored

    state = trainer.init_state(seed=config.seed)
    if not config.resume:
        return Restored(state=state, cursor={"next_step": 0}, weights_version="", step=0)
    return checkpointer.restore(trainer.abstract_state())


@contextlib.asynccontextmanager
async def build_parts(
    config: Config,
    *,
    job: str = "",
    rollout_engine: Engine | None = None,
    engine: Engine | None = None,
    trainer: Trainer | None = None,
) -> AsyncIterator[Built]:
    """Builds the run of `config` (module docstring): refuses or resumes, loads the tasks, warm-starts,
    builds the trainer, the tracker, the harness, the engine with its publisher and the two proxies
    (serving); on exit stops the proxies and the engine and closes the checkpointer and the tracker.
    `rollout_engine`, when given, is what the proxies sample from instead of that engine (tests: a
    scripted engine at the engine boundary); the weights are still published to the engine built here.
    `engine`, when given, is used instead of opening `config.engine`'s: the proxies sample from it and the
    weights are published to it (tests and benchmarks: a scripted engine that stamps the published
    versions). `trainer`, when given, is used instead of building one from `config.model` and `config.mesh`
    (a benchmark shares one across runs so that no run pays a compile the others skip); one process only.

    On several processes (`mesh.distributed`) this is process 0's side: its trainer, checkpointer and
    publisher are the `Leading*` ones of train/commands.py, which the other processes follow (`train`
    runs `follow_process_0` there); the tracker, the engine, the proxies and the sandboxes exist here only.
    """
    from legorl_jax.train import distributed

    processes = distributed.initialize(config.mesh.distributed)
    if not processes.is_main:
        raise ValueError(
            f"build_parts builds process 0's side; this is process {processes.process_id} of "
            f"{processes.num_processes}, which follows it (run.train calls follow_process_0)"
        )
    with distributed.telling_peers_of_failure(processes):
        if trainer is not None and processes.num_processes > 1:
            raise ValueError(
                f"build_parts(trainer=...) is for one process; mesh.distributed runs "
                f"{processes.num_processes}, whose trainers follow process 0's"
            )
        async with _build_parts(
            config,
            job=job,
            processes=processes,
            rollout_engine=rollout_engine,
            engine=engine,
            trainer=trainer,
        ) as built:
            yield built


@contextlib.asynccontextmanager
async def _build_parts(
    config: Config,
    *,
    job: str,
    processes: Processes,
    rollout_engine: Engine | None,
    engine: Engine | None,
    trainer: Trainer | None,
) -> AsyncIterator[Built]:
    from legorl_jax.engine import open_engine
    from legorl_jax.engine.sglang_launcher import engine_for_loop
    from legorl_jax.harness import get_harness
    from legorl_jax.tasks.task_image import ensure_task_image
    from legorl_jax.train.commands import Commands, LeadingPublisher
    from legorl_jax.train.publish import Publisher, version_of

    folder = run_dir(config)
    # issue 40: a fresh start never writes over a run (refused, or moved aside with overwrite=true)
    replaced = claim_run_folder(folder, resume=config.resume, overwrite=config.overwrite)
    if replaced is not None:
        log.warning("overwrite=true: the run that was in %s is now in %s (nothing deleted)", folder, replaced)
    commands = Commands() if processes.num_processes > 1 else None
    checkpointer = open_checkpointer(config, commands)
    tracker, ended = None, False
    try:
        if config.resume:  # issue 40: resume where a step's checkpoint and its metrics row are both on disk
            for path in set_aside_uncommitted_checkpoints(checkpointer, folder):
                log.warning("checkpoint %s has no metrics row for its step (killed between): set aside", path)
        train_tasks, validation_tasks = load_tasks(config)
        if config.tasks.build_images:
            for task in {t.instance_id: t for t in [*train_tasks, *validation_tasks]}.values():
                await asyncio.to_thread(ensure_task_image, task)

        model_dir = ensure_model(config.model.path)
        warm = ""
        if config.loop.warm_start.enabled:
            # On process 0's first device alone (its trainer has no mesh): no collective, the others wait.
            ws = config.loop.warm_start
            same = ws.split in (None, "same")
            demo_tasks = (
                train_tasks
                if same
                else load_tasks(
                    dataclasses.replace(
                        config, tasks=dataclasses.replace(config.tasks, split=ws.split, ids=None)
                    )
                )[0]
            )
            report = await warm_start_for(config, demo_tasks, model_dir, same_tasks_as_rl=same)
            model_dir, warm = report.model_dir, report.describe()
            log.info("%s", warm)

        if commands is not None:
            commands.send("start", model_dir=str(pathlib.Path(model_dir).absolute()))
        trainer = trainer or make_trainer(config, model_dir, commands)
        start = start_state(config, trainer, checkpointer)
        cursor = LoopCursor.from_dict(start.cursor)
        state, start_step, run_id = start.state, cursor.next_step, cursor.run_id
        if config.resume:
            moved = set_aside_uncommitted_trials(folder, start_step)
            if config.loop.mode == "async":
                moved += set_aside_unfinished_groups(folder, cursor)
            log.info(
                "resumed %s at loop step %d (optimiser step %d); set aside %s",
                folder,
                start_step,
                cursor.optimiser_step,
                [str(m) for m in moved] or "nothing",
            )

        tracker = make_tracker(config, folder, job=job, resume_hash=run_id or None)
        run_id = tracker.run_hash or run_id
        tracker.log_hparams(run_config_of(config))
        harness = get_harness(config.harness.name, **config.harness.options)
        engine_config = with_logs_under(config.engine, folder)  # issue 40: engine/router logs in the run
        engine_config = engine_for_loop(engine_config, config.loop.mode)
        if engine is None and log_paths(engine_config):
            log.info("engine logs: %s", ", ".join(log_paths(engine_config)))
        given = contextlib.nullcontext(engine) if engine is not None else None
        async with (
            given or open_engine(engine_config, model_dir) as engine,
            serving_proxies(config, rollout_engine or engine, model_dir, folder) as (proxy, eval_proxy),
            open_executor(config.rollout) as executor,
        ):
            auto = "in_process" if config.engine.backend == "jax" else "disk"
            # The same publisher on one process or leading several (its calls told to the others first).
            make_publisher = (
                Publisher if commands is None else functools.partial(LeadingPublisher, commands=commands)
            )
            publisher = make_publisher(
                engine,
                mode=auto if config.loop.publish == "auto" else config.loop.publish,
                to_policy=trainer.policy_of,
                directory=config.loop.publish_dir or folder / "weights",
                source_dir=model_dir,
                update_policy=config.engine.update_policy,
                # The weights the trainer's forward computes with: bf16 weights under a float32 trainer
                # would put bf16 rounding between the engine's log-probs and π_old (issue 43).
                dtype="float32" if config.model.compute_dtype == "float32" else "bfloat16",
            )
            if config.resume:
                await publisher.publish(state.params, version_of(start_step))
            parts = Parts(
                LoopSettings.of(config),
                trainer,
                proxy,
                harness,
                train_tasks,
                validation_tasks,
                checkpointer,
                publisher,
                tracker,
                validation_proxy=eval_proxy,
                run_id=run_id,
                executor=executor,
            )
            yield Built(parts, state, start_step, warm, cursor if config.resume else None)
        ended = True
    finally:
        # After a failure the followers are already told to stop (telling_peers_of_failure): no more commands.
        if ended or commands is None:
            checkpointer.wait()
        if ended and commands is not None:
            commands.send("stop")
        checkpointer.close()
        if tracker is not None:
            tracker.close()


def follow_process_0(config: Config) -> Followed:
    """A process other than 0 of a `mesh.distributed` run: the same checkpointer, trainer and start state as
    process 0 builds, then its trainer calls followed until it stops (train/commands.py). No task, sandbox,
    engine, proxy or tracker is opened here."""
    from legorl_jax.train import distributed
    from legorl_jax.train.commands import Commands, follow

    processes = distributed.initialize(config.mesh.distributed)
    if processes.is_main:
        raise ValueError("follow_process_0 runs on the processes other than 0; process 0 runs build_parts")
    with distributed.telling_peers_of_failure(processes):
        commands = Commands()
        checkpointer = open_checkpointer(config)
        try:
            start = commands.receive()
            if start.kind != "start":
                raise ValueError(f"process 0 sent {start.kind!r} before 'start'")
            trainer = make_trainer(config, str(start.fields["model_dir"]))
            state = start_state(config, trainer, checkpointer).state
            followed = follow(commands, trainer, checkpointer, state)
        finally:
            checkpointer.close()
    log.info(
        "process %d of %d followed process 0: %s",
        processes.process_id,
        processes.num_processes,
        dict(followed.counts),
    )
    return followed


@contextlib.asynccontextmanager
async def serving_proxies(
    config: Config, engine: Engine, model_dir: str, folder: pathlib.Path
) -> AsyncIterator[tuple[CaptureProxy, CaptureProxy]]:
    """The training proxy and the validation proxy (`proxy.mode=eval`) over `engine`, both archiving to
    `<folder>/sessions` and serving on loopback (on `rollout.ray.proxy_host` when Ray nodes run the trials);
    stopped on exit."""
    from legorl_jax.proxy import CaptureProxy

    host = proxy_host(config.rollout)
    train = dataclasses.replace(config.proxy, archive_dir=str(folder / "sessions"))
    resumes = config.engine.max_resumes  # replies cut by a weight update (engine.update_policy=abort_resume)
    async with (
        CaptureProxy.serving(engine, model_dir, train, host, max_resumes=resumes) as proxy,
        CaptureProxy.serving(
            engine, model_dir, dataclasses.replace(train, mode="eval"), host, max_resumes=resumes
        ) as eval_proxy,
    ):
        yield proxy, eval_proxy


async def warm_start_for(
    config: Config, tasks: list[Task], model_dir: str, *, same_tasks_as_rl: bool
) -> WarmStartReport:
    """`loop.warm_start` of `config` on `tasks` from `model_dir`, with the run's own sub-configs."""
    from legorl_jax.warm_start import warm_start

    return await warm_start(
        config.loop.warm_start,
        tasks,
        model_dir,
        same_tasks_as_rl=same_tasks_as_rl,
        algo=config.algo,
        train=config.train,
        harness=config.harness,
        rollout=config.rollout,
        proxy=config.proxy,
        sandbox=config.sandbox,
        verifier=config.verifier,
        max_len=config.engine.max_len,
        dtype=config.model.dtype,
        seed=config.seed,
    )


async def run_loop(
    parts: Parts, state: TrainState, *, start_step: int = 0, cursor: LoopCursor | None = None
) -> list[StepRecord]:
    """Runs loop steps `start_step .. loop.steps - 1` in the loop of `loop.mode`: loop.py's (sync) or
    async_loop.py's (async, continuing a resumed run from the checkpoint's `cursor`); one record a step."""
    if parts.settings.loop.mode == "async":
        return await run_async_loop(parts, state, start_step=start_step, cursor=cursor)
    if cursor is not None and cursor.mode != "sync":
        raise ValueError(
            f"the checkpoint was written by a loop.mode={cursor.mode!r} run: resume it in that mode (its "
            "groups in flight would be lost)"
        )
    return await run_sync_loop(parts, state, start_step=start_step)


async def train(config: Config, *, job: str = "") -> RunSummary | None:
    """Runs one job (module docstring): `build_parts`, then `run_loop` from where the run starts. On a
    process other than 0 of a `mesh.distributed` run: `follow_process_0`, and None (process 0 summarises)."""
    from legorl_jax.train import distributed
    from legorl_jax.train.checkpoint import saving_on_signal

    if not distributed.initialize(config.mesh.distributed).is_main:
        follow_process_0(config)
        return None
    aim_repo = config.tracking.repo if config.tracking.backend == "aim" else None
    async with build_parts(config, job=job) as built:
        with saving_on_signal(built.parts.checkpointer):  # issue 40: SIGTERM / SIGINT save, then exit
            records = await run_loop(
                built.parts, built.state, start_step=built.start_step, cursor=built.cursor
            )
    parts = built.parts
    return RunSummary(run_dir(config), records, built.warm_start, aim_repo, parts.run_id, built.start_step)
