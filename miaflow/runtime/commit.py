"""Record a finished Snakemake run of the whole workflow in dvc.lock, as `dvc repro` would.

    python -m miaflow.runtime.commit

`make run` runs the workflow as one Snakemake DAG (`snakemake --cores all`), not as `dvc
repro`'s eight stage commands: Snakemake parses the workflow once instead of eight times, and a
job starts as soon as its own inputs exist rather than when the whole previous stage is done
(the language-model stage runs beside the tabular ones). Then this records every stage's deps
and outs (`dvc commit --force`), hashing them into dvc.lock and the DVC cache: the lock that
`dvc repro` writes after the same jobs (tests/test_resume_e2e.py compares the two), so `dvc
status` is clean and a later `dvc repro` runs nothing. First it creates what a stage's command
creates when the stage has nothing to write (its `mkdir -p` in dvc.yaml, such as results/llm
without language-model experiments): DVC refuses to record a missing out.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

MKDIR = ("mkdir", "-p")


def created_directories(dvc_yaml: Path) -> list[str]:
    """The directories the stages' commands create with `mkdir -p`, in stage order."""
    directories = []
    for stage in yaml.safe_load(dvc_yaml.read_text())["stages"].values():
        commands = stage["cmd"] if isinstance(stage["cmd"], list) else [stage["cmd"]]
        for command in commands:
            words = shlex.split(command)
            if tuple(words[:2]) == MKDIR:
                directories += words[2:]
    return directories


def commit(root: Path = Path(".")) -> int:
    """Create the stages' empty outs, then `dvc commit --force` (its exit status)."""
    for directory in created_directories(root / "dvc.yaml"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    return subprocess.run(["dvc", "commit", "--force", "--quiet"], cwd=root).returncode


if __name__ == "__main__":
    sys.exit(commit())
