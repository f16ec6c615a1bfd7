"""The verifier: `await grade(task, diff)` → `VerifierReport` (docs/security.md §4).

One grade, in a fresh sandbox started from the task's clean image (never the agent's sandbox):

1. The agent's diff is parsed file by file (`patchset`; a section whose `---`/`+++` lines name other files
than
   its header is refused as malformed) and every change to a protected path is dropped and reported
   (`protection`: tests, conftest, pytest/tox/setup configuration, `pyproject.toml`, start-up hooks, `.git*`,
   runner shadowing, symlinks, the task's own globs, the hidden test paths).
2. What is left is applied with `git apply`, then `git apply --3way`, then `patch --fuzz=5` (swebench's
   fallback chain, the tree restored between attempts). A diff that none of them applies is the policy's
   failure: reward 0, apply status `failed`; the tests are not run. What the apply *really* wrote is then
   checked against the same rules: any file under `.git/` newer than the apply (config filters, attributes,
   hooks), and every path `git status` shows changed, are judged again; a protected one is tampering.
3. The hidden tests (`task.test_patch`) are applied with plain `git apply`, through a private empty git
   directory with no system or user config (no filter, hook or attribute of the repository's is used);
   Harbor tasks get their `tests/` uploaded to `/tests` only now. Failing here is infrastructure.
4. Everything the grader wrote into the sandbox (the agent's patch, the pristine hidden tests, the private git
   folder, the stamp) is deleted before the tests run: the test process finds nothing of the grader's, and the
   folder its report path names is empty. The test command then runs with the task's timeout, after a
   snapshot of the running processes:
   - built-in tasks: pytest run as `python -P` with the repository root appended to `sys.path` (nothing of
     the agent's can shadow pytest, its imports or the standard library), `-rA`, and a JUnit report at a
     random path; the report, the `-rA` lines, the closing count line and the exit code are cross-checked
     (`pytest_report.cross_check`). Every eligible hidden test gets must-fail canary twins whose values,
     names and places do not single out the original (`canary`), and the watch plugin (`pytest_watch`,
     passed inline, registered before any conftest or repository code) reports any change to pytest's
     outcome-deciding functions, hooks and outcome classes;
   - SWE-bench tasks: the test script (passed as `bash -c`: a script file could be rewritten under bash)
     between random start/end markers, its stdout and stderr merged as swebench's harness merges them, read
     by the task's log parser and line by line (`log_parsers.read_stream`: the worst status any line gives a
     test wins; a pass after a failure, or a listed test's status after the runner's closing line, is
     tampering); a non-zero exit with no failing test, or a zero exit with one, is tampering, and so is a
     test file whose inode changed after the run started (ctime). A command that is set-up (`source`,
     `conda activate`, `cd`, `export`) then one plain `pytest ...` or `python -m pytest ...`, as swebench
     writes it for its pytest repositories, runs with the watch plugin too (no `-P`: these images run older
     Pythons), speaking on the exec's stderr (fd 9), not on the stream it checks: each test's outcome as
     pytest's reports gave it, pytest's own exit code, which the process must exit with. Canary twins are
     planted where the row allows them (`_SwebenchRun._canary_files`: plain pytest rows read by a parser of
     node ids, and sympy's `bin/test`, in the hidden test files the command names whole, as the hidden
     tests left them), with the survival probability and its shortfall stated per grade. Rows read by
     `parse_log_django` run under the unittest watch (`unittest_watch`, as `sitecustomize`). The end
     marker's nonce reaches the script through a file it reads and deletes first (`_read_secret`);
   - Harbor tasks: `bash /tests/test.sh` under a wrapper that prints a per-grade marker with test.sh's
     status on its own channel (no marker, a signal's status or another wrapper exit is tampering); where
     the tests are pytest, every pytest session runs under the watch (`PYTEST_PLUGINS`, the module form),
     which also flags a reward file written while the tests ran. Then `/logs/verifier/reward.txt` (a
     number) or `reward.json`; a reward above 0 whose sessions never ended or ran no test, a reward of 1
     whose sessions saw a failure, a reward file no file of the verifier names, or a changed file of
     `/tests` is tampering.
5. Processes the test run left behind are listed and killed before any result file is read. Result files
   are read with a timeout and a byte cap, only when they are regular files (a FIFO or a link to
   `/dev/zero` is tampering, not a hang), and XML is parsed with `defusedxml`. For Harbor tasks, whose
   reward file is the only evidence, a survivor is tampering (it could have rewritten it), and so is a
   reward file it left missing or unreadable (no empty-diff grade is needed to blame the diff).

Reward is 1.0 exactly when every FAIL_TO_PASS test `passed` and every PASS_TO_PASS test passed (SWE-bench
tasks also accept `skipped`/`xfailed` for PASS_TO_PASS, as swebench does; an `xfailed` FAIL_TO_PASS test is
not a fix, which is stricter than swebench) and no tampering was seen.

Policy failure or infrastructure: a timeout, the memory limit, a run that left no result, a sandbox command
that failed are `VerifierError`s (with a `reason`, see `report.drop_rates`) only when the empty diff fails the
same way in the same kind of sandbox; after a diff that applied, they are otherwise the diff's doing (it
crashed, killed its parent, filled /tmp, closed the pipes, slept past the limit) and score 0, reported as
tampering (with the processes it left), so a policy cannot learn to crash instead of failing. That the empty
diff grades is remembered per process for the task as graded (`grading_identity`: every field, and a Harbor
verifier's files) and the configuration, never for another task that shares its id. `grade_many` returns
every item's result: any exception in one grade becomes a `VerifierError` (reason `internal`) in its place.

What is guaranteed against code that runs inside the test process (the agent's package, imported by the
tests): it cannot change which tests run or how pytest is configured (protected paths, `-P`, plugin
autoload off, `PYTEST_ADDOPTS` cleared), cannot outlive the run (survivors are killed before results are
read), cannot make the grader hang or read anything but a capped regular file, cannot read or write what the
grader keeps (deleted before the run), any inconsistent forgery of the three result sources is caught, and so
is any replaced or wrapped pytest run, report or hook function that the watch plugin records (built-in tasks,
and SWE-bench rows whose command is a plain pytest run; other SWE-bench commands, such as django's
runtests.py and sympy's bin/test, have the stream checks, the exit code against their log and, for sympy's,
canary twins: a consistent rewrite of a Django-style row's whole stream is not caught, see docs/security.md).
Residual risk: a forger that reads the planted file and guesses which member of each FAIL_TO_PASS group is the
original survives a grade with probability `VerifierReport.canary_survival`, the product of 1/group size;
groups grow until it reaches 1e-3 or the grade's twins reach 64 (each failing twin costs grading time).
On the 40 built-in tasks it is 1e-3 or less for every one (min 7.7e-4, median 9.3e-4, max 9.9e-4); a
grade above 1e-3 (a SWE-bench row with few eligible fix tests) says why, test by test, in
`VerifierReport.canary_shortfall`. A forger with a prior over values (round numbers, real words, an input
echoed in the expected value) does better than guessing, and a FAIL_TO_PASS test with no eligible assert has
no twin. Code written against this verifier specifically can still find the watch plugin in memory and
silence it, or change outcomes without replacing a recorded function (see `pytest_watch`); only a separate
process that the tests do not share with the package would close that.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import hashlib
import json
import math
import posixpath
import re
import secrets
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from legorl_jax.config import VerifierConfig
from legorl_jax.sandbox.base import ExecResult, Sandbox, SandboxError, SandboxSpec
from legorl_jax.tasks.canary import CanaryError, CanaryPlan, canary_problems, plan_canaries
from legorl_jax.tasks.log_parsers import read_stream, resolve_log_parser
from legorl_jax.tasks.patchset import PatchError, format_patch, parse_patch
from legorl_jax.tasks.protection import (
    FilteredPatch,
    RemovedChange,
    filter_patch,
    hidden_test_paths,
    protected_reason,
)
from legorl_jax.tasks.pytest_report import (
    ReportError,
    cross_check,
    parse_junit,
    parse_pytest_log,
    parse_summary,
    statuses_for,
)
from legorl_jax.tasks.report import ApplyResult, VerifierError, VerifierReport, cap_text
from legorl_jax.tasks.schema import Task
from legorl_jax.tasks.swebench_parsers import SWEBENCH_PARSERS

SandboxFactory = Callable[[SandboxSpec], Sandbox]
APPLY_TIMEOUT_S = 120.0
REPORT_OUTPUT_CHARS = 65536
EXEC_OUTPUT_BYTES = 16 << 20
_MAX_JUNIT_BYTES = 8 << 20  # base64 of it stays under EXEC_OUTPUT_BYTES
_MAX_REWARD_BYTES = 64 << 10
_WATCH_TAG = "LEGORL-WATCH"  # pytest_watch's line tag
READ_TIMEOUT_S = 60.0
# Prints a file the test run could have replaced, base64-encoded, at most $2 bytes of it; refuses a symlink
# (to /dev/zero, say) and anything that is not a regular file (a FIFO would block the reader forever).
_READ_SCRIPT = r"""
p=$1
if [ -L "$p" ]; then echo "is a symbolic link" >&2; exit 3; fi
if [ ! -e "$p" ]; then exit 4; fi
if [ ! -f "$p" ]; then echo "is not a regular file" >&2; exit 5; fi
head -c "$2" -- "$p" | base64 -w0
"""
# A private, empty git directory and no user or system config: the hidden tests are applied without any
# filter, hook or attribute the agent's diff could have planted in the repository's own .git.
_PRIVATE_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1"}
# Files under .git that applying and restoring the tree write by themselves.
_GIT_SELF_WRITES = (
    "-path",
    ".git/objects",
    "-prune",
    "-o",
    "-path",
    ".git/logs",
    "-prune",
    "-o",
    "-name",
    "index",
    "-o",
    "-name",
    "index.lock",
    "-o",
    "-name",
    "ORIG_HEAD",
    "-o",
    "!",
    "-type",
    "d",
)
_F2P_OK = frozenset({"passed"})
_P2P_OK = {"builtin": frozenset({"passed"}), "swebench": frozenset({"passed", "skipped", "xfailed"})}
_APPLY_METHODS = (
    ("git apply", ["git", "apply", "--verbose", "--whitespace=nowarn"]),
    ("git apply --3way", ["git", "apply", "--verbose", "--3way", "--whitespace=nowarn"]),
    ("patch --fuzz=5", ["patch", "--batch", "--forward", "--no-backup-if-mismatch", "--fuzz=5", "-p1", "-i"]),
)
# Lists "pid command" for every live process except this shell and its own children (zombies skipped).
_PS_SCRIPT = r"""
self=$$
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$self" ] && continue
  st=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p; s/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null | tr '\n' ' ') || continue
  set -- $st
  [ "${1:-Z}" = Z ] && continue
  [ "${2:-}" = "$self" ] && continue
  echo "$p $(tr '\0' ' ' < "$d/cmdline" 2>/dev/null | cut -c1-200)"
