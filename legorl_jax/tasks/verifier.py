"""The verifier: `await grade(task, diff)` → `VerifierReport` (ARCHITECTURE §2, §8; lego-rl-spec §6.1, §6.5).

One grade, in a fresh sandbox started from the task's clean image (never the agent's sandbox):

1. The agent's diff is parsed file by file (`patchset`) and every change to a protected path is dropped
   and reported (`protection`: tests, conftest, pytest/tox/setup configuration, `pyproject.toml`,
   start-up hooks, `.git*`, runner shadowing, symlinks, the task's own globs, the hidden test paths).
2. What is left is applied with `git apply`, then `git apply --3way`, then `patch --fuzz=5` (swebench's
   fallback chain, the tree restored between attempts). A diff that none of them applies is the policy's
   failure: reward 0, apply status `failed`; the tests are not run.
3. The hidden tests (`task.test_patch`) are applied with plain `git apply`; Harbor tasks get their `tests/` uploaded to `/tests`
   only now. Failing here is the infrastructure's fault (`VerifierError`): the filtered diff cannot touch
   those paths.
4. The test command runs with the task's timeout, after a snapshot of the running processes:
   - built-in tasks: pytest with `-rA` and a JUnit report at a fresh random path outside the repository;
     the report, the `-rA` lines, the closing count line and the exit code are cross-checked
     (`pytest_report.cross_check`), and any disagreement is tampering (reward 0). Code of the agent's that
     runs inside pytest can forge all of those consistently (patching pytest's report objects from the
     package the tests import), so a *canary* runs in the same session: a test that always fails, under a
     random name beside the hidden tests, at a random place in the test order, written only now. If it is
     not reported `failed`, results are being rewritten: tampering (reward 0);
   - SWE-bench tasks: the test script between random start/end markers, read by the task's log parser;
     a non-zero exit with no failing test, or a zero exit with one, is tampering;
   - Harbor tasks: `bash /tests/test.sh`, then `/logs/verifier/reward.txt` (a number) or `reward.json`.
5. Processes the test run left behind are listed and killed before any result file is read. For Harbor
   tasks, whose reward file is the only evidence, a survivor is tampering (it could have rewritten it).

Reward is 1.0 exactly when every FAIL_TO_PASS test `passed` and every PASS_TO_PASS test passed (SWE-bench
tasks also accept `skipped`/`xfailed` for PASS_TO_PASS, as swebench does; an `xfailed` FAIL_TO_PASS test is
not a fix, which is stricter than swebench) and no tampering was seen. A timeout, a missing image, a
container that does not start, or a run that left no result raises `VerifierError`; so does a JUnit report
that is missing while pytest exited non-zero before its closing line, whereas a missing report after exit 0
or after the closing line is tampering (so code of the agent's cannot turn a failing run into a dropped one).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import posixpath
import secrets
import shlex
import time
from collections.abc import Callable
from typing import Any

from legorl_jax.config import VerifierConfig
from legorl_jax.sandbox.base import ExecResult, Sandbox, SandboxError, SandboxSpec
from legorl_jax.tasks.log_parsers import resolve_log_parser
from legorl_jax.tasks.patchset import PatchError, format_patch, parse_patch
from legorl_jax.tasks.protection import FilteredPatch, RemovedChange, filter_patch, hidden_test_paths
from legorl_jax.tasks.pytest_report import ReportError, cross_check, parse_junit, parse_pytest_log, parse_summary, statuses_for
from legorl_jax.tasks.report import ApplyResult, VerifierError, VerifierReport, cap_text
from legorl_jax.tasks.schema import Task

SandboxFactory = Callable[[SandboxSpec], Sandbox]
APPLY_TIMEOUT_S = 120.0
REPORT_OUTPUT_CHARS = 65536
EXEC_OUTPUT_BYTES = 16 << 20
_MAX_JUNIT_BYTES = 32 << 20
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
"""


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
        image=task.image, workdir=task.workdir, network="none", cpus=config.cpus, memory_mb=config.memory_mb,
        pids=config.pids, disk_mb=config.disk_mb, user=user, read_only_root=task.kind == "builtin",
        labels={"legorl.role": "verifier", "legorl.task": task.instance_id}, output_limit_bytes=EXEC_OUTPUT_BYTES,
    )


