"""Loader of SWE-bench / SWE-Gym / SWE-rebench style task files: one JSON object per line → `Task` records.

Each row carries SWE-bench's instance fields. `FAIL_TO_PASS` / `PASS_TO_PASS` may be lists or JSON-encoded
lists (as Hugging Face exports them); `version` may be a number. Optional fields of ours, per row:
`image`, `workdir` (default `/testbed`), `test_cmd`, `log_parser`, `split`, `difficulty`, `domain`,
`protected_paths`, `timeouts` (`{agent_s, verify_s, build_s}`). A `.json` file holding one list of such
objects is read too, and a `.parquet` file as the Hugging Face hub serves a data set (pyarrow reads it;
its rows load exactly as the same rows in JSONL). Fields of other data sets are ignored unless named here.

- `image`: the row's; else SWE-rebench's `docker_image` (or `image_name`); else `image_template` formatted
  with `instance_id` in swebench's Docker spelling (lowercase, `__` → `_1776_`), e.g.
  `swebench/sweb.eval.x86_64.{instance_id}:latest`, or `swegym_instance_id` in SWE-Gym's (`__` → `_s_`,
  `SWEGYM_IMAGE_TEMPLATE`: `xingyaoww/sweb.eval.x86_64.{swegym_instance_id}:latest`).
- `test_cmd`: a bash script run in `workdir` whose output the log parser reads. The row's; else, for a
  swebench 5.x row, the set-up lines and the command between the markers of its `eval_script`; else
  SWE-rebench's `install_config.test_cmd`, followed by the test directives of `test_patch`; else derived
  as swebench 4.x's eval scripts do: `test_cmd` of the repo and version, followed by the test directives of
  `test_patch` (exactly `get_test_directives` of swebench 4.1.0), in the image's conda `testbed` env. swebench
  5.x no longer ships the per-repo specs (rows carry `eval_script` and `log_parser` instead, and its task
  repos an `eval.sh`), so the specs come from an installed 4.x when there is one, else from the table the
  project keeps (`swebench_specs.json`, 4.1.0's, written by `tools/make_swebench_specs.py`).
- `log_parser`: the row's, else its `install_config.log_parser` (SWE-rebench), else the installed swebench's
  parser for the repo (its `MAP_REPO_TO_PARSER*`), else the spec table's. A row whose parser none of them
  names is an error, never a silent default. Every Python parser swebench names is ours too
  (`swebench_parsers.py`), so every repository of SWE-bench, Lite and Verified loads and grades without
  swebench installed.

For rows of a repository none of these knows (SWE-Gym's: getmoto/moto, python/mypy, ...), the caller may
name a `test_cmd` (followed by the test directives, in the conda env) and a `log_parser` for the whole file
(`--test-cmd` / `--log-parser`, `tasks.test_cmd` / `tasks.log_parser`); without them such a row is an error
saying so.

Where each came from is recorded in `metadata["test_cmd_source"]`, `metadata["log_parser_source"]`
(`row`, `eval_script`, `install_config`, `swebench <version>`, `spec table (swebench 4.1.0)`, `--test-cmd`,
`--log-parser`) and `metadata["image_source"]`. A file may hold the same row twice
(SWE-agent's test data does); identical repeats are skipped with a warning, differing ones are an error.

Every bad row raises `TaskError` naming the instance (with the file and line), the field and the value.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from legorl_jax.tasks.log_parsers import UnknownParserError, check_parser_name, swebench_parser_for_repo
from legorl_jax.tasks.patchset import PatchError, parse_patch
from legorl_jax.tasks.schema import Task, TaskError, Timeouts, require

DEFAULT_IMAGE_TEMPLATE = "swebench/sweb.eval.x86_64.{instance_id}:latest"
SWEGYM_IMAGE_TEMPLATE = "xingyaoww/sweb.eval.x86_64.{swegym_instance_id}:latest"
_TEMPLATE_FIELDS = ("instance_id", "swegym_instance_id")
DEFAULT_WORKDIR = "/testbed"
DEFAULT_VERIFY_S = 1800.0  # swebench's own evaluation timeout
_REQUIRED = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "version",
)
_CONDA = "source /opt/miniconda3/bin/activate && conda activate testbed"
_START_MARKER, _END_MARKER = ">>>>> Start Test Output", ">>>>> End Test Output"
_SETUP_PREFIXES = ("source ", "conda activate", "cd ", "export ", ". ")
# swebench 4.1.0's NON_TEST_EXTS, its "csv" without a dot included: upstream drops any path ending in csv.
_NON_TEST_SUFFIXES = (
    ".json",
    ".png",
    "csv",
    ".txt",
    ".md",
    ".jpg",
    ".jpeg",
    ".pkl",
    ".yml",
    ".yaml",
    ".toml",
)
_DIRECTIVE_RE = re.compile(r"diff --git a/.* b/(.*)")
SPEC_TABLE = Path(__file__).with_name("swebench_specs.json")
SPEC_TABLE_SOURCE = "spec table (swebench 4.1.0)"
log = logging.getLogger(__name__)


@functools.cache
def spec_table() -> Mapping[str, Any]:
    """The project's copy of swebench 4.1.0's per-repo test commands and parser names."""
    return json.loads(SPEC_TABLE.read_text(encoding="utf-8"))


def docker_instance_id(instance_id: str) -> str:
    """How swebench spells an instance id inside an image name."""
    return instance_id.lower().replace("__", "_1776_")


def swegym_instance_id(instance_id: str) -> str:
    """How SWE-Gym's images (OpenHands' `xingyaoww/sweb.eval.x86_64.*`) spell an instance id."""
    return instance_id.lower().replace("__", "_s_")


def load_swebench_file(
    path: Path,
    *,
    image_template: str = DEFAULT_IMAGE_TEMPLATE,
    test_cmd: str | None = None,
    log_parser: str | None = None,
) -> list[Task]:
    """Every row of a `.jsonl` file (or the list in a `.json` file, or a `.parquet` file), in file order.

    `test_cmd` / `log_parser`: what rows of a repository that no source above knows run and parse (SWE-Gym's
    repositories, which no swebench release specifies): the user's explicit choice, never a default."""
    path = Path(path)
    if not any(f"{{{name}}}" in image_template for name in _TEMPLATE_FIELDS):
        raise TaskError(
            str(path),
            "image_template",
            f"must contain one of {[f'{{{n}}}' for n in _TEMPLATE_FIELDS]}, got {image_template!r}",
        )
    rows: list[tuple[int, Any]] = []
    if path.suffix == ".parquet":
        rows = [(i + 1, row) for i, row in enumerate(read_parquet_rows(path))]
        text = ""
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise TaskError(str(path), "file", f"cannot be read: {err}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise TaskError(str(path), "file", f"is not valid JSON: {err}") from None
        if not isinstance(data, list):
            raise TaskError(
                str(path), "file", f"must hold a JSON list of task objects, got {type(data).__name__}"
            )
        rows = [(i + 1, row) for i, row in enumerate(data)]
    elif path.suffix != ".parquet":
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                rows.append((lineno, json.loads(line)))
            except json.JSONDecodeError as err:
                raise TaskError(f"{path.name}:{lineno}", "line", f"is not valid JSON: {err}") from None
    tasks: list[Task] = []
    seen: dict[str, tuple[int, Any]] = {}
    for n, row in rows:
        instance_id = row.get("instance_id") if isinstance(row, Mapping) else None
        if isinstance(instance_id, str) and instance_id in seen:
            first_line, first = seen[instance_id]
            if first != row:
                raise TaskError(
                    instance_id,
                    "instance_id",
                    f"appears more than once in {str(path)!r} (rows "
                    f"{first_line} and {n}) with different contents",
                )
            log.warning("%s: row %d repeats row %d (%s) exactly; skipped", path, n, first_line, instance_id)
            continue
        tasks.append(
            task_from_row(
                row,
                f"{path.name}:{n}",
                image_template,
                str(path.resolve()),
                fallback=Fallback(test_cmd, log_parser),
            )
        )
        if isinstance(instance_id, str):
            seen[instance_id] = (n, row)
    return tasks


def read_parquet_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a Parquet file as the Hugging Face hub serves a data set (`data/test-*.parquet`), each a
    dict as its JSONL export's line would be (timestamps as ISO text)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TaskError(
            str(path),
            "file",
            "is Parquet, which needs pyarrow (`pip install pyarrow`); or export it as JSONL",
        ) from None
    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise TaskError(str(path), "file", f"is not a readable Parquet file: {err}") from None
    return [{k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in row.items()} for row in rows]


