"""The agent's side of a trial: a sandbox that holds the task's code and nothing that gives the fix away.

`prepare_agent_sandbox(task, sandbox)` runs in a started sandbox of the task's image, before the harness:

- Git history is reduced to one commit holding the current HEAD tree (docs/security.md §3, without keeping
  the old `.git` anywhere the agent can read it): the objects of that tree are packed into a fresh
  repository, committed once by the fixed identity of `snapshot.COMMIT_ENV`, and swapped in for the old
  `.git`. Later commits, remotes, tags, other branches, the reflog, packed refs, the stash, `ORIG_HEAD`,
  `FETCH_HEAD`, alternates and dangling objects are all gone, because none of them was copied. The index
  is rebuilt from the new HEAD and `info/exclude` and the core settings that change `git status`
  (`filemode`, `autocrlf`, `symlinks`, `ignorecase`) are carried over, so the working tree reads exactly as
  before. For a built-in task the new commit *is* `task.base_commit` (same tree, same identity); for other
  images its sha is new, and it is returned: the agent's diff is taken against it.
- The result is checked, not assumed: one commit reachable from anything, one ref, no unreachable object,
  no remote, no stash, the same `git status` as before; and no file the hidden tests add exists.
  A failed check is a `SandboxError` (the trial is dropped, never run on a leaky sandbox).

The verifier never sees this sandbox: it grades in a fresh one from the unmodified image, which still has
whatever history the hidden tests' set-up needs. No network is the sandbox default (`agent_sandbox_spec`).
`agent_sandbox(task, ...)` is the trial-start helper: start, prepare, yield, always clean up.
`oracle_diff(task, ...)` runs a Harbor task's `solution/solve.sh` in such a sandbox and returns its diff
(the gold patch of tasks that ship a script instead of a diff).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
from collections.abc import AsyncIterator, Mapping

from legorl_jax.config import SandboxConfig
from legorl_jax.sandbox import spec_from_config
from legorl_jax.sandbox.base import Sandbox, SandboxError, SandboxSpec
from legorl_jax.tasks.patchset import parse_patch
from legorl_jax.tasks.schema import Task
from legorl_jax.tasks.snapshot import COMMIT_ENV, COMMIT_MESSAGE
from legorl_jax.tasks.verifier import SandboxFactory, default_sandbox_factory

STRIP_TIMEOUT_S = 600.0
_CARRIED_SETTINGS = ("core.filemode", "core.autocrlf", "core.symlinks", "core.ignorecase")
_STRIP_SCRIPT = r"""
set -eu
top=$(git rev-parse --show-toplevel)
[ "$top" = "$(pwd -P)" ] || { echo "the workdir $(pwd -P) is not the root of its repository ($top)" >&2; exit 3; }
before=$(git status --porcelain=v1 --untracked-files=all)
tree=$(git rev-parse --verify 'HEAD^{tree}')
settings=""
for key in SETTINGS; do
  value=$(git config --get "$key" || true)
  [ -n "$value" ] && settings="$settings $key=$value"
done
exclude=""
[ -f .git/info/exclude ] && exclude=$(cat .git/info/exclude)
new=$(mktemp -d /tmp/legorl-git-XXXXXXXX)
git init -q "$new"
git rev-list --objects "$tree" | git pack-objects -q --stdout > "$new/objects.pack"
git --git-dir="$new/.git" index-pack --stdin < "$new/objects.pack" >/dev/null
commit=$(git --git-dir="$new/.git" commit-tree "$tree" -m "MESSAGE")
git --git-dir="$new/.git" -c core.logAllRefUpdates=false update-ref refs/heads/main "$commit"
git --git-dir="$new/.git" symbolic-ref HEAD refs/heads/main
rm -rf "$new/.git/hooks" "$new/.git/logs"
for kv in $settings; do git --git-dir="$new/.git" config "${kv%%=*}" "${kv#*=}"; done
printf '%s\n' "$exclude" > "$new/.git/info/exclude"
rm -rf .git
mv "$new/.git" .git
rm -rf "$new"
git read-tree HEAD
git update-index -q --refresh >/dev/null || true
after=$(git status --porcelain=v1 --untracked-files=all)
[ "$before" = "$after" ] || { echo "git status changed across the strip" >&2; exit 4; }
echo "commit $commit"
"""  # noqa: E501 - script lines kept whole
_CHECK_SCRIPT = r"""
set -eu
echo "commits $(git rev-list --all --reflog --count)"
echo "refs $(git for-each-ref --format='%(refname)' | tr '\n' ' ')"
echo "remotes $(git remote | tr '\n' ' ')"
echo "stash $(git stash list | wc -l)"
echo "unreachable $(git fsck --unreachable --no-reflogs --no-progress 2>/dev/null | wc -l)"
for f in ORIG_HEAD FETCH_HEAD MERGE_HEAD packed-refs logs objects/info/alternates; do
  [ -e ".git/$f" ] && echo "leftover .git/$f"
done
echo "head $(git rev-parse HEAD)"
"""


@dataclasses.dataclass(frozen=True)
class AgentWorkspace:
    """What the trial needs to know about the prepared repository."""

    base_commit: str
    """The only commit of the stripped repository: take the agent's diff against it."""
    workdir: str


