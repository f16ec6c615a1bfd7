"""A SWE-bench-style task for the tests: a local image whose repository history still holds the fix (a later
commit, a branch, a tag, a stash, a remote, packed refs and reflog entries), and its JSONL row."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from legorl_jax.sandbox import images
from legorl_jax.tasks.snapshot import COMMIT_ENV, snapshot_commit

REPO = {
    "calc/__init__.py": "from calc.ops import add, sub\n",
    "calc/ops.py": "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n",
    "tests/test_sub.py": "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n",
}
GOLD = (
    "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,5 +1,5 @@\n"
    " def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def sub(a, b):\n"
)
TEST_PATCH = (
    "diff --git a/tests/test_add.py b/tests/test_add.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tests/test_add.py\n@@ -0,0 +1,5 @@\n+from calc import add\n+\n+\n+def test_add():\n"
    "+    assert add(2, 3) == 5\n"
)
FIX_MESSAGE = "fix: add() adds (the gold patch, reachable only through history)"
_ENV = " ".join(f"{k}='{v}'" for k, v in COMMIT_ENV.items())
DOCKERFILE = f"""\
FROM {{base}}
USER root
COPY repo/ /testbed/
COPY fixed_ops.py /tmp/fixed_ops.py
RUN cd /testbed && export {_ENV} \\
 && git init -q -b main && git add -A && git commit -q -m base && git tag v1.0 \\
 && cp /tmp/fixed_ops.py calc/ops.py && rm /tmp/fixed_ops.py \\
 && git commit -q -am "{FIX_MESSAGE}" && git tag v1.1 && git branch fix-branch \\
 && git reset -q --hard HEAD~1 \\
 && echo '# work in progress' >> calc/ops.py && git stash -q \\
 && git remote add origin https://example.invalid/calc.git && git pack-refs --all \\
 && chown -R agent:agent /testbed
USER agent
"""


def build_swebench_image() -> tuple[str, str]:
    """(image tag, base commit sha) of the local SWE-bench-style image (built once, cached by content)."""
    base = images.ensure_base_image()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        for rel, text in REPO.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        (Path(tmp) / "fixed_ops.py").write_text(REPO["calc/ops.py"].replace("a - b", "a + b", 1))
        tag = images.ensure_image(Path(tmp), DOCKERFILE.format(base=base), "legorl-test-swebench-calc")
        return tag, snapshot_commit(repo)


def write_jsonl(path: Path, image: str, base_commit: str, **changes) -> Path:
    row = {
        "instance_id": "legorl__calc-1",
        "repo": "legorl/calc",
        "base_commit": base_commit,
        "problem_statement": "add(2, 3) returns -1",
        "patch": GOLD,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": json.dumps(["tests/test_add.py::test_add"]),
        "PASS_TO_PASS": json.dumps(["tests/test_sub.py::test_sub"]),
        "version": "1.0",
        "image": image,
        "log_parser": "pytest",
        "test_cmd": "python3 -m pytest -rA -p no:cacheprovider tests/test_add.py tests/test_sub.py",
        "timeouts": {"verify_s": 120},
    }
    row.update(changes)
    path.write_text(json.dumps(row) + "\n")
    return path
