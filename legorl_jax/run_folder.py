"""A run's folder: who may start in it, and where the logs of the processes it starts go.

    moved = claim_run_folder(folder, resume=config.resume, overwrite=config.overwrite)  # refuses, or moves
    engine_config = with_logs_under(config.engine, folder)                             # logs/engine-<i>.log

Contract of `claim_run_folder`: a folder that holds a run (`RUN_CONTENTS`: trials, metrics, checkpoints,
sessions, validation trials, a summary) is never written into by a fresh start. `resume=true` continues it
(run.py checks there is a checkpoint); `overwrite=true` moves everything the run wrote, except Hydra's
per-start log folders (`hydra/`, one timestamped folder per start, of which the new start's is already open),
into `<folder>.replaced-<time>/` beside it, and starts afresh; nothing is ever deleted. Without either, a
`FileExistsError` names what the folder holds and both ways on. A folder with none of it (new, or only
`hydra/` and `logs/`) is simply used.

Resume point (`committed_step`): a loop step is committed when both its checkpoint (`checkpoints/<s+1>`) and
its metrics row (step s in `metrics.jsonl`) are on disk. The loops log a step's row after its checkpoint, so
a kill between the two leaves a checkpoint without its row; resuming from it would lose that row for good.
`set_aside_uncommitted_checkpoints` moves such checkpoints to `checkpoints.abandoned/<s>-<time>/` (never
deleted) so the resume starts from the last committed step and runs the step again: every step's row once.

Logs: the engines and the router that `engine=fleet` (or `engine=sglang` with `launch`) starts write into
`<folder>/logs/` (`engine-<i>.log`, `router.log`) unless their config names a file; run.py logs the paths.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any

from legorl_jax.config import EngineConfig

RUN_CONTENTS = (
    "trials",
    "metrics.jsonl",
    "checkpoints",
    "sessions",
    "validation",
    "summary.md",
    "curves.png",
    "weights",
)
"""What a run writes into its folder; any of it (non-empty) means the folder holds a run."""
KEPT_IN_PLACE = ("hydra",)
"""Left in the folder when a run is moved aside: Hydra's per-start log folders (the new start's is open)."""
LOGS = "logs"


def run_contents(folder: pathlib.Path) -> list[str]:
    """The entries of `RUN_CONTENTS` that `folder` holds (an empty directory does not count)."""
    found = []
    for name in RUN_CONTENTS:
        path = folder / name
        if path.is_file() and path.stat().st_size > 0:
            found.append(name)
        elif path.is_dir() and any(path.iterdir()):
            found.append(name)
    return found


def claim_run_folder(folder: pathlib.Path, *, resume: bool, overwrite: bool) -> pathlib.Path | None:
    """Refuses, continues or moves aside the run in `folder` (module docstring); returns where the old run
    went when `overwrite` moved it, else None."""
    if resume and overwrite:
        raise ValueError(
            f"resume=true and overwrite=true contradict each other for {folder}: resume continues the run "
            "there, overwrite moves it aside and starts afresh; pass one"
        )
    held = run_contents(folder)
    if resume or not held:
        return None
    if not overwrite:
        raise FileExistsError(
            f"{folder} already holds a run ({', '.join(held)}): pass resume=true to continue it, "
            "overwrite=true to move it aside (kept, never deleted) and start afresh, or choose another "
            "rollout.experiment"
        )
    aside = folder.with_name(f"{folder.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}")
    n = 1
    while aside.exists():  # two overwrites within a second
        aside = folder.with_name(f"{folder.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}-{n}")
        n += 1
    aside.mkdir()
    for entry in sorted(folder.iterdir()):
        if entry.name not in KEPT_IN_PLACE:
            entry.rename(aside / entry.name)
    return aside


def logged_steps(folder: pathlib.Path) -> set[int] | None:
    """The loop steps with a row in `<folder>/metrics.jsonl`, or None when there is no such file."""
    import json

    path = folder / "metrics.jsonl"
    if not path.is_file():
        return None
    steps = set()
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                steps.add(int(json.loads(line)["step"]))
            except (ValueError, KeyError, TypeError):
                continue  # a row cut by the kill: not a logged step
    return steps


def committed_step(checkpoint_steps: list[int], folder: pathlib.Path) -> int | None:
    """The newest checkpoint whose step's metrics row is logged (module docstring); the newest checkpoint
    when the folder has no metrics file (a process that does not write it); None without checkpoints."""
    if not checkpoint_steps:
        return None
    logged = logged_steps(folder)
    if logged is None:
        return max(checkpoint_steps)
    for step in sorted(checkpoint_steps, reverse=True):
        if step - 1 in logged:
            return step
    return max(checkpoint_steps)  # no checkpoint has its row (rows lost another way): the newest


def set_aside_uncommitted_checkpoints(checkpointer: Any, folder: pathlib.Path) -> list[pathlib.Path]:
    """Moves the checkpoints newer than `committed_step` out of `checkpointer.directory` into
    `checkpoints.abandoned/` beside it; returns their new paths."""
    steps = checkpointer.all_steps()
    keep = committed_step(steps, folder)
    newer = [s for s in steps if keep is not None and s > keep]
    if not newer:
        return []
    aside_root = pathlib.Path(checkpointer.directory).with_name(
        pathlib.Path(checkpointer.directory).name + ".abandoned"
    )
    aside_root.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    moved = [checkpointer.move_step(s, aside_root / f"{s}-{stamp}") for s in newer]
    return moved


def with_logs_under(engine: EngineConfig, folder: pathlib.Path) -> EngineConfig:
    """`engine` with the launched engines' and the router's logs in `<folder>/logs/` where not named."""
    if engine.backend != "sglang":  # the embedded engine writes no log of its own
        return engine
    logs = folder / LOGS
    sglang, router = engine.sglang, engine.router
    if sglang.log_file is None:
        sglang = dataclasses.replace(sglang, log_file=str(logs / "engine.log"))
    if router.log_file is None:
        router = dataclasses.replace(router, log_file=str(logs / "router.log"))
    if sglang is engine.sglang and router is engine.router:
        return engine
    logs.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(engine, sglang=sglang, router=router)


def log_paths(engine: EngineConfig) -> list[str]:
    """The log files the engine side of `engine` writes (launched engines, the router), for the run's log."""
    from legorl_jax.engine.fleet import launched_log

    paths: list[str] = []
    launched = engine.launch if engine.fleet else (1 if engine.backend == "sglang" and not engine.url else 0)
    if engine.sglang.log_file:
        if engine.fleet:
            paths += [str(launched_log(engine.sglang.log_file, i)) for i in range(engine.launch or 0)]
        elif launched:
            paths.append(engine.sglang.log_file)
    if engine.fleet and engine.router.log_file and not engine.router_url:
        paths.append(engine.router.log_file)
    return paths
