"""Which parts of an agent's diff the verifier refuses to apply (docs/security.md §4).

Grading applies the agent's diff to a clean checkout; a change that could decide the verdict without fixing
the code is dropped whole, file by file, and reported with the rule that caught it:

- `path outside the repository`: an absolute path, an empty path or a `..` component.
- `git metadata`: any component starting with `.git` (`.git/`, `.gitignore`, `.gitattributes`, `.github/`).
- `test file`: a `tests`, `test` or `testing` directory component, `test_*.py`, `*_test.py`, `conftest.py`.
- `hidden test`: a path the task's `test_patch` writes.
- `test configuration`: `pytest.ini`, `.pytest.ini`, `pytest.toml`, `.pytest.toml`, `tox.ini`, `setup.cfg`,
  `noxfile.py` and `pyproject.toml` (its `[tool.pytest.ini_options]` table can add `-p`/`--deselect`/plugins;
  we drop the whole file change rather than parse TOML out of a diff).
- `interpreter start-up hook`: `sitecustomize.py`, `usercustomize.py`, `*.pth` anywhere.
- `shadows the test runner`: any top-level module or package named like the runner or a module it imports
  (`pytest`, `_pytest`, `pluggy`, `py`, `iniconfig`, `conftest`, `attr`, `attrs`, `packaging`, ...), or a
  *new* top-level module (`x.py`, `x.so`, or `x/__init__.py`) named like a standard-library module, which
  the test process would import instead of the real one because the repository root is first on `sys.path`
  (a directory without `__init__.py` shadows nothing). A rename or copy counts as new for its target.
- `symbolic link` / `submodule`: a symlink can redirect a later write into a protected file, a gitlink
  points at code outside the diff; fixes need neither.
- `protected by the task`: a glob from `Task.protected_paths` (`fnmatch` on the repo-relative path; a
  pattern ending in `/` covers that directory's whole subtree).

Contract: `filter_patch` never edits a file's change, it keeps or drops it; the kept list, formatted, is the
exact text handed to `git apply`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import posixpath
import sys
from collections.abc import Iterable

from legorl_jax.tasks.patchset import FilePatch, parse_patch

TEST_DIRS = frozenset({"tests", "test", "testing"})
TEST_CONFIG_FILES = frozenset(
    {
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "noxfile.py",
        "pyproject.toml",
    }
)
STARTUP_HOOKS = frozenset({"sitecustomize.py", "usercustomize.py"})
# pytest and everything it imports (pytest 7.x: attrs, iniconfig, packaging, pluggy, exceptiongroup, tomli,
# pygments for reports, colorama on Windows, its `py` shim).
RUNNER_MODULES = frozenset(
    {
        "pytest",
        "_pytest",
        "pluggy",
        "py",
        "_py",
        "iniconfig",
        "conftest",
        "attr",
        "attrs",
        "packaging",
        "exceptiongroup",
        "tomli",
        "pygments",
        "colorama",
    }
)
# Names a repository root legitimately holds even though a stdlib module shares them.
_STDLIB_SHADOW_EXEMPT = frozenset({"setup", "this", "antigravity", "__future__", "__main__"})
_MODULE_SUFFIXES = frozenset({"py", "pyc", "so", "pyd"})


@dataclasses.dataclass(frozen=True)
class RemovedChange:
    """One file change the verifier dropped, and why."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class FilteredPatch:
    """The file changes that will be applied and those that were dropped."""

    kept: tuple[FilePatch, ...]
    removed: tuple[RemovedChange, ...]


def hidden_test_paths(test_patch: str) -> frozenset[str]:
    """Every path the hidden-test diff creates, modifies, deletes or renames."""
    return frozenset(p for fp in parse_patch(test_patch) for p in fp.paths)


def filter_patch(
    patches: Iterable[FilePatch], *, hidden_paths: Iterable[str] = (), protected_globs: Iterable[str] = ()
) -> FilteredPatch:
    """Splits `patches` into kept and removed, checking every path each change touches."""
    hidden = frozenset(hidden_paths)
    globs = tuple(protected_globs)
    kept: list[FilePatch] = []
    removed: list[RemovedChange] = []
    for patch in patches:
        reason = _why_protected(patch, hidden, globs)
        if reason is None:
            kept.append(patch)
        else:
            removed.append(RemovedChange(patch.path, reason))
    return FilteredPatch(tuple(kept), tuple(removed))


def _why_protected(patch: FilePatch, hidden: frozenset[str], globs: tuple[str, ...]) -> str | None:
    if patch.is_symlink:
        return "symbolic link"
    if patch.is_gitlink:
        return "submodule"
    for path in patch.paths:
        # A rename or copy creates its target as surely as a new file does, so it gets the new-file checks.
        creates = patch.is_new or (path == patch.new_path and patch.old_path != patch.new_path)
        reason = protected_reason(path, hidden=hidden, globs=globs, is_new=creates)
        if reason is not None:
            return reason
    return None


def protected_reason(
    path: str, *, hidden: frozenset[str] = frozenset(), globs: tuple[str, ...] = (), is_new: bool = False
) -> str | None:
    """Why `path` may not be changed by the agent, or None when it may."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in path:
        return "path outside the repository"
    name = parts[-1]
    if any(p.startswith(".git") for p in parts):
        return "git metadata"
    if path in hidden or any(h.startswith(path + "/") for h in hidden):
        return "hidden test"
    if any(p in TEST_DIRS for p in parts[:-1]) or name in TEST_DIRS:
        return "test file"
    if name == "conftest.py" or (
        name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
    ):
        return "test file"
    if name in TEST_CONFIG_FILES:
        return "test configuration"
    if name in STARTUP_HOOKS or name.endswith(".pth"):
        return "interpreter start-up hook"
    module = _top_level_module(parts)
    if module in RUNNER_MODULES or (
        is_new and module in sys.stdlib_module_names and module not in _STDLIB_SHADOW_EXEMPT
    ):
        return "shadows the test runner"
    for glob in globs:
        if _matches(path, glob):
            return "protected by the task"
    return None


def _top_level_module(parts: list[str]) -> str | None:
    """The module name a repo-root entry makes importable (a directory only with its `__init__.py`)."""
    if len(parts) == 1:
        stem, _, suffix = parts[0].partition(".")
        return stem if suffix.rsplit(".", 1)[-1] in _MODULE_SUFFIXES else None
    if parts[0] in RUNNER_MODULES or parts[1:] == ["__init__.py"]:
        return parts[0]
    return None


def _matches(path: str, glob: str) -> bool:
    if glob.endswith("/"):
        prefix = glob.rstrip("/")
        return path == prefix or path.startswith(prefix + "/") or fnmatch.fnmatchcase(path, glob + "*")
    return fnmatch.fnmatchcase(path, glob) or fnmatch.fnmatchcase(posixpath.basename(path), glob)
