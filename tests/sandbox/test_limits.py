"""Resource limits on both backends: memory (OOM reported), process count (fork bombs), concurrency."""

from __future__ import annotations

import asyncio
import time

import pytest

from legorl_jax.sandbox import SandboxSpec, make_sandbox

HOG = "python3 -c 'b = bytearray(400 << 20); print(len(b))'"


async def test_a_process_over_the_memory_limit_dies_and_is_reported_as_oom(open_sandbox):
    sb = await open_sandbox(memory_mb=128)
    result = await sb.exec(HOG, timeout=60)
    assert result.exit_code == 137 and result.oom_killed, result
    after = await sb.exec(["echo", "alive"])
    assert after.stdout == "alive\n" and not after.oom_killed


async def test_a_fork_bomb_is_contained_and_the_sandbox_survives(open_sandbox):
    sb = await open_sandbox(pids=48)
    bomb = await sb.exec("bomb() { bomb | bomb & }; bomb; sleep 30", timeout=3)
    assert bomb.timed_out
    assert "Resource temporarily unavailable" in bomb.stderr  # fork failed: the pids limit was hit
    after = await sb.exec("ps -e --no-headers | wc -l")
    assert after.exit_code == 0 and int(after.stdout) < 10, after


@pytest.mark.slow  # the verifier's fork-bomb attack test covers both backends in the default suite
async def test_a_spinning_python_fork_bomb_ends_soon_after_its_timeout(open_sandbox):
    sb = await open_sandbox()  # the default pids limit: hundreds of processes spinning on failed forks
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    started = time.monotonic()
    result = await sb.exec(["python3", "-c", bomb], timeout=5)
    elapsed = time.monotonic() - started
    assert result.timed_out and elapsed < 15, (result, elapsed)  # a plain kill sweep on Docker took 20 s
    after = await sb.exec("ps -e --no-headers | wc -l")
    assert after.exit_code == 0 and int(after.stdout) < 10, after


@pytest.mark.parametrize("user", [None, "root"])  # the container's root has no CAP_SYS_NICE either
async def test_on_docker_commands_run_at_nice_19_and_cannot_lower_it(backend, open_sandbox, user):
    if backend != "docker":
        pytest.skip("the nice value is how the Docker supervisor outruns a fork bomb; bubblewrap kills bwrap")
    sb = await open_sandbox(user=user)
    result = await sb.exec(["python3", "-c", "import os; print(os.nice(0)); os.nice(-1)"])
    assert result.stdout == "19\n" and "PermissionError" in result.stderr, result


async def test_sixteen_sandboxes_run_at_once(backend, base_image):
    async def one(i: int) -> str:
        async with make_sandbox(
            SandboxSpec(image=base_image, labels={"trial": f"t{i}"}), backend=backend
        ) as sb:
            await sb.write_file("n.txt", str(i))
            return (await sb.exec("cat n.txt; hostname")).stdout

    outputs = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(16))), 150)
    assert outputs == [f"{i}sandbox\n" for i in range(16)]


@pytest.mark.parametrize("limit_mode", ["rlimit"])
async def test_bubblewrap_without_cgroups_still_caps_memory_per_process(base_image, limit_mode):
    import shutil

    from legorl_jax.sandbox.bwrap_backend import BwrapSandbox

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this host")
    async with BwrapSandbox(SandboxSpec(image=base_image, memory_mb=128), limits=limit_mode) as sb:
        result = await sb.exec(HOG, timeout=60)
    assert result.exit_code != 0 and "MemoryError" in result.stderr