done
"""  # noqa: E501 - script lines kept whole
# Exit status of the scripts below when a step before their last one failed.
_SCRIPT_STEP_FAILED = 125
# Makes the scratch directory ($1) and the stamp in it, then says whether the workdir is a git work tree.
_SETUP_SCRIPT = (
    'mkdir -p -m 700 "$1" && touch "$1/before-apply" || exit 125\ngit rev-parse --is-inside-work-tree\n'
)
# Makes the private git directory ($1, under $GIT_DIR) and applies the hidden tests ($2) through it.
_INIT_AND_APPLY_SCRIPT = 'git init -q "$1" && exec git apply --verbose --whitespace=nowarn "$2"'
# Empties the scratch directory ($1) and, when $2 is set, writes the nonce $3 there (only this user can read
# it); `_PS_SCRIPT` follows.
_CLEAR_SCRIPT = (
    'find "$1" -mindepth 1 -delete || exit 125\n'
    'if [ -n "$2" ]; then (umask 077 && printf %s "$3" > "$2") || exit 125; fi\n'
)


@dataclasses.dataclass(frozen=True)
class RunVerdict:
    """What a test run's results say, as its runner read them."""

    statuses: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Status of every listed test (empty for Harbor tasks, whose verifier reports only a reward)."""
    tampering: tuple[str, ...] = ()
    """Every sign that the results were forged; non-empty means reward 0."""
    reward: float | None = None
    """The reward the task's own verifier wrote (Harbor); None when the listed tests decide."""
    canary_survival: float | None = None
    """The chance a forger guessing the canaries survives this grade (built-in tasks, `CanaryPlan`)."""
    canary_shortfall: str | None = None
    """Why that chance is above the target, when it is (`CanaryPlan.shortfall`)."""


@dataclasses.dataclass
class _Progress:
    """How far one grade got, for turning a crash caused by the diff into a reward of 0."""

    apply: ApplyResult | None = None
    exit_code: int | None = None
    leftovers: tuple[str, ...] = ()


def default_sandbox_factory(spec: SandboxSpec, backend: str = "auto") -> Sandbox:
    """The sandbox layer's factory for `backend` (auto: Docker when a daemon answers, else bubblewrap)."""
    from legorl_jax.sandbox import make_sandbox

    return make_sandbox(spec, backend=backend)


def verifier_sandbox_spec(task: Task, config: VerifierConfig | None = None) -> SandboxSpec:
    """The grading sandbox: the task's image, no network, the configured limits.

    Built-in tasks grade on a read-only root (only the repository and /tmp are writable); SWE-bench and
    Harbor images were not made for one (conda caches, `/logs`, `/tests`), so theirs stays writable. Harbor
    verifiers run as the user their task declares (root by default).
    """
    config = config or VerifierConfig()
    user = str(task.metadata.get("verifier_user", "root")) if task.kind == "harbor" else None
    return SandboxSpec(
        image=task.image,
        workdir=task.workdir,
        network="none",
        cpus=config.cpus,
        memory_mb=config.memory_mb,
        pids=config.pids,
        disk_mb=config.disk_mb,
        user=user,
        read_only_root=task.kind == "builtin",
        labels={"legorl.role": "verifier", "legorl.task": task.instance_id},
        output_limit_bytes=EXEC_OUTPUT_BYTES,
    )


async def grade(
    task: Task,
    diff: str,
    *,
    sandbox_factory: SandboxFactory | None = None,
    config: VerifierConfig | None = None,
) -> VerifierReport:
    """Grades `diff` (the agent's `git diff` against the base) for `task`; see the module docstring."""
    if not isinstance(task, Task):
        raise TypeError(f"task must be a Task, got {type(task).__name__}")
    if not isinstance(diff, str):
        raise TypeError(f"diff must be str, got {type(diff).__name__}")
    config = config or VerifierConfig()
    started = time.monotonic()
    durations: dict[str, float] = {}
    try:
        hidden = hidden_test_paths(task.test_patch)
    except PatchError as err:  # the task's fault, not the diff's
        raise VerifierError(
            f"task {task.instance_id!r}: its hidden tests are not a readable diff: {err}", "hidden_tests"
        ) from err
    try:
        filtered = filter_patch(parse_patch(diff), hidden_paths=hidden, protected_globs=task.protected_paths)
    except PatchError as err:
        return _report(
            task, ApplyResult("malformed", None, str(err)), durations={"total": time.monotonic() - started}
        )
    factory = sandbox_factory or functools.partial(default_sandbox_factory, backend=config.backend)
    timeout = task.timeouts.verify_s * config.timeout_multiplier
    progress = _Progress()
    try:
        try:
            async with factory(verifier_sandbox_spec(task, config)) as sandbox:
                durations["start"] = time.monotonic() - started
                return await _grade_in(task, sandbox, filtered, durations, started, timeout, progress)
        except SandboxError as err:
            raise VerifierError(
                f"task {task.instance_id!r}: the grading sandbox failed: {err}", "sandbox"
            ) from err
    except VerifierError as err:
        # Crashing, killing the sandbox's processes, exhausting a limit or sleeping past the timeout must not
        # turn a failing diff into a dropped trial: it is infrastructure only if the empty diff fails too.
        if progress.apply is None or progress.apply.status != "applied":
            raise
        if not await _empty_diff_grades(task, sandbox_factory, config):
            raise
        durations["total"] = time.monotonic() - started
        return _report(
            task,
            progress.apply,
            removed=filtered.removed,
            durations=durations,
            leftovers=progress.leftovers,
            exit_code=progress.exit_code,
            output=str(err)[-REPORT_OUTPUT_CHARS:],
            tampering=[
                f"the grade failed with this diff ({err.reason}) but not with the empty diff, so "
                f"the diff caused it: {err}"
            ],
        )


_EMPTY_DIFF_OK: set[tuple[str, ...]] = set()


def grading_identity(task: Task) -> str:
    """A digest of everything that decides how `task` is graded: every field of the task and, for a Harbor
    task, the content of its verifier directory (uploaded at each grade, so editing it changes the grade).
    Two tasks with the same id but another test command, hidden tests, verifier or environment differ."""
    digest = hashlib.sha256(repr(task).encode())
    if task.verifier_dir:
        root = Path(task.verifier_dir)
        for path in sorted(root.rglob("*")) if root.is_dir() else ():
            digest.update(b"\0" + str(path.relative_to(root)).encode() + b"\0")
            if path.is_file() and not path.is_symlink():
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


async def _empty_diff_grades(
    task: Task, sandbox_factory: SandboxFactory | None, config: VerifierConfig
) -> bool:
    """Whether the empty diff grades without a `VerifierError` in the same kind of sandbox (cached when
    so, per `grading_identity`: a broken copy of a task must not borrow the verdict of a working one)."""
    key = (grading_identity(task), repr(config), str(sandbox_factory))
    if key in _EMPTY_DIFF_OK:
        return True
    try:
        await grade(task, "", sandbox_factory=sandbox_factory, config=config)
    except VerifierError:
        return False
    _EMPTY_DIFF_OK.add(key)
    return True


