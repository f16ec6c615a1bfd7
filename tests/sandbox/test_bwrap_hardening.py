"""bubblewrap does not leak the host (attack class 6 of issue 14): its own environment (pid 1 inside) holds
none of this process's variables, the sandbox user is not host root (with a read-only or a writable root),
nested user namespaces are refused, and the seccomp filter refuses what Docker's default profile refuses."""

from __future__ import annotations

import ctypes
import os
import shutil

import pytest

from legorl_jax.sandbox import SandboxSpec, make_sandbox
from legorl_jax.sandbox.bwrap_backend import SANDBOX_HOST_UID
from legorl_jax.sandbox.seccomp import DENIED_X86_64, filter_program

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed on this host"
)

# Calls a syscall through libc and prints its errno (0 on success): python3 runs inside the sandbox.
# An argument "self" stands for the caller's pid.
SYSCALL = (
    "import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); "
    "args = [os.getpid() if a == 'self' else int(a) for a in sys.argv[2:]]; "
    "r = libc.syscall(int(sys.argv[1]), *args); print(0 if r >= 0 else ctypes.get_errno())"
)
KCMP_FILE, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING = 0, 0, -3


@pytest.fixture
async def sandbox(base_image):
    sb = make_sandbox(SandboxSpec(image=base_image), backend="bwrap")
    await sb.start()
    yield sb
    await sb.close()


async def test_pid_1_inside_shows_none_of_the_host_environment(sandbox, monkeypatch):
    monkeypatch.setenv("LEGORL_HOST_SECRET", "do-not-leak-7f3a")
    result = await sandbox.exec(
        ["sh", "-c", "tr '\\0' '\\n' < /proc/1/environ; echo; cat /proc/1/cmdline | tr '\\0' ' '"]
    )
    assert result.exit_code == 0, result
    assert "bwrap" in result.stdout  # it really is bubblewrap's own environment being read
    assert "do-not-leak-7f3a" not in result.stdout and "LEGORL_HOST_SECRET" not in result.stdout


@pytest.mark.skipif(
    os.geteuid() != 0, reason="without root bubblewrap already runs as this unprivileged user"
)
async def test_files_the_sandbox_user_creates_belong_to_an_unprivileged_host_uid(sandbox):
    result = await sandbox.exec(["sh", "-c", "echo x > /testbed/made-inside && sleep 0"])
    assert result.exit_code == 0, result
    made = sandbox.state / "fs" / "work" / "made-inside"
    assert made.stat().st_uid == SANDBOX_HOST_UID != 0


@pytest.mark.skipif(
    os.geteuid() != 0, reason="without root bubblewrap already runs as this unprivileged user"
)
@pytest.mark.parametrize("read_only_root", [True, False])
async def test_the_sandbox_user_is_an_unprivileged_host_uid_with_either_kind_of_root(
    base_image, read_only_root
):
    async with make_sandbox(
        SandboxSpec(image=base_image, read_only_root=read_only_root), backend="bwrap"
    ) as sb:
        result = await sb.exec(["sh", "-c", "echo x > /tmp/made-inside"])
        assert result.exit_code == 0, result
        # Where /tmp lies on the host: its own bind, or the overlay's upper layer.
        made = sb.state / "fs" / ("tmp" if read_only_root else "upper/tmp") / "made-inside"
        assert made.stat().st_uid == SANDBOX_HOST_UID != 0
        if not read_only_root:  # the writable root is still writable everywhere, as the sandbox user
            wrote = await sb.exec(["sh", "-c", "echo x > /etc/made-inside && echo y > /usr/bin/made-inside"])
            assert wrote.exit_code == 0, wrote
            assert (sb.state / "fs" / "upper/etc/made-inside").stat().st_uid == SANDBOX_HOST_UID


async def test_nested_user_namespaces_are_refused(sandbox):
    clone_newuser = 0x10000000
    result = await sandbox.exec(["python3", "-c", SYSCALL, str(DENIED_X86_64["unshare"]), str(clone_newuser)])
    assert result.exit_code == 0 and int(result.stdout) != 0, result


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("kcmp", ["self", "self", str(KCMP_FILE), "0", "0"]),
        ("keyctl", [str(KEYCTL_GET_KEYRING_ID), str(KEY_SPEC_SESSION_KEYRING), "0"]),
    ],
)
async def test_calls_dockers_default_profile_refuses_fail_with_eperm(sandbox, name, args):
    # Each of these succeeds for an ordinary process without a filter (checked on the host first).
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(DENIED_X86_64[name], *[os.getpid() if a == "self" else int(a) for a in args]) >= 0
    result = await sandbox.exec(["python3", "-c", SYSCALL, str(DENIED_X86_64[name]), *args])
    assert result.exit_code == 0 and result.stdout.strip() == "1", result  # 1 = EPERM


async def test_clone3_fails_with_enosys_so_libc_falls_back_to_a_filtered_clone(sandbox):
    result = await sandbox.exec(["python3", "-c", SYSCALL, "435", "0", "0"])
    assert result.stdout.strip() == "38", result  # ENOSYS
    fork = await sandbox.exec(["sh", "-c", "echo child & wait"])
    assert fork.stdout == "child\n"


def test_the_filter_is_refused_for_an_architecture_it_has_no_numbers_for():
    with pytest.raises(ValueError, match="aarch64"):
        filter_program("aarch64")
