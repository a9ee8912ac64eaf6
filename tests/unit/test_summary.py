"""The end-of-run summary (miaflow.tools.summary) on a small synthetic project."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from miaflow import io
from miaflow.evaluation.best import best_attacks, low_fpr_metric, tpr_label
from miaflow.evaluation.verdicts import VERDICT_COLUMNS
from miaflow.tools.summary import job_seconds, main, summary


def metric_rows(
    dataset: str, target_model: str, attack: str, aurocs: list[float], tpr: float | None = 0.05
) -> list[dict]:
    """One AUROC (and TPR at 0.1%, 1% and 10% FPR) per repeat, in the contract's long format."""
    rows = []
    for repeat, auroc in enumerate(aurocs):
        rows.append(
            {
                "dataset": dataset,
                "target_model": target_model,
                "attack": attack,
                "repeat": repeat,
                "metric": "auroc",
                "value": auroc,
            }
        )
        if tpr is not None:
            rows += [
                {
                    "dataset": dataset,
                    "target_model": target_model,
                    "attack": attack,
                    "repeat": repeat,
                    "metric": name,
                    "value": value,
                }
                for name, value in (
                    ("tpr_at_0.1pct_fpr", tpr / 10),
                    ("tpr_at_1pct_fpr", tpr),
                    ("tpr_at_10pct_fpr", tpr * 5),
                )
            ]
    return rows


def synthetic_metrics() -> pd.DataFrame:
    rows = (
        # digits: lira wins on the mean (0.70) although loss has the single best run (0.95)
        metric_rows("digits", "cnn", "lira", [0.70, 0.72, 0.68], tpr=0.10)
        + metric_rows("digits", "cnn", "loss", [0.95, 0.40, 0.45], tpr=0.30)
        # adult: the mean runs over both target models (0.60 on mlp, 0.80 on catboost -> 0.70)
        + metric_rows("adult", "mlp", "rmia", [0.60, 0.60])
        + metric_rows("adult", "catboost", "rmia", [0.80, 0.80])
        + metric_rows("adult", "mlp", "loss", [0.69, 0.69])
        + metric_rows("adult", "catboost", "loss", [0.69, 0.69])
        # text: one run, and an attack whose AUROC is undefined
        + metric_rows("text", "gpt2", "mink", [0.65], tpr=None)
        + metric_rows("text", "gpt2", "broken", [math.nan], tpr=None)
    )
    return pd.DataFrame(rows)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """results/metrics.parquet, 2 tables in 3 formats, 3 figures and run records: two Snakemake
    benchmark files and the per-attack timings file that must not count as a job."""
    io.write_parquet(tmp_path / "results/metrics.parquet", synthetic_metrics())
    for stem in ("auroc", "tests"):
        for suffix in (".csv", ".md", ".tex"):
            (tmp_path / "results/tables").mkdir(parents=True, exist_ok=True)
            (tmp_path / f"results/tables/{stem}{suffix}").write_text("x")
    (tmp_path / "results/figures").mkdir(parents=True)
    for name in ("roc-digits-cnn.png", "roc-adult-mlp.png", "auroc-vs-gap.png"):
        (tmp_path / f"results/figures/{name}").write_bytes(b"png")
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for path, seconds in (
        ("train/benchmarks/train_shard/digits/cnn/shard-0.tsv", 50.5),
        ("evaluate/benchmarks/score_attacks/digits/cnn.tsv", 39.5),
    ):
        (tmp_path / "records" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "records" / path).write_text(
            f"{header}{seconds}\t0:00:50\t1\t1\t1\t1\t0\t0\t0\t1.0\n"
        )
    (tmp_path / "records/evaluate/benchmarks/score_attacks/digits/cnn.attacks.tsv").write_text(
        "attack\ts\tcpu_time\nlira\t30.0\t29.0\n"
    )
    io.write_parquet(tmp_path / "results/report/verdicts.parquet", synthetic_verdicts())
    return tmp_path


def synthetic_verdicts() -> pd.DataFrame:
    """The verdicts of a classifier experiment, a language-model experiment won by a Min-K% k
    point and a benchmark setting whose selection alone is separable."""
    rows = [
        ("digits", "cnn", "lira", 0.7, 0.02, 3, ["loss"], 2, "loss", 0.3, 0.01, [], 2, []),
        (
            "text",
            "gpt2",
            "llm-mink-k50",
            0.8,
            0.01,
            2,
            [],
            3,
            "llm-mink-k50",
            0.2,
            0.05,
            [],
            3,
            ["low_fpr_raised"],
        ),
        (
            "text",
            "gpt2/easy",
            "em-mia",
            1.0,
            0.0,
            2,
            ["llm-loss"],
            2,
            "em-mia",
            1.0,
            0.0625,
            ["llm-loss"],
            2,
            ["low_fpr_raised", "selection_separable"],
        ),
    ]
    table = pd.DataFrame(rows, columns=VERDICT_COLUMNS)
    return table.assign(
        separability=[np.nan, 0.6, 1.0],
        separability_form=[None, "bag_of_words", "bag_of_words"],
        attack_minus_selection=[np.nan, 0.2, 0.0],
    )


