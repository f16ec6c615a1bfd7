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

Logs: the engines and the router that `engine=fleet` (or `engine=sglang` with `launch`) starts write into
`<folder>/logs/` (`engine-<i>.log`, `router.log`) unless their config names a file; run.py logs the paths.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

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


def with_logs_under(engine: EngineConfig, folder: pathlib.Path) -> EngineConfig:
    """`engine` with the launched engines' and the router's logs in `<folder>/logs/` where not named."""
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
