"""No import circle inside rocketq, and nothing inside it imports the package root.

A circle (a imports b, b imports a, or a longer ring) means neither module can be read,
tested or moved without the other, and its import order decides whether it loads at all;
what the two share belongs in a module below both. The package root ``rocketq/__init__.py``
is the top of the stack (it re-exports the client), so an import of it from inside would
run back up.

The graph is built from the source with ``ast``, not by importing: every ``import`` and
``from ... import`` of a rocketq module, relative ones resolved from where the module sits.
``from .pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
Every import counts, wherever it sits. One inside a function still runs (later), and one
inside ``if TYPE_CHECKING:`` still ties the module to the one it names: a module that takes
the object above it as a parameter type cannot be read or checked without it. Deferring or
guarding an import hides a circle from the interpreter's import order, not from the reader;
a lower module that needs the shape of an upper one says so with a ``Protocol`` of its own.
``from . import _ccodec`` (a compiled module, no ``.py``) is an edge to that module, not to
the package.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rocketq"


def module_name(path: pathlib.Path) -> str:
    """``rocketq/store/records.py`` is ``rocketq.store.records``; a package's
    ``__init__.py`` is the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, pathlib.Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def import_nodes(tree: ast.AST):
    """Every import statement in ``tree``, at any depth."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def imports_of(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The rocketq modules that the module ``name`` at ``path`` imports."""
    is_package = path.name == "__init__.py"
    package = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in import_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "rocketq" or alias.name.startswith("rocketq."):
                    found.add(alias.name)
            continue
        if node.level:
            base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
            target = ".".join(base + (node.module.split(".") if node.module else []))
        else:
            target = node.module or ""
        if target != "rocketq" and not target.startswith("rocketq."):
            continue
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            if sub in modules:
                found.add(sub)
            elif not is_compiled(sub):
                found.add(target)
    found.discard(name)
    return found


def is_compiled(name: str) -> bool:
    """Whether ``name`` is a compiled extension module (``_ccodec.cpython-312-...so``)."""
    folder = ROOT.joinpath(*name.split(".")[:-1])
    return any(folder.glob(name.rsplit(".", 1)[-1] + ".*.so")) or (
        folder / (name.rsplit(".", 1)[-1] + ".pyx")).exists()


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules) & modules.keys()
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as one
    ring through them, sorted so the message is stable."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep graph cannot reach the recursion limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(ring(graph, component) for component in components)


def ring(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One path from the component's first module back to itself inside the component
    (breadth first, so it is a shortest one)."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    return paths[node] + [start]
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    following.append(nxt)
        frontier = following
    return component


def test_the_finder_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_no_import_circle_in_rocketq():
    found = cycles(import_graph())
    lines = [" -> ".join(name.removeprefix("rocketq.") for name in ring_)
             for ring_ in found]
    assert not found, ("import circles (move what the modules share into one below them):\n"
                       + "\n".join(lines))


def test_nothing_inside_imports_the_package_root():
    """``rocketq/__init__.py`` loads the client on first use of its names; a module inside
    that imports it (``from .. import __version__``) runs back up the stack."""
    graph = import_graph()
    upward = sorted(name for name, targets in graph.items()
                    if "rocketq" in targets and name != "rocketq")
    assert not upward, f"these import the package root: {upward}"
