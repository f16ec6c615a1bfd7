"""Writes tests/fixtures/swebench_logs/expected.json: swebench's own statuses for every log there, per parser.

    pip download --no-deps swebench==5.0.2 && unzip swebench-5.0.2-py3-none-any.whl -d /tmp/swebench-whl
    python tools/make_swebench_parser_fixtures.py /tmp/swebench-whl/swebench

The argument is swebench's package folder (an unpacked wheel, or an installed `site-packages/swebench`).
Only `harness/log_parsers/python.py` and the two small modules it imports are loaded: the package's own
`__init__` pulls in modal, datasets and docker, none of which a parser needs. The suite then checks our
parsers (legorl_jax/tasks/swebench_parsers.py) against this file without swebench installed, as
tools/make_hf_fixtures.py does for Hugging Face.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import re
import sys
import types

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "swebench_logs"
PARSERS = (
    "parse_log_pytest",
    "parse_log_pytest_options",
    "parse_log_pytest_v2",
    "parse_log_django",
    "parse_log_seaborn",
    "parse_log_sympy",
    "parse_log_matplotlib",
)


def load_python_parsers(package: pathlib.Path) -> types.ModuleType:
    """swebench's `harness.log_parsers.python`, its parent packages stood in for by bare namespaces."""
    if not (package / "harness" / "log_parsers" / "python.py").is_file():
        raise SystemExit(f"{package} is not swebench's package folder (no harness/log_parsers/python.py)")
    for name, sub in (
        ("swebench", ""),
        ("swebench.harness", "harness"),
        ("swebench.harness.log_parsers", "harness/log_parsers"),
    ):
        module = types.ModuleType(name)
        module.__path__ = [str(package / sub)]
        sys.modules[name] = module
    return importlib.import_module("swebench.harness.log_parsers.python")


def swebench_version(package: pathlib.Path) -> str:
    m = re.search(r'__version__\s*=\s*"([^"]+)"', (package / "__init__.py").read_text())
    if m is None:
        raise SystemExit(f"{package}/__init__.py states no __version__")
    return m.group(1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("package", type=pathlib.Path, help="swebench's package folder")
    args = p.parse_args(argv)
    module = load_python_parsers(args.package)
    logs = sorted(FIXTURES.glob("*.log"))
    statuses = {
        log.name: {name: getattr(module, name)(log.read_text(encoding="utf-8"), None) for name in PARSERS}
        for log in logs
    }
    repos = {repo: fn.__name__ for repo, fn in sorted(module.MAP_REPO_TO_PARSER_PY.items())}
    out = {"swebench": swebench_version(args.package), "repo_parsers": repos, "statuses": statuses}
    target = FIXTURES / "expected.json"
    target.write_text(json.dumps(out, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{target}: {len(logs)} logs x {len(PARSERS)} parsers, swebench {out['swebench']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
