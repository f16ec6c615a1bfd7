"""One training job from a resolved `Config`: build the parts, resume or start, run the loop, summarise.

    summary = asyncio.run(train(config, job="algo=cispo"))      # what train.py calls
    async with build_parts(config) as built:                    # the same parts, without the loop
        records = await run_loop(built.parts, built.state, start_step=built.start_step)

Layout of a run (`<rollout.runs_dir>/<rollout.experiment>/`): `checkpoints/` (orbax), `trials/step_<s>/`
(every trial's archive), `validation/`, `weights/` (disk publishing), `metrics.jsonl`, `summary.md` and
`curves.png`. Aim runs go to `tracking.repo` (one repository for all jobs of a sweep).

Starting where a run already has checkpoints is refused unless `resume=true` (nothing is overwritten); with
`resume=true` the last checkpoint's state, loop cursor and Aim run continue, and the trial archive of steps
after it (collected, never trained on) is moved aside to `trials/step_<s>.abandoned-<time>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import pathlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from legorl_jax.config import Config
from legorl_jax.loop import Parts, StepRecord, run_loop
from legorl_jax.tasks.schema import Task

if TYPE_CHECKING:
    from legorl_jax.engine.base import Engine
    from legorl_jax.proxy import CaptureProxy
    from legorl_jax.rollout.executor import TrialExecutor
    from legorl_jax.train.state import TrainState

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


def make_tracker(config: Config, folder: pathlib.Path, *, job: str, resume_hash: str | None) -> Any:
    from legorl_jax.monitor.tracker import JsonlTracker, Trackers

    trackers: list[Any] = [JsonlTracker(folder / "metrics.jsonl")]
    if config.tracking.backend == "aim":
        from legorl_jax.monitor.aim_tracker import AimTracker

        trackers.append(
            AimTracker(
                config.tracking.repo,
                experiment=config.tracking.experiment or config.rollout.experiment,
                run_name=config.tracking.run_name or job or config.rollout.experiment,
                resume_hash=resume_hash,
            )
        )
    return Trackers(*trackers)


def run_config_of(config: Config) -> dict[str, Any]:
    """The config a checkpoint records and a resume must match (minus the resume switch itself)."""
    plain = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    plain.pop("resume", None)
    return plain


@dataclasses.dataclass
class Built:
    """A run's parts and where it starts: the state and loop step (a resume's), the warm start's account, and
    the checkpoint's loop cursor (None on a fresh run; the async loop continues from it)."""

    parts: Parts
    state: TrainState
    start_step: int
    warm_start: str
    cursor: dict[str, Any] | None = None


