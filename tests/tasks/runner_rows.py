"""SWE-bench-style rows whose runners have the shapes of SWE-bench's non-pytest repositories, for the tests:
a Django-shaped row (`tests/runtests.py --verbosity 2 ...`: unittest's verbose runner, every status line on
stderr, read by `parse_log_django`) and a sympy-shaped row (`bin/test -C --verbose <files>`: `test_x ok` /
`test_x F` lines, failure headers and `tests finished: ...`, read by `parse_log_sympy`). Each is a local
image built FROM the sandbox base image (no registry), holding the same tiny `calc` package as
`swebench_fixture`: `add` subtracts, the hidden tests add `test_add`, `test_sub` passes throughout."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from legorl_jax.sandbox import images
from legorl_jax.tasks.snapshot import COMMIT_ENV, snapshot_commit

CALC = {
    "calc/__init__.py": "from calc.ops import add, sub\n",
    "calc/ops.py": "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n",
}
GOLD = (
    "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,5 +1,5 @@\n"
    " def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def sub(a, b):\n"
)

DJANGO_RUNTESTS = '''\
#!/usr/bin/env python3
"""Runs test modules as Django's tests/runtests.py does: unittest's TextTestRunner, which writes to stderr."""
import argparse
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.dirname(here)]
parser = argparse.ArgumentParser()
parser.add_argument("--verbosity", type=int, default=1)
parser.add_argument("--settings")
parser.add_argument("--parallel")
parser.add_argument("labels", nargs="*")
args = parser.parse_args()
suite = unittest.defaultTestLoader.loadTestsFromNames(args.labels)
result = unittest.TextTestRunner(verbosity=args.verbosity).run(suite)
sys.exit(not result.wasSuccessful())
'''
DJANGO_BASE = '''\
import unittest


class TestCase(unittest.TestCase):
    """Names tests as Django's test ids read (`test_x (module.Class)`, Python < 3.11's unittest)."""

    def __str__(self):
        return "%s (%s.%s)" % (self._testMethodName, type(self).__module__, type(self).__qualname__)
'''
DJANGO_REPO = {
    **CALC,
    "tests/runtests.py": DJANGO_RUNTESTS,
    "tests/calc_tests/__init__.py": "",
    "tests/calc_tests/base.py": DJANGO_BASE,
    "tests/calc_tests/test_sub.py": (
        "from calc import sub\n\nfrom calc_tests.base import TestCase\n\n\nclass SubTests(TestCase):\n"
        "    def test_sub(self):\n        self.assertEqual(sub(5, 3), 2)\n"
    ),
}
DJANGO_TEST_ADD = (
    "from calc import add\n\nfrom calc_tests.base import TestCase\n\n\nclass AddTests(TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)

SYMPY_BIN_TEST = '''\
#!/usr/bin/env python3
"""Runs the test functions of the named files and prints what sympy's `bin/test --verbose` prints."""
import importlib.util
import os
import sys
import time
import traceback

sys.path.insert(0, os.getcwd())
files = [a for a in sys.argv[1:] if a.endswith(".py")]
passed, failed, errors, failures = 0, 0, 0, []
started = time.time()
print("=" * 29 + " test process starts " + "=" * 30)
for path in files:
    spec = importlib.util.spec_from_file_location(path[:-3].replace("/", "."), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = sorted(n for n in vars(module) if n.startswith("test_"))
    print("%s[%d]" % (path, len(names)))
    for name in names:
        try:
            getattr(module, name)()
        except AssertionError:
            print("%s F" % name)
            failed += 1
            failures.append((path, name, traceback.format_exc()))
        except Exception:
            print("%s E" % name)
            errors += 1
            failures.append((path, name, traceback.format_exc()))
        else:
            print("%s ok" % name)
            passed += 1
for path, name, trace in failures:
    print("%s %s:%s %s" % ("_" * 20, path, name, "_" * 20))
    print(trace)
counts = "%d passed" % passed + (", %d failed" % failed if failed else "") + (
    ", %d exceptions" % errors if errors else ""
)
print("=" * 10 + " tests finished: %s, in %.2f seconds " % (counts, time.time() - started) + "=" * 10)
sys.exit(1 if failed or errors else 0)
'''
SYMPY_REPO = {
    **CALC,
    "bin/test": SYMPY_BIN_TEST,
    "calc/tests/__init__.py": "",
    "calc/tests/test_sub.py": "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n",
}
SYMPY_TEST_ADD = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"

_ENV = " ".join(f"{k}='{v}'" for k, v in COMMIT_ENV.items())
DOCKERFILE = f"""\
FROM {{base}}
USER root
COPY repo/ /testbed/
RUN cd /testbed && export {_ENV} && git init -q -b main && git add -A && git commit -q -m base \\
 && chown -R agent:agent /testbed
USER agent
"""
EXECUTABLE = ("tests/runtests.py", "bin/test")


def _new_file_diff(path: str, text: str) -> str:
    lines = text.splitlines()
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)
    )


SHAPES = {
    "django": {
        "repo": DJANGO_REPO,
        "name": "legorl-test-swebench-calc-django",
        "test_patch": _new_file_diff("tests/calc_tests/test_add.py", DJANGO_TEST_ADD),
        "FAIL_TO_PASS": ["test_add (calc_tests.test_add.AddTests)"],
        "PASS_TO_PASS": ["test_sub (calc_tests.test_sub.SubTests)"],
        "log_parser": "parse_log_django",
        "test_cmd": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 "
        "calc_tests.test_add calc_tests.test_sub",
    },
    "sympy": {
        "repo": SYMPY_REPO,
        "name": "legorl-test-swebench-calc-sympy",
        "test_patch": _new_file_diff("calc/tests/test_add.py", SYMPY_TEST_ADD),
        "FAIL_TO_PASS": ["test_add"],
        "PASS_TO_PASS": ["test_sub"],
        "log_parser": "parse_log_sympy",
        "test_cmd": "PYTHONWARNINGS='ignore::UnicodeWarning' bin/test -C --verbose "
        "calc/tests/test_add.py calc/tests/test_sub.py",
    },
}


def build_runner_image(shape: str) -> tuple[str, str]:
    """(image tag, base commit sha) of the `shape` row's local image (built once, cached by content)."""
    spec = SHAPES[shape]
    base = images.ensure_base_image()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        for rel, text in spec["repo"].items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
            (repo / rel).chmod(0o755 if rel in EXECUTABLE else 0o644)
        tag = images.ensure_image(Path(tmp), DOCKERFILE.format(base=base), spec["name"])
        return tag, snapshot_commit(repo)


def write_runner_jsonl(path: Path, shape: str, image: str, base_commit: str) -> Path:
    """The `shape` row as a one-line JSONL file at `path`."""
    spec = SHAPES[shape]
    row = {
        "instance_id": f"legorl__calc-{shape}-1",
        "repo": f"legorl/calc-{shape}",
        "base_commit": base_commit,
        "problem_statement": "add(2, 3) returns -1",
        "patch": GOLD,
        "test_patch": spec["test_patch"],
        "FAIL_TO_PASS": json.dumps(spec["FAIL_TO_PASS"]),
        "PASS_TO_PASS": json.dumps(spec["PASS_TO_PASS"]),
        "version": "1.0",
        "image": image,
        "log_parser": spec["log_parser"],
        "test_cmd": spec["test_cmd"],
        "timeouts": {"verify_s": 120},
    }
    path.write_text(json.dumps(row) + "\n")
    return path