@dataclasses.dataclass(frozen=True)
class Fallback:
    """The test command and log parser a user gave for rows that no other source covers."""

    test_cmd: str | None = None
    log_parser: str | None = None


def task_from_row(
    row: Any,
    where: str,
    image_template: str = DEFAULT_IMAGE_TEMPLATE,
    source: str = "",
    *,
    fallback: Fallback = Fallback(),
) -> Task:
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
    install = row.get("install_config")
    if install is not None and not isinstance(install, Mapping):
        raise TaskError(label, "install_config", f"must be an object, got {install!r:.120}")
    log_parser, parser_source = _log_parser(label, row, repo, fallback.log_parser)
    test_cmd, cmd_source = row.get("test_cmd"), "row"
    if test_cmd is None:
        test_cmd, cmd_source = _derived_test_cmd(label, row, repo, version, test_patch, fallback.test_cmd)
    elif not isinstance(test_cmd, str):
        raise TaskError(label, "test_cmd", f"must be a string, got {test_cmd!r}")
    image, image_source = _image(label, row, str(instance_id), image_template)
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
            FAIL_TO_PASS=tuple(_test_list(label, row, "FAIL_TO_PASS")),
            PASS_TO_PASS=tuple(_test_list(label, row, "PASS_TO_PASS")),
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
            metadata={
                **{k: row[k] for k in ("hints_text", "created_at", "eval_type") if k in row},
                "test_cmd_source": cmd_source,
                "log_parser_source": parser_source,
                "image_source": image_source,
            },
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
            raise TaskError(
                label, field, f"must be a list or a JSON-encoded list, got {value!r:.120}"
            ) from None
    if not isinstance(value, list):
        raise TaskError(label, field, f"must be a list of test ids, got {value!r:.120}")
    return value