async def grade(task: Task, diff: str, *, sandbox_factory: SandboxFactory | None = None,
                config: VerifierConfig | None = None) -> VerifierReport:
    """Grades `diff` (the agent's `git diff` against the base) for `task`; see the module docstring."""
    if not isinstance(task, Task):
        raise TypeError(f"task must be a Task, got {type(task).__name__}")
    if not isinstance(diff, str):
        raise TypeError(f"diff must be str, got {type(diff).__name__}")
    config = config or VerifierConfig()
    started = time.monotonic()
    durations: dict[str, float] = {}
    try:
        filtered = filter_patch(parse_patch(diff), hidden_paths=hidden_test_paths(task.test_patch),
                                protected_globs=task.protected_paths)
    except PatchError as err:
        return _report(task, ApplyResult("malformed", None, str(err)), durations={"total": time.monotonic() - started})
    factory = sandbox_factory or functools.partial(default_sandbox_factory, backend=config.backend)
    timeout = task.timeouts.verify_s * config.timeout_multiplier
    try:
        async with factory(verifier_sandbox_spec(task, config)) as sandbox:
            durations["start"] = time.monotonic() - started
            return await _grade_in(task, sandbox, filtered, durations, started, timeout)
    except SandboxError as err:
        raise VerifierError(f"task {task.instance_id!r}: the grading sandbox failed: {err}") from err


async def _grade_in(task: Task, sandbox: Sandbox, filtered: FilteredPatch, durations: dict[str, float],
                    started: float, timeout: float) -> VerifierReport:
    scratch = f"/tmp/legorl-verify-{secrets.token_hex(16)}"
    await _must(sandbox, ["mkdir", "-p", "-m", "700", scratch], "creating the scratch directory")
    phase = time.monotonic()
    apply = await _apply(sandbox, task, format_patch(list(filtered.kept)), f"{scratch}/agent.patch")
    durations["apply"] = time.monotonic() - phase
    if apply.status == "failed":
        durations["total"] = time.monotonic() - started
        return _report(task, apply, removed=filtered.removed, durations=durations)
    phase = time.monotonic()
    if task.test_patch.strip():
        # Plain `git apply` only: the filtered diff cannot touch these paths, so a fuzzy fallback would only
        # hide a broken task (and restoring the tree for it would undo the agent's changes).
        hidden = await _apply(sandbox, task, task.test_patch, f"{scratch}/hidden.patch", _APPLY_METHODS[:1])
        if hidden.status != "applied":
            raise VerifierError(f"task {task.instance_id!r}: the hidden tests do not apply: {hidden.log[-2000:]}")
    if task.kind == "harbor":
        await sandbox.upload(task.verifier_dir, "/tests")
        await _must(sandbox, ["sh", "-c", "rm -rf /logs/verifier && mkdir -p /logs/verifier"], "clearing /logs/verifier")
    durations["hidden_tests"] = time.monotonic() - phase
    baseline = await _processes(sandbox)
    phase = time.monotonic()
    if task.kind == "builtin":
        run = _BuiltinRun(task, scratch, timeout)
    elif task.kind == "swebench":
        run = _SwebenchRun(task, scratch, timeout)
    else:
        run = _HarborRun(task, timeout)
    result = await run.execute(sandbox)
    durations["tests"] = time.monotonic() - phase
    if result.timed_out:
        raise VerifierError(f"task {task.instance_id!r}: the tests ran past the verifier timeout of {timeout:.0f} s")
    if getattr(result, "oom_killed", False):
        raise VerifierError(f"task {task.instance_id!r}: the tests hit the grading sandbox's memory limit "
                            f"(exit {result.exit_code}); raise verifier.memory_mb if the suite needs more")
    leftovers = await _kill_leftovers(sandbox, baseline)
    verdict = await run.read(sandbox, result, leftovers)
    durations["total"] = time.monotonic() - started
    output, truncated = cap_text(result.stdout + ("\n--- stderr ---\n" + result.stderr if result.stderr else ""),
                                 REPORT_OUTPUT_CHARS)
    return _report(task, apply, removed=filtered.removed, durations=durations, leftovers=leftovers,
                   exit_code=result.exit_code, output=output, truncated=truncated or result.truncated, **verdict)


