"""Writes legorl_jax/tasks/swebench_specs.json from an unpacked swebench 4.1.0 wheel (run once; offline).

swebench 5.x no longer ships the per-repository test commands (`MAP_REPO_VERSION_TO_SPECS`): its rows carry
their own `eval_script` and `log_parser`. Rows made for 4.x (most published SWE-bench exports) carry
neither, so the project keeps 4.1.0's table: for every repository and version the `test_cmd`, and for every
repository the name of its log parser (`MAP_REPO_TO_PARSER`). Only these two facts are taken.

    pip download --no-deps swebench==4.1.0 && unzip swebench-4.1.0-py3-none-any.whl -d sweb4
    python tools/make_swebench_specs.py sweb4
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import types
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "legorl_jax" / "tasks" / "swebench_specs.json"


class _Placeholder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stands in for the harness's third-party imports (datasets, docker, ...), which the two tables never
    use."""

    NAMES = frozenset(
        {
            "datasets",
            "dotenv",
            "ghapi",
            "git",
            "bs4",
            "unidiff",
            "modal",
            "tenacity",
            "requests",
            "typer",
            "docker",
            "tqdm",
        }
    )

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in self.NAMES:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attr: type(attr, (), {})
        return module

    def exec_module(self, module):
        pass


def main(unpacked: str) -> None:
    root = Path(unpacked).resolve()
    # The package __init__ files import the whole harness (docker, datasets, ...): load the two data modules
    # through bare package objects instead.
    for name in ("swebench", "swebench.harness"):
        module = types.ModuleType(name)
        module.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = module
    sys.path.insert(0, str(root))
    sys.meta_path.insert(0, _Placeholder())
    constants = importlib.import_module("swebench.harness.constants")
    parsers = importlib.import_module("swebench.harness.log_parsers")
    version = (
        (root / "swebench" / "__init__.py").read_text().split("__version__ = ")[1].split("\n")[0].strip("\"'")
    )
    if version != "4.1.0":
        raise SystemExit(f"expected swebench 4.1.0, found {version!r} in {root}")
    test_cmds = {
        repo: {str(v): spec["test_cmd"] for v, spec in sorted(versions.items()) if "test_cmd" in spec}
        for repo, versions in sorted(constants.MAP_REPO_VERSION_TO_SPECS.items())
    }
    parser_names = {repo: fn.__name__ for repo, fn in sorted(parsers.MAP_REPO_TO_PARSER.items())}
    OUT.write_text(
        json.dumps(
            {
                "source": "swebench 4.1.0: "
                "harness.constants.MAP_REPO_VERSION_TO_SPECS[repo][version]['test_cmd'] and "
                "harness.log_parsers.MAP_REPO_TO_PARSER[repo].__name__",
                "test_cmd": test_cmds,
                "log_parser": parser_names,
            },
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    print(f"wrote {OUT}: {len(test_cmds)} repositories, {len(parser_names)} parsers")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} <unpacked swebench-4.1.0 wheel>")
    main(sys.argv[1])