@contextlib.asynccontextmanager
async def build_parts(config: Config, *, job: str = "") -> AsyncIterator[Built]:
    """Builds the run of `config` (module docstring): refuses or resumes, loads the tasks, warm-starts,
    builds the trainer, the tracker, the harness, the engine with its publisher and the two proxies
    (serving); on exit stops the proxies and the engine and closes the checkpointer and the tracker."""
    from legorl_jax.engine import open_engine
    from legorl_jax.harness import get_harness
    from legorl_jax.model import load_hf
    from legorl_jax.model.sharding import make_mesh, rules_from_config
    from legorl_jax.tasks.task_image import ensure_task_image
    from legorl_jax.train.checkpoint import Checkpointer
    from legorl_jax.train.publish import Publisher, version_of
    from legorl_jax.train.step import Trainer
    from legorl_jax.warm_start import warm_start

    if config.mesh.distributed.enabled:
        # Every process would run its own copy of the loop (rollouts, tracker, checkpoints) into one folder.
        raise ValueError(
            "mesh.distributed.enabled=true: the RL loop does not run on several processes yet (process 0 "
            "leading rollouts while the others follow its trainer calls); the trainer itself does: "
            "legorl_jax/train/distributed.py, tools/bench_train.py --processes N"
        )
    folder = run_dir(config)
    checkpoint = config.train.checkpoint
    if checkpoint.directory is None:
        checkpoint = dataclasses.replace(checkpoint, directory=str(folder / "checkpoints"))
    checkpointer = Checkpointer(checkpoint, run_config=run_config_of(config))
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

    train_tasks, validation_tasks = load_tasks(config)
    if config.tasks.build_images:
        for task in {t.instance_id: t for t in [*train_tasks, *validation_tasks]}.values():
            await asyncio.to_thread(ensure_task_image, task)

    model_dir = ensure_model(config.model.path)
    warm = ""
    if config.loop.warm_start.enabled:
        ws = config.loop.warm_start
        same = ws.split in (None, "same")
        demo_tasks = (
            train_tasks
            if same
            else load_tasks(
                dataclasses.replace(config, tasks=dataclasses.replace(config.tasks, split=ws.split, ids=None))
            )[0]
        )
        report = await warm_start(
            ws,
            demo_tasks,
            model_dir,
            same_tasks_as_rl=same,
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
        model_dir, warm = report.model_dir, report.describe()
        log.info("%s", warm)

    mesh = make_mesh(config.mesh)
    trainer = Trainer(
        load_hf(model_dir, config.model.dtype),
        config.algo,
        config.train,
        mesh=mesh,
        rules=rules_from_config(config.mesh),
    )
    state, start_step, run_id, cursor = trainer.init_state(seed=config.seed), 0, "", None
    if config.resume:
        restored = checkpointer.restore(trainer.abstract_state())
        state, start_step, cursor = restored.state, int(restored.cursor["next_step"]), restored.cursor
        run_id = str(restored.cursor.get("run_id", ""))
        moved = set_aside_uncommitted_trials(folder, start_step)
        if config.loop.mode == "async":
            from legorl_jax.async_loop import set_aside_unfinished_groups

            moved += set_aside_unfinished_groups(folder, cursor)
        log.info(
            "resumed %s at loop step %d (optimiser step %d); set aside %s",
            folder,
            start_step,
            restored.step,
            [str(m) for m in moved] or "nothing",
        )

    tracker = make_tracker(config, folder, job=job, resume_hash=run_id or None)
    run_id = getattr(tracker.trackers[-1], "run_hash", "") or run_id
    tracker.log_hparams(run_config_of(config))
    harness = get_harness(config.harness.name, **config.harness.options)
    try:
        async with (
            open_engine(config.engine, model_dir) as engine,
            serving_proxies(config, engine, model_dir, folder) as (proxy, eval_proxy),
            trial_executor(config) as executor,
        ):
            auto = "in_process" if config.engine.backend == "jax" else "disk"
            publisher = Publisher(
                engine,
                mode=auto if config.loop.publish == "auto" else config.loop.publish,
                to_policy=trainer.policy_of,
                directory=config.loop.publish_dir or folder / "weights",
                source_dir=model_dir,
                update_policy=config.engine.update_policy,
            )
            if config.resume:
                await publisher.publish(state.params, version_of(start_step))
            parts = Parts(
                config,
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
            yield Built(parts, state, start_step, warm, cursor)
    finally:
        checkpointer.wait()
        checkpointer.close()
        tracker.close()


@contextlib.asynccontextmanager
async def serving_proxies(
    config: Config, engine: Engine, model_dir: str, folder: pathlib.Path
) -> AsyncIterator[tuple[CaptureProxy, CaptureProxy]]:
    """The training proxy and the validation proxy (`proxy.mode=eval`) over `engine`, both archiving to
    `<folder>/sessions` and serving on loopback (on `rollout.ray.proxy_host` when Ray nodes run the trials);
    stopped on exit."""
    from legorl_jax.proxy import CaptureProxy

    host = config.rollout.ray.proxy_host if config.rollout.executor == "ray" else "127.0.0.1"
    train = dataclasses.replace(config.proxy, archive_dir=str(folder / "sessions"))
    resumes = config.engine.max_resumes  # replies cut by a weight update (engine.update_policy=abort_resume)
    async with (
        CaptureProxy.serving(engine, model_dir, train, host, max_resumes=resumes) as proxy,
        CaptureProxy.serving(
            engine, model_dir, dataclasses.replace(train, mode="eval"), host, max_resumes=resumes
        ) as eval_proxy,
    ):
        yield proxy, eval_proxy


@contextlib.asynccontextmanager
async def trial_executor(config: Config) -> AsyncIterator[TrialExecutor | None]:
    """The Ray executor of `rollout.executor: ray` (closed on exit), or None: trials in this process."""
    if config.rollout.executor != "ray":
        yield None
        return
    from legorl_jax.rollout.ray_executor import RayExecutor

    executor = await RayExecutor.start(config.rollout)
    try:
        yield executor
    finally:
        await executor.close()


async def train(config: Config, *, job: str = "") -> RunSummary:
    """Runs one job (module docstring): `build_parts`, then `run_loop` from where the run starts."""
    aim_repo = config.tracking.repo if config.tracking.backend == "aim" else None
    async with build_parts(config, job=job) as built:
        records = await run_loop(built.parts, built.state, start_step=built.start_step, cursor=built.cursor)
    parts = built.parts
    return RunSummary(run_dir(config), records, built.warm_start, aim_repo, parts.run_id, built.start_step)
