"""The package's subpackages import each other one way: no loop of imports between them.

A loop (e.g. models -> defenses -> models) would mean neither can be read, tested or changed
without the other; the graph is read from the code as the workflow reads it for DVC deps."""

from __future__ import annotations

from miaflow.plan.code import PACKAGE, ROOT, imported_modules


def _unit(module: str) -> str:
    """The subpackage (or top-level module) a module belongs to: `miaflow.models.training` ->
    `miaflow.models`."""
    return ".".join(module.split(".")[:2])


def subpackage_graph() -> dict[str, set[str]]:
    """unit -> the other units its modules import (the package root itself left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        targets = {_unit(m) for m in imported_modules(module)} - {PACKAGE, _unit(module)}
        graph.setdefault(_unit(module), set()).update(targets)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One loop of the graph as a path that ends where it starts, [] if there is none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return []
        for target in sorted(graph.get(node, ())):
            found = visit(target, path + [node])
            if found:
                return found
        done.add(node)
        return []

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return []


def test_cycle_finds_a_loop_and_only_a_loop():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def module_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports, leaving out the packages that contain it
    (Python imports those before the module in any case)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        graph[module] = {
            target
            for target in imported_modules(module)
            if target != module and not module.startswith(f"{target}.")
        }
    return graph


def test_modules_import_one_way():
    assert cycle(module_graph()) == [], " -> ".join(cycle(module_graph()))


def test_subpackages_import_one_way():
    graph = subpackage_graph()
    assert "miaflow.defenses" in graph["miaflow.models"]  # training calls the defenses ...
    assert "miaflow.models" not in graph["miaflow.defenses"]  # ... which import nothing back
    assert cycle(graph) == [], " -> ".join(cycle(graph))
