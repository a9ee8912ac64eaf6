"""The library files a job runs: the import closure of its job function, found by reading code.

Every `import miaflow...` and `from miaflow... import ...` statement of a module counts, also
those inside functions (heavy dependencies are imported lazily), together with the
`__init__.py` of every package on the way. A job function (`miaflow.jobs.<stage>.<job>`) runs
its module's top-level imports, its own, and those of the module's functions and classes it
names; each module it reaches counts whole (`closure`). Rules list these files as their `code`
input, and DVC stages as deps, so that editing any module a job imports, directly or not,
reruns exactly the jobs that can run it.

Reading the whole package's code takes seconds, on every parse of the workflow. So the workflow
reads the jobs modules' files through `job_files`, which keeps them in a cache under .snakemake/
keyed by the sha256 of every file of the package (`package_digest`, tens of milliseconds): any
edit, added or removed file gives another key, and the closures are read again. Other
parse-time work that the workflow's code and config determine is kept the same way
(`remembered` under `workflow_digest`: the jobs whose run records the cost table reads).
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

PACKAGE = "miaflow"
ROOT = Path(__file__).resolve().parents[2]  # the directory holding the package
ADAPTER = f"{PACKAGE}.runtime.adapter"  # every script runs its job through it


def module_file(module: str, root: Path = ROOT) -> Path | None:
    """The source file of a module of the package (relative to `root`), None if there is none."""
    base = Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


def imported_modules(module: str, root: Path = ROOT) -> set[str]:
    """Modules of the package that `module`'s source imports anywhere, with their parent
    packages."""
    path = module_file(module, root)
    if path is None:
        raise ModuleNotFoundError(f"no module {module} below {root}")
    return imports_in(ast.parse((root / path).read_text(), str(path)), root)


def imports_in(tree: ast.AST, root: Path = ROOT) -> set[str]:
    """Modules of the package that the import statements in `tree` load, with their parents
    (not those under `if TYPE_CHECKING:`, which only type checkers run)."""
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from package import submodule` imports the submodule too
            found.update(
                f"{node.module}.{alias.name}"
                for alias in node.names
                if module_file(f"{node.module}.{alias.name}", root)
            )
    ours = {name for name in found if name == PACKAGE or name.startswith(f"{PACKAGE}.")}
    return {parent for name in ours for parent in _with_parents(name) if module_file(parent, root)}


def _runtime_nodes(tree: ast.AST):
    """The nodes of `tree`, leaving out the bodies of `if TYPE_CHECKING:` blocks."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


@lru_cache(maxsize=None)
def closure(module: str, root: Path = ROOT) -> tuple[str, ...]:
    """Every module of the package that importing `module` (and running its functions) can
    load, itself and its parent packages included, sorted."""
    return closures([module], root)[module]


def closures(modules: Iterable[str], root: Path = ROOT) -> dict[str, tuple[str, ...]]:
    """`closure` of each of `modules`, reading each module's source once for all of them (and
    afresh on every call)."""
    imports: dict[str, set[str]] = {}
    found = {}
    for module in modules:
        seen, todo = set(), [*_with_parents(module)]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name not in imports:
                imports[name] = imported_modules(name, root)
            todo.extend(imports[name] - seen)
        found[module] = tuple(sorted(seen))
    return found


def function_closure(module: str, function: str, root: Path = ROOT) -> tuple[str, ...]:
    """Every module of the package that running `function` of `module` can load: the module
    itself and its parents, and the closure of each module that its top-level statements, the
    function and the module-level functions and classes it names (in turn) import; sorted."""
    path = module_file(module, root)
    if path is None:
        raise ModuleNotFoundError(f"no module {module} below {root}")
    tree = ast.parse((root / path).read_text(), str(path))
    defining = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    definitions = {node.name: node for node in tree.body if isinstance(node, defining)}
    if function not in definitions:
        raise AttributeError(f"{module} defines no {function}")
    reached, todo = set(), [function]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += [
                node.id
                for node in ast.walk(definitions[name])
                if isinstance(node, ast.Name) and node.id in definitions
            ]
    top = [
        node for node in tree.body if not isinstance(node, tuple(map(type, definitions.values())))
    ]
    body = ast.Module(body=[*top, *(definitions[name] for name in reached)], type_ignores=[])
    seeds = imports_in(body, root) - {module}
    found = closures(sorted(seeds), root)
    return tuple(sorted({*_with_parents(module), *(m for c in found.values() for m in c)}))


