"""No import circle in ``caffe_lstm/``: the module import graph, built from every import
statement (those inside functions included, which import-linter's layers would not see as a
circle), has no cycle.

An import names the module it loads: ``from caffe_lstm.ops import get_op`` is an edge to the
package ``caffe_lstm.ops``, ``from caffe_lstm.ops import linear`` one to the submodule
``caffe_lstm.ops.linear``. The parent packages Python runs on the way are not edges (else
every package importing its own submodules would be a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path
from tests.helpers import pyproject

PACKAGE = Path(__file__).resolve().parents[1] / "caffe_lstm"

def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under ``package`` (a package is its
    ``__init__.py``)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(statement: ast.Import | ast.ImportFrom, module: str, path: Path,
             known: dict[str, Path]) -> set[str]:
    """The modules of the package that ``statement`` (in ``module``) loads by name."""
    if isinstance(statement, ast.Import):
        names = [alias.name for alias in statement.names]
    else:
        base = statement.module or ""
        if statement.level:  # relative: from the package holding ``module``
            anchor = module.split(".")
            anchor = anchor if path.name == "__init__.py" else anchor[:-1]
            anchor = anchor[:len(anchor) - statement.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                 for alias in statement.names]
    found = set()
    for name in names:
        while name and name not in known:  # ``import a.b.c`` of a name inside a module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def deferred(tree: ast.Module, module: str, known: dict[str, Path]) -> set[str]:
    """The submodules a package imports by name on first use: the cli package's ``COMMANDS``
    tuple (each ``caffe_lstm.cli.<name>``, loaded through ``importlib`` when the command runs)."""
    found = set()
    for statement in tree.body:
        if (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Tuple)
                and any(isinstance(target, ast.Name) and target.id == "COMMANDS"
                        for target in statement.targets)):
            found |= {f"{module}.{item.value}" for item in statement.value.elts
                      if isinstance(item, ast.Constant) and f"{module}.{item.value}" in known}
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports, from every import statement in its file and
    the commands it defers (``deferred``)."""
    known = modules(package)
    graph = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges: set[str] = deferred(tree, module, known)
        for statement in ast.walk(tree):
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                edges |= imported(statement, module, path, known)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _listing(found: list[frozenset[str]]) -> str:
    return "; ".join(" <-> ".join(sorted(cycle)) for cycle in found)


def test_no_import_cycle_in_the_package():
    found = cycles(import_graph(PACKAGE))
    assert not found, f"import circles: {_listing(found)}"


def test_a_lazy_import_circle_is_found(tmp_path):
    """Not vacuous: a circle closed by an import inside a function is reported, and a package
    importing its submodules (which import the package's sibling) is not a circle."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg import a\n")
    (package / "a.py").write_text("from pkg.b import g\n")
    (package / "b.py").write_text("def g():\n    from pkg import a\n    return a\n")
    (package / "sub" / "__init__.py").write_text("from . import c\n")
    (package / "sub" / "c.py").write_text("from ..b import g\nimport pkg.sub.d\n")
    (package / "sub" / "d.py").write_text("X = 1\n")
    graph = import_graph(package)
    assert graph["pkg.sub"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.b", "pkg.sub.d"}
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b"})]


def test_the_tensorrt_walker_and_the_cli_group_are_no_circle():
    """The two circles cut in issue 16: the TensorRT context that imported the emitter lazily,
    and the command modules that imported the ``cli`` package which imports them."""
    graph = import_graph(PACKAGE)
    assert "caffe_lstm.backends.tensorrt.emitter" not in graph[
        "caffe_lstm.backends.tensorrt.context"]
    assert not any("caffe_lstm.cli" in graph[module] for module in graph
                   if module.startswith("caffe_lstm.cli."))


def test_the_deferred_commands_are_edges():
    """The cli package imports its command modules by name when a command runs; the graph
    still has those edges, so a command module importing the cli package back is a circle."""
    from caffe_lstm.cli import COMMANDS

    graph = import_graph(PACKAGE)
    assert {f"caffe_lstm.cli.{name}" for name in COMMANDS} <= graph["caffe_lstm.cli"]


# ---- every top-level module is in a layer of [tool.importlinter] -----------------------------


def _layered_modules() -> set[str]:

    contracts = pyproject()["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    return {name.strip().strip("()") for layer in layers for name in layer.split("|")}


def test_every_top_level_module_is_in_a_layer():
    """The layers contract places every module and package of ``caffe_lstm`` (but ``proto``,
    the generated protobuf code that only the frontend may import (its own contract), and
    ``__main__``, which runs the cli), so an upward import from any of them is refused."""
    top_level = {f"caffe_lstm.{path.stem}" for path in PACKAGE.glob("*.py")}
    top_level |= {f"caffe_lstm.{path.parent.name}" for path in PACKAGE.glob("*/__init__.py")}
    unplaced = top_level - _layered_modules() - {
        "caffe_lstm.__init__", "caffe_lstm.__main__", "caffe_lstm.proto"}
    assert not unplaced, f"in no layer of pyproject.toml: {sorted(unplaced)}"
