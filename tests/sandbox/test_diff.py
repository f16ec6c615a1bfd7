"""`diff()` on both backends: everything the agent changed, binary-safe, applicable, and untouched by
whatever the agent did to its repository's git configuration."""

from __future__ import annotations

import hashlib
import os

import pytest

from legorl_jax.sandbox import SandboxError

COMMIT = (
    "git init -q -b main && git add -A && "
    "GIT_AUTHOR_DATE=2020-01-01T00:00:00Z GIT_COMMITTER_DATE=2020-01-01T00:00:00Z "
    "git -c user.name=base -c user.email=base@test commit -qm base && git rev-parse HEAD"
)
SNAPSHOT = (
    "find . -path ./.git -prune -o -type f -print -o -type l -print | sort | xargs -d '\\n' sha256sum; find "
    ". -path ./.git -prune -o -type l -printf '%p -> %l\\n' | sort; find . -path ./.git -prune -o -perm -u+x "
    "-type f -print | sort"
)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "pkg" / "logo.bin").write_bytes(bytes(range(256)) * 8)
    (root / "obsolete.txt").write_text("to be deleted\n")
    (root / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (root / ".gitignore").write_text("*.log\n")
    return root


async def _checkout(sb, repo) -> str:
    await sb.upload(repo, "/testbed")
    made = await sb.exec(COMMIT)
    assert made.exit_code == 0, made
    return made.stdout.strip()


AGENT_EDITS = """
set -e
printf 'def add(a, b):\\n    return a + b\\n' > pkg/core.py
printf '\\x00\\x01binary\\xff' > pkg/logo.bin
rm obsolete.txt
mkdir -p new/deeper && printf '\\x89PNG\\r\\n\\x1a\\n\\x00' > new/deeper/image.png
printf 'caf\\xe9\\n' > new/latin1.txt
echo 'noise' > debug.log
ln -s pkg/core.py link.py
chmod +x pkg/core.py
"""


async def test_diff_captures_every_kind_of_change_and_applies_to_a_fresh_copy(open_sandbox, repo):
    agent = await open_sandbox()
    base = await _checkout(agent, repo)
    assert (await agent.exec(AGENT_EDITS)).exit_code == 0
    patch = await agent.diff(base)
    for expected in (
        "a/pkg/core.py",
        "GIT binary patch",
        "deleted file mode",
        "b/new/deeper/image.png",
        "new file mode 120000",
        "old mode 100644",
        "b/new/latin1.txt",
    ):
        assert expected in patch, expected
    assert "debug.log" not in patch  # ignored by the repository's .gitignore

    fresh = await open_sandbox()
    assert await _checkout(fresh, repo) == base
    await fresh.write_file("/tmp/agent.patch", patch)
    applied = await fresh.exec(["git", "apply", "--check", "--whitespace=nowarn", "/tmp/agent.patch"])
    assert applied.exit_code == 0, applied
    assert (await fresh.exec(["git", "apply", "/tmp/agent.patch"])).exit_code == 0
    await agent.exec("rm debug.log")
    assert (await fresh.exec(SNAPSHOT)).stdout == (await agent.exec(SNAPSHOT)).stdout


async def test_diff_leaves_the_agents_index_refs_and_objects_untouched(open_sandbox, repo):
    sb = await open_sandbox()
    base = await _checkout(sb, repo)
    await sb.exec(AGENT_EDITS)
    state = "sha256sum .git/index; git show-ref; find .git/objects -type f | wc -l; git status --porcelain"
    before = await sb.exec(state)
    await sb.diff(base)
    assert (await sb.exec(state)).stdout == before.stdout


HOSTILE = """
set -e
git config core.fsmonitor 'touch /tmp/pwned-fsmonitor; echo'
git config filter.evil.clean 'touch /tmp/pwned-filter; cat'
git config filter.evil.required true
git config diff.evil.textconv 'touch /tmp/pwned-textconv; cat'
git config diff.external /tmp/evil-diff
git config core.autocrlf true
git config core.filemode false
git config diff.noprefix true
git config core.hooksPath /tmp/hooks
mkdir -p /tmp/hooks .git/hooks
for h in /tmp/hooks .git/hooks; do printf '#!/bin/sh\\ntouch /tmp/pwned-hook\\n' > $h/pre-commit; chmod +x $h/pre-commit; done
printf '#!/bin/sh\\ntouch /tmp/pwned-extdiff\\n' > /tmp/evil-diff; chmod +x /tmp/evil-diff
echo '* filter=evil diff=evil' > .gitattributes
printf 'changed\\r\\n' > obsolete.txt
chmod +x pkg/core.py
"""  # noqa: E501 - script lines kept whole


async def test_diff_ignores_hostile_git_config_hooks_and_attributes(open_sandbox, repo):
    sb = await open_sandbox()
    base = await _checkout(sb, repo)
    assert (await sb.exec(HOSTILE)).exit_code == 0
    patch = await sb.diff(base)
    assert (await sb.exec("ls /tmp | grep -c pwned || true")).stdout.strip() == "0"
    assert "a/obsolete.txt" in patch and "+changed\r" in patch  # no prefix or CRLF settings applied
    assert "new mode 100755" in patch  # core.filemode=false did not hide the mode change


async def test_diff_covers_commits_the_agent_made_since_the_base(open_sandbox, repo):
    sb = await open_sandbox()
    base = await _checkout(sb, repo)
    await sb.exec(
        "echo committed >> pkg/core.py && git -c user.name=a -c user.email=a@a commit -qam step && "
        "echo uncommitted > later.txt"
    )
    patch = await sb.diff(base)
    assert "+committed" in patch and "b/later.txt" in patch
    assert "b/later.txt" in await sb.diff()  # default base: HEAD of the repository when nothing was recorded


async def test_diff_of_an_unknown_base_raises_sandbox_error_and_a_bad_one_value_error(open_sandbox, repo):
    sb = await open_sandbox()
    await _checkout(sb, repo)
    with pytest.raises(SandboxError, match="0123456789abcdef0123456789abcdef01234567"):
        await sb.diff("0123456789abcdef0123456789abcdef01234567")
    with pytest.raises(ValueError, match="--output=/tmp/x"):
        await sb.diff("--output=/tmp/x")


async def test_a_task_image_seeds_its_repository_and_reports_the_base_commit(
    backend, docker_available, repo, tmp_path
):
    if not docker_available:
        pytest.skip("building a task image needs Docker")
    from legorl_jax.sandbox import SandboxSpec, make_sandbox
    from legorl_jax.sandbox.images import ensure_base_image, ensure_image

    base_tag = ensure_base_image()
    dockerfile = (
        f"FROM {base_tag}\nCOPY --chown=agent:agent repo/ /testbed/\n"
        f"RUN cd /testbed && {COMMIT} > /tmp/base-sha\n"
    )
    (tmp_path / "ctx").mkdir()
    os.rename(repo, tmp_path / "ctx" / "repo")
    tag = ensure_image(tmp_path / "ctx", dockerfile, "legorl-test-repo")
    async with make_sandbox(SandboxSpec(image=tag), backend=backend) as sb:
        head = (await sb.exec(["git", "rev-parse", "HEAD"])).stdout.strip()
        assert sb.base_commit == head and len(head) == 40
        core = await sb.read_file("pkg/core.py")
        assert (
            hashlib.sha256(core).hexdigest()
            == hashlib.sha256(b"def add(a, b):\n    return a - b\n").hexdigest()
        )
        await sb.exec("echo change >> pkg/core.py")
        assert "+change" in await sb.diff()
