"""Stand-in for SGLang's kernel package (`sgl_kernel`, PyPI `sglang-kernel`) on a CPU-only development box.

Test support only, installed by tools/make_sglang_venv.sh into .venv-sglang; never part of legorl_jax.

Why: SGLang imports `sgl_kernel` (and submodules: `kvcacheio`, `scalar_type`, `flash_attn`, ...) at module
level in many places, but the CPU build of that package is served by no index (it is compiled from SGLang's
source), and the CUDA wheel cannot load without a GPU. With `--device cpu --attention-backend torch_native`
a small Qwen3 / Qwen3-MoE runs on torch's own ops and calls none of the kernel package's functions; only the
imports must succeed.

What it does: every name, in this package and in any submodule, is an `Unavailable` object. Importing it,
reading attributes off it (`scalar_types.uint4b8`) or naming it in a type annotation works; *calling* it
raises `NotImplementedError` naming the function. So this module never computes anything: a code path that
needs a real kernel fails loudly instead of running something else.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__version__ = "0.0.0+cpu-stand-in"


class Unavailable:
    """A kernel function (or constant) that exists here only by name: calling it raises."""

    def __init__(self, name: str):
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{self._name} was called, but sgl_kernel is the CPU test stand-in (tools/sglang_cpu): this "
            f"code path needs SGLang's compiled kernels; run SGLang with --device cpu "
            f"--attention-backend torch_native, or on a GPU with the real sglang-kernel"
        )

    def __getattr__(self, attr: str) -> Unavailable:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Unavailable(f"{self._name}.{attr}")

    def __getitem__(self, key: Any) -> Unavailable:  # e.g. a subscripted type alias
        return Unavailable(f"{self._name}[{key!r}]")

    def __repr__(self) -> str:
        return f"<sgl_kernel stand-in {self._name}>"


class _StandInModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Unavailable(f"{self.__name__}.{attr}")


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes every `sgl_kernel.<anything>` importable as another stand-in module."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


__path__: list[str] = []  # a package, so `import sgl_kernel.kvcacheio` asks the finder below
sys.modules[__name__].__class__ = _StandInModule
if not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _SubmoduleFinder())
