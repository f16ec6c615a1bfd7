"""The seccomp filter bubblewrap installs before a sandboxed command runs (Docker's default profile, in
spirit).

`filter_program()` returns a classic-BPF program (the bytes `bwrap --seccomp FD` reads) that, for x86_64:

- fails with EPERM every system call Docker's default profile leaves out for an unprivileged container:
  mounting and namespace changes (`mount`, `umount2`, `pivot_root`, the new mount API, `unshare`, `setns`),
  kernel modules, kexec, `reboot`, swap, `acct`, clock setting, the kernel keyring, `bpf`,
  `perf_event_open`, `userfaultfd`, `open_by_handle_at`/`name_to_handle_at`, `process_vm_readv/writev`,
  `kcmp`, `iopl`/`ioperm`, `syslog`, `quotactl`, NUMA policy calls, and obsolete ones;
- fails `clone` with EPERM when it asks for a new namespace (any `CLONE_NEW*` flag), and `clone3` with ENOSYS
  (its flags sit in memory a filter cannot read; libc then falls back to `clone`), as Docker does;
- fails every x32 call (ENOSYS) and every call made through another architecture's ABI (EPERM: the 32-bit
  `int 0x80` entry has other numbers, which this list would not cover);
- allows everything else (`ptrace` included, as Docker does on kernels from 4.8).

Numbers are x86_64's (`asm/unistd_64.h`); `SUPPORTED_MACHINES` lists where the program is valid, and
`filter_program` raises `ValueError` anywhere else, so a backend never installs a filter for the wrong table.
"""

from __future__ import annotations

import errno
import platform
import struct

SUPPORTED_MACHINES = ("x86_64",)
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little endian).
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
CLONE, CLONE3 = 56, 435
DENIED_X86_64 = {
    "acct": 163,
    "add_key": 248,
    "bpf": 321,
    "clock_adjtime": 305,
    "clock_settime": 227,
    "create_module": 174,
    "delete_module": 176,
    "finit_module": 313,
    "get_kernel_syms": 177,
    "init_module": 175,
    "ioperm": 173,
    "iopl": 172,
    "kcmp": 312,
    "kexec_file_load": 320,
    "kexec_load": 246,
    "keyctl": 250,
    "lookup_dcookie": 212,
    "mount": 165,
    "move_pages": 279,
    "name_to_handle_at": 303,
    "nfsservctl": 180,
    "open_by_handle_at": 304,
    "perf_event_open": 298,
    "pivot_root": 155,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "query_module": 178,
    "quotactl": 179,
    "reboot": 169,
    "request_key": 249,
    "setns": 308,
    "settimeofday": 164,
    "swapon": 167,
    "swapoff": 168,
    "sysfs": 139,
    "_sysctl": 156,
    "umount2": 166,
    "unshare": 272,
    "uselib": 134,
    "userfaultfd": 323,
    "ustat": 136,
    "vhangup": 153,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "open_tree": 428,
    "move_mount": 429,
    "mount_setattr": 442,
    "syslog": 103,
    "get_mempolicy": 239,
    "set_mempolicy": 238,
    "mbind": 237,
}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program(machine: str | None = None) -> bytes:
    """The filter for `machine` (default: this one's) as `struct sock_filter` bytes."""
    machine = machine or platform.machine()
    if machine not in SUPPORTED_MACHINES:
        raise ValueError(f"the sandbox seccomp filter is defined for {SUPPORTED_MACHINES}, not {machine!r}")
    eperm, enosys = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS
    out = [
        _insn(_LD_W_ABS, 0, 0, _ARCH),
        _insn(_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        _insn(_RET_K, 0, 0, eperm),
        _insn(_LD_W_ABS, 0, 0, _NR),
        _insn(_JGE_K, 0, 1, X32_SYSCALL_BIT),
        _insn(_RET_K, 0, 0, enosys),
        _insn(_JEQ_K, 0, 1, CLONE3),
        _insn(_RET_K, 0, 0, enosys),
    ]
    for number in sorted(DENIED_X86_64.values()):
        out += [_insn(_JEQ_K, 0, 1, number), _insn(_RET_K, 0, 0, eperm)]
    out += [
        _insn(_JEQ_K, 0, 3, CLONE),
        _insn(_LD_W_ABS, 0, 0, _ARG0_LOW),
        _insn(_JSET_K, 0, 1, CLONE_NEW_FLAGS),
        _insn(_RET_K, 0, 0, eperm),
        _insn(_RET_K, 0, 0, _RET_ALLOW),
    ]
    return b"".join(out)
