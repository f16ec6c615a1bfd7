"""The agent's sandbox: history reduced to one commit, so every way of reading the fix from git finds
nothing; no hidden test in the image; the working tree untouched."""

from __future__ import annotations

import dataclasses

import pytest
from swebench_fixture import FIX_MESSAGE, build_swebench_image, write_jsonl

from legorl_jax.sandbox import make_sandbox
from legorl_jax.sandbox.base import SandboxError
from legorl_jax.tasks.agent_sandbox import agent_sandbox, agent_sandbox_spec, prepare_agent_sandbox
from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_task
from legorl_jax.tasks.protection import hidden_test_paths
from legorl_jax.tasks.swebench import load_swebench_file
from legorl_jax.tasks.task_image import ensure_task_image

pytestmark = pytest.mark.docker

SAMPLE = sorted(d.name for d in SUITE_DIR.iterdir() if (d / "task.toml").is_file())[0]


@pytest.fixture(scope="module")
def leaky_task(tmp_path_factory):
    """A SWE-bench-style task whose image still holds the fix in its git history, and the fix's sha."""
    image, base = build_swebench_image()
    (task,) = load_swebench_file(write_jsonl(tmp_path_factory.mktemp("jsonl") / "set.jsonl", image, base))
    return task


async def _sh(sandbox, script: str) -> str:
    result = await sandbox.exec(["bash", "-c", script])
    return (result.stdout + result.stderr).strip()


async def test_every_way_of_reading_the_fix_from_history_finds_nothing(leaky_task):
    async with make_sandbox(agent_sandbox_spec(leaky_task)) as sandbox:
        fix_sha = await _sh(sandbox, "git rev-parse fix-branch")
        assert FIX_MESSAGE in await _sh(sandbox, "git log --all --format=%s")  # the image does leak it
        workspace = await prepare_agent_sandbox(leaky_task, sandbox)
        probes = {
            "git log --all": "git log --all --format='%H %s'",
            "git reflog": "git reflog --all 2>&1; cat .git/logs/HEAD 2>&1",
            "git show <fix sha>": f"git show {fix_sha} 2>&1",
            "git cat-file <fix sha>": f"git cat-file -t {fix_sha} 2>&1",
            "packed refs": "cat .git/packed-refs 2>&1",
            "tags and branches": "git tag; git branch -a",
            "stash": "git stash list",
            "remotes": "git remote -v",
            "dangling objects": "git fsck --lost-found --no-reflogs 2>&1",
            "ORIG_HEAD": "git rev-parse --verify -q ORIG_HEAD; cat .git/ORIG_HEAD 2>&1",
        }
        seen = {name: await _sh(sandbox, script) for name, script in probes.items()}
        assert FIX_MESSAGE not in seen["git log --all"] and len(seen["git log --all"].splitlines()) == 1
        asked = ("git show <fix sha>", "git cat-file <fix sha>")  # these echo the sha in their error
        assert fix_sha not in "".join(v for k, v in seen.items() if k not in asked)
        assert (
            "bad object" in seen["git show <fix sha>"]
            and "could not get object" in seen["git cat-file <fix sha>"]
        )
        assert seen["tags and branches"] == "* main" and seen["stash"] == "" and seen["remotes"] == ""
        assert "No such file" in seen["packed refs"]
        assert "return a - b" in await _sh(sandbox, "head -2 calc/ops.py")  # the working tree is the base
        assert await _sh(sandbox, "git status --porcelain") == ""
        assert workspace.base_commit == await _sh(sandbox, "git rev-parse HEAD")
        await sandbox.write_file("calc/ops.py", "def add(a, b):\n    return a + b\n")
        assert "+    return a + b" in await sandbox.diff(workspace.base_commit)
        assert await sandbox.diff() == await sandbox.diff(workspace.base_commit)  # the default base follows


async def test_a_builtin_task_keeps_its_base_commit_and_has_no_hidden_tests():
    task = load_builtin_task(SUITE_DIR / SAMPLE)
    ensure_task_image(task)
    async with agent_sandbox(task) as (sandbox, workspace):
        assert workspace.base_commit == task.base_commit
        for path in hidden_test_paths(task.test_patch):
            if path not in {
                p.relative_to(SUITE_DIR / SAMPLE / "repo").as_posix()
                for p in (SUITE_DIR / SAMPLE / "repo").rglob("*")
            }:
                assert (await sandbox.exec(["test", "-e", path])).exit_code != 0, path
        assert (await sandbox.exec(["git", "rev-list", "--all", "--count"])).stdout.strip() == "1"


async def test_a_hidden_test_present_in_the_image_stops_the_trial():
    task = load_builtin_task(SUITE_DIR / SAMPLE)
    ensure_task_image(task)
    present = sorted(
        p.relative_to(SUITE_DIR / SAMPLE / "repo").as_posix()
        for p in (SUITE_DIR / SAMPLE / "repo").glob("*/*.py")
    )[0]
    leaky = dataclasses.replace(
        task,
        test_patch=(
            f"diff --git a/{present} b/{present}\nnew file mode 100644\n--- /dev/null\n+++ b/{present}\n@@ "
            "-0,0 +1 @@\n+x\n"
        ),
    )
    with pytest.raises(SandboxError, match=rf"hidden test file '{present}' is in the image"):
        async with agent_sandbox(leaky):
            pass
