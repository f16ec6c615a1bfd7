"""The Sandbox protocol on both backends: exec, timeouts, output caps, files, upload, lifecycle, errors."""

from __future__ import annotations

import asyncio
import os
import re

import pytest

from legorl_jax.sandbox import Sandbox, SandboxError, SandboxSpec, make_sandbox, resolve_backend


async def test_exec_reports_exit_code_stdout_and_stderr_as_the_image_user(open_sandbox):
    sb = await open_sandbox()
    assert isinstance(sb, Sandbox)
    argv = await sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (argv.exit_code, argv.stdout, argv.stderr, argv.timed_out) == (3, "out\n", "err\n", False)
    script = await sb.exec("id -un; pwd; echo $GREETING", env={"GREETING": "hi"})
    assert script.stdout.split() == ["agent", "/testbed", "hi"]
    elsewhere = await sb.exec(["pwd"], workdir="/tmp")
    assert elsewhere.stdout == "/tmp\n"
    missing = await sb.exec(["no-such-command-xyz"])
    assert missing.exit_code == 127


async def test_exec_past_its_timeout_kills_the_whole_tree_including_background_children(open_sandbox):
    sb = await open_sandbox()
    # The background child would leave a trace two seconds later if it survived the kill.
    result = await sb.exec("(sleep 2; touch /tmp/survivor) & sleep 300", timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert 0.9 < result.duration_s < 8
    await asyncio.sleep(2.5)
    left = await sb.exec(["sh", "-c", "ls /tmp/survivor 2>/dev/null; ps -eo comm | grep -c '^sleep' || true"])
    assert left.stdout.split() == ["0"]


async def test_output_beyond_the_limit_is_cut_and_flagged(open_sandbox):
    sb = await open_sandbox(output_limit_bytes=1000)
    result = await sb.exec("head -c 200000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero | tr '\\0' b >&2")
    assert result.truncated and result.exit_code == 0
    assert result.stdout == "a" * 1000 and result.stderr == "b" * 1000
    small = await sb.exec(["echo", "fits"])
    assert not small.truncated and small.stdout == "fits\n"


async def test_files_round_trip_bytes_and_resolve_relative_paths_against_the_workdir(open_sandbox):
    sb = await open_sandbox()
    payload = bytes(range(256)) * 40
    await sb.write_file("deep/dir/blob.bin", payload)
    assert await sb.read_file("/testbed/deep/dir/blob.bin") == payload
    await sb.write_file("/tmp/note.txt", "héllo\n")
    assert (await sb.read_file("/tmp/note.txt")).decode() == "héllo\n"
    owner = await sb.exec(["stat", "-c", "%U", "deep/dir/blob.bin"])
    assert owner.stdout.strip() == "agent"
    with pytest.raises(FileNotFoundError, match="/testbed/absent.txt"):
        await sb.read_file("absent.txt")
    with pytest.raises(SandboxError, match="/usr/forbidden"):
        await sb.write_file("/usr/forbidden", b"x")


async def test_reading_a_file_past_the_read_limit_raises_instead_of_buffering_it(open_sandbox):
    sb = await open_sandbox(disk_mb=80)
    await sb.exec("head -c 70000000 /dev/zero > /tmp/big")
    with pytest.raises(SandboxError, match="larger than the 67108864 byte read limit"):
        await sb.read_file("/tmp/big")


async def test_upload_copies_a_directory_tree_owned_by_the_sandbox_user(open_sandbox, tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "data.bin").write_bytes(b"\x00\xff" * 100)
    (tmp_path / "pkg" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    os.chmod(tmp_path / "pkg" / "run.sh", 0o755)
    (tmp_path / "top.txt").write_text("top\n")
    sb = await open_sandbox()
    await sb.upload(tmp_path, "/tmp/up")
    assert await sb.read_file("/tmp/up/pkg/sub/data.bin") == b"\x00\xff" * 100
    ran = await sb.exec(
        ["sh", "-c", "/tmp/up/pkg/run.sh && touch /tmp/up/pkg/sub/new && stat -c %U /tmp/up/top.txt"]
    )
    assert ran.stdout.split() == ["ran", "agent"]


async def test_read_only_root_leaves_only_workdir_tmp_and_home_writable(open_sandbox):
    sb = await open_sandbox()
    probe = await sb.exec(
        "for d in /testbed /tmp /home/agent /usr /etc; do touch $d/w 2>/dev/null && echo $d; done"
    )
    assert probe.stdout.split() == ["/testbed", "/tmp", "/home/agent"]


async def test_workspace_quota_stops_writes_past_disk_mb(open_sandbox):
    sb = await open_sandbox(disk_mb=2)
    big = await sb.exec("head -c 3000000 /dev/zero > /testbed/big; echo rc=$?", timeout=30)
    assert "rc=0" not in big.stdout
    fits = await sb.exec("rm /testbed/big; head -c 500000 /dev/zero > /testbed/small && echo ok", timeout=30)
    assert fits.stdout == "ok\n"


async def test_close_is_idempotent_and_removes_everything_even_when_the_body_raised(backend, base_image):
    sb = make_sandbox(SandboxSpec(image=base_image), backend=backend)
    with pytest.raises(RuntimeError, match="body failed"):
        async with sb:
            await sb.exec(["true"])
            raise RuntimeError("body failed")
    await sb.close()
    assert not await _leftovers(sb)
    with pytest.raises(SandboxError, match="closed"):
        await sb.exec(["true"])


async def _leftovers(sb) -> list[str]:
    if sb.backend == "docker":
        import docker

        from legorl_jax.sandbox import daemon

        try:
            daemon.client().api.inspect_container(sb.name)
            return [sb.name]
        except docker.errors.NotFound:
            return []
    return [str(sb.state)] if sb.state.exists() else []


async def test_missing_image_raises_sandbox_error_not_an_exec_result(backend):
    image = "legorl-no-such-image:never" if backend == "docker" else "/nonexistent/rootfs"
    sb = make_sandbox(SandboxSpec(image=image), backend=backend)
    with pytest.raises(SandboxError, match="legorl-no-such-image|/nonexistent/rootfs"):
        await sb.start()
    await sb.close()


async def test_a_failing_start_raises_sandbox_error_and_leaves_nothing(backend, base_image, tmp_path):
    sb = make_sandbox(
        SandboxSpec(image=base_image, mounts={"/opt": str(tmp_path / "missing")}), backend=backend
    )
    # The error names the mount source that does not exist (each backend in its own words).
    with pytest.raises(SandboxError, match=re.escape(str(tmp_path / "missing"))):
        async with sb:
            pass
    assert not await _leftovers(sb)


async def test_exec_arguments_are_checked_with_the_received_value(open_sandbox):
    sb = await open_sandbox()
    with pytest.raises(TypeError, match="42"):
        await sb.exec(42)
    with pytest.raises(TypeError, match=r"\[\]"):
        await sb.exec([])
    with pytest.raises(ValueError, match="-1"):
        await sb.exec(["true"], timeout=-1)
    with pytest.raises(ValueError, match="'relative'"):
        await sb.exec(["true"], workdir="relative")
    with pytest.raises(ValueError, match="'A=B'"):
        await sb.exec(["true"], env={"A=B": "x"})


def test_spec_rejects_bad_fields_naming_the_value():
    with pytest.raises(ValueError, match="'bridge'"):
        SandboxSpec(image="x", network="bridge")
    with pytest.raises(ValueError, match="proxy_port"):
        SandboxSpec(image="x", network="proxy_only")
    with pytest.raises(ValueError, match="memory_mb.*0"):
        SandboxSpec(image="x", memory_mb=0)
    with pytest.raises(ValueError, match="'testbed'"):
        SandboxSpec(image="x", workdir="testbed")
    with pytest.raises(ValueError, match="70000"):
        SandboxSpec(image="x", network="proxy_only", proxy_port=70000)
    with pytest.raises(ValueError, match="'opt'"):
        SandboxSpec(image="x", mounts={"opt": "/srv"})
    with pytest.raises(ValueError, match="'kvm'"):
        make_sandbox(SandboxSpec(image="x"), backend="kvm")


def test_auto_backend_falls_back_to_bubblewrap_when_no_daemon_answers(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    assert resolve_backend("auto") == "bwrap"
    assert make_sandbox(SandboxSpec(image="x"), backend="auto").backend == "bwrap"


@pytest.mark.docker
def test_auto_backend_picks_docker_when_a_daemon_answers(docker_available):
    assert docker_available, "no Docker daemon answers (make system starts one)"
    assert resolve_backend("auto") == "docker"


async def test_bubblewrap_without_a_docker_daemon_runs_the_base_image_from_its_debootstrap_tree(
    monkeypatch, tmp_path
):
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this host")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    async with make_sandbox(SandboxSpec(image="legorl-base:latest"), backend="auto") as sb:
        assert sb.backend == "bwrap"
        probe = await sb.exec("id -un; python3 -m pytest --version 2>&1; git --version")
    assert probe.stdout.startswith("agent\npytest 7.") and "git version" in probe.stdout
