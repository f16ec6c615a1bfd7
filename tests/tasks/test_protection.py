"""The verifier drops, whole and reported, every change that could decide the verdict without fixing code."""

from __future__ import annotations

import pytest

from legorl_jax.tasks.patchset import FilePatch, parse_patch
from legorl_jax.tasks.protection import filter_patch, hidden_test_paths, protected_reason


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("tests/test_x.py", "test file"),
        ("pkg/tests/helpers.py", "test file"),
        ("testing/fixtures.py", "test file"),
        ("pkg/test_thing.py", "test file"),
        ("pkg/thing_test.py", "test file"),
        ("conftest.py", "test file"),
        ("src/pkg/conftest.py", "test file"),
        ("pytest.ini", "test configuration"),
        (".pytest.ini", "test configuration"),
        ("tox.ini", "test configuration"),
        ("setup.cfg", "test configuration"),
        ("pyproject.toml", "test configuration"),
        ("sub/pyproject.toml", "test configuration"),
        ("sitecustomize.py", "interpreter start-up hook"),
        ("pkg/usercustomize.py", "interpreter start-up hook"),
        ("evil.pth", "interpreter start-up hook"),
        (".git/config", "git metadata"),
        (".gitattributes", "git metadata"),
        (".github/workflows/ci.yml", "git metadata"),
        ("pytest.py", "shadows the test runner"),
        ("_pytest/main.py", "shadows the test runner"),
        ("pluggy/__init__.py", "shadows the test runner"),
        ("../outside.py", "path outside the repository"),
        ("/etc/passwd", "path outside the repository"),
        ("a/./b.py", "path outside the repository"),
    ],
)
def test_protected_paths_are_named_with_their_rule(path, reason):
    assert protected_reason(path) == reason


@pytest.mark.parametrize(
    "path",
    [
        "pkg/core.py",
        "README.md",
        "pkg/testimony.py",
        "docs/tests.md.txt",
        "setup.py",
        "pkg/json.py",
        "contest.py",
    ],
)
def test_ordinary_source_files_are_not_protected(path):
    assert protected_reason(path) is None


def test_a_new_top_level_module_named_like_the_stdlib_is_dropped_but_an_edit_of_an_existing_one_is_not():
    assert protected_reason("json.py", is_new=True) == "shadows the test runner"
    assert protected_reason("collections/__init__.py", is_new=True) == "shadows the test runner"
    assert protected_reason("json.py", is_new=False) is None
    assert protected_reason("pkg/json.py", is_new=True) is None


def test_hidden_test_paths_and_their_parent_directories_are_protected():
    hidden = frozenset({"checks/issue_check.py"})
    assert protected_reason("checks/issue_check.py", hidden=hidden) == "hidden test"
    assert protected_reason("checks", hidden=hidden) == "hidden test"
    assert protected_reason("checks/other.py", hidden=hidden) is None


def test_task_globs_protect_files_and_directory_subtrees():
    globs = ("data/golden/", "*.snap")
    assert protected_reason("data/golden/out.json", globs=globs) == "protected by the task"
    assert protected_reason("pkg/view.snap", globs=globs) == "protected by the task"
    assert protected_reason("data/other.json", globs=globs) is None


def test_symlinks_and_submodules_are_dropped_even_at_harmless_paths():
    link = FilePatch(None, "pkg/link", "diff --git a/pkg/link b/pkg/link\n", new_mode="120000")
    gitlink = FilePatch(None, "vendor/lib", "diff --git a/vendor/lib b/vendor/lib\n", new_mode="160000")
    result = filter_patch([link, gitlink])
    assert result.kept == ()
    assert [(c.path, c.reason) for c in result.removed] == [
        ("pkg/link", "symbolic link"),
        ("vendor/lib", "submodule"),
    ]


def test_a_rename_out_of_a_protected_path_is_dropped():
    diff = (
        "diff --git a/tests/test_x.py b/pkg/x.py\nsimilarity index 100%\n"
        "rename from tests/test_x.py\nrename to pkg/x.py\n"
    )
    result = filter_patch(parse_patch(diff))
    assert result.kept == () and result.removed[0].reason == "test file"


def test_filtering_keeps_source_changes_in_order_and_reports_each_drop():
    diff = "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
        for p in ("pkg/a.py", "tests/test_a.py", "pkg/b.py", "conftest.py")
    )
    result = filter_patch(parse_patch(diff))
    assert [p.path for p in result.kept] == ["pkg/a.py", "pkg/b.py"]
    assert [c.to_dict() for c in result.removed] == [
        {"path": "tests/test_a.py", "reason": "test file"},
        {"path": "conftest.py", "reason": "test file"},
    ]


def test_hidden_test_paths_lists_every_path_a_test_patch_writes():
    diff = (
        "diff --git a/checks/t.py b/checks/t.py\nnew file mode 100644\n--- /dev/null\n+++ b/checks/t.py\n"
        "@@ -0,0 +1 @@\n+x\n"
    )
    assert hidden_test_paths(diff) == frozenset({"checks/t.py"})


def test_a_rename_into_a_stdlib_named_top_level_module_is_dropped_like_a_new_one():
    diff = (
        "diff --git a/pkg/helpers.py b/json.py\nsimilarity index 100%\n"
        "rename from pkg/helpers.py\nrename to json.py\n"
    )
    result = filter_patch(parse_patch(diff))
    assert result.kept == () and result.removed[0].reason == "shadows the test runner"


@pytest.mark.parametrize("name", ["attr", "attrs", "packaging", "exceptiongroup", "tomli", "pygments"])
def test_modules_pytest_imports_are_runner_modules_whether_new_or_edited(name):
    assert protected_reason(f"{name}.py") == "shadows the test runner"
    assert protected_reason(f"{name}/__init__.py") == "shadows the test runner"