def job_names(root: Path = ROOT) -> list[str]:
    """Every job function of the package (`miaflow.jobs.<stage>.<job>`: the public functions of
    the jobs modules)."""
    names = []
    for path in sorted((root / PACKAGE / "jobs").glob("*.py")):
        if path.stem == "common":  # what the stages' jobs share: no stage's job itself
            continue
        tree = ast.parse(path.read_text(), str(path))
        names += [
            f"{PACKAGE}.jobs.{path.stem}.{node.name}"
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
        ]
    return names


# Package data and the module that reads it.
PACKAGE_DATA = {
    f"{PACKAGE}.config": f"{PACKAGE}/schemas/params.schema.json",
    f"{PACKAGE}.evaluation.published": f"{PACKAGE}/evaluation/published.csv",
}


def files(module: str, root: Path = ROOT) -> list[str]:
    """Source files (relative to `root`, posix) of `closure(module)`, plus the package data the
    closure reads (PACKAGE_DATA: the params schema, the published values)."""
    return source_files(closure(module, root), root)


def source_files(modules: tuple[str, ...], root: Path) -> list[str]:
    found = [module_file(name, root).as_posix() for name in modules]
    found += [data for reader, data in PACKAGE_DATA.items() if reader in modules]
    return sorted(found)


def package_digest(root: Path = ROOT) -> str:
    """sha256 of the path and content of every file of the package below `root` (its modules and
    package data; compiled files aside): all that closures, and validation, are derived from."""
    digest = hashlib.sha256()
    for path in sorted((root / PACKAGE).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(f"{path.relative_to(root).as_posix()}\0{path.stat().st_size}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def job_files(cache: Path, root: Path = ROOT) -> dict[str, list[str]]:
    """The source files of every job function (`function_closure`, by its dotted name) and of
    the adapter module every script runs, with the package data they read: read from the JSON
    file `cache` if it was computed from the same package (`package_digest`), else computed and
    written there."""

    def compute() -> dict[str, list[str]]:
        found = {ADAPTER: source_files(closure(ADAPTER, root), root)}
        for job in job_names(root):
            module, function = job.rsplit(".", 1)
            found[job] = source_files(function_closure(module, function, root), root)
        return found

    return remembered(cache, package_digest(root), compute)


def workflow_digest(config: Mapping[str, Any], root: Path = ROOT) -> str:
    """sha256 of all that the workflow's jobs are derived from at parse time: the package
    (`package_digest`), the Snakefile and rule files, and the effective config."""
    digest = hashlib.sha256(package_digest(root).encode())
    for path in [root / "Snakefile", *sorted((root / "rules").glob("*.smk"))]:
        digest.update(f"{path.name}\0".encode() + path.read_bytes())
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def remembered(cache: Path, key: str, compute: Callable[[], Any]) -> Any:
    """`compute()`, or what it gave before under the same `key` (kept as JSON in `cache`): for
    parse-time work that its key fully determines."""
    try:
        stored = json.loads(cache.read_text())
    except (OSError, ValueError):
        stored = {}
    if isinstance(stored, dict) and stored.get("key") == key:
        return stored["value"]
    value = compute()
    from miaflow.io import write_json  # pandas and pyarrow: only when the key changed

    write_json(cache, {"key": key, "value": value})
    return value


if __name__ == "__main__":  # print the files of modules, e.g. to update dvc.yaml's deps by hand
    import sys

    for name in sys.argv[1:]:
        print("\n".join(files(name)))
