"""DVC stages split the Snakemake rules between them: every rule in exactly one stage."""

from __future__ import annotations

import re
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


def rule_code(repo: Path) -> dict[str, set[str]]:
    """Files each rule runs, read off the rule files: the rule file itself, its script, and the
    library modules its `package(...)` code input names (always with `jobs` and `io`)."""
    code = {}
    for smk in sorted((repo / "rules").glob("*.smk")):
        for block in re.split(r"^rule ", smk.read_text(), flags=re.M)[1:]:
            name = block.split(":", 1)[0].strip()
            files = {f"rules/{smk.name}", "Snakefile", "miaflow/workflow.py", "miaflow/config.py",
                     "miaflow/schemas"}
            script = re.search(r'script:\s*"\.\./(scripts/[^"]+)"', block)
            files |= {script.group(1)} if script else set()
            package = re.search(r"package\(([^)]*)\)", block)
            modules = re.findall(r'"([^"]+)"', package.group(1)) if package else []
            for module in ("jobs", "io", *modules):
                files.add(f"miaflow/{module}" if (repo / "miaflow" / module).is_dir()
                          else f"miaflow/{module}.py")
            code[name] = files
    return code


def test_every_stage_depends_on_the_code_its_rules_run(repo):
    """Otherwise `dvc repro` skips a stage whose code changed and `dvc status` reports it clean."""
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]
    code = rule_code(repo)
    assert {"train_shard", "score_attacks", "prepare_dataset"} <= code.keys()
    for name, stage in stages.items():
        command = " ".join([stage["cmd"]] if isinstance(stage["cmd"], str) else stage["cmd"])
        rules = command.split("--allowed-rules")[1].split("\n")[0].split()
        needed = set().union(*(code.get(rule, set()) for rule in rules))
        missing = sorted(needed - set(stage["deps"]))
        assert not missing, f"dvc stage {name} lacks deps {missing}"
