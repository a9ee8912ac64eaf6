"""Orphans: files under results/ (and their run records) that no rule of the workflow writes any
more, because an audit, an experiment or a dataset was removed from params.yaml.

DVC records a stage's output folder whole (results/figures, results/tables, ...), so a file an
earlier configuration wrote stays in it, counted by the summary and recorded in dvc.lock, and a
reviewer's `dvc status` and `make verify` would report about files no rule can rebuild. So a run
of the whole workflow (target `all`) removes every file under a stage's outputs that no job of
its DAG writes, its provenance record, and the logs and benchmark records of jobs that no longer
exist, at its start (the Snakefile's `onstart`), and says which; the commit that follows records
the folders without them. `make verify` names such files as orphans, apart from stale ones
(`produced_by_workflow`, which asks Snakemake for the DAG's files).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from miaflow.runtime.provenance import FOLDER, RECORDS, SNAKEMAKE_MARKER

ARTIFACTS = Path("results")
RUN_RECORDS = ("logs", "benchmarks")  # a stage's run records that each job declares


def declared(jobs: Iterable[Any]) -> set[str]:
    """Every path a DAG's jobs write: their outputs, logs and benchmark files."""
    paths = set()
    for job in jobs:
        paths.update(str(path) for path in job.output)
        paths.update(str(path) for path in job.log)
        if job.benchmark:
            paths.add(str(job.benchmark))
    return paths


def orphans(root: Path, written: set[str]) -> list[Path]:
    """The files under results/ and the stages' log and benchmark folders that no path of
    `written` is (or holds, for a directory output), and the provenance records of orphaned or
    missing artifacts; relative to `root`, sorted."""
    prefixes = tuple(f"{path.rstrip('/')}/" for path in written)

    def written_here(relative: str) -> bool:
        return relative in written or relative.startswith(prefixes)

    found = []
    stages = sorted((root / RECORDS).glob("*"))
    trees = [root / ARTIFACTS, *(stage / kind for stage in stages for kind in RUN_RECORDS)]
    for tree in trees:
        for path in sorted(tree.rglob("*")) if tree.is_dir() else []:
            relative = path.relative_to(root).as_posix()
            if path.is_file() and path.name != SNAKEMAKE_MARKER and not written_here(relative):
                found.append(Path(relative))
    for record in sorted((root / RECORDS).glob(f"*/{FOLDER}/**/*.json")):
        artifact = record.relative_to(root / RECORDS).as_posix().split(f"/{FOLDER}/", 1)[1]
        artifact = artifact.removesuffix(".json")
        if not written_here(artifact):
            found.append(record.relative_to(root))
    return sorted(set(found))


def remove_orphans(workflow: Any, root: Path = Path(".")) -> list[str]:
    """For a run of the whole workflow (its DAG's targets include rule `all`), remove the
    orphans and say which; other runs (a stage's, a rule's) see part of the DAG only, and touch
    nothing."""
    if not any(job.rule.name == "all" for job in workflow.dag.targetjobs):
        return []
    found = orphans(root, declared(workflow.dag.jobs))
    for path in found:
        (root / path).unlink(missing_ok=True)
        for folder in (root / path).parents:  # and the folders it leaves empty
            if folder == root or any(folder.iterdir()):
                break
            folder.rmdir()
    return [
        f"removed {path}: no rule writes it any more (a removed audit or experiment)"
        for path in found
    ]


def produced_by_workflow(root: Path) -> set[str] | None:
    """What the workflow at `root` writes, as Snakemake's summary of target `all` lists it
    (outputs; `make verify`'s view, without a DAG of its own); None if Snakemake cannot say."""
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "snakemake"), "--summary", "--quiet"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        return None
    rows = [line.split("\t") for line in listed.stdout.splitlines()[1:] if "\t" in line]
    return {row[0] for row in rows}
