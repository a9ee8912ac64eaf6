"""DVC stages split the Snakemake rules between them: every rule in exactly one stage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml


def test_every_rule_belongs_to_exactly_one_dvc_stage(repo):
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]
    snakemake = {name: next(c for c in ([stage["cmd"]] if isinstance(stage["cmd"], str) else stage["cmd"])
                            if c.startswith("snakemake")) for name, stage in stages.items()}
    allowed = {name: cmd.split("--allowed-rules")[1].split() for name, cmd in snakemake.items()}
    listed = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--list-rules"],
                            cwd=repo, capture_output=True, text=True, check=True).stdout
    rules = {line.split()[0] for line in listed.splitlines() if line.strip()}
    flat = [rule for names in allowed.values() for rule in names]
    assert sorted(flat) == sorted(rules)
    for name, stage in stages.items():
        target = snakemake[name].split()[1]
        assert target in allowed[name], f"stage {name} does not allow its own target rule {target}"
