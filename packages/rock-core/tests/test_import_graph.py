"""rock_core's import graph has no circle, and the engine's jobs stand on its core, not its facade.

Every module of rock_core is read with :mod:`ast` (never imported): each import is an edge, at
module level, inside a function, or under ``if TYPE_CHECKING:`` alike, relative imports resolved.
``from package import name`` is an edge to the submodule ``package.name`` when there is one,
else to ``package``. A package's ``__init__`` that a submodule's import runs on the way is not
counted: only what a module names. Nor is an import under ``if __name__ == "__main__":`` (the
module runs it as the program, ``__main__``, and what it imports then loads the module again
under its own name: no circle, as ``python -m rock_core.states`` shows).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import rock_core

SOURCE = Path(rock_core.__file__).resolve().parent
#: Circles known and allowed, each as its sorted modules, with why (none now).
KNOWN_CIRCLES: dict[tuple[str, ...], str] = {}


def _modules() -> dict[str, Path]:
    """Every module of rock_core by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _is_main_block(node: ast.AST) -> bool:
    """Whether ``node`` is ``if __name__ == "__main__":``."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    sides = [test.left, *test.comparators]
    return (
        len(sides) == 2
        and isinstance(test.ops[0], ast.Eq)
        and any(isinstance(side, ast.Name) and side.id == "__name__" for side in sides)
        and any(isinstance(side, ast.Constant) and side.value == "__main__" for side in sides)
    )


def _walk_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """Every node of ``tree`` (functions, classes, ``TYPE_CHECKING`` blocks included), but not
    what a module-level ``if __name__ == "__main__":`` holds."""
    todo: list[ast.AST] = [node for node in tree.body if not _is_main_block(node)]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _imports(name: str) -> Iterator[tuple[str, int]]:
    """The rock_core modules ``name`` imports, with the line of each import."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"), str(MODULES[name]))
    return _edges(tree, name if _is_package(name) else name.rpartition(".")[0])


def _edges(tree: ast.Module, package: str) -> Iterator[tuple[str, int]]:
    """The rock_core modules ``tree`` imports, its relative imports read from ``package``."""
    for node in _walk_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _target(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                if sub in MODULES:
                    yield sub, node.lineno
                else:
                    yield from _target(origin, node.lineno)


def _target(module: str, line: int) -> Iterator[tuple[str, int]]:
    if module in MODULES:
        yield module, line


GRAPH = {name: dict(_imports(name)) for name in MODULES}


def _cycles() -> list[list[str]]:
    """One circle per strongly connected component of more than one module (or a self-import),
    each as a path that starts and ends at the same module (Tarjan, then a walk inside it)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in GRAPH[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in GRAPH[node]:
                components.append(sorted(component))

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    return [_walk(component) for component in components]


def _walk(component: list[str]) -> list[str]:
    """A circle through ``component``'s first module, by a breadth-first search back to it."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(GRAPH[node]):
            if nxt == start:
                return [*paths[node], start]
            if nxt in members and nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no circle found in {component}")  # Tarjan said there is one


def _describe(cycle: list[str]) -> str:
    steps = [f"{a} (line {GRAPH[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:], strict=False)]
    return "\n    ".join(steps)


def test_the_graph_reads_every_kind_of_import() -> None:
    """Module-level, relative, function-level and ``TYPE_CHECKING`` imports are edges; an
    import under ``if __name__ == "__main__":`` is not."""
    source = """
from typing import TYPE_CHECKING
from . import live
from .core import EngineCore
import rock_core.states
if TYPE_CHECKING:
    from rock_core.engine.manager import SandboxManager
def job():
    from rock_core.engine import stopping
    import rock_core.errors
if __name__ == "__main__":
    from rock_core import models
"""
    assert {target for target, _ in _edges(ast.parse(source), "rock_core.engine")} == {
        "rock_core.engine.live",
        "rock_core.engine.core",
        "rock_core.states",
        "rock_core.engine.manager",
        "rock_core.engine.stopping",
        "rock_core.errors",
    }
    assert "rock_core.states" in GRAPH["rock_core.engine.manager"]


def test_rock_core_has_no_import_circle() -> None:
    found = {tuple(sorted(set(c))): c for c in _cycles()}
    unknown = {key: cycle for key, cycle in found.items() if key not in KNOWN_CIRCLES}
    assert not unknown, "import circles under rock_core:\n" + "\n".join(
        f"  {' -> '.join(cycle)}\n    {_describe(cycle)}" for cycle in unknown.values()
    )
    stale = set(KNOWN_CIRCLES) - set(found)
    assert not stale, f"circles listed as known that no longer exist: {sorted(stale)}"


def test_no_engine_module_imports_the_facade() -> None:
    """The jobs of rock_core.engine receive the engine's core; none imports SandboxManager's module."""
    upward = {
        f"{name} (line {GRAPH[name]['rock_core.engine.manager']})"
        for name in MODULES
        if name.startswith("rock_core.engine.")
        and name != "rock_core.engine.manager"
        and "rock_core.engine.manager" in GRAPH[name]
    }
    assert not upward, (
        f"modules under rock_core.engine import rock_core.engine.manager: {sorted(upward)}"
    )


def test_no_engine_module_reaches_into_another_objects_private_attributes() -> None:
    """A job uses the core's public methods: no ``x._name`` under rock_core.engine but on
    ``self`` or ``cls`` (dunders aside)."""
    reaches = []
    for name, path in MODULES.items():
        if not name.startswith("rock_core.engine"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                reaches.append(f"{name}:{node.lineno} .{node.attr}")
    assert not reaches, f"private attributes of other objects used: {reaches}"