async def _grade_in(
    task: Task,
    sandbox: Sandbox,
    filtered: FilteredPatch,
    durations: dict[str, float],
    started: float,
    timeout: float,
    progress: _Progress,
) -> VerifierReport:
    scratch = f"/tmp/legorl-verify-{secrets.token_hex(16)}"
    # One command for the three steps: every exec is a process start in the sandbox (a bubblewrap run there).
    inside = await _exec(sandbox, ["sh", "-c", _SETUP_SCRIPT, "sh", scratch], workdir=task.workdir)
    if inside.exit_code == _SCRIPT_STEP_FAILED:
        raise VerifierError(
            f"creating and stamping the scratch directory failed: {inside.stderr[-1000:]}", "sandbox"
        )
    if inside.stdout.strip() != "true":
        raise VerifierError(
            f"task {task.instance_id!r}: the workdir {task.workdir} of image {task.image!r} holds no git "
            "repository; the agent's work reaches the grading sandbox as a git diff against it, so "
            "the image must commit its files there (e.g. `git init && git add -A && git commit` in "
            "the Dockerfile)",
            "task",
        )
    before = await _changed_paths(sandbox, task)
    phase = time.monotonic()
    apply = await _apply(sandbox, task, format_patch(list(filtered.kept)), f"{scratch}/agent.patch")
    durations["apply"] = time.monotonic() - phase
    if apply.status == "failed":
        durations["total"] = time.monotonic() - started
        return _report(task, apply, removed=filtered.removed, durations=durations)
    written = await _protected_writes(sandbox, task, scratch, before)
    if written:
        durations["total"] = time.monotonic() - started
        return _report(task, apply, removed=filtered.removed, durations=durations, tampering=written)
    progress.apply = apply
    phase = time.monotonic()
    if task.test_patch.strip():
        # Plain `git apply` only: the filtered diff cannot touch these paths, so a fuzzy fallback would only
        # hide a broken task (and restoring the tree for it would undo the agent's changes). The private git
        # directory is made by the same command, under the same empty config.
        private = {
            **_PRIVATE_GIT_ENV,
            "GIT_DIR": f"{scratch}/git/.git",
            "GIT_WORK_TREE": task.workdir,
            "HOME": scratch,
            "XDG_CONFIG_HOME": scratch,
        }
        init_and_apply = ["sh", "-c", _INIT_AND_APPLY_SCRIPT, "sh", f"{scratch}/git"]
        hidden = await _apply(
            sandbox,
            task,
            task.test_patch,
            f"{scratch}/hidden.patch",
            (("git apply", init_and_apply),),
            private,
        )
        if hidden.status != "applied":
            raise VerifierError(
                f"task {task.instance_id!r}: the hidden tests do not apply: {hidden.log[-2000:]}",
                "hidden_tests",
            )
    if task.kind == "harbor":
        await sandbox.upload(task.verifier_dir, "/tests")
        await _must(
            sandbox,
            ["sh", "-c", "rm -rf /logs/verifier && mkdir -p /logs/verifier"],
            "clearing /logs/verifier",
        )
    durations["hidden_tests"] = time.monotonic() - phase
    phase = time.monotonic()
    run: _BuiltinRun | _SwebenchRun | _HarborRun
    if task.kind == "builtin":
        run = _BuiltinRun(task, scratch, timeout)
    elif task.kind == "swebench":
        run = _SwebenchRun(task, scratch, timeout)
    else:
        run = _HarborRun(task, scratch, timeout)
    await run.prepare(sandbox)
    durations["plan"] = time.monotonic() - phase
    phase = time.monotonic()
    # Nothing the grader keeps may be within the tests' reach: the agent's patch, the pristine hidden tests
    # and the private git folder go before the run, and the folder the report goes to is left empty but for
    # the watch's nonce, which the watch deletes at load.
    baseline = await _clear_scratch(sandbox, scratch, run.nonce_file)
    durations["clear"] = time.monotonic() - phase
    phase = time.monotonic()
    result = await run.execute(sandbox)
    progress.exit_code = result.exit_code
    durations["tests"] = time.monotonic() - phase
    if result.timed_out:
        raise VerifierError(
            f"task {task.instance_id!r}: the tests ran past the verifier timeout of {timeout:.0f} s",
            "timeout",
        )
    if getattr(result, "oom_killed", False):
        raise VerifierError(
            f"task {task.instance_id!r}: the tests hit the grading sandbox's memory limit "
            f"(exit {result.exit_code}); raise verifier.memory_mb if the suite needs more",
            "memory",
        )
    leftovers = progress.leftovers = await _kill_leftovers(sandbox, baseline)
    verdict = await run.read(sandbox, result, leftovers)
    durations["total"] = time.monotonic() - started
    output, truncated = cap_text(
        result.stdout + ("\n--- stderr ---\n" + result.stderr if result.stderr else ""), REPORT_OUTPUT_CHARS
    )
    return _report(
        task,
        apply,
        removed=filtered.removed,
        durations=durations,
        leftovers=leftovers,
        exit_code=result.exit_code,
        output=output,
        truncated=truncated or result.truncated,
        statuses=verdict.statuses,
        tampering=verdict.tampering,
        reward=verdict.reward,
        canary_survival=verdict.canary_survival,
        canary_shortfall=verdict.canary_shortfall,
    )


def _report(
    task: Task,
    apply: ApplyResult,
    *,
    removed: tuple[RemovedChange, ...] = (),
    durations: dict[str, float] | None = None,
    leftovers: tuple[str, ...] = (),
    exit_code: int | None = None,
    output: str = "",
    truncated: bool = False,
    statuses: Mapping[str, str] | None = None,
    tampering: list[str] | tuple[str, ...] = (),
    reward: float | None = None,
    canary_survival: float | None = None,
    canary_shortfall: str | None = None,
) -> VerifierReport:
    statuses = dict(statuses or {})
    p2p_ok = _P2P_OK.get(task.kind, frozenset({"passed"}))
    failed = tuple(t for t in task.FAIL_TO_PASS if statuses.get(t) not in _F2P_OK) + tuple(
        t for t in task.PASS_TO_PASS if statuses.get(t) not in p2p_ok
    )
    ran = apply.status in ("applied", "empty") and exit_code is not None
    if reward is None:  # built-in and SWE-bench: the listed tests decide
        resolved = ran and not failed and not tampering and bool(task.tests)
        reward = 1.0 if resolved else 0.0
    else:  # Harbor: the task's verifier decided
        reward = 0.0 if tampering else reward
        resolved = ran and reward >= 1.0
    return VerifierReport(
        task_id=task.instance_id,
        kind=task.kind,
        reward=reward,
        resolved=resolved,
        apply=apply,
        # A Harbor verifier reports only its reward: its listed tests have no status to fail on.
        tests=statuses,
        failed_tests=failed if task.tests and task.kind != "harbor" else (),
        removed_changes=tuple(removed),
        tampering=tuple(tampering),
        leftover_processes=tuple(leftovers),
        exit_code=exit_code,
        output=output,
        output_truncated=truncated,
        durations=dict(durations or {}),
        canary_survival=canary_survival,
        canary_shortfall=canary_shortfall,
    )


async def _exec(
    sandbox: Sandbox,
    cmd: list[str] | str,
    *,
    timeout: float = APPLY_TIMEOUT_S,
    workdir: str | None = None,
    env: dict[str, str] | None = None,
) -> ExecResult:
    return await sandbox.exec(cmd, timeout=timeout, workdir=workdir, env=env)


async def _must(sandbox: Sandbox, cmd: list[str], what: str, workdir: str | None = None) -> ExecResult:
    result = await _exec(sandbox, cmd, workdir=workdir)
    if result.exit_code != 0 or result.timed_out:
        raise VerifierError(
            f"{what} failed (exit {result.exit_code}): {(result.stderr or result.stdout)[-1000:]}", "sandbox"
        )
    return result


async def _read_untrusted(sandbox: Sandbox, path: str, cap: int) -> tuple[bytes | None, str | None]:
    """(content, None), (None, None) when `path` does not exist, or (None, why) when it may not be read:
    a symlink, not a regular file, or over `cap` bytes. Read with a timeout, never following a link."""
    result = await _exec(
        sandbox, ["sh", "-c", _READ_SCRIPT, "sh", path, str(cap + 1)], timeout=READ_TIMEOUT_S
    )
    if result.timed_out:
        return None, f"{path} could not be read within {READ_TIMEOUT_S:.0f} s"
    if result.exit_code == 4:
        return None, None
    if result.exit_code in (3, 5):
        return None, f"{path} {result.stderr.strip()}"
    if result.exit_code != 0:
        raise VerifierError(
            f"reading {path} failed (exit {result.exit_code}): {result.stderr[-500:]}", "sandbox"
        )
    data = base64.b64decode(result.stdout.strip())
    if len(data) > cap:
        return None, f"{path} is over the {cap} byte cap"
    return data, None