def test_best_attack_is_the_highest_mean_auroc_per_experiment_over_its_target_models():
    best = best_attacks(synthetic_metrics()).set_index(["dataset", "target_model"])
    assert list(best.index) == [
        ("adult", "catboost"),
        ("adult", "mlp"),
        ("digits", "cnn"),
        ("text", "gpt2"),
    ]
    assert best.loc[("digits", "cnn"), "attack"] == "lira"
    assert best.loc[("digits", "cnn"), "auroc"] == pytest.approx(0.70)
    assert best.loc[("digits", "cnn"), "auroc_std"] == pytest.approx(0.02)  # ddof 1, 3 targets
    assert best.loc[("digits", "cnn"), "tpr"] == pytest.approx(0.10)
    assert best.loc[("digits", "cnn"), "tpr_metric"] == "tpr_at_1pct_fpr"
    assert best.loc[("digits", "cnn"), "target_models"] == 3
    assert best.loc[("text", "gpt2"), "attack"] == "mink"
    assert math.isnan(best.loc[("text", "gpt2"), "auroc_std"])
    assert math.isnan(best.loc[("text", "gpt2"), "tpr"])


def test_experiments_of_one_dataset_are_not_averaged_together():
    """Averaged over adult's two experiments rmia (0.70) would beat loss (0.69); on adult/mlp
    loss is the best attack, on adult/catboost rmia."""
    metrics = synthetic_metrics()
    auroc = metrics[(metrics["metric"] == "auroc") & (metrics["dataset"] == "adult")]
    assert auroc.groupby("attack")["value"].mean().idxmax() == "rmia"
    best = best_attacks(metrics).set_index(["dataset", "target_model"])
    assert best.loc[("adult", "mlp"), "attack"] == "loss"
    assert best.loc[("adult", "mlp"), "auroc"] == pytest.approx(0.69)
    assert best.loc[("adult", "catboost"), "attack"] == "rmia"
    assert best.loc[("adult", "catboost"), "target_models"] == 2


def test_ties_go_to_the_first_attack_name():
    rows = metric_rows("d", "m", "zeta", [0.6]) + metric_rows("d", "m", "alpha", [0.6])
    assert best_attacks(pd.DataFrame(rows))["attack"].tolist() == ["alpha"]


def test_low_fpr_metric_prefers_one_percent_else_the_lowest_level():
    assert low_fpr_metric({"auroc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr"}) == "tpr_at_1pct_fpr"
    assert low_fpr_metric({"auroc", "tpr_at_10pct_fpr", "tpr_at_0.1pct_fpr"}) == "tpr_at_0.1pct_fpr"
    assert low_fpr_metric({"auroc", "precision"}) is None
    assert tpr_label("tpr_at_0.1pct_fpr") == "TPR@0.1%FPR"


def test_job_seconds_sums_snakemake_benchmarks_only(project):
    assert job_seconds(project) == (pytest.approx(90.0), 2)
    assert job_seconds(project / "nowhere") == (0.0, 0)


def test_summary_says_where_things_are_and_the_headline(project):
    lines = summary(project, started=1_000.0, now=1_372.0)
    text = "\n".join(lines)
    assert len(lines) <= 15
    assert f"not built yet: `make report` writes {project / 'report.html'}" in text
    assert f"{project / 'results/tables'}/ (2, as csv, md and tex" in text
    assert f"{project / 'results/figures'}/ (3)" in text
    assert f"{project / 'records'}/<stage>/logs/" in text
    best = lines.index(next(line for line in lines if line.startswith("Best"))) + 1
    assert lines[best:-1] == [
        f" AUROC as in {project / 'results/tables/auroc.md'}:",
        "  digits/cnn      lira          AUROC 0.700 ± 0.020 (not separated from: loss); "
        "TPR@1%FPR: loss 0.300 (separated from the other attack)",
        f" AUROC as in {project / 'results/tables/llm_mink_sweep.md'}:",
        "  text/gpt2       llm-mink-k50  AUROC 0.800 ± 0.010 (separated from all 2 others); "
        "TPR@5%FPR: llm-mink-k50 0.200 (separated from all 2 others); selection alone AUROC "
        "0.600 (bag of words); flags: low_fpr_raised",
        f" AUROC as in {project / 'results/tables/llm_settings.md'}:",
        "  text/gpt2/easy  em-mia        AUROC 1.000 ± 0.000 (not separated from: llm-loss); "
        "TPR@6.25%FPR: em-mia 1.000 (not separated from: llm-loss); selection alone AUROC "
        "1.000 (bag of words); flags: low_fpr_raised, selection_separable",
    ]
    assert lines[-1] == "Wall time: 6 min 12 s."


