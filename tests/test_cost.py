"""The cost estimate of a plan: known per-job times in, predicted totals out."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest

from miaflow.workflow import cost, needs, plan

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def write_record(records, stage, rule, job, wall, cpu):
    path = records / stage / "benchmarks" / rule / f"{job}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{wall}\t0:00:01\t100\t200\t90\t95\t1\t1\t50\t{cpu}\n")


@pytest.fixture
def default_config(repo, monkeypatch):
    monkeypatch.chdir(repo)
    return needs.effective_config([])


def planned(*jobs):
    return pd.DataFrame(jobs, columns=["stage", "rule", "job"])


def test_known_job_times_give_the_predicted_totals(tmp_path, default_config):
    """Training scales with models x epochs per kind, an experiment's jobs with its models, a job
    without a size costs the median record, and a rule without records stays unknown."""
    models = len(plan.model_ids(default_config))
    epochs = default_config["architectures"]["mlp"]["epochs"]
    records = tmp_path / "records"
    # 0.01 CPU-s (0.05 wall-s) per model-epoch; 0.5 CPU-s per model of an experiment.
    write_record(
        records, "train", "train_shard", "purchase/mlp/shard-0", models * epochs * 0.05,
        models * epochs * 0.01,
    )  # fmt: skip
    write_record(records, "evaluate", "score_attacks", "purchase/mlp", models, models * 0.5)
    for dataset, seconds in (("a", 2), ("b", 4), ("c", 9)):
        write_record(records, "prepare", "prepare_dataset", dataset, seconds, seconds)

    bigger = dict(
        default_config,
        splits=dict(default_config["splits"], n_reference=20),
        training=dict(default_config["training"], models_per_job=8),
    )
    shards = plan.shards(bigger)
    assert len(shards) > 1 and len(plan.model_ids(bigger)) > models
    jobs = planned(
        *[("train", "train_shard", f"purchase/mlp/shard-{k}") for k in range(len(shards))],
        ("evaluate", "score_attacks", "purchase/mlp"),
        ("prepare", "prepare_dataset", "purchase"),
        ("prepare", "prepare_dataset", "digits"),
        ("report", "tables", "all"),
    )
    history = cost.sized(cost.recorded(records), default_config)
    table = cost.estimate(cost.sized(jobs, bigger), cost.rates(history)).set_index("rule")

    planned_models = len(plan.model_ids(bigger))
    assert table.loc["train_shard", "cpu_s"] == pytest.approx(planned_models * epochs * 0.01)
    assert table.loc["train_shard", "wall_s"] == pytest.approx(planned_models * epochs * 0.05)
    assert table.loc["train_shard", "records"] == "train_shard:mlp:1"
    assert table.loc["score_attacks", "cpu_s"] == pytest.approx(planned_models * 0.5)
    assert table.loc["prepare_dataset", "cpu_s"] == pytest.approx(2 * 4)
    assert table.loc["prepare_dataset", "basis"] == "median job"
    assert math.isnan(table.loc["tables", "cpu_s"]) and table.loc["tables", "basis"] == "no records"

    stages = cost.by_stage(table.reset_index()).set_index("stage")
    assert stages.loc["total", "cpu_s"] == pytest.approx(
        planned_models * epochs * 0.01 + planned_models * 0.5 + 8
    )
    assert stages.loc["total", "unknown"] == 1 and math.isnan(stages.loc["report", "cpu_s"])
    assert list(stages.index[:3]) == ["prepare", "train", "evaluate"]  # the stages' order


def test_training_rates_are_per_architecture_kind(default_config):
    """A CatBoost shard's seconds do not set the MLP's rate."""
    records = planned(
        ("train", "train_shard", "purchase/mlp/shard-0"),
        ("train", "train_shard", "breast_cancer/catboost/shard-0"),
    ).assign(s=[10.0, 100.0], cpu_time=[5.0, 50.0])
    fitted = cost.rates(cost.sized(records, default_config))
    models = len(plan.model_ids(default_config))
    assert fitted["train_shard:mlp"]["cpu_s_per_unit"] == pytest.approx(
        5 / (models * default_config["architectures"]["mlp"]["epochs"])
    )
    assert fitted["train_shard:catboost"]["cpu_s_per_unit"] == pytest.approx(
        50 / (models * default_config["architectures"]["catboost"]["iterations"])
    )


def test_planned_jobs_are_read_from_the_dry_runs_benchmark_lines():
    dry_run = (
        "rule train_shard:\n    jobid: 3\n"
        "    benchmark: records/train/benchmarks/train_shard/digits/cnn/shard-0.tsv\n\n"
        "rule all:\n    jobid: 0\n"
    )
    assert cost.planned_keys(dry_run).to_dict("records") == [
        {"stage": "train", "rule": "train_shard", "job": "digits/cnn/shard-0"}
    ]


def test_the_cli_predicts_a_finished_run_from_its_own_records(finished_run):
    """On a finished tiny run every planned rule has records, and its training, predicted from
    its own records (same sizes), costs the CPU seconds recorded."""
    result = subprocess.run(
        [sys.executable, "-m", "miaflow.workflow.cost", "--rules"],
        cwd=finished_run,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "no records" not in result.stdout
    line = next(x for x in result.stdout.splitlines() if "train/train_shard:" in x)
    predicted = float(line.split(", ")[1].split(" / ")[0])
    measured = cost.recorded(finished_run / "records")
    recorded = measured.loc[measured["rule"] == "train_shard", "cpu_time"].sum()
    assert predicted == pytest.approx(recorded, abs=0.1)