async def _changed_paths(sandbox: Sandbox, task: Task) -> frozenset[tuple[str, bool]]:
    """(path, is new) for every file `git status` shows changed, untracked or ignored in the workdir."""
    result = await _must(
        sandbox,
        [
            "git",
            "-c",
            "core.quotepath=false",
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--ignored=traditional",
            "--no-renames",
        ],
        "reading git status",
        task.workdir,
    )
    out = set()
    for entry in result.stdout.split("\0"):
        if len(entry) > 3:
            out.add((entry[3:], entry[:2] in ("??", "!!", "A ")))
    return frozenset(out)


async def _protected_writes(
    sandbox: Sandbox, task: Task, scratch: str, before: frozenset[tuple[str, bool]]
) -> list[str]:
    """Every protected path the apply really changed (the filter judged the diff's text; git and patch may
    have written elsewhere): files under .git newer than the stamp, then `git status` against the one
    before."""
    git_dir = await _exec(
        sandbox,
        ["find", ".git", *_GIT_SELF_WRITES, "-newer", f"{scratch}/before-apply", "-print"],
        workdir=task.workdir,
    )
    touched = [p for p in git_dir.stdout.splitlines() if p and p != ".git"]
    if touched:
        # git itself would read them from now on (config filters, attributes, hooks): nothing more runs.
        return [f"applying the diff wrote into the repository's git metadata: {touched[:10]}"]
    hidden = hidden_test_paths(task.test_patch)
    problems = []
    for path, new in sorted(await _changed_paths(sandbox, task) - before):
        reason = protected_reason(path.rstrip("/"), hidden=hidden, globs=task.protected_paths, is_new=new)
        if reason is not None:
            problems.append(
                f"applying the diff changed {path!r}, which the filter would have dropped ({reason})"
            )
    return problems


async def _apply(
    sandbox: Sandbox,
    task: Task,
    patch_text: str,
    path: str,
    methods: tuple[tuple[str, list[str]], ...] = _APPLY_METHODS,
    env: dict[str, str] | None = None,
) -> ApplyResult:
    """Applies `patch_text` in the workdir trying `methods` in turn; the tree is restored between attempts."""
    if not patch_text.strip():
        return ApplyResult("empty")
    await sandbox.write_file(path, patch_text)
    logs: list[str] = []
    before: ExecResult | None = None
    for name, argv in methods:
        result = await _exec(sandbox, [*argv, path], workdir=task.workdir, env=env)
        logs.append(f"$ {name}\n{result.stdout}{result.stderr}".strip())
        if result.exit_code == 0 and not result.timed_out:
            return ApplyResult("applied", name, cap_text("\n".join(logs), 8000)[0])
        if before is None:
            # A failed plain `git apply` changes nothing, so the tree now is the tree to come back to.
            before = await _must(
                sandbox, ["git", "status", "--porcelain"], "reading git status", task.workdir
            )
            continue
        now = await _must(sandbox, ["git", "status", "--porcelain"], "reading git status", task.workdir)
        if now.stdout != before.stdout:
            await _must(
                sandbox,
                ["sh", "-c", "git reset -q --hard HEAD && git clean -fdq"],
                "restoring the tree",
                task.workdir,
            )
    return ApplyResult("failed", None, cap_text("\n".join(logs), 8000)[0])


async def _clear_scratch(
    sandbox: Sandbox, scratch: str, nonce_file: tuple[str, str] | None
) -> dict[str, str]:
    """Empties `scratch`, writes the watch's nonce file (`(path, nonce)`) when the run has one, and lists the
    processes then alive, in one command (each exec is a process start in the sandbox)."""
    path, nonce = nonce_file or ("", "")
    result = await _exec(
        sandbox, ["sh", "-c", _CLEAR_SCRIPT + _PS_SCRIPT, "sh", scratch, path, nonce], timeout=60
    )
    if result.exit_code == _SCRIPT_STEP_FAILED:
        raise VerifierError(
            f"clearing the scratch directory or writing the watch's nonce failed: {result.stderr[-1000:]}",
            "sandbox",
        )
    return _process_list(result)


async def _processes(sandbox: Sandbox) -> dict[str, str]:
    return _process_list(await _exec(sandbox, ["sh", "-c", _PS_SCRIPT], timeout=60))


def _process_list(result: ExecResult) -> dict[str, str]:
    if result.exit_code != 0:
        raise VerifierError(
            f"listing the sandbox's processes failed (exit {result.exit_code}): {result.stderr[-500:]}",
            "sandbox",
        )
    out: dict[str, str] = {}
    for line in result.stdout.splitlines():
        pid, _, cmd = line.partition(" ")
        if pid.isdigit():
            out[pid] = cmd.strip()
    return out


async def _kill_leftovers(sandbox: Sandbox, baseline: dict[str, str]) -> tuple[str, ...]:
    """Kills and names every process the test run started that is still alive."""
    now = await _processes(sandbox)
    extra = {pid: cmd for pid, cmd in now.items() if pid not in baseline}
    if extra:
        await _exec(sandbox, ["sh", "-c", "kill -9 " + " ".join(extra) + " 2>/dev/null; true"], timeout=30)
    return tuple(f"{pid} {cmd}".strip() for pid, cmd in sorted(extra.items(), key=lambda kv: int(kv[0])))


def pytest_argv(
    test_cmd: str,
    workdir: str,
    watch_nonce_path: str | None = None,
    *,
    isolate: bool = True,
    watch_fd: int = 1,
) -> list[str]:
    """`test_cmd` as argv, with `python[3] -m pytest` run as `python -P` and the repository root appended to
    `sys.path` (after the standard library and site-packages), so no module of the agent's can shadow
    pytest, its imports or the standard library; the package under test still imports. With
    `watch_nonce_path`, the watch plugin (`pytest_watch`, its text inline: no file to touch) is registered
    before pytest reads a conftest or imports the repository, speaks on a duplicate of `watch_fd`, and says
    `exit <code>` once `pytest.main` returned (the process reached pytest's own exit path). `isolate=False`
    (SWE-bench rows: their images run Pythons older than `-P`, and their suites import as `python -m pytest`
    lets them) keeps the interpreter's own path, the current directory first, and only adds the watch."""
    argv = shlex.split(test_cmd)
    if is_python_pytest(argv):
        if watch_nonce_path is None:
            start = "raise SystemExit(pytest.console_main())"
        else:
            start = (
                f"_ns = {{'__name__': 'legorl_watch'}}; exec(compile({_watch_source()!r}, '<legorl-watch>', "
                f"'exec'), _ns); _w = _ns['Watch']({watch_nonce_path!r}, {int(watch_fd)}).start(); "
                "_code = pytest.main(plugins=[_w]); sys.stdout.flush(); raise SystemExit(_w.finish(_code))"
            )
        if not isolate:
            return [argv[0], "-c", f"import sys; import pytest; {start}", *argv[3:]]
        bootstrap = f"import sys; sys.path.append({workdir!r}); import pytest; {start}"
        return [argv[0], "-P", "-c", bootstrap, *argv[3:]]
    return argv


def is_python_pytest(argv: list[str]) -> bool:
    """Whether `argv` is `python[3] -m pytest ...` (a path to the interpreter allowed)."""
    return (
        len(argv) >= 3
        and posixpath.basename(argv[0]) in ("python", "python3")
        and argv[1:3] == ["-m", "pytest"]
    )


_UNITTEST_SETTINGS = '_SETTINGS = {"nonce_path": "", "fd": 9}'


@functools.cache
def _unittest_watch_source() -> str:
    source = (Path(__file__).with_name("unittest_watch.py")).read_text(encoding="utf-8")
    if _UNITTEST_SETTINGS not in source:
        raise VerifierError("unittest_watch.py lost its settings line", "internal")
    return source


@functools.cache
def _watch_source() -> str:
    return (Path(__file__).with_name("pytest_watch.py")).read_text(encoding="utf-8")


@dataclasses.dataclass(frozen=True)
class WatchLines:
    """What the watch plugin (`pytest_watch`) said in one run: its nonce-tagged lines, read back."""

    tampered: tuple[str, ...] = ()
    statuses: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The status the watch saw for each test node id (the worst over sessions)."""
    oks: int = 0
    starts: int = 0
    ends: tuple[tuple[int, int, int], ...] = ()
    """(tests seen, session exit status, failing tests) for each session that reached its end."""
    exits: tuple[int, ...] = ()
    """The code `pytest.main` returned, per process that reached pytest's exit path (inline bootstrap)."""

    @property
    def failing(self) -> int:
        return sum(s in ("failed", "error") for s in self.statuses.values())