def _image(label: str, row: Mapping[str, Any], instance_id: str, template: str) -> tuple[str, str]:
    """(image, where it came from): the row's `image`, SWE-rebench's `docker_image` / `image_name`, or the
    template."""
    for field in ("image", "docker_image", "image_name"):
        value = row.get(field)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise TaskError(label, field, f"must be an image name, got {value!r:.120}")
        return value, "row" if field == "image" else field
    fields = {
        "instance_id": docker_instance_id(instance_id),
        "swegym_instance_id": swegym_instance_id(instance_id),
    }
    return template.format(**fields), f"template {template}"


def _log_parser(label: str, row: Mapping[str, Any], repo: str, fallback: str | None) -> tuple[str, str]:
    """(parser name, where it came from): the row, its `install_config` (SWE-rebench), the installed
    swebench, or the spec table."""
    name, source = row.get("log_parser"), "row"
    if name is None and isinstance(row.get("install_config"), Mapping):
        name, source = row["install_config"].get("log_parser"), "install_config"
    if name is None:
        name, source = swebench_parser_for_repo(repo), f"swebench {_swebench_version()}"
    if name is None:
        name, source = spec_table()["log_parser"].get(repo), SPEC_TABLE_SOURCE
    if name is None and fallback is not None:
        name, source = fallback, "--log-parser"
    if name is None:
        raise TaskError(
            label,
            "log_parser",
            f"is missing, and neither the installed swebench nor the spec table "
            f"knows a parser for repo {repo!r}; add a log_parser to the row, or name one for the file "
            f"(`--log-parser`, tasks.log_parser; SWE-Gym's pytest repositories: parse_log_pytest)",
        )
    if not isinstance(name, str):
        raise TaskError(label, "log_parser", f"must be a string, got {name!r}")
    try:
        check_parser_name(name)
    except UnknownParserError as err:
        raise TaskError(label, "log_parser", f"{err} (from {source})") from None
    return name, source