def _report(
    task: Task, apply: ApplyResult, *, removed: tuple[RemovedChange, ...] = (), durations: dict[str, float] | None = None,
    leftovers: tuple[str, ...] = (), exit_code: int | None = None, output: str = "", truncated: bool = False,
    statuses: dict[str, str] | None = None, tampering: list[str] | tuple[str, ...] = (), reward: float | None = None,
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
        task_id=task.instance_id, kind=task.kind, reward=reward, resolved=resolved, apply=apply,
        tests=statuses, failed_tests=failed if task.tests else (), removed_changes=tuple(removed),
        tampering=tuple(tampering), leftover_processes=tuple(leftovers), exit_code=exit_code, output=output,
        output_truncated=truncated, durations=dict(durations or {}),
    )


async def _exec(sandbox: Sandbox, cmd: list[str] | str, *, timeout: float = APPLY_TIMEOUT_S, workdir: str | None = None,
                env: dict[str, str] | None = None) -> ExecResult:
    return await sandbox.exec(cmd, timeout=timeout, workdir=workdir, env=env)


async def _must(sandbox: Sandbox, cmd: list[str], what: str, workdir: str | None = None) -> ExecResult:
    result = await _exec(sandbox, cmd, workdir=workdir)
    if result.exit_code != 0 or result.timed_out:
        raise VerifierError(f"{what} failed (exit {result.exit_code}): {(result.stderr or result.stdout)[-1000:]}")
    return result


async def _apply(sandbox: Sandbox, task: Task, patch_text: str, path: str,
                 methods: tuple[tuple[str, list[str]], ...] = _APPLY_METHODS) -> ApplyResult:
    """Applies `patch_text` in the workdir trying `methods` in turn; the tree is restored between attempts."""
    if not patch_text.strip():
        return ApplyResult("empty")
    await sandbox.write_file(path, patch_text)
    logs: list[str] = []
    before: ExecResult | None = None
    for name, argv in methods:
        result = await _exec(sandbox, [*argv, path], workdir=task.workdir)
        logs.append(f"$ {name}\n{result.stdout}{result.stderr}".strip())
        if result.exit_code == 0 and not result.timed_out:
            return ApplyResult("applied", name, cap_text("\n".join(logs), 8000)[0])
        if before is None:
            # A failed plain `git apply` changes nothing, so the tree now is the tree to come back to.
            before = await _must(sandbox, ["git", "status", "--porcelain"], "reading git status", task.workdir)
            continue
        now = await _must(sandbox, ["git", "status", "--porcelain"], "reading git status", task.workdir)
        if now.stdout != before.stdout:
            await _must(sandbox, ["sh", "-c", "git reset -q --hard HEAD && git clean -fdq"], "restoring the tree", task.workdir)
    return ApplyResult("failed", None, cap_text("\n".join(logs), 8000)[0])


async def _processes(sandbox: Sandbox) -> dict[str, str]:
    result = await _exec(sandbox, ["sh", "-c", _PS_SCRIPT], timeout=60)
    if result.exit_code != 0:
        raise VerifierError(f"listing the sandbox's processes failed (exit {result.exit_code}): {result.stderr[-500:]}")
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


def canary_test(task: Task) -> tuple[str, str]:
    """(node id, file source) of a fresh canary test `<dir>/test_<hex>.py::test_<hex>` failing an assertion.

    It sits in the directory of the first hidden test file (the repository root when there is none), so
    neither its place nor its name tells it apart from a hidden test.
    """
    hidden = sorted(p for p in hidden_test_paths(task.test_patch) if p.endswith(".py"))
    folder = posixpath.dirname(hidden[0]) if hidden else ""
    path, name = posixpath.join(folder, f"test_{secrets.token_hex(6)}.py"), f"test_{secrets.token_hex(5)}"
    left, right = secrets.randbelow(1000), 1000 + secrets.randbelow(1000)
    return f"{path}::{name}", f"def {name}():\n    assert {left} == {right}\n"


