"""Image building: content hashes, the host's Debian mirror, image facts, and cached task-image builds."""

from __future__ import annotations

import time

import pytest

from legorl_jax.sandbox import SandboxError
from legorl_jax.sandbox.images import ImageError, base_recipe_hash, context_hash, debian_mirror, ensure_image
from legorl_jax.sandbox.seed import git_head, parse_passwd


def test_context_hash_follows_content_modes_and_the_dockerfile(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "run.sh").write_text("echo")
    dockerfile = "FROM scratch\nCOPY . /x\n"
    first = context_hash(tmp_path, dockerfile)
    assert context_hash(tmp_path, dockerfile) == first
    (tmp_path / "sub" / "run.sh").chmod(0o755)
    moded = context_hash(tmp_path, dockerfile)
    (tmp_path / "a.txt").write_text("two")
    edited = context_hash(tmp_path, dockerfile)
    assert len({first, moded, edited, context_hash(tmp_path, dockerfile + "RUN true\n")}) == 4
    assert len(base_recipe_hash()) == 16


def test_debian_mirror_reads_deb822_and_one_line_sources(tmp_path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
    )
    assert debian_mirror([deb822]) == "http://mirror.example/debian"
    legacy = tmp_path / "sources.list"
    legacy.write_text("# comment\ndeb [arch=amd64] http://old.example/debian bookworm main\n")
    assert debian_mirror([tmp_path / "absent", legacy]) == "http://old.example/debian"
    assert debian_mirror([tmp_path / "absent"]) == "http://deb.debian.org/debian"


def test_passwd_lookup_resolves_names_uids_and_groups():
    passwd = "root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000::/home/agent:/bin/bash\n"
    group = "root:x:0:\nagent:x:1000:\nstaff:x:50:\n"
    assert parse_passwd(passwd, group, "agent") == (1000, 1000, "/home/agent")
    assert parse_passwd(passwd, group, "1000:staff") == (1000, 50, "/home/agent")
    assert parse_passwd(passwd, group, "4242") == (4242, 4242, "/")
    with pytest.raises(SandboxError, match="'ghost'"):
        parse_passwd(passwd, group, "ghost")


def test_git_head_follows_symbolic_loose_and_packed_refs():
    sha, other = "a" * 40, "b" * 40
    loose = {"/r/.git/HEAD": b"ref: refs/heads/main\n", "/r/.git/refs/heads/main": f"{sha}\n".encode()}
    packed = {
        "/r/.git/HEAD": b"ref: refs/heads/main\n",
        "/r/.git/packed-refs": f"# pack\n{other} refs/heads/main\n".encode(),
    }
    assert git_head(loose.get, "/r/.git") == sha
    assert git_head(packed.get, "/r/.git") == other
    assert git_head({"/r/.git/HEAD": f"{sha}\n".encode()}.get, "/r/.git") == sha
    assert git_head({"/r/.git/HEAD": b"ref: refs/heads/unborn\n"}.get, "/r/.git") is None
    assert git_head({}.get, "/r/.git") is None


def test_ensure_image_rejects_bad_arguments_naming_them(tmp_path):
    with pytest.raises(ValueError, match="'/no/such/dir'"):
        ensure_image("/no/such/dir", "FROM scratch", "x")
    with pytest.raises(ValueError, match="FROM"):
        ensure_image(tmp_path, "RUN true", "x")
    with pytest.raises(ValueError, match="'Bad Name'"):
        ensure_image(tmp_path, "FROM scratch", "Bad Name")


@pytest.mark.docker
def test_ensure_image_builds_once_and_reuses_the_content_tag(docker_available, base_image, tmp_path):
    assert docker_available, "no Docker daemon answers (make system starts one)"
    (tmp_path / "hello.txt").write_text(f"built at {time.time()}\n")  # unique content: a fresh build
    dockerfile = f"FROM {base_image}\nCOPY hello.txt /testbed/hello.txt\n"
    tag = ensure_image(tmp_path, dockerfile, "legorl-test-cache")
    from legorl_jax.sandbox import daemon

    created = daemon.client().images.get(tag).attrs["Created"]
    started = time.perf_counter()
    assert ensure_image(tmp_path, dockerfile, "legorl-test-cache") == tag
    assert time.perf_counter() - started < 5
    assert daemon.client().images.get(tag).attrs["Created"] == created
    daemon.client().images.remove(tag, force=True)


@pytest.mark.docker
def test_a_failing_build_raises_image_error_with_the_log(docker_available, base_image, tmp_path):
    assert docker_available, "no Docker daemon answers (make system starts one)"
    with pytest.raises(ImageError, match="no-such-binary-xyz"):
        ensure_image(tmp_path, f"FROM {base_image}\nRUN no-such-binary-xyz\n", "legorl-test-broken")


