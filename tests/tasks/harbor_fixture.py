"""A tiny but complete Harbor task directory, written for the tests (FROM the sandbox base image)."""

from __future__ import annotations

import os
from pathlib import Path

TASK_TOML = """\
schema_version = "1.4"

[task]
name = "legorl/harbor-add"
description = "add() subtracts"

[metadata]
difficulty = "easy"
category = "numerics"
tags = ["tiny"]

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 300.0

[environment]
build_timeout_sec = 600.0
"""

DOCKERFILE = """\
FROM {base}
USER root
COPY repo/ /app/
RUN cd /app && git init -q && git add -A \\
 && git -c user.name=h -c user.email=h@h commit -qm base \\
 && git -c user.name=h -c user.email=h@h tag v1 \\
 && mkdir -p /logs && chown -R agent:agent /app /logs
WORKDIR /app
"""

TEST_SH = """\
#!/bin/bash
cd /app
if python3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""

TEST_OUTPUTS = """\
import sys

sys.path.insert(0, "/app")

from calc import add


def test_add():
    assert add(2, 3) == 5
"""

SOLVE_SH = "#!/bin/bash\nsed -i 's/a - b/a + b/' /app/calc.py\n"
GOLD_DIFF = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
    "-    return a - b\n+    return a + b\n"
)


def write_harbor_task(
    root: Path, base_image: str = "legorl-base:latest", *, task_toml: str = TASK_TOML
) -> Path:
    """Writes the task under `root` (created) and returns it."""
    files = {
        "task.toml": task_toml,
        "instruction.md": "add(2, 3) returns -1; it should return 5.\n",
        "environment/Dockerfile": DOCKERFILE.format(base=base_image),
        "environment/repo/calc.py": "def add(a, b):\n    return a - b\n",
        "tests/test.sh": TEST_SH,
        "tests/test_outputs.py": TEST_OUTPUTS,
        "tests/config.json": '{"FAIL_TO_PASS": ["test_outputs.py::test_add"], "PASS_TO_PASS": []}',
        "solution/solve.sh": SOLVE_SH,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for rel in ("tests/test.sh", "solution/solve.sh"):
        os.chmod(root / rel, 0o755)
    return root
