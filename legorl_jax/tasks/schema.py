"""The `Task` record every loader produces and the verifier consumes (docs/security.md §3, §4).

A `Task` carries SWE-bench's instance fields (`instance_id`, `repo`, `base_commit`, `problem_statement`,
`patch`, `test_patch`, `FAIL_TO_PASS`, `PASS_TO_PASS`, `version`, `environment_setup_commit`) plus what it
takes to run and grade it here: the sandbox `image` and `workdir`, the `test_cmd`, which `log_parser` turns
the test output into per-test statuses, paths the agent may not change (`protected_paths`), timeouts, and
bookkeeping (`kind`, `split`, `difficulty`, `domain`). Where the grading assets live on the host is kept too:
`source_dir` (the task's directory, or the JSONL file) and, for Harbor tasks, `verifier_dir` (uploaded to the
grading sandbox only after the agent's diff is applied) and `image_context` (the Dockerfile directory the
image is built from when it has not been built yet).

Contract: a `Task` is frozen and valid by construction. Every field is type- and value-checked in
`__post_init__`, and a bad one raises `TaskError` (a `ValueError`) naming the task, the field and the
received value, so a broken task file is reported where it is read, never half-way through a trial.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from legorl_jax.validate import positive_number

KINDS = ("builtin", "swebench", "harbor")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/]*$")
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")


class TaskError(ValueError):
    """A task file or record is malformed; the message names the task, the field and the received value."""

    def __init__(self, task: str, field: str, problem: str) -> None:
        super().__init__(f"task {task!r}: {field}: {problem}")
        self.task = task
        self.field = field
        self.problem = problem


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Wall-clock limits, in seconds, of the phases of a trial."""

    agent_s: float = 900.0
    """How long the harness may work on the task."""
    verify_s: float = 120.0
    """How long the test command may run in the grading sandbox."""
    build_s: float = 600.0
    """How long building the task's image may take."""

    def __post_init__(self) -> None:
        for name in ("agent_s", "verify_s", "build_s"):
            value = positive_number(f"timeouts.{name}", getattr(self, name), unit="seconds")
            object.__setattr__(self, name, float(value))

    @classmethod
    def from_mapping(cls, task: str, raw: Any, field: str = "timeouts") -> Timeouts:
        """Reads `{agent_s, verify_s, build_s}` (any subset); unknown keys are an error, not ignored."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise TaskError(task, field, f"must be a table of seconds, got {raw!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise TaskError(task, field, f"unknown keys {unknown}; known: {sorted(known)}")
        try:
            return cls(**dict(raw))
        except ValueError as err:
            raise TaskError(task, field, str(err)) from None


@dataclasses.dataclass(frozen=True)
class Task:
    """One repository task: what the agent is asked, where it works, and how its diff is graded."""

    instance_id: str
    """Unique id within its suite (SWE-bench `instance_id`, the built-in task's directory name)."""
    repo: str
    """Where the code comes from (`owner/name` for SWE-bench; `legorl-suite/<id>` for built-in tasks)."""
    base_commit: str
    """The commit the agent starts from, as a 40-hex sha in the grading image's repository ('' for a Harbor
    task that names none: its image's HEAD is the base)."""
    problem_statement: str
    """The issue text shown to the agent."""
    patch: str
    """The gold fix, a git-format diff (empty for Harbor tasks, whose gold is `solution/solve.sh`)."""
    test_patch: str
    """A git-format diff that adds the hidden tests; applied only in the grading sandbox."""
    FAIL_TO_PASS: tuple[str, ...]
    """Tests that fail at `base_commit` and must pass after the agent's diff."""
    PASS_TO_PASS: tuple[str, ...]
    """Tests that pass at `base_commit` and must still pass."""
    version: str
    """The environment version (SWE-bench); '1' for built-in tasks."""
    environment_setup_commit: str
    """The commit the environment was installed from (SWE-bench); the base commit elsewhere."""
    image: str
    """The sandbox image holding the repository at `workdir` (Docker tag)."""
    workdir: str
    """Absolute path of the repository inside the image."""
    test_cmd: str
    """The test command: pytest argv prefix (built-in), a bash script (SWE-bench), `bash /tests/test.sh`
    (Harbor)."""
    log_parser: str
    """How results are read: 'junit' (built-in), a log-parser name (SWE-bench), 'harbor_reward' (Harbor)."""
    protected_paths: tuple[str, ...] = ()
    """Extra glob patterns (repo-relative) the agent's diff may not touch, on top of the verifier's defaults.
    """
    timeouts: Timeouts = dataclasses.field(default_factory=Timeouts)
    """Phase time limits."""
    kind: str = "builtin"
    """Where the task came from: builtin | swebench | harbor."""
    split: str = "train"
    """Which split the task belongs to (train, validation, test, ...)."""
    difficulty: str = ""
    """easy | medium | hard for built-in tasks; free text (or empty) elsewhere."""
    domain: str = ""
    """What kind of code the task is about (parsers, numerics, ...); empty when unknown."""
    title: str = ""
    """A one-line summary for listings."""
    source_dir: str = ""
    """Host path the task was loaded from (task directory or JSONL file)."""
    verifier_dir: str = ""
    """Host directory uploaded to `/tests` of the grading sandbox after the diff is applied (Harbor)."""
    image_context: str = ""
    """Host directory holding the Dockerfile `image` is built from, when it is built locally."""
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Free-form extra information kept from the task file (tags, hints, verifier env)."""

    def __post_init__(self) -> None:
        tid = self.instance_id if isinstance(self.instance_id, str) else repr(self.instance_id)
        if not isinstance(self.instance_id, str) or not _ID_RE.match(self.instance_id):
            raise TaskError(tid, "instance_id", f"must match {_ID_RE.pattern}, got {self.instance_id!r}")
        for name in (
            "repo",
            "problem_statement",
            "patch",
            "test_patch",
            "version",
            "environment_setup_commit",
            "image",
            "workdir",
            "test_cmd",
            "log_parser",
            "kind",
            "split",
            "difficulty",
            "domain",
            "title",
            "source_dir",
            "verifier_dir",
            "image_context",
        ):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TaskError(tid, name, f"must be a string, got {type(value).__name__} {value!r}")
        for name in ("repo", "image", "workdir", "test_cmd", "log_parser", "split", "problem_statement"):
            if not getattr(self, name).strip():
                raise TaskError(tid, name, f"must not be empty, got {getattr(self, name)!r}")
        if self.kind not in KINDS:
            raise TaskError(tid, "kind", f"must be one of {KINDS}, got {self.kind!r}")
        # A Harbor task may leave it empty: its image's HEAD is the base.
        if not _SHA_RE.match(self.base_commit) and not (self.kind == "harbor" and self.base_commit == ""):
            raise TaskError(
                tid, "base_commit", f"must be a 40-hex-digit commit sha, got {self.base_commit!r}"
            )
        if not self.workdir.startswith("/") or "\0" in self.workdir:
            raise TaskError(tid, "workdir", f"must be an absolute path, got {self.workdir!r}")
        for name in ("FAIL_TO_PASS", "PASS_TO_PASS", "protected_paths"):
            object.__setattr__(self, name, _string_tuple(tid, name, getattr(self, name)))
        if self.kind != "harbor" and not self.FAIL_TO_PASS:
            raise TaskError(
                tid, "FAIL_TO_PASS", "must list at least one test (nothing would be graded), got []"
            )
        overlap = sorted(set(self.FAIL_TO_PASS) & set(self.PASS_TO_PASS))
        if overlap:
            raise TaskError(tid, "PASS_TO_PASS", f"repeats FAIL_TO_PASS tests {overlap}")
        if not isinstance(self.timeouts, Timeouts):
            raise TaskError(tid, "timeouts", f"must be a Timeouts, got {self.timeouts!r}")
        if not isinstance(self.metadata, Mapping):
            raise TaskError(tid, "metadata", f"must be a mapping, got {self.metadata!r}")

    @property
    def tests(self) -> tuple[str, ...]:
        """Every graded test id, FAIL_TO_PASS first."""
        return self.FAIL_TO_PASS + self.PASS_TO_PASS

    def to_dict(self) -> dict[str, Any]:
        """The whole task as JSON-serialisable data (gold patch included)."""
        out = dataclasses.asdict(self)
        out["FAIL_TO_PASS"] = list(self.FAIL_TO_PASS)
        out["PASS_TO_PASS"] = list(self.PASS_TO_PASS)
        out["protected_paths"] = list(self.protected_paths)
        out["metadata"] = _jsonable(self.metadata)
        return out


def _string_tuple(task: str, field: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise TaskError(task, field, f"must be a list of strings, got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise TaskError(task, field, f"must hold non-empty strings only, got item {item!r}")
    if len(set(value)) != len(value):
        dupes = sorted({v for v in value if value.count(v) > 1})
        raise TaskError(task, field, f"lists {dupes} more than once")
    return tuple(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def require(task: str, raw: Mapping[str, Any], field: str, kind: type | tuple[type, ...] = str) -> Any:
    """Reads `raw[field]`, raising `TaskError` when it is absent or not of `kind` (loaders' common check)."""
    if field not in raw:
        raise TaskError(task, field, "is missing")
    value = raw[field]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TaskError(task, field, f"must be {names}, got {type(value).__name__} {value!r}")
    return value