def read_watch(text: str, nonce: str) -> WatchLines:
    """The watch's lines in `text` for `nonce`."""
    tampered: list[str] = []
    statuses: dict[str, str] = {}
    ends: list[tuple[int, int, int]] = []
    exits: list[int] = []
    oks = starts = 0
    for kind, rest in re.findall(
        rf"{_WATCH_TAG} {re.escape(nonce)} (tampered|ok|end|start|exit) ?([^\n]*)", text
    ):
        rest = rest.strip()
        if kind == "tampered":
            tampered.append(rest)
        elif kind == "ok":
            oks += 1
            parts = rest.split(" ", 2)
            if len(parts) == 3:
                old = statuses.get(parts[2])
                statuses[parts[2]] = parts[1] if old is None else _worse_status(old, parts[1])
        elif kind == "start":
            starts += 1
        elif kind == "end":
            numbers = [int(n) for n in rest.split() if n.lstrip("-").isdigit()]
            seen, status, failing = (numbers + [0, 0, 0])[:3]
            ends.append((seen, status, failing))
        else:
            exits.append(int(rest) if rest.lstrip("-").isdigit() else -1)
    return WatchLines(tuple(tampered), statuses, oks, starts, tuple(ends), tuple(exits))


def _worse_status(old: str, new: str) -> str:
    order = ("error", "failed", "xpassed", "passed", "xfailed", "skipped", "missing")
    if old not in order or new not in order:
        return old if new not in order else new
    return old if order.index(old) <= order.index(new) else new


def watch_problems(text: str, nonce: str, passed: int, *, exit_code: int | None = None) -> list[str]:
    """What the watch plugin's lines (`pytest_watch`) in `text` say: every change it saw, whether it spoke to
    the end of every session it started about at least the `passed` tests the run's report counts, and,
    given the test process's `exit_code`, whether that process left through pytest's own exit path with
    the code pytest returned."""
    lines = read_watch(text, nonce)
    problems = [f"watch: pytest's machinery was changed inside the test process: {t}" for t in lines.tampered]
    if not lines.ends or len(lines.ends) < lines.starts:
        problems.append("watch: the watch plugin inside pytest fell silent before the end of the session")
        return problems
    seen = sum(e[0] for e in lines.ends)
    if seen != lines.oks or lines.oks < passed:
        problems.append(
            f"watch: the watch plugin saw {lines.oks} tests end (its closing line says {seen}), the run's "
            f"report counts {passed} passed"
        )
    if exit_code is not None:
        if not lines.exits:
            problems.append(
                f"watch: the test process exited {exit_code} without returning from pytest's run (an exit "
                "handler, os._exit or a signal ended it after its session)"
            )
        elif lines.exits[-1] != exit_code:
            problems.append(
                f"watch: pytest's run returned {lines.exits[-1]} but the test process exited {exit_code}"
            )
    return problems


def watch_disagreements(
    lines: WatchLines, statuses: Mapping[str, str], parse: Callable[[str], dict[str, str]] | None = None
) -> list[str]:
    """Every test that `statuses` (the runner's output as the task's parser read it) reports passing while
    the watch saw it fail or never saw it run, and every one reported failing that the watch saw pass. The
    watch's node ids are put through `parse` (as a one-line `PASSED <id>` log) to get the parser's own
    spelling of them."""
    watch: dict[str, str] = {}
    for node_id, status in lines.statuses.items():
        names = list(parse(f"PASSED {node_id}")) if parse is not None else [node_id]
        for name in names or [node_id]:
            watch[name] = _worse_status(watch[name], status) if name in watch else status
    problems = []
    for test, status in statuses.items():
        seen = watch.get(test)
        good, bad = status in ("passed", "xpassed"), status in ("failed", "error")
        if good and seen is None:
            problems.append(f"watch: the output says {test} {status}, but no such test ran under the watch")
        elif (good and seen in ("failed", "error")) or (bad and seen in ("passed", "xpassed")):
            problems.append(f"watch: the output says {test} {status}, the watch inside pytest saw {seen}")
    if len(problems) > 5:  # one forgery, many tests: name five
        problems[5:] = [f"watch: and {len(problems) - 5} more tests the output and the watch disagree on"]
    return problems


class _BuiltinRun:
    """pytest with a JUnit report at a random path in an empty folder, the watch plugin, and canary twins
    of every eligible hidden test; three result sources cross-checked, every twin must fail where its
    original passed, and the watch must have seen nothing change."""

    def __init__(self, task: Task, scratch: str, timeout: float) -> None:
        self.task, self.timeout = task, timeout
        self.junit = f"{scratch}/{secrets.token_hex(16)}.xml"
        self.nonce = secrets.token_hex(16)
        self.nonce_path = f"{scratch}/{secrets.token_hex(16)}"
        self.nonce_file: tuple[str, str] | None = (self.nonce_path, self.nonce)  # written by the grader
        try:
            self.plan = plan_canaries(task)
        except CanaryError as err:
            raise VerifierError(str(err), "internal") from err
        self.run_ids = self.plan.run_ids(self.task.tests)
        secrets.SystemRandom().shuffle(self.run_ids)
        self.watched = False

    async def prepare(self, sandbox: Sandbox) -> None:
        """Nothing to read from the sandbox: the plan is made from the task's own hidden test files."""

    async def execute(self, sandbox: Sandbox) -> ExecResult:
        for path, source in self.plan.files.items():
            await sandbox.write_file(posixpath.join(self.task.workdir, path), source)
        # The watch speaks on the exec's stderr, pytest on its stdout: rewriting one does not reach the other.
        command = pytest_argv(self.task.test_cmd, self.task.workdir, self.nonce_path, watch_fd=2)
        self.watched = command[1:2] == ["-P"]
        # --maxfail=0 (no limit) overrides a -x in the task's command, which would let a twin end the run.
        argv = [
            *command,
            "--rootdir",
            self.task.workdir,
            "-rA",
            # One line per failure: formatting a full traceback for each of up to 64 failing twins doubled
            # the grading time; the line keeps the assertion and its values.
            "--tb=line",
            "-o",
            "junit_family=xunit2",
            "--maxfail=0",
            f"--junitxml={self.junit}",
            *self.run_ids,
        ]
        # Plugins come from the image only when asked for; none is needed and each one is code we would trust.
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "", "PYTHONDONTWRITEBYTECODE": "1"}
        return await _exec(sandbox, argv, timeout=self.timeout, workdir=self.task.workdir, env=env)

    async def read(self, sandbox: Sandbox, result: ExecResult, leftovers: tuple[str, ...]) -> RunVerdict:
        data, refused = await _read_untrusted(sandbox, self.junit, _MAX_JUNIT_BYTES)
        if refused is not None:
            return RunVerdict(tampering=(f"the JUnit report was replaced: {refused}",))
        if data is None:
            if result.exit_code == 0:
                return RunVerdict(tampering=("pytest exited 0 but wrote no JUnit report",))
            if parse_summary(result.stdout) is not None:
                # pytest reached its closing line, which it prints after writing the report: it was removed.
                return RunVerdict(
                    tampering=(f"pytest finished (exit {result.exit_code}) but its JUnit report is gone",)
                )
            raise VerifierError(
                f"task {self.task.instance_id!r}: the test run left no JUnit report "
                f"(exit {result.exit_code}): {(result.stderr or result.stdout)[-2000:]}",
                "no_result",
            )
        try:
            report = parse_junit(data)
        except ReportError as err:
            return RunVerdict(tampering=(str(err),))
        problems = cross_check(
            report,
            parse_pytest_log(result.stdout, self.run_ids),
            parse_summary(result.stdout),
            result.exit_code,
            self.run_ids,
        )
        seen = statuses_for(report, self.run_ids)
        problems.extend(canary_problems(self.plan, seen))
        if self.watched:
            problems.extend(
                watch_problems(result.stderr, self.nonce, report.passed, exit_code=result.exit_code)
            )
            problems.extend(watch_disagreements(read_watch(result.stderr, self.nonce), seen))
        if problems and result.truncated:
            problems.append("the test output hit the capture limit, so its summary could not be checked")
        return RunVerdict(
            self.plan.listed_statuses(seen, self.task.tests),
            tuple(problems),
            canary_survival=self.plan.survival,
            canary_shortfall=self.plan.shortfall,
        )


# A test command's shell syntax: with any of it, the last command is not plainly `pytest ...`.
_SHELL_SYNTAX = frozenset(";&|<>$`()\\\n{}*?!#~")
# What swebench's set-up lines start with (as `swebench.command_from_eval_script` keeps them).
_SETUP_PREFIXES = ("source ", "conda activate", "cd ", "export ", ". ")
# Runs pytest's own interpreter (its script's `#!` line), as the `pytest` script would: the current directory
# is not on sys.path (`del sys.path[0]` drops the '' that `-c` puts there).
_PYTEST_SCRIPT_PYTHON = (
    '_py=$(sed -n "1s/^#! *//p" "$(command -v pytest)"); '
    'case "$_py" in *python*) ;; *) _py=python3;; esac; $_py'
)