def agent_sandbox_spec(
    task: Task,
    config: SandboxConfig | None = None,
    *,
    network: str | None = None,
    proxy_port: int | None = None,
    mounts: Mapping[str, str] | None = None,
) -> SandboxSpec:
    """The agent's sandbox: the task's image at its workdir with the run's `sandbox` config (no network unless
    the proxy must be reachable). Without a config: the defaults, with a read-only root for built-in tasks
    only (their image was made for it; SWE-bench and Harbor images expect a writable one)."""
    config = config or SandboxConfig(read_only_root=task.kind == "builtin")
    return spec_from_config(
        config,
        image=task.image,
        workdir=task.workdir,
        network=network,
        proxy_port=proxy_port,
        labels={"legorl.role": "agent", "legorl.task": task.instance_id},
        mounts=mounts,
    )


async def prepare_agent_sandbox(task: Task, sandbox: Sandbox) -> AgentWorkspace:
    """Strips the repository's history and checks the sandbox holds no hidden test; see the module
    docstring."""
    script = _STRIP_SCRIPT.replace("SETTINGS", " ".join(_CARRIED_SETTINGS)).replace("MESSAGE", COMMIT_MESSAGE)
    stripped = await sandbox.exec(
        ["bash", "-c", script], timeout=STRIP_TIMEOUT_S, workdir=task.workdir, env=dict(COMMIT_ENV)
    )
    if stripped.exit_code != 0 or stripped.timed_out:
        raise SandboxError(
            f"task {task.instance_id!r}: stripping git history failed (exit {stripped.exit_code}): "
            f"{(stripped.stderr or stripped.stdout)[-1500:]}"
        )
    commit = _field(stripped.stdout, "commit")
    checked = await sandbox.exec(["bash", "-c", _CHECK_SCRIPT], timeout=STRIP_TIMEOUT_S, workdir=task.workdir)
    if checked.exit_code != 0:
        raise SandboxError(
            f"task {task.instance_id!r}: checking the stripped history failed: {checked.stderr[-1500:]}"
        )
    problems = _history_problems(checked.stdout, commit)
    if task.kind == "builtin" and commit != task.base_commit:
        problems.append(f"the image's tree commits as {commit}, the task's base is {task.base_commit}")
    problems += await _present_hidden_files(task, sandbox)
    if problems:
        raise SandboxError(f"task {task.instance_id!r}: the agent's sandbox is not clean: {problems}")
    if hasattr(sandbox, "base_commit"):
        # The backend recorded HEAD at start as `diff()`'s default base; that commit no longer exists here.
        sandbox.base_commit = commit
    return AgentWorkspace(base_commit=commit, workdir=task.workdir)


def _field(stdout: str, name: str) -> str:
    for line in stdout.splitlines():
        if line.startswith(name + " "):
            return line[len(name) + 1 :].strip()
    return ""


def _history_problems(stdout: str, commit: str) -> list[str]:
    problems = []
    if _field(stdout, "commits") != "1":
        problems.append(f"{_field(stdout, 'commits')} commits are reachable, not 1")
    if _field(stdout, "refs") != "refs/heads/main":
        problems.append(f"refs are {_field(stdout, 'refs')!r}, not only refs/heads/main")
    for name in ("remotes",):
        if _field(stdout, name):
            problems.append(f"{name}: {_field(stdout, name)!r}")
    for name in ("stash", "unreachable"):
        if _field(stdout, name) != "0":
            problems.append(f"{name}: {_field(stdout, name)}")
    problems += [line for line in stdout.splitlines() if line.startswith("leftover ")]
    if _field(stdout, "head") != commit:
        problems.append(f"HEAD is {_field(stdout, 'head')}, not the new commit {commit}")
    return problems


async def _present_hidden_files(task: Task, sandbox: Sandbox) -> list[str]:
    added = [p.new_path for p in parse_patch(task.test_patch) if p.is_new and p.new_path]
    if not added:
        return []
    quoted = " ".join(shlex.quote(p) for p in added)
    found = await sandbox.exec(
        ["bash", "-c", f'for p in {quoted}; do [ -e "$p" ] && echo "$p"; done; true'],
        timeout=60,
        workdir=task.workdir,
    )
    return [f"hidden test file {p!r} is in the image" for p in found.stdout.split()]


@contextlib.asynccontextmanager
async def agent_sandbox(
    task: Task, *, sandbox_factory: SandboxFactory | None = None, spec: SandboxSpec | None = None
) -> AsyncIterator[tuple[Sandbox, AgentWorkspace]]:
    """Starts the agent's sandbox for `task`, prepares it, and removes it on exit whatever happened."""
    factory = sandbox_factory or default_sandbox_factory
    async with factory(spec or agent_sandbox_spec(task)) as sandbox:
        yield sandbox, await prepare_agent_sandbox(task, sandbox)


async def oracle_diff(task: Task, *, sandbox_factory: SandboxFactory | None = None) -> str:
    """The gold diff: `task.patch`, or for a Harbor task the diff its `solution/solve.sh` leaves behind."""
    if task.patch.strip():
        return task.patch
    solution = str(task.metadata.get("solution_dir", ""))
    if task.kind != "harbor" or not solution:
        raise ValueError(f"task {task.instance_id!r} has no gold patch and no solution/solve.sh")
    async with agent_sandbox(
        task, sandbox_factory=sandbox_factory, spec=dataclasses.replace(agent_sandbox_spec(task), user="root")
    ) as (sandbox, workspace):
        await sandbox.upload(solution, "/solution")
        ran = await sandbox.exec(
            ["bash", "/solution/solve.sh"], timeout=task.timeouts.agent_s, workdir=task.workdir
        )
        if ran.exit_code != 0 or ran.timed_out:
            raise SandboxError(
                f"task {task.instance_id!r}: solution/solve.sh exited {ran.exit_code}: {ran.stderr[-1500:]}"
            )
        return await sandbox.diff(workspace.base_commit)
