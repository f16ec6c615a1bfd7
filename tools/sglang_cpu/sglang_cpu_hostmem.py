"""Host-memory fix for `--enable-return-routed-experts` with SGLang on `--device cpu` (SGLang 0.5.23).

Test support only, installed by tools/make_sglang_venv.sh into .venv-sglang (run at interpreter start by
`sglang_cpu_hostmem.pth`, so SGLang's scheduler subprocesses get it too); never part of legorl_jax.

Why: SGLang's routed-experts capturer keeps its host copy of the routing in a buffer allocated with
`pin_memory=True` hard-coded (`sglang.srt.state_capturer.base.BaseHostCache`), through
`ALLOC_MEMORY_FUNCS[device]`, whose default registers the memory with `cudaHostRegister`. On a machine with no
GPU that call fails and the server dies at start. Pinning only speeds device-to-host copies; on device "cpu"
there is no device to copy from.

What it does: once `sglang.srt.mem_cache.pool_host.common` is imported, `ALLOC_MEMORY_FUNCS["cpu"]` becomes
an allocator that returns the same host buffer (SGLang's own `HostTensorAllocator.allocate`, an mmap'd
tensor) without registering it. Other devices' entries are untouched. The buffer's shape, dtype and
contents (SGLang zeroes it and writes the routing into it) are SGLang's: no computation changes, only where
the bytes live.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

TARGET = "sglang.srt.mem_cache.pool_host.common"


def alloc_plain_host(
    dims: tuple,
    dtype: Any,
    device: str,
    pin_memory: bool,
    allocator: Any,
    registration_granularity_bytes: int | None = None,
) -> Any:
    """SGLang's host allocation for device "cpu", without `cudaHostRegister` (module docstring)."""
    return allocator.allocate(dims, dtype=dtype, device="cpu")


def patch(module: Any) -> None:
    module.ALLOC_MEMORY_FUNCS["cpu"] = alloc_plain_host


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