class _BuiltinRun:
    """pytest with a JUnit report at a random path and a canary test; three result sources cross-checked."""

    def __init__(self, task: Task, scratch: str, timeout: float) -> None:
        self.task, self.timeout = task, timeout
        self.junit = f"{scratch}/{secrets.token_hex(16)}.xml"
        self.canary, self.canary_source = canary_test(task)

    async def execute(self, sandbox: Sandbox) -> ExecResult:
        canary_file = posixpath.join(self.task.workdir, self.canary.split("::")[0])
        await sandbox.write_file(canary_file, self.canary_source)
        tests = list(self.task.tests)
        tests.insert(secrets.randbelow(len(tests) + 1), self.canary)
        # --maxfail=0 (no limit) overrides a -x in the task's command, which would let the canary end the run.
        argv = [*shlex.split(self.task.test_cmd), "--rootdir", self.task.workdir, "-rA", "-o", "junit_family=xunit2",
                "--maxfail=0", f"--junitxml={self.junit}", *tests]
        # Plugins come from the image only when asked for; none is needed and each one is code we would trust.
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "", "PYTHONDONTWRITEBYTECODE": "1"}
        return await _exec(sandbox, argv, timeout=self.timeout, workdir=self.task.workdir, env=env)

    async def read(self, sandbox: Sandbox, result: ExecResult, leftovers: tuple[str, ...]) -> dict[str, Any]:
        size = await _exec(sandbox, ["stat", "-c", "%s", self.junit], timeout=30)
        if size.exit_code != 0:
            if result.exit_code == 0:
                return {"tampering": ["pytest exited 0 but wrote no JUnit report"]}
            if parse_summary(result.stdout) is not None:
                # pytest reached its closing line, which it prints after writing the report: it was removed.
                return {"tampering": [f"pytest finished (exit {result.exit_code}) but its JUnit report is gone"]}
            raise VerifierError(f"task {self.task.instance_id!r}: the test run left no JUnit report "
                                f"(exit {result.exit_code}): {(result.stderr or result.stdout)[-2000:]}")
        if int(size.stdout.strip() or 0) > _MAX_JUNIT_BYTES:
            return {"tampering": [f"the JUnit report is {size.stdout.strip()} bytes, over the {_MAX_JUNIT_BYTES} cap"]}
        try:
            report = parse_junit(await sandbox.read_file(self.junit))
        except ReportError as err:
            return {"tampering": [str(err)]}
        ran = (*self.task.tests, self.canary)
        problems = cross_check(report, parse_pytest_log(result.stdout, ran), parse_summary(result.stdout),
                               result.exit_code, ran)
        canary = statuses_for(report, [self.canary])[self.canary]
        if canary != "failed":
            problems.append(f"the canary test {self.canary}, which always fails, was reported {canary}: "
                            "something in the test process rewrites results")
        if problems and result.truncated:
            problems.append("the test output hit the capture limit, so its summary could not be checked")
        return {"statuses": statuses_for(report, self.task.tests), "tampering": problems}


class _SwebenchRun:
    """The task's test script between random markers, read by its log parser."""

    def __init__(self, task: Task, scratch: str, timeout: float) -> None:
        self.task, self.timeout = task, timeout
        nonce = secrets.token_hex(12)
        self.start, self.end = f">>>>> Start Test Output {nonce}", f">>>>> End Test Output {nonce}"
        self.script = f"{scratch}/eval.sh"

    async def execute(self, sandbox: Sandbox) -> ExecResult:
        body = "\n".join([
            "#!/bin/bash", "set -uo pipefail", f"cd {shlex.quote(self.task.workdir)}", f"echo '{self.start}'",
            self.task.test_cmd, "rc=$?", f"echo '{self.end}'", "exit $rc", "",
        ])
        await sandbox.write_file(self.script, body)
        return await _exec(sandbox, ["bash", self.script], timeout=self.timeout, workdir=self.task.workdir)

    async def read(self, sandbox: Sandbox, result: ExecResult, leftovers: tuple[str, ...]) -> dict[str, Any]:
        out = result.stdout
        first, last = out.find(self.start), out.rfind(self.end)
        if first == -1 or last == -1 or last < first:
            raise VerifierError(f"task {self.task.instance_id!r}: the test script never reached its output markers "
                                f"(exit {result.exit_code}): {(result.stderr or out)[-2000:]}")
        parsed = resolve_log_parser(self.task.log_parser, self.task.tests)(out[first + len(self.start) : last])
        if not parsed:
            raise VerifierError(f"task {self.task.instance_id!r}: the log parser {self.task.log_parser!r} found no "
                                f"test result in the output (exit {result.exit_code})")
        statuses = {t: parsed.get(t, "missing") for t in self.task.tests}
        failing = [t for t, s in parsed.items() if s in ("failed", "error")]
        problems = []
        if result.exit_code != 0 and not failing:
            problems.append(f"the test command exited {result.exit_code} but its log shows no failing test")
        if result.exit_code == 0 and failing:
            problems.append(f"the test command exited 0 but its log shows failing tests {failing[:5]}")
        return {"statuses": statuses, "tampering": problems}


