"""`load_suite(name_or_path, split=None)`: one entry point to every task source.

- `builtin` → the built-in suite (`legorl_jax/tasks/vendor/suite/`).
- a `.jsonl` / `.json` / `.parquet` file → SWE-bench / SWE-Gym / SWE-rebench style rows
  (`swebench.load_swebench_file`).
- a directory that is one task (a built-in task dir: `task.toml` + `repo/`; a Harbor task dir: `task.toml`
  + `instruction.md`) → that task; a directory of such directories → all of them, but for multi-step Harbor
  tasks (`steps` in task.toml, or a `steps/` directory), which are skipped with a warning naming each.

`split` keeps the tasks of that split; a split no task has is an error listing the splits there are, so a
typo never trains on nothing. Two tasks with one id in a suite are an error. `find_task` picks one task by
id with an error that lists near names. Everything raises `TaskError`.
"""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Any

from legorl_jax.tasks.builtin import is_task_dir, load_builtin_suite, load_builtin_task
from legorl_jax.tasks.harbor import is_harbor_dir, is_multi_step_harbor_dir, load_harbor_task
from legorl_jax.tasks.schema import Task, TaskError
from legorl_jax.tasks.swebench import DEFAULT_IMAGE_TEMPLATE, load_swebench_file

BUILTIN = "builtin"
log = logging.getLogger(__name__)


def load_suite(
    name_or_path: str | Path,
    split: str | None = None,
    *,
    image_template: str | None = None,
    test_cmd: str | None = None,
    log_parser: str | None = None,
) -> list[Task]:
    """The tasks of a suite name or path, optionally of one split (`image_template`, `test_cmd`, `log_parser`:
    `swebench.load_swebench_file`'s, for SWE-bench-style files)."""
    rows = {
        "image_template": image_template or DEFAULT_IMAGE_TEMPLATE,
        "test_cmd": test_cmd,
        "log_parser": log_parser,
    }
    tasks = _load_all(name_or_path, rows)
    ids = [t.instance_id for t in tasks]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise TaskError(str(name_or_path), "instance_id", f"ids {dupes} appear more than once")
    if split is None:
        return tasks
    if not isinstance(split, str) or not split:
        raise TaskError(str(name_or_path), "split", f"must be a non-empty string, got {split!r}")
    chosen = [t for t in tasks if t.split == split]
    if not chosen:
        have = sorted({t.split for t in tasks})
        raise TaskError(str(name_or_path), "split", f"no task has split {split!r}; the suite has {have}")
    return chosen


def find_task(tasks: list[Task], task_id: str) -> Task:
    """The task called `task_id`."""
    for task in tasks:
        if task.instance_id == task_id:
            return task
    near = difflib.get_close_matches(task_id, [t.instance_id for t in tasks], n=3)
    hint = f"; did you mean {near}?" if near else ""
    raise TaskError(task_id, "task", f"no task with id {task_id!r} among {len(tasks)} tasks{hint}")


def _load_all(name_or_path: str | Path, rows: dict[str, Any]) -> list[Task]:
    if isinstance(name_or_path, str) and name_or_path == BUILTIN:
        return load_builtin_suite()
    if not isinstance(name_or_path, str | Path) or not str(name_or_path):
        raise TaskError(str(name_or_path), "suite", f"must be 'builtin' or a path, got {name_or_path!r}")
    path = Path(name_or_path)
    if path.is_file():
        if path.suffix in (".jsonl", ".json", ".parquet"):
            return load_swebench_file(path, **rows)
        raise TaskError(
            str(path), "suite", f"a task file must end in .jsonl, .json or .parquet, got {path.name!r}"
        )
    if not path.is_dir():
        raise TaskError(
            str(path), "suite", f"is neither 'builtin' nor an existing file or directory: {str(path)!r}"
        )
    if is_task_dir(path):
        return [load_builtin_task(path)]
    if is_harbor_dir(path) or is_multi_step_harbor_dir(path):
        return [load_harbor_task(path)]  # a multi-step task alone is an error saying so
    children = [d for d in sorted(path.iterdir()) if d.is_dir() and not d.name.startswith(".")]
    tasks: list[Task] = []
    skipped = []
    for child in children:
        if is_task_dir(child):
            tasks.append(load_builtin_task(child))
        elif is_multi_step_harbor_dir(child):
            skipped.append(child.name)
            log.warning("skipping Harbor task %s: a multi-step task, which is not supported", child)
        elif is_harbor_dir(child):
            tasks.append(load_harbor_task(child))
        elif (child / "task.toml").exists() or (child / "repo").exists():
            raise TaskError(
                child.name,
                "directory",
                f"looks like a task but lacks repo/ or instruction.md: {str(child)!r}",
            )
    if not tasks:
        also = f" (only multi-step Harbor tasks, which are not supported: {skipped})" if skipped else ""
        raise TaskError(str(path), "suite", f"holds no task directory: {str(path)!r}{also}")
    return sorted(tasks, key=lambda t: t.instance_id)
