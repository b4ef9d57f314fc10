"""The package's import graph: no module imports itself back through others, and every layer
imports only the layers below it (protocol <- engine, client <- service, kernel <- server); the
lab extension's rooms likewise (protocol <- render <- panel, notebook, inline, edit).

The graph is read from the source (``ast``), with every import, at the top of a module or in a
function, but those under ``if TYPE_CHECKING:`` (for the type checker only, never run).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lmsp_jupyter"
#: The lab extension's sources: a room per folder, the plugin's wiring (index.ts, widget.ts,
#: translation.ts) beside them.
LAB = Path(__file__).resolve().parents[1] / "labextension" / "src"

#: Which top-level parts each part may import (besides itself and the package's own root
#: modules: its version).
LAYERS = {
    "protocol": set(),
    "engine": {"protocol"},
    "client": {"protocol"},
    "service": {"protocol", "engine"},
    "kernel": {"protocol", "client"},
    "server": {"protocol", "engine", "client", "service"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    node: ast.AST, module: str, is_package: bool, modules: Collection[str]
) -> Iterator[str]:
    """The modules ``node`` imports, skipping ``if TYPE_CHECKING:`` blocks; ``modules`` are the
    package's, to tell a module imported from its package from a name imported from a module."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child.test):
            for part in child.orelse:
                yield from _imports(part, module, is_package, modules)
            continue
        if isinstance(child, ast.Import):
            yield from (alias.name for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = module.split(".")
                base = base[: len(base) - child.level + (1 if is_package else 0)]
                source = ".".join(base + ([child.module] if child.module else []))
            else:
                source = child.module or ""
            for alias in child.names:  # a module named is imported; else a name of ``source``
                yield f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
        yield from _imports(child, module, is_package, modules)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), str(path))
        found = _imports(tree, name, path.name == "__init__.py", paths)
        graph[name] = {target for target in found if target in paths and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back() -> None:
    graph = import_graph()
    assert len(graph) > 100
    assert cycles(graph) == []


def test_each_layer_imports_only_the_layers_below() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if module.count(".") >= 1
        and target.count(".") >= 1
        and (part := module.split(".")[1]) in LAYERS
        and (other := target.split(".")[1]) in LAYERS
        and other != part
        and other not in LAYERS[part]
    )
    assert upward == []


def test_the_graph_sees_imports_in_functions_but_not_for_the_type_checker() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .b import B\n"
        "def f():\n    from .c import C\n"
    )
    modules = {"lmsp_jupyter.x.b", "lmsp_jupyter.x.c"}
    found = set(_imports(ast.parse(source), "lmsp_jupyter.x.a", False, modules))
    assert "lmsp_jupyter.x.c" in found
    assert "lmsp_jupyter.x.b" not in found
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


#: Which rooms of the lab extension each room may import (besides itself and the top-level
#: modules: translation.ts).
LAB_ROOMS = {
    "protocol": set(),
    "render": {"protocol"},
    "panel": {"protocol", "render"},
    "notebook": {"protocol", "render"},
    "inline": {"protocol"},
    "edit": {"protocol", "inline"},
}

_TS_IMPORT = re.compile(r"""from\s+'(\.[^']*)'""")


def lab_imports() -> dict[str, set[str]]:
    """Each lab extension module (``render/view``) and the modules of it that it imports."""
    graph: dict[str, set[str]] = {}
    for path in LAB.rglob("*.ts"):
        name = path.relative_to(LAB).with_suffix("").as_posix()
        targets = set()
        for spec in _TS_IMPORT.findall(path.read_text()):
            target = (path.parent / spec).resolve()
            if target.with_suffix(".ts").exists():
                targets.add(target.with_suffix("").relative_to(LAB).as_posix())
            elif (target / "index.ts").exists():
                targets.add((target / "index").relative_to(LAB).as_posix())
        graph[name] = targets
    return graph


def test_each_room_of_the_lab_extension_imports_only_the_rooms_below() -> None:
    graph = lab_imports()
    assert set(LAB_ROOMS) <= {name.split("/")[0] for name in graph if "/" in name}
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if "/" in module
        and "/" in target
        and (room := module.split("/")[0]) != (other := target.split("/")[0])
        and other not in LAB_ROOMS[room]
    )
    assert upward == []
    # The protocol's types come from protocol/types, never through the rendering's barrel.
    assert "export *" not in (LAB / "render" / "index.ts").read_text()
    barrel_types = re.compile(r"import type [^;]* from '[./]*(render|\.)';")
    assert [p.name for p in LAB.rglob("*.ts") if barrel_types.search(p.read_text())] == []