class _HarborRun:
    """`bash /tests/test.sh`, then the reward file it wrote."""

    def __init__(self, task: Task, timeout: float) -> None:
        self.task, self.timeout = task, timeout

    async def execute(self, sandbox: Sandbox) -> ExecResult:
        env = {str(k): str(v) for k, v in dict(self.task.metadata.get("verifier_env", {})).items()}
        return await _exec(sandbox, shlex.split(self.task.test_cmd), timeout=self.timeout,
                           workdir=self.task.workdir, env=env)

    async def read(self, sandbox: Sandbox, result: ExecResult, leftovers: tuple[str, ...]) -> dict[str, Any]:
        files = await _exec(sandbox, ["sh", "-c", "cd /logs/verifier 2>/dev/null && ls -1"], timeout=30)
        names = set(files.stdout.split())
        if "reward.txt" in names:
            raw = (await sandbox.read_file("/logs/verifier/reward.txt")).decode("utf-8", "replace").strip()
            reward = _number(self.task, raw, "reward.txt")
        elif "reward.json" in names:
            reward = _json_reward(self.task, (await sandbox.read_file("/logs/verifier/reward.json")).decode("utf-8", "replace"))
        else:
            raise VerifierError(f"task {self.task.instance_id!r}: tests/test.sh wrote no /logs/verifier/reward.txt or "
                                f"reward.json (exit {result.exit_code}): {(result.stderr or result.stdout)[-2000:]}")
        tampering = [f"processes outlived tests/test.sh and could have rewritten the reward: {list(leftovers)[:5]}"] if leftovers else []
        return {"reward": reward, "tampering": tampering}


def _number(task: Task, raw: str, what: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise VerifierError(f"task {task.instance_id!r}: {what} holds {raw[:100]!r}, not a number") from None
    if not math.isfinite(value):
        raise VerifierError(f"task {task.instance_id!r}: {what} holds {raw[:100]!r}, not a finite number")
    return value


def _json_reward(task: Task, raw: str) -> float:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        raise VerifierError(f"task {task.instance_id!r}: reward.json is not JSON: {raw[:200]!r}") from None
    if isinstance(data, dict) and "reward" in data:
        return _number(task, str(data["reward"]), "reward.json")
    if isinstance(data, dict) and len(data) == 1:
        return _number(task, str(next(iter(data.values()))), "reward.json")
    raise VerifierError(f"task {task.instance_id!r}: reward.json must hold a 'reward' key or one value, got {raw[:200]!r}")


async def grade_many(tasks_and_diffs: list[tuple[Task, str]], *, sandbox_factory: SandboxFactory | None = None,
                     config: VerifierConfig | None = None) -> list[VerifierReport | VerifierError]:
    """Grades several diffs, `config.concurrency` sandboxes at a time; infrastructure failures come back as
    `VerifierError` values in their place instead of cancelling the others."""
    config = config or VerifierConfig()
    gate = asyncio.Semaphore(config.concurrency)

    async def one(task: Task, diff: str) -> VerifierReport | VerifierError:
        async with gate:
            try:
                return await grade(task, diff, sandbox_factory=sandbox_factory, config=config)
            except VerifierError as err:
                return err

    return await asyncio.gather(*(one(t, d) for t, d in tasks_and_diffs))