def swebench_pytest_args(test_cmd: str) -> list[str] | None:
    """The arguments of the one plain pytest run `test_cmd` ends in (see `swebench_watched_command`), or
    None when it does not end in one."""
    lines = test_cmd.strip().split("\n")
    segments = lines[-1].split(" && ")
    setup, last = [*lines[:-1], *segments[:-1]], segments[-1].strip()
    if not last or set(last) & _SHELL_SYNTAX or not all(s.strip().startswith(_SETUP_PREFIXES) for s in setup):
        return None
    argv = shlex.split(last)
    if is_python_pytest(argv):
        return argv[3:]
    return argv[1:] if argv[0] == "pytest" else None


def swebench_watched_command(test_cmd: str, nonce_path: str, watch_fd: int = 1) -> str | None:
    """`test_cmd` with the watch plugin, when it is set-up lines or `&&`-joined set-up commands (`source`,
    `conda activate`, `cd`, `export`, as swebench writes them) ending in one plain `pytest ...` or
    `python[3] -m pytest ...` with no shell syntax; None for any other command (django's runtests.py,
    sympy's bin/test, tox, anything piped or redirected), which runs as it is. The pytest run keeps the
    interpreter's own path (no `-P`: these images run Pythons older than 3.11)."""
    lines = test_cmd.strip().split("\n")
    segments = lines[-1].split(" && ")
    setup, last = [*lines[:-1], *segments[:-1]], segments[-1].strip()
    if not last or set(last) & _SHELL_SYNTAX or not all(s.strip().startswith(_SETUP_PREFIXES) for s in setup):
        return None
    argv = shlex.split(last)
    if is_python_pytest(argv):
        run = shlex.join(pytest_argv(last, "", nonce_path, isolate=False, watch_fd=watch_fd))
    elif argv[0] == "pytest":
        python = pytest_argv(
            shlex.join(["python3", "-m", *argv]), "", nonce_path, isolate=False, watch_fd=watch_fd
        )
        python[2] = python[2].replace("import sys;", "import sys; del sys.path[0];", 1)
        run = f"{{ {_PYTEST_SCRIPT_PYTHON} {shlex.join(python[1:])}; }}"
    else:
        return None
    return "\n".join([*lines[:-1], " && ".join([*segments[:-1], run])])


# The first line a SWE-bench or Harbor run's script prints on its own channel: the sandbox's clock then.
_STARTED_TAG = "LEGORL-RUN-STARTED"
_TEST_REASONS = ("test file", "hidden test")
_STARTED_AT = f'echo "{_STARTED_TAG} $(date +%s.%N)" >&9'  # 9: `_WATCH_FD`
# Parsers that read pytest's node ids as pytest prints them (`path::name`), which canary twins can be read by.
_NODE_ID_PARSERS = frozenset(
    {"pytest"}
    | {
        name
        for name, parser in SWEBENCH_PARSERS.items()
        if parser
        in (
            SWEBENCH_PARSERS["parse_log_pytest"],
            SWEBENCH_PARSERS["parse_log_pytest_options"],
            SWEBENCH_PARSERS["parse_log_pytest_v2"],
            SWEBENCH_PARSERS["parse_log_matplotlib"],
        )
    }
)
# The file descriptor the SWE-bench script gives the watch: the exec's stderr, while the runner's own stdout
# and stderr are merged on its stdout (as swebench's harness runs `eval.sh ... 2>&1`).
_WATCH_FD = 9


class _SwebenchRun:
    """The task's test script between random markers, its stdout and stderr merged (as swebench's harness
    captures `eval.sh`), read by its log parser line by line (`log_parsers.read_stream`). A test command that
    ends in one plain pytest run (`swebench_watched_command`) runs with the watch plugin, speaking on the
    exec's stderr, and with canary twins of the eligible hidden tests of the files the command names."""

    def __init__(self, task: Task, scratch: str, timeout: float) -> None:
        self.task, self.timeout = task, timeout
        nonce = secrets.token_hex(12)
        # The end marker's nonce reaches the script through a file it reads and deletes before anything else
        # runs (never its command line, which any process can read): code under test cannot print it.
        self.end_nonce, self.end_path = secrets.token_hex(12), f"{scratch}/{secrets.token_hex(16)}"
        self.start, self.end = f">>>>> Start Test Output {nonce}", f">>>>> End Test Output {self.end_nonce}"
        self.nonce = secrets.token_hex(16)
        self.nonce_path = f"{scratch}/{secrets.token_hex(16)}"
        self.watched_cmd = swebench_watched_command(task.test_cmd, self.nonce_path, _WATCH_FD)
        # unittest-style rows (Django's runtests.py) get the unittest watch as `sitecustomize` instead.
        django = SWEBENCH_PARSERS.get(task.log_parser) is SWEBENCH_PARSERS["parse_log_django"]
        self.unittest_dir = f"{scratch}/py" if self.watched_cmd is None and django else None
        watched = self.watched_cmd is not None or self.unittest_dir is not None
        self.nonce_file = (self.nonce_path, self.nonce) if watched else None
        self.plan: CanaryPlan | None = None
        self.shortfall: str | None = None

    async def prepare(self, sandbox: Sandbox) -> None:
        """Plans canary twins in the hidden test files the command runs, as the hidden tests left them."""
        files, why = self._canary_files()
        if not files:
            self.shortfall = f"no canary twins: {why}"
            return
        sources = {}
        for path in files:
            try:
                raw = await sandbox.read_file(posixpath.join(self.task.workdir, path))
            except (SandboxError, OSError) as err:
                raise VerifierError(
                    f"task {self.task.instance_id!r}: reading hidden test {path!r} failed: {err}", "sandbox"
                ) from err
            sources[path] = raw.decode("utf-8", "replace")
        try:
            sympy = SWEBENCH_PARSERS.get(self.task.log_parser) is SWEBENCH_PARSERS["parse_log_sympy"]
            self.plan = plan_canaries(
                self.task, sources=sources, test_id=(lambda _path, name: name) if sympy else None
            )
        except CanaryError as err:
            self.shortfall = f"no canary twins: {err}"
            return
        self.shortfall = self.plan.shortfall

    def _canary_files(self) -> tuple[list[str], str]:
        """The hidden test files twins may go into, or ([], why none): files the command names whole, for a
        plain pytest run read by a parser of node ids, or sympy's `bin/test` (which runs every `test_`
        function of the files it is given)."""
        sympy = SWEBENCH_PARSERS.get(self.task.log_parser) is SWEBENCH_PARSERS["parse_log_sympy"]
        if sympy:
            args = shlex.split(self.task.test_cmd.strip().split("\n")[-1].split(" && ")[-1])
            if any(a in ("-k", "--kw") or a.startswith(("-k", "--kw")) for a in args):
                return [], "the row's command selects tests by keyword"
        else:
            pytest_args = swebench_pytest_args(self.task.test_cmd)
            if pytest_args is None or self.watched_cmd is None:
                return [], "the row's command is not one plain pytest run or sympy's bin/test"
            if self.task.log_parser not in _NODE_ID_PARSERS:
                return [], f"the log parser {self.task.log_parser!r} does not report pytest node ids"
            args = pytest_args
            if any(a.startswith(("-k", "--lf", "--last-failed", "--deselect", "--sw")) for a in args):
                return [], "the row's command selects tests by keyword or deselects some"
        named = set(args)
        paths = []
        for patch in parse_patch(self.task.test_patch):
            path = patch.new_path
            if path is None or not path.endswith(".py") or patch.binary:
                continue
            if path in named and not any(a.startswith(f"{path}::") for a in args):
                paths.append(path)
        if not paths:
            return [], "the row's command names no hidden test file whole (it selects test ids, or none)"
        return paths, ""

    async def execute(self, sandbox: Sandbox) -> ExecResult:
        for path, source in (self.plan.files if self.plan else {}).items():
            await sandbox.write_file(posixpath.join(self.task.workdir, path), source)
        setup = []
        if self.unittest_dir is not None:
            settings = repr({"nonce_path": self.nonce_path, "fd": _WATCH_FD})
            source = _unittest_watch_source().replace(_UNITTEST_SETTINGS, f"_SETTINGS = {settings}", 1)
            await sandbox.write_file(f"{self.unittest_dir}/sitecustomize.py", source)
            quoted = shlex.quote(self.unittest_dir)
            setup.append(f'export PYTHONPATH={quoted}"${{PYTHONPATH:+:$PYTHONPATH}}"')
        await sandbox.write_file(self.end_path, self.end_nonce)
        body = "\n".join(
            [
                _read_secret("_legorl_end", self.end_path),
                "set -uo pipefail",
                f"cd {shlex.quote(self.task.workdir)}",
                # The watch's channel is the exec's stderr; the runner's two streams are merged on stdout.
                f"exec {_WATCH_FD}>&2 2>&1",
                _STARTED_AT,
                *setup,
                f"echo '{self.start}'",
                self.watched_cmd or self.task.test_cmd,
                "rc=$?",
                'echo ">>>>> End Test Output $_legorl_end"',
                "exit $rc",
                "",
            ]
        )
        # Passed as `bash -c`, never as a file: bash reads a script file as it runs, so code under test could
        # rewrite the lines after its own (the exit status, the end marker).
        return await _exec(sandbox, ["bash", "-c", body], timeout=self.timeout, workdir=self.task.workdir)

    async def read(self, sandbox: Sandbox, result: ExecResult, leftovers: tuple[str, ...]) -> RunVerdict:
        out = result.stdout
        first, last = out.find(self.start), out.rfind(self.end)
        if first == -1 or last == -1 or last < first:
            raise VerifierError(
                f"task {self.task.instance_id!r}: the test script never reached its output markers "
                f"(exit {result.exit_code}): {(result.stderr or out)[-2000:]}",
                "no_result",
            )
        parse = resolve_log_parser(self.task.log_parser, self.task.tests + self._twin_ids())
        renamed = self.plan.renamed if self.plan else {}
        listed = {renamed.get(t, t) for t in self.task.tests} | set(self._twin_ids())
        reading = read_stream(parse, out[first + len(self.start) : last], listed)
        parsed = reading.statuses
        if not parsed:
            raise VerifierError(
                f"task {self.task.instance_id!r}: the log parser {self.task.log_parser!r} found no "
                f"test result in the output (exit {result.exit_code})",
                "no_result",
            )
        statuses = {t: parsed.get(renamed.get(t, t), "missing") for t in self.task.tests}
        failing = [t for t, s in parsed.items() if s in ("failed", "error")]
        problems = list(reading.problems)
        if out.count(self.end) > 1 or out.count(self.start) > 1:
            problems.append("stream: the verifier's per-grade output markers appear more than once")
        if result.exit_code != 0 and not failing:
            problems.append(f"the test command exited {result.exit_code} but its log shows no failing test")
        if result.exit_code == 0 and failing:
            problems.append(f"the test command exited 0 but its log shows failing tests {failing[:5]}")
        if self.watched_cmd is not None:
            passed = sum(s == "passed" for s in parsed.values())
            problems.extend(watch_problems(result.stderr, self.nonce, passed, exit_code=result.exit_code))
            seen = {t: parsed.get(t, "missing") for t in listed}
            problems.extend(watch_disagreements(read_watch(result.stderr, self.nonce), seen, parse))
        if self.unittest_dir is not None:
            problems.extend(self._unittest_problems(result, {t: parsed.get(t, "missing") for t in listed}))
        if self.plan is not None:
            problems.extend(canary_problems(self.plan, parsed))
        hidden = hidden_test_paths(self.task.test_patch)
        changed = await _changed_during_run(
            sandbox,
            result,
            self.task.workdir,
            lambda p: (
                p.endswith(".py") and protected_reason(p, hidden=hidden) in ("test file", "hidden test")
            ),
        )
        if changed:
            problems.append(f"test files were changed while the tests ran: {changed[:5]}")
        if problems and result.truncated:
            problems.append("the test output hit the capture limit, so its summary could not be checked")
        return RunVerdict(
            statuses,
            tuple(problems),
            canary_survival=self.plan.survival if self.plan else 1.0,
            canary_shortfall=self.shortfall,
        )

    def _unittest_problems(self, result: ExecResult, seen: Mapping[str, str]) -> list[str]:
        """What the unittest watch (`unittest_watch`) says, where it saw any test: a change it saw, a
        process that reported tests and never reached its exit handler, a test the log and it disagree on."""
        lines = read_watch(result.stderr, self.nonce)
        if not lines.starts:
            return []  # no test reached unittest's result methods under the watch (another runner)
        problems = [
            f"watch: unittest's machinery was changed inside the test process: {t}" for t in lines.tampered
        ]
        if len(lines.ends) < lines.starts:
            problems.append(
                "watch: a process that reported test results never reached its exit handlers (os._exit, a "
                "signal, or an exit handler of the package's ended it)"
            )
        return problems + watch_disagreements(lines, seen)

    def _twin_ids(self) -> tuple[str, ...]:
        return tuple(c.node_id for c in self.plan.canaries) if self.plan else ()


