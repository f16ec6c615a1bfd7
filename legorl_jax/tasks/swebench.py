"""Loader of SWE-bench / SWE-Gym style task files: one JSON object per line → `Task` records.

Each row carries SWE-bench's instance fields. `FAIL_TO_PASS` / `PASS_TO_PASS` may be lists or JSON-encoded
lists (as Hugging Face exports them); `version` may be a number. Optional fields of ours, per row:
`image`, `workdir` (default `/testbed`), `test_cmd`, `log_parser`, `split`, `difficulty`, `domain`,
`protected_paths`, `timeouts` (`{agent_s, verify_s, build_s}`). A `.json` file holding one list of such
objects is read too.

- `image`: the row's, else `image_template` formatted with `instance_id` in Docker's spelling (lowercase,
  `__` → `_1776_`, as swebench names its images), e.g. `swebench/sweb.eval.x86_64.{instance_id}:latest`.
- `test_cmd`: a bash script run in `workdir` whose output the log parser reads. The row's; else, for a
  swebench 5.x row, the set-up lines and the command between the markers of its `eval_script`; else, with
  swebench 4.x installed, derived as its eval scripts do (`MAP_REPO_VERSION_TO_SPECS[repo][version]
  ["test_cmd"]` followed by the test files of `test_patch`, in the image's conda `testbed` env). Otherwise a
  missing `test_cmd` is an error.
- `log_parser`: the row's, else swebench's parser for the repo, else `pytest` (see `log_parsers`); an
  unknown name is an error at load time.

Every bad row raises `TaskError` naming the instance (with the file and line), the field and the value.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from legorl_jax.tasks.log_parsers import UnknownParserError, check_parser_name, default_parser_name
from legorl_jax.tasks.patchset import PatchError, parse_patch
from legorl_jax.tasks.schema import Task, TaskError, Timeouts, require

DEFAULT_IMAGE_TEMPLATE = "swebench/sweb.eval.x86_64.{instance_id}:latest"
DEFAULT_WORKDIR = "/testbed"
DEFAULT_VERIFY_S = 1800.0  # swebench's own evaluation timeout
_REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch",
             "FAIL_TO_PASS", "PASS_TO_PASS", "version")
_CONDA = "source /opt/miniconda3/bin/activate && conda activate testbed"
_START_MARKER, _END_MARKER = ">>>>> Start Test Output", ">>>>> End Test Output"
_SETUP_PREFIXES = ("source ", "conda activate", "cd ", "export ", ". ")
_NON_TEST_SUFFIXES = (".json", ".png", ".csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")


def docker_instance_id(instance_id: str) -> str:
    """How swebench spells an instance id inside an image name."""
    return instance_id.lower().replace("__", "_1776_")


def load_swebench_file(path: Path, *, image_template: str = DEFAULT_IMAGE_TEMPLATE) -> list[Task]:
    """Every row of a `.jsonl` file (or the list in a `.json` file), in file order."""
    path = Path(path)
    if "{instance_id}" not in image_template:
        raise TaskError(str(path), "image_template", f"must contain '{{instance_id}}', got {image_template!r}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TaskError(str(path), "file", f"cannot be read: {err}") from None
    rows: list[tuple[int, Any]] = []
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise TaskError(str(path), "file", f"is not valid JSON: {err}") from None
        if not isinstance(data, list):
            raise TaskError(str(path), "file", f"must hold a JSON list of task objects, got {type(data).__name__}")
        rows = [(i + 1, row) for i, row in enumerate(data)]
    else:
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                rows.append((lineno, json.loads(line)))
            except json.JSONDecodeError as err:
                raise TaskError(f"{path.name}:{lineno}", "line", f"is not valid JSON: {err}") from None
    tasks = [task_from_row(row, f"{path.name}:{n}", image_template, str(path.resolve())) for n, row in rows]
    seen: set[str] = set()
    for task in tasks:
        if task.instance_id in seen:
            raise TaskError(task.instance_id, "instance_id", f"appears more than once in {str(path)!r}")
        seen.add(task.instance_id)
    return tasks


def task_from_row(row: Any, where: str, image_template: str = DEFAULT_IMAGE_TEMPLATE, source: str = "") -> Task:
    """One SWE-bench-style record → `Task`; `where` (file:line) is used in errors."""
    if not isinstance(row, Mapping):
        raise TaskError(where, "row", f"must be a JSON object, got {type(row).__name__} {row!r:.80}")
    label = f"{row.get('instance_id', '?')} ({where})"
    for field in _REQUIRED:
        if field not in row:
            raise TaskError(label, field, "is missing")
    instance_id = require(label, row, "instance_id")
    version = row["version"]
    if isinstance(version, bool) or not isinstance(version, str | int | float):
        raise TaskError(label, "version", f"must be a string or number, got {version!r}")
    version = str(version)
    test_patch = require(label, row, "test_patch")
    for field in ("patch", "test_patch"):
        try:
            parse_patch(require(label, row, field))
        except PatchError as err:
            raise TaskError(label, field, f"is not a readable diff: {err}") from None
    repo = require(label, row, "repo")
    log_parser = row.get("log_parser") or default_parser_name(repo)
    if not isinstance(log_parser, str):
        raise TaskError(label, "log_parser", f"must be a string, got {log_parser!r}")
    try:
        check_parser_name(log_parser)
    except UnknownParserError as err:
        raise TaskError(label, "log_parser", str(err)) from None
    test_cmd = row.get("test_cmd")
    if test_cmd is None:
        test_cmd = _derived_test_cmd(label, row, repo, version, test_patch)
    elif not isinstance(test_cmd, str):
        raise TaskError(label, "test_cmd", f"must be a string, got {test_cmd!r}")
    image = row.get("image") or image_template.format(instance_id=docker_instance_id(str(instance_id)))
    timeouts_raw = row.get("timeouts", {"verify_s": DEFAULT_VERIFY_S})
    if isinstance(timeouts_raw, Mapping) and "verify_s" not in timeouts_raw:
        timeouts_raw = {**timeouts_raw, "verify_s": DEFAULT_VERIFY_S}
    try:
        return Task(
            instance_id=instance_id,
            repo=repo,
            base_commit=require(label, row, "base_commit"),
            problem_statement=require(label, row, "problem_statement"),
            patch=row["patch"],
            test_patch=test_patch,
            FAIL_TO_PASS=_test_list(label, row, "FAIL_TO_PASS"),
            PASS_TO_PASS=_test_list(label, row, "PASS_TO_PASS"),
            version=version,
            environment_setup_commit=row.get("environment_setup_commit") or row["base_commit"],
            image=image,
            workdir=row.get("workdir", DEFAULT_WORKDIR),
            test_cmd=test_cmd,
            log_parser=log_parser,
            protected_paths=row.get("protected_paths", []),
            timeouts=Timeouts.from_mapping(label, timeouts_raw),
            kind="swebench",
            split=row.get("split", "test"),
            difficulty=row.get("difficulty", ""),
            domain=row.get("domain", ""),
            title=row.get("title", ""),
            source_dir=source,
            metadata={k: row[k] for k in ("hints_text", "created_at", "eval_type") if k in row},
        )
    except TaskError as err:
        # Re-label with the file position: the record's own id alone does not say where it is.
        raise TaskError(label, err.field, err.problem) from None


def _test_list(label: str, row: Mapping[str, Any], field: str) -> list[str]:
    value = row[field]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TaskError(label, field, f"must be a list or a JSON-encoded list, got {value!r:.120}") from None
    if not isinstance(value, list):
        raise TaskError(label, field, f"must be a list of test ids, got {value!r:.120}")
    return value


def _derived_test_cmd(label: str, row: Mapping[str, Any], repo: str, version: str, test_patch: str) -> str:
    eval_script = row.get("eval_script")
    if eval_script is not None:
        return command_from_eval_script(label, eval_script)
    try:
        constants = importlib.import_module("swebench.harness.constants")
    except ImportError:
        raise TaskError(
            label, "test_cmd", "is missing, and the row has no eval_script; deriving it from repo/version needs "
            "swebench 4.x (not installed); add a test_cmd to the row"
        ) from None
    specs = getattr(constants, "MAP_REPO_VERSION_TO_SPECS", None)
    if specs is None:
        raise TaskError(label, "test_cmd", "is missing and neither the row's eval_script nor this swebench's "
                        "repo/version specs (swebench 4.x) can provide it; add a test_cmd or an eval_script")
    try:
        base_cmd = specs[repo][version]["test_cmd"]
    except KeyError:
        raise TaskError(label, "test_cmd", f"is missing and swebench has no spec for {repo!r} version {version!r}") from None
    if isinstance(base_cmd, list):
        base_cmd = base_cmd[-1]
    return f"{_CONDA} && {base_cmd} {' '.join(directives_from_test_patch(repo, test_patch))}"


def command_from_eval_script(label: str, eval_script: Any) -> str:
    """The test command inside a swebench 5.x `eval_script`: its environment set-up lines (`source`,
    `conda activate`, `cd`, `export`) followed by what it runs between its start and end markers. The rest
    (resetting test files, applying the test patch) is the verifier's own job."""
    if not isinstance(eval_script, str):
        raise TaskError(label, "eval_script", f"must be a string, got {eval_script!r:.120}")
    lines = eval_script.split("\n")
    start = next((i for i, line in enumerate(lines) if _START_MARKER in line), None)
    end = next((i for i, line in enumerate(lines) if _END_MARKER in line), None)
    if start is None or end is None or end <= start + 1:
        raise TaskError(label, "eval_script", f"has no command between {_START_MARKER!r} and {_END_MARKER!r} "
                        f"markers: {eval_script[:200]!r}")
    setup = [line for line in lines[:start] if line.strip().startswith(_SETUP_PREFIXES)]
    return "\n".join(setup + lines[start + 1 : end])


def directives_from_test_patch(repo: str, test_patch: str) -> list[str]:
    """The test files `test_patch` touches, as swebench passes them to the test command."""
    directives = [p.path for p in parse_patch(test_patch) if not p.path.endswith(_NON_TEST_SUFFIXES)]
    if repo != "django/django":
        return directives
    out = []
    for d in directives:
        name = d.rsplit("/", 1)[-1]
        if not (name == "tests.py" or name.startswith("test_") or "/tests/" in d or "/test_" in d):
            continue
        d = re.sub(r"\.py$", "", d)
        out.append(d.removeprefix("tests/").replace("/", "."))
    return out