def test_summary_says_whether_the_report_shows_these_results(project):
    report, metrics = project / "report.html", project / "results/metrics.parquet"
    report.write_text("<html></html>")
    os.utime(metrics, (1_000, 1_000))
    os.utime(report, (2_000, 2_000))
    assert f"  report:   {report} (current)" in summary(project)
    os.utime(metrics, (3_000, 3_000))
    assert f"  report:   {report} (older than {metrics}: `make report` rebuilds it)" in summary(
        project
    )


def test_without_a_start_the_time_is_the_job_time_of_the_run_records(project):
    assert summary(project)[-1] == (
        "Job time: 1 min 30 s over 2 jobs (run records; jobs in parallel add up, so not wall time)."
    )


def test_an_unfinished_project_gets_a_summary_too(tmp_path, capsys):
    assert main(["--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'results/report/verdicts.parquet'} not found" in out
    assert "no run records" in out


def test_the_top_attacks_of_each_experiment_best_first():
    best = best_attacks(synthetic_metrics(), top=2)
    assert [(row.target_model, row.attack) for row in best.itertuples()] == [
        ("catboost", "rmia"),
        ("catboost", "loss"),
        ("mlp", "loss"),
        ("mlp", "rmia"),
        ("cnn", "lira"),
        ("cnn", "loss"),
        ("gpt2", "mink"),
    ]  # an undefined AUROC is no rank


def test_the_audit_stage_prints_each_audits_best_attacks(tmp_path: Path, capsys):
    """`snakemake audit` ends with its result: each audit's best attacks, in the summary's
    format, read from the audits' metrics files."""
    from miaflow.jobs.audit import BEST, audit

    metrics = pd.DataFrame(
        metric_rows("sklearn_digits", "forest", "lira", [0.9])
        + [
            row
            for k, attack in enumerate(["loss", "entropy", "zlib"])
            for row in metric_rows("sklearn_digits", "forest", attack, [0.6 + k / 100])
        ]
        + metric_rows("purchase", "mine", "loss", [0.55], tpr=0.02)
    )
    paths = []
    for (dataset, name), table in metrics.groupby(["dataset", "target_model"]):
        paths.append(tmp_path / f"results/audit/metrics/{dataset}/{name}.parquet")
        io.write_parquet(paths[-1], table)
    audit(metrics=[str(path) for path in paths])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("Best attacks of each audit")
    assert [line.split()[:2] for line in printed[1:]] == [
        ["purchase/mine", "loss"],
        ["sklearn_digits/forest", "lira"],
        ["sklearn_digits/forest", "zlib"],
        ["sklearn_digits/forest", "entropy"],
    ]
    assert BEST == 3 and "AUROC 0.900, TPR@1%FPR 0.050  (over 1 target model)" in printed[2]
    audit(metrics=[])
    assert capsys.readouterr().out.startswith("No audits configured")


def test_the_metrics_contract_keeps_every_metric_and_adds_the_ppvs(tmp_path):
    """results/metrics.parquet: every row of the experiments' metrics, then the precision of
    each target-calibrated operating point at each membership prior."""
    from miaflow.evaluation.operating_points import operating_point_table
    from miaflow.jobs.report import collect_metrics

    metrics = synthetic_metrics()
    parts = []
    for dataset, rows in metrics.groupby("dataset"):
        parts.append(tmp_path / f"{dataset}.parquet")
        io.write_parquet(parts[-1], rows.reset_index(drop=True))
    member = np.arange(40) % 2 == 0
    scores = pd.DataFrame(
        {
            "dataset": "digits",
            "target_model": "cnn",
            "attack": "lira",
            "repeat": 0,
            "sample_id": np.arange(40),
            "score": member + np.linspace(0, 1.5, 40),
            "is_member": member,
        }
    )
    io.write_parquet(tmp_path / "points.parquet", operating_point_table(scores, [0.1], [0.5]))
    collect_metrics(
        experiment_metrics=parts,
        operating_points=tmp_path / "points.parquet",
        metrics=tmp_path / "metrics.parquet",
        priors=[0.5],
    )
    written = io.read_parquet(tmp_path / "metrics.parquet")
    assert len(written) == len(metrics) + 1
    (ppv,) = written[written["metric"] == "ppv_at_10pct_fpr_50pct_prior"].itertuples()
    assert (ppv.dataset, ppv.attack, ppv.repeat) == ("digits", "lira", 0) and 0.5 < ppv.value <= 1
