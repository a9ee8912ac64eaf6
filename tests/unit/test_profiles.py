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
    result = subprocess.run(
        [str(snakemake), "-n", "--quiet", "rules", "--config", f"profile={profile}"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_paper_profile_plans_downloads_and_every_stage(repo, tmp_path):
    plan = dry_run(repo, tmp_path, "paper")
    for rule in (
        "download_dataset",
        "train_shard",
        "query_canaries",
        "score_attacks",
        "study_tables",
        "hparam_features",
        "hparam_run",
        "hparam_report",
        "llm_statistics",
        "llm_pairs",
        "llm_scores",
        "llm_report",
    ):
        assert rule in plan


def planned_from_local_copies(
    repo: Path, root: Path, shared_data: Path, profile: str
) -> dict[str, int]:
    """Job counts per rule of a profile's plan, reading ../shared (never downloading)."""
    (root / "shared").symlink_to(shared_data.parent)
    (root / "project").mkdir()
    plan = dry_run(repo, root / "project", profile)
    assert "download_dataset" not in plan
    return {
        line.split()[0]: int(line.split()[1])
        for line in plan.splitlines()
        if len(line.split()) == 2 and line.split()[1].isdigit()
    }


def test_llm_cpu_profile_plans_the_language_models_from_local_copies(repo, tmp_path, shared_data):
    counts = planned_from_local_copies(repo, tmp_path, shared_data, "llm-cpu")
    # SmolLM2 converted once and fine-tuned per repeat (3); the scratch GPT-2's reference trained
    # too; both again in the two trap experiments, with one target each (their own `repeats`).
    assert counts["llm_convert"] == 1 and counts["llm_train"] == 3 + (3 + 1) + 1 + (1 + 1)
    # Per repeat, the scored set's and the benchmark settings' statistics (the traps' in a trap
    # experiment), each with the first of EM-MIA's 4 pair-matrix shards; the other shards in jobs
    # of their own.
    assert counts["llm_statistics"] == 2 * 3 * 2 + 2 * 1
    assert counts["llm_reference_statistics"] == 2 * 2 + 2
    assert counts["llm_pairs"] == (2 * 3 * 2 + 2 * 1) * 3 and counts["llm_scores"] == 2
    # dataset inference on both trained targets; the traps drawn once per trap experiment
    assert counts["llm_inference_statistics"] == 2 * 3 and counts["llm_dataset_inference"] == 2
    assert counts["llm_traps"] == 2 and counts["llm_trap_scores"] == 2


def test_study_cpu_profile_plans_the_study_from_local_copies(repo, tmp_path, shared_data):
    counts = planned_from_local_copies(repo, tmp_path, shared_data, "study-cpu")
    # mnist5k on Lite0 and its black-box twin (Lite2 shadows): ε ∈ {∞, 8, 1}, R = 10
    assert counts["hparam_run"] == 2 * 3 * 10 and counts["hparam_noise"] == 2 * 2
    assert counts["hparam_features"] == 2  # mnist5k through Lite0 and Lite2, once each


def test_real_cpu_profile_plans_from_local_copies(repo, tmp_path, shared_data):
    assert "train_shard" in planned_from_local_copies(repo, tmp_path, shared_data, "real-cpu")


def test_an_unknown_profile_stops_before_any_job(repo, tmp_path):
    with pytest.raises(AssertionError, match="profile: 'nope' is not a profile"):
        dry_run(repo, tmp_path, "nope")


def test_study_scratch_cpu_profile_plans_the_cnn_study(repo, tmp_path, shared_data):
    counts = planned_from_local_copies(repo, tmp_path, shared_data, "study-scratch-cpu")
    # one CNN setting on mnist5k's images: ε ∈ {∞, 8}, R = 4, no backbone to embed with
    assert counts["hparam_run"] == 2 * 4 and counts["hparam_noise"] == 1
    assert "hparam_features" not in counts


def test_audit_cpu_profile_plans_the_privacy_audit_from_local_copies(repo, tmp_path, shared_data):
    """The heads on Location30 and six trained models (DP-SGD at ε 1 and 8 and undefended, on
    Adult and Location30), with the default's experiments."""
    jobs = planned_from_local_copies(repo, tmp_path, shared_data, "audit-cpu")
    assert jobs["privacy_heads"] == 1 and jobs["privacy_model"] == 6
    assert jobs["privacy_bounds"] == 1 and jobs["privacy_report"] == 1
    assert "hparam_run" not in jobs and "llm_train" not in jobs