def _read_secret(variable: str, path: str) -> str:
    """A script line that reads `path` into the shell `variable` and deletes it: the value then lives only
    in that shell's memory, which no process it starts can read (ptrace, hence /proc/<pid>/mem, of an
    ancestor is refused, and Docker drops CAP_SYS_PTRACE)."""
    quoted = shlex.quote(path)
    return f"read -r {variable} < {quoted}; rm -f {quoted}"


async def _changed_during_run(
    sandbox: Sandbox, result: ExecResult, folder: str, keep: Callable[[str], bool]
) -> list[str]:
    """Files under `folder` whose inode changed after the run started (ctime, which no user can set back),
    that `keep` (a path relative to `folder`) says the run must not change; the start time is the first line
    the run's script printed on its own channel, before any code under test ran."""
    m = re.match(rf"{_STARTED_TAG} ([0-9]+(?:\.[0-9]+)?)", result.stderr)
    if m is None:
        return [f"the run's script never said when it started, so changes to {folder} cannot be checked"]
    found = await _exec(
        sandbox,
        [
            "find",
            ".",
            "-path",
            "./.git",
            "-prune",
            "-o",
            "-type",
            "f",
            "-newerct",
            f"@{m.group(1)}",
            "-print",
        ],
        workdir=folder,
        timeout=READ_TIMEOUT_S,
    )
    paths = [p.removeprefix("./") for p in found.stdout.splitlines() if p.startswith("./")]
    return sorted(p for p in paths if keep(p))


_HARBOR_NO_TWINS = (
    "no canary twins: a Harbor task's reward is its tests/test.sh's verdict on the whole run, which a "
    "must-fail twin would turn to 0 for every honest fix"
)
_REWARD_DIR = "/logs/verifier"
_REWARD_NAMES = ("reward.txt", "reward.json")
# A Harbor verifier that sets these itself would drop the watch the verifier passes down (and pytest would
# fail to import it), so such a verifier runs unwatched.
_WATCH_ENV = ("PYTHONPATH", "PYTEST_PLUGINS")
# The module form of the watch for pytest runs the verifier does not start itself (a Harbor task's
# tests/test.sh): `PYTEST_PLUGINS` names it, so it is registered before any conftest or test module, in
# every pytest session test.sh starts, and speaks on the file descriptor the verifier's wrapper opened.
_WATCH_MODULE = """\
_NS = {{"__name__": "legorl_watch"}}
exec(compile({source!r}, "<legorl-watch>", "exec"), _NS)
_WATCH = _NS["Watch"]({nonce_path!r}, {fd}, True, {guarded!r})
globals().update({{k: getattr(_WATCH, k) for k in dir(_WATCH) if k.startswith("pytest_")}})
"""


