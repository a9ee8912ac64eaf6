"""The shipped profiles build their workflow: `snakemake -n --config profile=NAME` plans every job
without any data present (the paper profile downloads what is missing)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FILES = ["Snakefile", "rules", "scripts", "miaflow", "profiles", "envs", "params.yaml"]


def dry_run(repo: Path, root: Path, profile: str) -> str:
    for name in FILES:
        source = repo / name
        copy = shutil.copytree if source.is_dir() else shutil.copy
        copy(source, root / name)
    snakemake = Path(sys.executable).parent / "snakemake"
    result = subprocess.run([str(snakemake), "-n", "--quiet", "rules", "--config", f"profile={profile}"],
                            cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_paper_profile_plans_downloads_and_every_stage(repo, tmp_path):
    plan = dry_run(repo, tmp_path, "paper")
    for rule in ("download_dataset", "train_shard", "query_ref", "score_attacks", "study_tables",
                 "hparam_features", "hparam_grid", "hparam_report", "llm_train", "llm_pairs",
                 "llm_scores", "llm_report"):
        assert rule in plan


def test_llm_cpu_profile_plans_the_language_models_from_local_copies(repo, tmp_path, shared_data):
    (tmp_path / "shared").symlink_to(shared_data.parent)
    (tmp_path / "project").mkdir()
    plan = dry_run(repo, tmp_path / "project", "llm-cpu")
    counts = {line.split()[0]: int(line.split()[1]) for line in plan.splitlines()
              if len(line.split()) == 2 and line.split()[1].isdigit()}
    assert "download_dataset" not in plan
    # SmolLM2 converted once and fine-tuned per repeat; the scratch GPT-2's reference trained too.
    assert counts["llm_convert"] == 1 and counts["llm_train"] == 3 + 3 + 1
    assert counts["llm_pairs"] == 2 * 3 * 4 and counts["llm_scores"] == 2


def test_study_cpu_profile_plans_the_study_from_local_copies(repo, tmp_path, shared_data):
    (tmp_path / "shared").symlink_to(shared_data.parent)
    (tmp_path / "project").mkdir()
    plan = dry_run(repo, tmp_path / "project", "study-cpu")
    counts = {line.split()[0]: int(line.split()[1]) for line in plan.splitlines()
              if len(line.split()) == 2 and line.split()[1].isdigit()}
    assert "download_dataset" not in plan
    assert counts["hparam_grid"] == 3 * 10 and counts["hparam_noise"] == 2  # ε ∈ {∞, 8, 1}, R = 10


def test_real_cpu_profile_plans_from_local_copies(repo, tmp_path, shared_data):
    (tmp_path / "shared").symlink_to(shared_data.parent)  # ../shared beside the project, as here
    (tmp_path / "project").mkdir()
    plan = dry_run(repo, tmp_path / "project", "real-cpu")
    assert "download_dataset" not in plan and "train_shard" in plan


def test_an_unknown_profile_stops_before_any_job(repo, tmp_path):
    with pytest.raises(AssertionError, match="profile: 'nope' is not a profile"):
        dry_run(repo, tmp_path, "nope")
