"""The workflow's stages as DVC sees them: each stage's rules and the files its command runs.

A stage is one rule file, `rules/<stage>.smk`, whose rules its DVC command may run
(`--allowed-rules`), and one jobs module, `miaflow/jobs/<stage>.py`. The code a stage's command
runs is what Snakemake imports to parse the workflow, the stage's rule and script files, and the
import closure of its jobs module; `dvc.yaml` lists exactly those files as the stage's deps, so
`dvc status` sees every edit that can change the stage's outputs. Run
`python -m miaflow.workflow.stages` to rewrite those deps after the code's imports changed (the
tests fail until dvc.yaml matches).
"""

from __future__ import annotations

import re
from pathlib import Path

from miaflow.workflow.code import ADAPTER, ROOT, closure, files

STAGES = ("prepare", "train", "queries", "evaluate", "hparams", "llm", "audit", "report")
WORKFLOW_FILES = ("Snakefile", "rules/common.smk", "profiles/default", "envs/miaflow.yaml")
# Where the workflow writes: artifacts under results/, run records (logs, timings) under records/.
OUTPUT_ROOTS = ("results/", "records/")
# What users bring: the files of audits of their own models (docs/audit.md), a dep of stage audit.
USER_INPUTS = ("audit",)
_RULE = re.compile(r"^rule (\w+):", re.M)
_SCRIPT = re.compile(r'script:\s*"\.\./(scripts/[\w.]+)"')
_IMPORT = re.compile(r"^\s*(?:from|import) (miaflow[\w.]*)", re.M)


def rules(stage: str, root: Path = ROOT) -> list[str]:
    """The rules defined in `rules/<stage>.smk`, in file order (its target rule among them)."""
    return _RULE.findall((root / "rules" / f"{stage}.smk").read_text())


def parse_modules(root: Path = ROOT) -> list[str]:
    """The package modules the Snakefile and the common rule file import to build the DAG."""
    text = "".join((root / name).read_text() for name in ("Snakefile", "rules/common.smk"))
    return sorted(set(_IMPORT.findall(text)))


def code_deps(stage: str, root: Path = ROOT) -> list[str]:
    """Every file the stage's command runs, relative to `root`, sorted."""
    rule_file = root / "rules" / f"{stage}.smk"
    scripts = _SCRIPT.findall(rule_file.read_text())
    library = {path for module in [*parse_modules(root), f"miaflow.jobs.{stage}", ADAPTER]
               for path in files(module, root)}
    return sorted({*WORKFLOW_FILES, f"rules/{stage}.smk", *scripts, *library})


def uses(stage: str, module: str, root: Path = ROOT) -> bool:
    """Whether the jobs of `stage` run `module` (not counting what parsing the workflow runs)."""
    return module in closure(f"miaflow.jobs.{stage}", root)


def write_dvc_deps(path: Path = ROOT / "dvc.yaml") -> None:
    """Rewrite each stage's code deps in dvc.yaml (its data deps, under OUTPUT_ROOTS or USER_INPUTS, are kept, and
    so is the rest of the file, comments and the top-level `plots` of `dvc plots show` included)."""
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
    yaml.dump(document, path)


if __name__ == "__main__":
    write_dvc_deps()
