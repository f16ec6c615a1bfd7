"""Loader of Harbor task directories → `Task` records.

A Harbor task is a directory:

```
<task>/
  task.toml              # [task] name, [metadata], [verifier] timeout_sec/env/user, [agent] timeout_sec,
                         # [environment] docker_image?/workdir?/build_timeout_sec
  instruction.md         # the prompt
  environment/Dockerfile # the image (unless [environment].docker_image names a prebuilt one)
  tests/test.sh          # the verifier: writes /logs/verifier/reward.txt (a number) or reward.json
  tests/config.json      # optional: the raw record (FAIL_TO_PASS / PASS_TO_PASS)
  tests/test_patch.diff  # optional: test-only changes test.sh applies (its paths are protected)
  solution/solve.sh      # optional: the oracle's script (run to derive the gold diff)
```

Mapping: `instance_id` = the last part of `[task].name`, else `[metadata].extra.instance_id`, else the
directory name; `workdir` = `[environment].workdir`, else the Dockerfile's last `WORKDIR`; `image` =
`docker_image`, else `legorl-harbor-<id>:<12 hex of the environment/ content hash>` built from
`environment/` on demand; `base_commit` = `[metadata].extra.base_commit` when it is a sha, else empty (the
image's HEAD is the base); `test_cmd` = `bash /tests/test.sh`; `log_parser` = `harbor_reward`;
`verifier_dir` = `tests/`, uploaded to `/tests` of the grading sandbox only after the agent's diff is
applied; the gold `patch` is empty (the oracle runs `solution/solve.sh`, kept in `metadata.solution_dir`).

`task.toml` is read as Harbor 0.26 reads it: its top-level keys are exactly those of Harbor's `TaskConfig`
(`schema_version`, `task`, `metadata`, `verifier`, `agent`, `environment`, `solution`, `source`,
`multi_step_reward_strategy`, `steps`, `artifacts`), and the older documented `version` is renamed to
`schema_version` (unless both are given). Multi-step tasks (`steps` in task.toml, or a `steps/` directory) are
not supported: loading one alone is a `TaskError` saying so; in a directory of tasks each is skipped with a
warning naming it, and the others load.

The verifier moves the agent's work to a fresh sandbox as a git diff, so the image must hold a git repository
at `workdir` (SWE-style Harbor tasks do); the verifier refuses a workdir without one with an error that says
so. Every malformed field raises `TaskError` naming the task, the field and the value.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from legorl_jax.tasks.patchset import PatchError, parse_patch
from legorl_jax.tasks.schema import Task, TaskError, Timeouts

TEST_CMD = "bash /tests/test.sh"
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_NAME_RE = re.compile(r"[^a-z0-9._-]+")
# harbor 0.26.0 `harbor/models/task/config.py::TaskConfig` fields.
_SECTIONS = (
    "schema_version",
    "task",
    "metadata",
    "verifier",
    "agent",
    "environment",
    "solution",
    "source",
    "multi_step_reward_strategy",
    "steps",
    "artifacts",
)
log = logging.getLogger(__name__)


class MultiStepTaskError(TaskError):
    """A multi-step Harbor task, which this loader does not support."""


def is_harbor_dir(path: Path) -> bool:
    """True for a directory shaped like a Harbor task (task.toml and instruction.md)."""
    return (path / "task.toml").is_file() and (path / "instruction.md").is_file()


def is_multi_step_harbor_dir(path: Path) -> bool:
    """True for a multi-step Harbor task: a task.toml with `steps`, or a `steps/` directory (its instructions
    live per step, so the directory may hold no top-level instruction.md)."""
    if not (path / "task.toml").is_file():
        return False
    if (path / "steps").is_dir():
        return True
    try:
        config = tomllib.loads((path / "task.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # loading it says what is wrong
    return bool(config.get("steps"))


def load_harbor_tasks(path: Path) -> list[Task]:
    """One task directory, or every task directory directly inside `path`, sorted by id."""
    path = Path(path)
    if is_harbor_dir(path):
        return [load_harbor_task(path)]
    children = sorted(path.iterdir()) if path.is_dir() else []
    dirs = [d for d in children if d.is_dir() and (is_harbor_dir(d) or is_multi_step_harbor_dir(d))]
    if not dirs:
        raise TaskError(
            str(path), "directory", f"holds no Harbor task (task.toml + instruction.md): {str(path)!r}"
        )
    tasks = []
    for d in dirs:
        if is_multi_step_harbor_dir(d):
            log.warning("skipping Harbor task %s: a multi-step task, which is not supported", d)
            continue
        tasks.append(load_harbor_task(d))
    return sorted(tasks, key=lambda t: t.instance_id)


def load_harbor_task(task_dir: Path) -> Task:
    """Reads one Harbor task directory (see the module docstring for the mapping)."""
    task_dir = Path(task_dir)
    name = task_dir.name
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise TaskError(name, "task.toml", f"cannot be read as TOML: {err}") from None
    if "version" in config:  # Harbor's own rename (TaskConfig.handle_version_rename)
        config.setdefault("schema_version", config.pop("version"))
    unknown = sorted(set(config) - set(_SECTIONS))
    if unknown:
        raise TaskError(name, "task.toml", f"has unknown top-level keys {unknown}; known: {list(_SECTIONS)}")
    if config.get("steps") or (task_dir / "steps").is_dir():
        raise MultiStepTaskError(
            name, "steps", f"{str(task_dir)!r} is a multi-step task, which is not supported"
        )
    source = config.get("source")
    if source is not None and not isinstance(source, str):
        raise TaskError(name, "source", f"must be a string, got {source!r}")
    sections = {s: _table(name, config, s) for s in ("task", "metadata", "verifier", "agent", "environment")}
    task_name = sections["task"].get("name")
    if task_name is not None and (not isinstance(task_name, str) or not task_name.strip()):
        raise TaskError(name, "task.name", f"must be a non-empty string, got {task_name!r}")
    extra = _table(name, sections["metadata"], "extra")
    instance_id = (task_name.rsplit("/", 1)[-1] if task_name else None) or extra.get("instance_id") or name
    label = str(instance_id)

    instruction = (task_dir / "instruction.md").read_text(encoding="utf-8")
    tests_dir = task_dir / "tests"
    if not (tests_dir / "test.sh").is_file():
        raise TaskError(label, "tests/test.sh", f"is missing from {str(task_dir)!r}")
    env = sections["environment"]
    docker_image = env.get("docker_image")
    if docker_image is not None and (not isinstance(docker_image, str) or not docker_image.strip()):
        raise TaskError(
            label, "environment.docker_image", f"must be a non-empty string, got {docker_image!r}"
        )
    dockerfile = task_dir / "environment" / "Dockerfile"
    if docker_image is None and not dockerfile.is_file():
        raise TaskError(
            label, "environment/Dockerfile", "is missing and [environment].docker_image is not set"
        )
    workdir = env.get("workdir") or (_dockerfile_workdir(dockerfile) if dockerfile.is_file() else None)
    if workdir is None:
        raise TaskError(label, "environment.workdir", "is not set and the Dockerfile has no WORKDIR")
    if docker_image is None:
        slug = _NAME_RE.sub("-", label.lower()).strip("-")
        image = f"legorl-harbor-{slug}:{_tree_hash(task_dir / 'environment')[:12]}"
        image_context = str((task_dir / "environment").resolve())
    else:
        image, image_context = docker_image, ""

    base_commit = extra.get("base_commit", "")
    if not isinstance(base_commit, str) or (base_commit and not _SHA_RE.match(base_commit)):
        raise TaskError(label, "metadata.extra.base_commit", f"must be a 40-hex sha, got {base_commit!r}")
    record = _record(label, tests_dir / "config.json")
    test_patch = ""
    if (tests_dir / "test_patch.diff").is_file():
        test_patch = (tests_dir / "test_patch.diff").read_text(encoding="utf-8")
        try:
            parse_patch(test_patch)
        except PatchError as err:
            raise TaskError(label, "tests/test_patch.diff", f"is not a readable diff: {err}") from None
    verifier_env = _table(label, sections["verifier"], "env")
    for key, value in verifier_env.items():
        if not isinstance(value, str):
            raise TaskError(label, f"verifier.env.{key}", f"must be a string, got {value!r}")
    verifier_user = sections["verifier"].get("user", "root")
    if not isinstance(verifier_user, str) or not verifier_user:
        raise TaskError(label, "verifier.user", f"must be a non-empty string, got {verifier_user!r}")
    difficulty = sections["metadata"].get("difficulty", "")
    domain = sections["metadata"].get("category", "")
    timeouts = Timeouts.from_mapping(
        label,
        {
            k: v
            for k, v in (
                ("agent_s", sections["agent"].get("timeout_sec")),
                ("verify_s", sections["verifier"].get("timeout_sec")),
                ("build_s", env.get("build_timeout_sec")),
            )
            if v is not None
        },
    )
    solution = task_dir / "solution" / "solve.sh"
    return Task(
        instance_id=label,
        repo=str(extra.get("repo") or record.get("repo") or f"harbor/{label}"),
        base_commit=base_commit,
        problem_statement=instruction,
        patch="",
        test_patch=test_patch,
        FAIL_TO_PASS=tuple(_listed(label, record, "FAIL_TO_PASS")),
        PASS_TO_PASS=tuple(_listed(label, record, "PASS_TO_PASS")),
        version=str(record.get("version", config.get("schema_version", "1"))),
        environment_setup_commit=base_commit,
        image=image,
        workdir=workdir,
        test_cmd=TEST_CMD,
        log_parser="harbor_reward",
        timeouts=timeouts,
        kind="harbor",
        split=str(sections["metadata"].get("split", "test")),
        difficulty=difficulty if isinstance(difficulty, str) else str(difficulty),
        domain=domain if isinstance(domain, str) else str(domain),
        title=str(sections["task"].get("description", "")),
        source_dir=str(task_dir.resolve()),
        verifier_dir=str(tests_dir.resolve()),
        image_context=image_context,
        metadata={
            "verifier_env": dict(verifier_env),
            "verifier_user": verifier_user,
            "solution_dir": str(solution.parent.resolve()) if solution.is_file() else "",
            "tags": list(sections["metadata"].get("tags", [])),
            "source": source or "",
            "schema_version": str(config.get("schema_version", "")),
        },
    )


def _table(task: str, parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = parent.get(key, {})
    if not isinstance(value, Mapping):
        raise TaskError(task, key, f"must be a table, got {value!r}")
    return value


def _dockerfile_workdir(dockerfile: Path) -> str | None:
    workdir = None
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*WORKDIR\s+(\S+)\s*$", line, flags=re.IGNORECASE)
        if m:
            workdir = m.group(1).strip("\"'")
    return workdir


def _record(task: str, path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TaskError(task, "tests/config.json", f"is not valid JSON: {err}") from None
    if not isinstance(record, Mapping):
        raise TaskError(task, "tests/config.json", f"must hold a JSON object, got {type(record).__name__}")
    return record


def _listed(task: str, record: Mapping[str, Any], field: str) -> list[str]:
    value = record.get(field, [])
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TaskError(
                task, f"tests/config.json {field}", f"must be a list, got {value!r:.120}"
            ) from None
    if not isinstance(value, list):
        raise TaskError(task, f"tests/config.json {field}", f"must be a list, got {value!r:.120}")
    return value


def _tree_hash(root: Path) -> str:
    """A content hash of every file under `root` (names, modes and bytes): the image tag."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        digest.update(rel.encode() + b"\0" + oct(path.lstat().st_mode).encode() + b"\0")
        digest.update(path.read_bytes() if not path.is_symlink() else str(path.readlink()).encode())
        digest.update(b"\0")
    return digest.hexdigest()