class _HarborRun:
    """`bash /tests/test.sh` under the verifier's wrapper, then the reward file it wrote. Where the task's
    tests are pytest, every pytest session test.sh starts runs under the watch plugin (module form, through
    `PYTEST_PLUGINS`), which also checks that no reward file was written while the tests ran. The wrapper
    prints a per-grade marker with test.sh's exit status once it has ended, on a channel of its own: a
    missing marker (the shell was killed) or a status of a signal is flagged, and so is a reward above 0
    from a run whose pytest sessions never ended or never ran a test, a reward of 1 from a run whose
    sessions saw a test fail, and a reward file that no file of the task's verifier names."""

    def __init__(self, task: Task, scratch: str, timeout: float) -> None:
        self.task, self.timeout, self.scratch = task, timeout, scratch
        texts = _verifier_texts(task)
        self.pytest = any(re.search(r"\bpytest\b", t) for t in texts)
        self.watched = self.pytest and not any(name in t for t in texts for name in _WATCH_ENV)
        self.reward_names = {n for n in _REWARD_NAMES if any(n in t for t in texts)}
        self.nonce = secrets.token_hex(16)
        self.nonce_path = f"{scratch}/{secrets.token_hex(16)}"
        self.nonce_file: tuple[str, str] | None = (self.nonce_path, self.nonce) if self.watched else None
        self.done_nonce, self.done_path = secrets.token_hex(16), f"{scratch}/{secrets.token_hex(16)}"
        self.done = f"LEGORL-HARBOR-DONE {self.done_nonce}"  # its nonce read from a file, as `_SwebenchRun`'s
        self.module = f"legorl_watch_{secrets.token_hex(8)}"

    async def prepare(self, sandbox: Sandbox) -> None:
        """Nothing to plan: the task's verifier decides what runs."""

    async def execute(self, sandbox: Sandbox) -> ExecResult:
        env = {str(k): str(v) for k, v in dict(self.task.metadata.get("verifier_env", {})).items()}
        lines = [f"exec {_WATCH_FD}>&2", _STARTED_AT]
        if self.watched:
            guarded = tuple(f"{_REWARD_DIR}/{n}" for n in _REWARD_NAMES)
            module = _WATCH_MODULE.format(
                source=_watch_source(), nonce_path=self.nonce_path, fd=_WATCH_FD, guarded=guarded
            )
            await sandbox.write_file(f"{self.scratch}/py/{self.module}.py", module)
            path = shlex.quote(f"{self.scratch}/py")
            lines += [
                f'export PYTHONPATH={path}"${{PYTHONPATH:+:$PYTHONPATH}}"',
                f'export PYTEST_PLUGINS={self.module}"${{PYTEST_PLUGINS:+,$PYTEST_PLUGINS}}"',
            ]
        lines += [self.task.test_cmd, "rc=$?", f'echo "LEGORL-HARBOR-DONE $_legorl_done $rc" >&{_WATCH_FD}']
        lines += ["exit $rc", ""]
        await sandbox.write_file(self.done_path, self.done_nonce)
        lines.insert(0, _read_secret("_legorl_done", self.done_path))
        # `bash -c`, never a script file: bash reads a file as it runs, so code under test could append lines
        # that the wrapper's shell, which holds the marker's nonce, would run.
        script = "\n".join(lines)
        return await _exec(
            sandbox, ["bash", "-c", script], timeout=self.timeout, workdir=self.task.workdir, env=env
        )

    async def read(self, sandbox: Sandbox, result: ExecResult, leftovers: tuple[str, ...]) -> RunVerdict:
        tampering = list(self._run_problems(result))
        if leftovers:
            tampering.append(
                f"processes outlived tests/test.sh and could have rewritten the reward: {list(leftovers)[:5]}"
            )
        try:
            verdict = await self._reward(sandbox, result, tuple(tampering))
        except VerifierError as err:
            if not tampering:
                raise
            # Killed mid-write, deleting it, garbling it: what survivors leave is theirs, not the verifier's.
            return RunVerdict(reward=0.0, tampering=(*tampering, f"the reward could not be read: {err}"))
        found = list(verdict.tampering)
        if self.watched:
            found += self._watch_problems(result, verdict.reward or 0.0)
        root = Path(self.task.verifier_dir)
        changed = await _changed_during_run(sandbox, result, "/tests", lambda p: (root / p).is_file())
        if changed:
            found.append(f"the task's verifier files in /tests were changed while test.sh ran: {changed[:5]}")
        if len(self.reward_names) == 1:
            (named,) = self.reward_names
            (other,) = (n for n in _REWARD_NAMES if n != named)
            data, refused = await _read_untrusted(sandbox, f"{_REWARD_DIR}/{other}", _MAX_REWARD_BYTES)
            if data is not None or refused is not None:
                found.append(
                    f"{_REWARD_DIR}/{other} exists, but the task's verifier names only {named}: something "
                    "else wrote it"
                )
        return RunVerdict(
            self._statuses(result),
            tuple(found),
            reward=verdict.reward,
            canary_survival=1.0,
            canary_shortfall=_HARBOR_NO_TWINS,
        )

    def _run_problems(self, result: ExecResult) -> list[str]:
        """Whether test.sh ended and the wrapper's own step after it ran."""
        done = re.findall(rf"{re.escape(self.done)} (-?\d+)", result.stderr)
        if not done:
            return [
                f"tests/test.sh's run was cut short (exit {result.exit_code}): the verifier's own step after "
                "it never ran, so its shell was killed"
            ]
        if len(done) > 1:
            return ["the verifier's end-of-run marker appears more than once: it was forged"]
        rc = int(done[0])
        if rc >= 128:
            return [f"tests/test.sh was killed by signal {rc - 128} (exit {rc})"]
        if result.exit_code != rc:
            # The wrapper exits with test.sh's status right after the marker: anything else ended it.
            return [f"the verifier's wrapper exited {result.exit_code}, not with test.sh's status {rc}"]
        return []

    def _watch_problems(self, result: ExecResult, reward: float) -> list[str]:
        lines = read_watch(result.stderr + "\n" + result.stdout, self.nonce)
        problems = [
            f"watch: pytest's machinery was changed inside the test process: {t}" for t in lines.tampered
        ]
        if len(lines.ends) < lines.starts:
            problems.append(
                "watch: a pytest session under tests/test.sh never reached its end (os._exit or a signal "
                "ended the test process)"
            )
        if reward > 0 and (not lines.ends or lines.oks == 0):
            problems.append(
                f"the reward is {reward:g} but no test ran to the end of a pytest session under the watch: "
                "the tests never ran"
            )
        if reward >= 1.0 and (lines.failing or any(e[1] != 0 for e in lines.ends)):
            problems.append(
                f"the reward is {reward:g} but the watched pytest sessions saw {lines.failing} failing tests "
                f"(exit statuses {[e[1] for e in lines.ends]})"
            )
        return problems

    def _statuses(self, result: ExecResult) -> dict[str, str]:
        """The listed tests' statuses as the watch saw them (node ids matched by their ending)."""
        if not self.watched:
            return {}
        seen = read_watch(result.stderr + "\n" + result.stdout, self.nonce).statuses
        out = {}
        for test in self.task.tests:
            match = [s for node, s in seen.items() if node == test or node.endswith("/" + test)]
            out[test] = match[0] if match else "missing"
        return out

    async def _reward(self, sandbox: Sandbox, result: ExecResult, tampering: tuple[str, ...]) -> RunVerdict:
        for name, parse in (
            ("reward.txt", lambda raw: _number(self.task, raw.strip(), "reward.txt")),
            ("reward.json", lambda raw: _json_reward(self.task, raw)),
        ):
            data, refused = await _read_untrusted(sandbox, f"{_REWARD_DIR}/{name}", _MAX_REWARD_BYTES)
            if refused is not None:
                return RunVerdict(
                    reward=0.0, tampering=(*tampering, f"the reward file was replaced: {refused}")
                )
            if data is not None:
                return RunVerdict(reward=parse(data.decode("utf-8", "replace")), tampering=tampering)
        raise VerifierError(
            f"task {self.task.instance_id!r}: tests/test.sh wrote no /logs/verifier/reward.txt or "
            f"reward.json (exit {result.exit_code}): {(result.stderr or result.stdout)[-2000:]}",
            "no_result",
        )


def _verifier_texts(task: Task) -> list[str]:
    """The text of every file of a Harbor task's verifier directory (tests/)."""
    root = Path(task.verifier_dir) if task.verifier_dir else None
    if root is None or not root.is_dir():
        return []
    texts = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= 1 << 20:
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    return texts


def _number(task: Task, raw: str, what: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise VerifierError(
            f"task {task.instance_id!r}: {what} holds {raw[:100]!r}, not a number", "no_result"
        ) from None
    if not math.isfinite(value):
        raise VerifierError(
            f"task {task.instance_id!r}: {what} holds {raw[:100]!r}, not a finite number", "no_result"
        )
    return value


def _json_reward(task: Task, raw: str) -> float:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        raise VerifierError(
            f"task {task.instance_id!r}: reward.json is not JSON: {raw[:200]!r}", "no_result"
        ) from None
    if isinstance(data, dict) and "reward" in data:
        return _number(task, str(data["reward"]), "reward.json")
    if isinstance(data, dict) and len(data) == 1:
        return _number(task, str(next(iter(data.values()))), "reward.json")
    raise VerifierError(
        f"task {task.instance_id!r}: reward.json must hold a 'reward' key or one value, got {raw[:200]!r}",
        "no_result",
    )


async def grade_many(
    tasks_and_diffs: list[tuple[Task, str]],
    *,
    sandbox_factory: SandboxFactory | None = None,
    config: VerifierConfig | None = None,
) -> list[VerifierReport | VerifierError]:
    """Grades several diffs, `config.concurrency` sandboxes at a time; infrastructure failures come back as
    `VerifierError` values in their place instead of cancelling the others, and so does any other exception
    one grade raises (reason `internal`): one item's failure never loses another's result."""
    config = config or VerifierConfig()
    gate = asyncio.Semaphore(config.concurrency)

    async def one(task: Task, diff: str) -> VerifierReport | VerifierError:
        async with gate:
            try:
                return await grade(task, diff, sandbox_factory=sandbox_factory, config=config)
            except VerifierError as err:
                return err
            except Exception as err:  # noqa: BLE001 - one broken grade must not cost the batch its other results
                failure = VerifierError(
                    f"task {task.instance_id!r}: grading raised {type(err).__name__}: {err}", "internal"
                )
                failure.__cause__ = err
                return failure

    return await asyncio.gather(*(one(t, d) for t, d in tasks_and_diffs))
