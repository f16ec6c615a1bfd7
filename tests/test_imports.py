"""The package's import graph has no cycle and every arrow points down the layer order below.

The graph is read from the source with `ast` (every `import` in a module, at the top or inside a function,
but not those under `if TYPE_CHECKING:`, which never run): a lazy import closes a cycle as surely as one at
the top, only later. `kernels/` is installed as `legorl_jax.kernels` (setup.py) and is read as that.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parents[1]

# Lowest first. A module may import modules of a lower layer, and modules of its own top-level part
# (legorl_jax.<part>); never a sibling part of its own layer, never a higher layer.
LAYERS: list[list[str]] = [
    ["legorl_jax", "legorl_jax.validate", "legorl_jax.harness.names"],
    ["legorl_jax.versions", "legorl_jax.config"],
    ["legorl_jax.types"],
    ["legorl_jax.kernels"],
    ["legorl_jax.model"],
    ["legorl_jax.engine", "legorl_jax.sandbox", "legorl_jax.monitor"],
    ["legorl_jax.tasks", "legorl_jax.harness"],
    ["legorl_jax.proxy", "legorl_jax.train", "legorl_jax.teacher"],
    ["legorl_jax.rollout"],
    ["legorl_jax.warm_start", "legorl_jax.loop_step", "legorl_jax.run_folder"],
    ["legorl_jax.loop", "legorl_jax.async_loop"],
    ["legorl_jax.run"],
]


def package_modules(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """Module name -> file, for legorl_jax/ and kernels/ (as legorl_jax.kernels); vendored code left out."""
    found: dict[str, pathlib.Path] = {}
    for top, prefix in ((root / "legorl_jax", "legorl_jax"), (root / "kernels", "legorl_jax.kernels")):
        for path in sorted(top.rglob("*.py")):
            parts = list(path.relative_to(top).with_suffix("").parts)
            if "vendor" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                inside.update(id(n) for n in ast.walk(statement))
    return inside


def import_graph(modules: dict[str, pathlib.Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module of the package: line of the first such import}."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_nodes(tree)
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, the longest LAYERS entry `module` falls under)."""
    best: tuple[int, str] | None = None
    for i, entries in enumerate(LAYERS):
        for entry in entries:
            # the package itself (its __init__) is an entry for itself alone
            under = module == entry or (entry != "legorl_jax" and module.startswith(entry + "."))
            if under and (best is None or len(entry) > len(best[1])):
                best = (i, entry)
    if best is None:
        raise ValueError(f"module {module!r} is in no layer of tests/test_imports.py LAYERS: add it")
    return best


def upward_arrows(graph: dict[str, dict[str, int]]) -> list[str]:
    """Each import that goes up the layers or across to a sibling part of the same layer."""
    bad = []
    for source, edges in sorted(graph.items()):
        (layer, entry) = layer_of(source)
        for target, line in sorted(edges.items()):
            (target_layer, target_entry) = layer_of(target)
            same_part = (
                target_entry == entry
                or target.startswith(entry + ".")
                or source.startswith(target_entry + ".")
            )
            if target_layer > layer or (target_layer == layer and not same_part):
                bad.append(f"{source}:{line} imports {target} (layer {layer} -> {target_layer})")
    return bad


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph(package_modules())


def test_the_package_has_no_import_cycle(graph):
    assert cycles(graph) == []


def test_every_import_points_down_the_layer_order(graph):
    assert upward_arrows(graph) == []


def test_the_check_finds_a_cycle_and_an_upward_arrow_when_one_is_added(tmp_path):
    package = tmp_path / "legorl_jax"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "config.py").write_text("def f():\n    from legorl_jax.run import train\n")
    (package / "run.py").write_text("from legorl_jax.config import f\n")
    built = import_graph(package_modules(tmp_path))
    assert cycles(built) == [["legorl_jax.config", "legorl_jax.run"]]
    assert upward_arrows(built) == ["legorl_jax.config:2 imports legorl_jax.run (layer 1 -> 11)"]


def test_a_module_outside_every_layer_is_named():
    with pytest.raises(ValueError, match="'legorl_jax.newpart' is in no layer"):
        layer_of("legorl_jax.newpart")


# Underscore names another module of the package may import, each with its reason. Empty: none is needed.
PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}


def _module_aliases(tree: ast.AST, modules: dict[str, pathlib.Path]) -> dict[str, str]:
    """Local name -> package module, for `import a.b as c` and `from a import b` where a.b is a module."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def private_imports(modules: dict[str, pathlib.Path]) -> list[str]:
    """Each underscore name (not a dunder) one module of the package takes from another: imported by name
    (`from m import _x`) or read off an imported module (`m._x`)."""
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases = _module_aliases(tree, modules)
        for node in ast.walk(tree):
            taken: list[tuple[str, str]] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("legorl_jax"):
                taken = [(node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in aliases:
                    taken = [(aliases[node.value.id], node.attr)]
            for source, attr in taken:
                private = attr.startswith("_") and not attr.startswith("__")
                if private and source != name and (source, attr) not in PRIVATE_IMPORTS_ALLOWED:
                    found.append(f"{name}:{node.lineno} takes {source}.{attr}")
    return sorted(found)


def test_no_module_imports_a_private_name_of_another():
    assert private_imports(package_modules()) == []


def test_the_check_finds_a_private_name_imported_or_read_off_a_module(tmp_path):
    package = tmp_path / "legorl_jax"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def _x():\n    pass\n")
    (package / "b.py").write_text("from legorl_jax.a import _x\n")
    (package / "c.py").write_text("from legorl_jax import a\n\na._x()\n")
    assert private_imports(package_modules(tmp_path)) == [
        "legorl_jax.b:1 takes legorl_jax.a._x",
        "legorl_jax.c:3 takes legorl_jax.a._x",
    ]
