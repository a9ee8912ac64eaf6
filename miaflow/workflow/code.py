"""The library files a job runs: the import closure of its jobs module, found by reading code.

Every `import miaflow...` and `from miaflow... import ...` statement of a module counts, also
those inside functions (jobs import their heavy dependencies lazily), together with the
`__init__.py` of every package on the way. Rules list these files as inputs, and DVC stages as
deps, so that editing any module a job imports, directly or not, reruns exactly that job.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE = "miaflow"
ROOT = Path(__file__).resolve().parents[2]  # the directory holding the package
ADAPTER = f"{PACKAGE}.jobs.adapter"  # every script runs its job through it


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
    """Modules of the package that the import statements in `tree` load, with their parents."""
    found: set[str] = set()
    for node in ast.walk(tree):
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


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


@lru_cache(maxsize=None)
def closure(module: str, root: Path = ROOT) -> tuple[str, ...]:
    """Every module of the package that importing `module` (and running its functions) can
    load, itself and its parent packages included, sorted."""
    seen, todo = set(), [*_with_parents(module)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(imported_modules(name, root) - seen)
    return tuple(sorted(seen))


# Package data and the module that reads it.
PACKAGE_DATA = {
    f"{PACKAGE}.config": f"{PACKAGE}/schemas/params.schema.json",
    f"{PACKAGE}.evaluation.published": f"{PACKAGE}/evaluation/published.csv",
}


def files(module: str, root: Path = ROOT) -> list[str]:
    """Source files (relative to `root`, posix) of `closure(module)`, plus the package data the
    closure reads (PACKAGE_DATA: the params schema, the published values)."""
    modules = closure(module, root)
    found = [module_file(name, root).as_posix() for name in modules]
    found += [data for reader, data in PACKAGE_DATA.items() if reader in modules]
    return sorted(found)


if __name__ == "__main__":  # print the files of modules, e.g. to update dvc.yaml's deps by hand
    import sys

    for name in sys.argv[1:]:
        print("\n".join(files(name)))