def _swebench_version() -> str:
    try:
        return importlib.import_module("swebench").__version__
    except (ImportError, AttributeError):
        return "(not installed)"


def _derived_test_cmd(
    label: str, row: Mapping[str, Any], repo: str, version: str, test_patch: str, fallback: str | None
) -> tuple[str, str]:
    eval_script = row.get("eval_script")
    if eval_script is not None:
        return command_from_eval_script(label, eval_script), "eval_script"
    install = row.get("install_config")
    if isinstance(install, Mapping) and install.get("test_cmd") is not None:
        base_cmd = install["test_cmd"]
        if isinstance(base_cmd, list) and base_cmd and all(isinstance(c, str) for c in base_cmd):
            base_cmd = base_cmd[-1]
        if not isinstance(base_cmd, str) or not base_cmd.strip():
            raise TaskError(label, "install_config.test_cmd", f"must be a command, got {base_cmd!r:.120}")
        directives = " ".join(directives_from_test_patch(repo, test_patch))
        return f"{_CONDA} && {base_cmd} {directives}", "install_config"
    specs, source = None, SPEC_TABLE_SOURCE
    try:
        specs = getattr(
            importlib.import_module("swebench.harness.constants"), "MAP_REPO_VERSION_TO_SPECS", None
        )
    except ImportError:
        pass
    base_cmd = None
    if specs is not None and "test_cmd" in specs.get(repo, {}).get(version, {}):
        base_cmd, source = specs[repo][version]["test_cmd"], f"swebench {_swebench_version()}"
    else:
        base_cmd = spec_table()["test_cmd"].get(repo, {}).get(version)
    if base_cmd is None and fallback is not None:
        base_cmd, source = fallback, "--test-cmd"
    if base_cmd is None:
        raise TaskError(
            label,
            "test_cmd",
            f"is missing, the row has no eval_script, and neither the installed "
            f"swebench nor the spec table has a test command for repo {repo!r} version {version!r}; "
            "add a test_cmd or an eval_script to the row, or name the command its test files follow for "
            "the file (`--test-cmd`, tasks.test_cmd; SWE-Gym's pytest repositories: 'pytest -rA')",
        )
    if isinstance(base_cmd, list):
        base_cmd = base_cmd[-1]
    return f"{_CONDA} && {base_cmd} {' '.join(directives_from_test_patch(repo, test_patch))}", source


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
        raise TaskError(
            label,
            "eval_script",
            f"has no command between {_START_MARKER!r} and {_END_MARKER!r} markers: {eval_script[:200]!r}",
        )
    setup = [line for line in lines[:start] if line.strip().startswith(_SETUP_PREFIXES)]
    return "\n".join(setup + lines[start + 1 : end])


def directives_from_test_patch(repo: str, test_patch: str) -> list[str]:
    """The test directives swebench 4.1.0's `get_test_directives` makes of `test_patch`: the `b/` path of
    every `diff --git` line, minus its non-test extensions; for Django, dotted module names without
    `tests/`."""
    directives = [d for d in _DIRECTIVE_RE.findall(test_patch) if not d.endswith(_NON_TEST_SUFFIXES)]
    if repo != "django/django":
        return directives
    return [d.removesuffix(".py").removeprefix("tests/").replace("/", ".") for d in directives]
