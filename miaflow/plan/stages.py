"""The workflow's stages as DVC sees them: each stage's rules, the files its command runs and the
params its rules read.

A stage is one rule file, `rules/<stage>.smk`, whose rules its DVC command may run
(`--allowed-rules`), and one jobs module, `miaflow/jobs/<stage>.py`. The code a stage's command
runs is what Snakemake imports to parse the workflow (the Snakefile's and every rule file's
imports), the stage's rule and script files, and the import closure of its jobs module. The
params its rules read are the params.yaml sections that the stage file, the rules/common.smk
names it uses and the `miaflow.plan` functions these call read (`config[...]`,
`config.get(...)`), read from the code as Snakemake translates it, plus the profile selectors.
`dvc.yaml` lists exactly those files as the stage's deps and those sections as its params, so
`dvc status` sees every edit that can change the stage's outputs. Run
`python -m miaflow.plan.stages` to rewrite both after the code changed (the tests fail until
dvc.yaml matches).
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

from miaflow.plan.code import ADAPTER, ROOT, files, function_closure, imports_in, source_files

STAGES = (
    "prepare",
    "train",
    "queries",
    "evaluate",
    "hparams",
    "llm",
    "audit",
    "privacy",
    "report",
)
WORKFLOW_FILES = ("Snakefile", "rules/common.smk", "profiles/default", "envs/miaflow.yaml")
# Where the workflow writes: artifacts under results/, run records (logs, timings) under records/.
OUTPUT_ROOTS = ("results/", "records/")
# What users bring: the files of audits of their own models (docs/audit.md), a dep of stage audit
# (validation rejects a file there that no audit names: miaflow.validation.audits).
USER_INPUTS = ("audit",)
# The params that select the effective config (the Snakefile applies the profile): a stage that
# reads any section depends on them.
SELECTORS = ("profile", "profiles")
# A rule's header in a rule file: `rule NAME:` or `use rule BASE as NAME` (groups: the defined
# rule's name, or the base's and the derived rule's).
RULE_HEADER = re.compile(r"^(?:rule (\w+):|use rule (\w+) as (\w+))", re.M)
_SCRIPT = re.compile(r'script:\s*"\.\./(scripts/[\w.]+)"')
_IMPORT = re.compile(r"^[ \t]*(?:from|import) miaflow\b.*$", re.M)


def rules(stage: str, root: Path = ROOT) -> list[str]:
    """The rules defined in `rules/<stage>.smk` (`use rule` ones too), in file order (its target
    rule among them)."""
    headers = RULE_HEADER.findall((root / "rules" / f"{stage}.smk").read_text())
    return [defined or derived for defined, _, derived in headers]


def parse_modules(root: Path = ROOT) -> list[str]:
    """The package modules the Snakefile and the rule files import (one statement a line): every
    stage's command parses them all to build the DAG."""
    sources = [root / "Snakefile", *sorted((root / "rules").glob("*.smk"))]
    lines = [line.strip() for path in sources for line in _IMPORT.findall(path.read_text())]
    return sorted(imports_in(ast.parse("\n".join(lines)), root))


def jobs(stage: str, root: Path = ROOT) -> list[str]:
    """The job functions the stage's rules run (`miaflow.jobs.<stage>.<job>`, one per script)."""
    scripts = _SCRIPT.findall((root / "rules" / f"{stage}.smk").read_text())
    return sorted({f"miaflow.jobs.{stage}.{Path(script).stem}" for script in scripts})


def job_modules(stage: str, root: Path = ROOT) -> set[str]:
    """The package modules the stage's jobs can run (not counting what parsing runs)."""
    return {
        module
        for job in jobs(stage, root)
        for module in function_closure(*job.rsplit(".", 1), root)
    }


def code_deps(stage: str, root: Path = ROOT) -> list[str]:
    """Every file the stage's command runs, relative to `root`, sorted: the workflow files, the
    stage's rule file and scripts, what parsing the workflow imports, and what its jobs (and the
    adapter they run through) can import."""
    scripts = _SCRIPT.findall((root / "rules" / f"{stage}.smk").read_text())
    parsed = {path for module in [*parse_modules(root), ADAPTER] for path in files(module, root)}
    ran = source_files(tuple(sorted(job_modules(stage, root))), root)
    return sorted({*WORKFLOW_FILES, f"rules/{stage}.smk", *scripts, *parsed, *ran})


def uses(stage: str, module: str, root: Path = ROOT) -> bool:
    """Whether the jobs of `stage` run `module` (not counting what parsing the workflow runs)."""
    return module in job_modules(stage, root)