@pytest.mark.slow
@pytest.mark.docker
async def test_a_registry_based_base_image_has_the_sandbox_layout(docker_available, base_image, tmp_path):
    # No registry is reachable here, so a local Debian image stands in for python:3.12-slim; the build
    # still runs apt-get against the mirror (network on), as it would FROM a registry image.
    assert docker_available, "no Docker daemon answers (make system starts one)"
    from legorl_jax.sandbox import SandboxSpec, make_sandbox
    from legorl_jax.sandbox.images import registry_base_dockerfile

    tag = ensure_image(
        tmp_path, registry_base_dockerfile(base_image), "legorl-test-registry-base", network=True
    )
    async with make_sandbox(SandboxSpec(image=tag), backend="docker") as sb:
        probe = await sb.exec(
            "id -un; pwd; git --version >/dev/null && python3 -m pytest --version 2>&1 | head -1"
        )
    assert probe.stdout.splitlines()[:2] == ["agent", "/testbed"] and "pytest" in probe.stdout


async def test_an_image_with_its_own_entrypoint_and_root_user_still_sandboxes(
    backend, docker_available, base_image, tmp_path
):
    if not docker_available:
        pytest.skip("building a task image needs Docker")
    from legorl_jax.sandbox import SandboxSpec, make_sandbox

    dockerfile = f'FROM {base_image}\nUSER root\nENTRYPOINT ["/bin/false"]\nCMD ["--never"]\n'
    tag = ensure_image(tmp_path, dockerfile, "legorl-test-entrypoint")
    async with make_sandbox(SandboxSpec(image=tag), backend=backend) as sb:
        probe = await sb.exec("id -un; touch ~/written && echo $HOME")
    assert probe.stdout.split() == ["root", "/root"]


@pytest.fixture
def no_docker_daemon(monkeypatch, tmp_path):
    """This process sees no Docker daemon (bubblewrap is what is left)."""
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this host")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")


@pytest.fixture
def tree_tag():
    """A tree-image tag unique to this test, whose cache entry is removed afterwards."""
    import shutil
    import uuid

    from legorl_jax.sandbox.rootfs import tree_image_dir

    tag = f"legorl-test-tree:{uuid.uuid4().hex[:12]}"
    yield tag
    shutil.rmtree(tree_image_dir(tag), ignore_errors=True)


@pytest.mark.parametrize("read_only_root", [True, False])
async def test_without_docker_a_tree_image_starts_with_its_tree_in_the_workdir(
    no_docker_daemon, tree_tag, read_only_root
):
    from legorl_jax.sandbox import SandboxSpec, make_sandbox
    from legorl_jax.sandbox.rootfs import ensure_tree_image

    calls = []

    def populate(workdir):
        calls.append(workdir)
        (workdir / "pkg").mkdir(parents=True)
        (workdir / "pkg" / "mod.py").write_text("VALUE = 1\n")

    ensure_tree_image(tree_tag, populate, workdir="/testbed", base_commit="c" * 40)
    ensure_tree_image(tree_tag, populate, workdir="/testbed", base_commit="c" * 40)
    assert len(calls) == 1  # made once, then found in the cache
    spec = SandboxSpec(image=tree_tag, read_only_root=read_only_root)
    async with make_sandbox(spec, backend="auto") as sb:
        assert sb.backend == "bwrap" and sb.base_commit == "c" * 40
        probe = await sb.exec("id -un; cat pkg/mod.py; echo 'VALUE = 2' > pkg/mod.py && cat pkg/mod.py")
        assert probe.stdout.split("\n")[:3] == ["agent", "VALUE = 1", "VALUE = 2"], probe
    async with make_sandbox(spec, backend="bwrap") as fresh:  # the tree itself was not changed
        assert (await fresh.read_file("pkg/mod.py")) == b"VALUE = 1\n"


async def test_a_tree_image_asked_for_at_another_workdir_is_a_sandbox_error_naming_both(
    no_docker_daemon, tree_tag
):
    from legorl_jax.sandbox import SandboxSpec, make_sandbox
    from legorl_jax.sandbox.rootfs import ensure_tree_image

    ensure_tree_image(tree_tag, lambda d: d.mkdir(), workdir="/testbed")
    with pytest.raises(SandboxError, match="'/testbed'.*'/srv/app'"):
        async with make_sandbox(SandboxSpec(image=tree_tag, workdir="/srv/app"), backend="bwrap"):
            pass


def test_a_tree_image_whose_populate_writes_nothing_is_not_cached(no_docker_daemon, tree_tag):
    from legorl_jax.sandbox.rootfs import ensure_tree_image, tree_image_dir

    with pytest.raises(SandboxError, match="populate wrote no directory"):
        ensure_tree_image(tree_tag, lambda d: None, workdir="/testbed")
    assert not tree_image_dir(tree_tag).exists()
    with pytest.raises(ValueError, match="'relative'"):
        ensure_tree_image(tree_tag, lambda d: d.mkdir(), workdir="relative")


def test_without_docker_an_unknown_image_is_a_sandbox_error_naming_it(no_docker_daemon):
    from legorl_jax.sandbox.rootfs import resolve

    with pytest.raises(SandboxError, match="'legorl-never-made:1'.*no tree image"):
        resolve("legorl-never-made:1", "/testbed", None)
