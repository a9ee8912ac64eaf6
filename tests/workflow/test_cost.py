"""The cost estimate of a plan: known per-job times in, predicted totals out."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from miaflow import plan
from miaflow.tools import cost, needs

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
        [sys.executable, "-m", "miaflow.tools.cost", "--rules"],
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


def test_a_study_run_counts_the_models_it_trains(default_config):
    """HPO's trials on both families' M+1 splits, the grid's M+1 columns and the ED targets; a
    black-box run adds the attacker's HPO of its TD splits and trains only the targets' diagonal
    and ED targets on the targets' side."""
    study = default_config["hparam_study"]
    splits, trials = study["shadow_models"] + 1, study["search"]["trials"]
    setting = plan.hparam_settings(default_config)[0]
    assert cost.study_models(default_config, setting) == 2 * splits * trials + splits * (splits + 1)
    black = {**setting, "backbone": "efficientnet-lite0", "shadow_backbone": "efficientnet-lite2"}
    assert cost.study_models(default_config, black) == 3 * splits * trials + splits * (splits + 2)


def test_study_rates_are_per_kind_of_model_and_per_backbone(default_config):
    """A head run's rate scales to a larger study but does not price a CNN run; features cost
    per image of their backbone, and a backbone without records is named, not borrowed."""
    setting = plan.hparam_settings(default_config)[0]
    per_model, per_image = 0.02, 0.1
    head_models = cost.study_models(default_config, setting)
    records = planned(
        ("hparams", "hparam_run", f"{setting['name']}/eps-inf/run-0"),
        ("hparams", "hparam_run", f"{setting['name']}/eps-inf/run-1"),
        ("hparams", "hparam_features", "mnist5k/efficientnet-lite0"),
    ).assign(cpu_time=[head_models * per_model] * 2 + [5000 * per_image])
    fitted = cost.rates(cost.sized(records.assign(s=records["cpu_time"]), default_config))

    cnn = {"dataset": "mnist5k", "shots": 8, "model": "cnn"}
    study = dict(default_config["hparam_study"], shadow_models=32, settings=[setting, cnn])
    bigger = dict(default_config, hparam_study=study)
    head, cnn_setting = plan.hparam_settings(bigger)
    jobs = planned(
        ("hparams", "hparam_run", f"{head['name']}/eps-8/run-0"),
        ("hparams", "hparam_run", f"{cnn_setting['name']}/eps-8/run-0"),
        ("hparams", "hparam_features", "digits/efficientnet-lite0"),
        ("hparams", "hparam_features", "digits/efficientnet-lite2"),
    )
    costs = cost.job_costs(cost.sized(jobs, bigger), fitted)
    assert cost.study_models(bigger, head) > head_models
    assert costs["cpu_s"].iloc[0] == pytest.approx(cost.study_models(bigger, head) * per_model)
    assert costs["used"].iloc[0] == "hparam_run:head:2"
    images, _ = cost.job_size(bigger, cost.JobKey("hparams", "hparam_features", "digits/x"))
    assert 0 < images < 5000  # digits' images, from the registry without the data
    assert costs["cpu_s"].iloc[2] == pytest.approx(images * per_image)
    assert costs["basis"].iloc[[1, 3]].tolist() == ["no records"] * 2
    assert costs["cpu_s"].iloc[[1, 3]].isna().all()


def test_predictions_are_compared_on_the_jobs_the_run_measured():
    """Measured seconds count only planned jobs (a stale record of another plan does not), and
    the stage and total rows only jobs with a prediction."""
    costs = planned(
        ("hparams", "hparam_run", "s/eps-inf/run-0"),
        ("hparams", "hparam_run", "s/eps-inf/run-1"),
        ("hparams", "hparam_features", "d/b"),
        ("report", "hparam_report", "all"),
    ).assign(cpu_s=[10.0, 12.0, np.nan, 1.0])
    run = planned(
        ("hparams", "hparam_run", "s/eps-inf/run-0"),
        ("hparams", "hparam_run", "s/eps-inf/run-1"),
        ("hparams", "hparam_run", "s/eps-inf/run-9"),
        ("hparams", "hparam_features", "d/b"),
    ).assign(cpu_time=[8.0, 12.0, 100.0, 50.0])
    out = cost.against(costs, run).set_index(["stage", "rule"])
    assert out.loc[("hparams", "hparam_run"), "measured_cpu_s"] == 20.0
    assert out.loc[("hparams", "hparam_run"), "error_pct"] == pytest.approx(10.0)
    assert math.isnan(out.loc[("hparams", "hparam_features"), "cpu_s"])
    assert out.loc[("hparams", "(stage)"), "jobs"] == 2
    assert out.loc[("total", "(all)"), "measured_cpu_s"] == 20.0
    assert ("report", "hparam_report") not in out.index  # not measured by that run