def rule_file(path: Path) -> ast.Module:
    """A rule file as the Python code Snakemake runs: its parser's translation, parsed."""
    return _translated(str(path), path.read_text())


@lru_cache(maxsize=None)
def _translated(path: str, text: str) -> ast.Module:
    """Cached by the file's path and text (`text`: the cache key; the parser reads the file)."""
    from snakemake import parser
    from snakemake.sourcecache import LocalSourceFile

    class Sources:  # what the parser asks of a workflow: to open the file
        @staticmethod
        def open(source: LocalSourceFile):
            return open(source.get_path_or_uri(secret_free=True), encoding="utf-8")

    python, _ = parser.parse(LocalSourceFile(path), SimpleNamespace(sourcecache=Sources()), {})
    return ast.parse(python, path)


def definitions(tree: ast.Module) -> dict[str, ast.stmt]:
    """The names a module defines at its top level (functions, assignments, imports), each with
    the statement that defines it."""
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            found.update(
                (name.id, node)
                for target in node.targets
                for name in ast.walk(target)
                if isinstance(name, ast.Name)
            )
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(((alias.asname or alias.name).split(".")[0], node) for alias in node.names)
    return found


def names_read(node: ast.AST) -> set[str]:
    """The names `node`'s code reads (not attributes, keywords or strings)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def shared_names(stage: str, root: Path = ROOT) -> set[str]:
    """The names of rules/common.smk that the stage file reads, directly or through the common
    definitions it reads."""
    common = definitions(rule_file(root / "rules" / "common.smk"))
    found, todo = set(), names_read(rule_file(root / "rules" / f"{stage}.smk")) & common.keys()
    while todo:
        name = todo.pop()
        found.add(name)
        todo |= (names_read(common[name]) & common.keys()) - found
    return found


def config_sections(node: ast.AST) -> set[str]:
    """The params.yaml sections `node`'s code reads: `config["<section>"]` and
    `config.get("<section>")`."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Subscript) and _is_config(n.value) and _is_text(n.slice):
            found.add(n.slice.value)
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.args
            and n.func.attr == "get"
            and _is_config(n.func.value)
            and _is_text(n.args[0])
        ):
            found.add(n.args[0].value)
    return found


def _is_config(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "config"


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def plan_functions(node: ast.AST) -> set[str]:
    """The functions of miaflow.plan that `node`'s code names (`plan.<function>`)."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "plan"
    }


def plan_sections(root: Path = ROOT) -> dict[str, set[str]]:
    """The params.yaml sections each function of miaflow.plan reads, itself or through
    the plan functions it calls."""
    module = ast.parse((root / "miaflow/plan/__init__.py").read_text())
    functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
    direct = {name: config_sections(node) for name, node in functions.items()}
    calls = {name: names_read(node) & functions.keys() for name, node in functions.items()}
    found = {}
    for name in functions:
        reached, todo = set(), {name}
        while todo:
            reached.add(current := todo.pop())
            todo |= calls[current] - reached
        found[name] = set().union(*(direct[f] for f in reached))
    return found


def params(stage: str, root: Path = ROOT) -> list[str]:
    """The params.yaml sections the stage's rules read: in its rule file, in the common names it
    reads and in the plan functions these call; with the profile selectors first."""
    common = definitions(rule_file(root / "rules" / "common.smk"))
    code = [
        rule_file(root / "rules" / f"{stage}.smk"),
        *(common[name] for name in shared_names(stage, root)),
    ]
    planned = plan_sections(root)  # plan constants (e.g. plan.RISK_SCORE) read no section
    named = {name for node in code for name in plan_functions(node)}
    sections = set().union(*map(config_sections, code), *(planned.get(n, ()) for n in named))
    return [*SELECTORS, *sorted(sections - set(SELECTORS))] if sections else []


def write_dvc_deps(path: Path = ROOT / "dvc.yaml") -> None:
    """Rewrite each stage's code deps and params in dvc.yaml (its data deps, under OUTPUT_ROOTS or
    USER_INPUTS, are kept, and so is the rest of the file, comments and the top-level `plots` of
    `dvc plots show` included)."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    document = yaml.load(path)
    for stage in STAGES:
        deps = document["stages"][stage]["deps"]
        data = [dep for dep in deps if str(dep).startswith(OUTPUT_ROOTS) or dep in USER_INPUTS]
        deps.clear()
        deps.extend([*data, *code_deps(stage, path.parent)])
        listed = document["stages"][stage]["params"]
        listed.clear()
        listed.extend(params(stage, path.parent))
    yaml.dump(document, path)


if __name__ == "__main__":
    write_dvc_deps()
