"""No import circles between the modules of `devicelint/` (issue 25).

Data flows one way (cli -> runner -> engine -> checks -> analysis), so no module may import,
directly or through others, a module that imports it back. The graph is read from the source
with `ast`, never by importing, so a circle is found even where Python happens to tolerate it.

What counts as an edge from module A to module B:
- Every `import` and `from ... import` in A that names B, wherever it is written: at module
  level, inside a function or method, inside `try:`. A lazy import that closes a circle is still
  a circle; it only moves the failure from import time to the first call.
- Imports under `if TYPE_CHECKING:` count too. They never run, but a lower module that names an
  upper one's types still depends on it (`placement_calls` naming `placement`'s types was one of
  the circles of issue 25); the types belong in a module below both, or in a `Protocol` or
  declared methods in the lower module.
- Relative imports are resolved against A's package.
- The edge goes to the module whose namespace the statement reads: `import a.b.c` and
  `from a.b import c` where `a/b/c.py` (or `a/b/c/`) exists point at `a.b.c`; `from a.b import
  name` where `name` is defined in `a/b/__init__.py` points at the package `a.b`.
- Python also executes the ancestor packages' `__init__` files (`a`, `a.b`) before `a.b.c`,
  but that is not counted as an edge. Those `__init__` files that import their own submodules
  (`checks/__init__.py` registers every rule; `model_events/__init__.py` re-exports its parts)
  would otherwise form a circle with every child that imports a sibling, though no name flows
  back from the package to the child. An import that does read a name from a package's
  `__init__` points at the package, so a child that needs its parent's code is still caught.

A circle is a strongly connected component of more than one module, or a module that imports
itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "devicelint"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def module_files(root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    """Every module under the package, by dotted name (a package by its own name)."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in the tree, at any depth."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imported_modules(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that `module` imports (see the module docstring)."""
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names if alias.name in modules)
            continue
        base = node.module or ""
        if node.level:
            package = _package_of(module, path)
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in modules:
                targets.add(submodule)
            elif base in modules:
                targets.add(base)
    return targets


def import_graph(root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    modules = module_files(root)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, and self-imports (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep chain of imports cannot hit the recursion limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        circles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(circles)


def _describe(circle: list[str], graph: dict[str, set[str]]) -> str:
    """The circle's modules, and each import between them."""
    members = set(circle)
    edges = [f"    {a} -> {b}" for a in circle for b in sorted(graph[a] & members)]
    return "  " + ", ".join(circle) + "\n" + "\n".join(edges)


def test_no_import_circles() -> None:
    graph = import_graph()
    circles = import_circles(graph)
    assert not circles, "import circles between devicelint modules:\n" + "\n".join(
        _describe(circle, graph) for circle in circles
    )


def test_graph_sees_relative_lazy_and_submodule_imports(tmp_path: Path) -> None:
    """The graph builder itself: each kind of import it must see."""
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "def f():\n    from devicelint import b\n",
        "b.py": "from .sub import c\n",
        "sub/__init__.py": "from devicelint.sub import c\nVALUE = 1\n",
        "sub/c.py": "from ..sub import VALUE\nimport devicelint.a\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from devicelint import a\n",
        "e.py": "import devicelint.e\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    graph = import_graph(package)
    assert graph == {
        "devicelint": set(),
        "devicelint.a": {"devicelint.b"},
        "devicelint.b": {"devicelint.sub.c"},
        "devicelint.sub": {"devicelint.sub.c"},
        "devicelint.sub.c": {"devicelint.sub", "devicelint.a"},
        "devicelint.d": {"devicelint.a"},
        "devicelint.e": {"devicelint.e"},
    }
    assert import_circles(graph) == [
        ["devicelint.a", "devicelint.b", "devicelint.sub", "devicelint.sub.c"],
        ["devicelint.e"],
    ]


def test_the_call_layer_declares_only_what_the_interpreter_supplies() -> None:
    """`placement_calls.CallEvaluation` declares the statement interpreter's methods it uses
    instead of importing `placement`; each declaration must be replaced by the interpreter's own
    (a declaration left in force would raise on the first call that reaches it)."""
    from types import FunctionType

    from devicelint.analysis.placement import _Interpreter
    from devicelint.analysis.placement_calls import CallEvaluation

    declared = [
        name
        for name, value in vars(CallEvaluation).items()
        if isinstance(value, FunctionType) and value.__code__.co_names == ("NotImplementedError",)
    ]
    assert declared
    assert [name for name in declared if getattr(_Interpreter, name) is getattr(CallEvaluation, name)] == []
