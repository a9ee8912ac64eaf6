from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from miaflow.evaluation import plots, tables
from miaflow.evaluation.plots import plot_roc_loglog
from miaflow.evaluation.tables import (
    accuracy_table,
    auroc_table,
    cost_table,
    format_mean_std,
    write_table,
)
from miaflow.runtime import joblog
from miaflow.runtime.joblog import read_benchmarks

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SNAKEMAKE_HEADER = (
    "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
)


def test_format_mean_std():
    assert format_mean_std(0.81234, 0.01251) == "0.812 ± 0.013"
    assert format_mean_std(0.5, 0.0, digits=2) == "0.50 ± 0.00"
    assert format_mean_std(0.5, math.nan) == "0.500"
    assert format_mean_std(math.nan, math.nan) == tables.MISSING


def test_write_table_writes_three_files(tmp_path: Path):
    table = pd.DataFrame(
        {"attack": ["metric_loss", "lira"], "toy/mlp": ["0.812 ± 0.013", "0.900 ± 0.002"]}
    )
    write_table(table, tmp_path / "auroc", "AUROC of tpr_at_1pct, 5% level")

    assert (tmp_path / "auroc.csv").read_text() == (
        "attack,toy/mlp\nmetric_loss,0.812 ± 0.013\nlira,0.900 ± 0.002\n"
    )
    markdown = (tmp_path / "auroc.md").read_text().splitlines()
    assert markdown[0] == "AUROC of tpr_at_1pct, 5% level"
    assert markdown[1] == ""
    assert "| metric_loss | 0.812 ± 0.013 |" in [" ".join(line.split()) for line in markdown]

    latex = (tmp_path / "auroc.tex").read_text()
    assert r"\caption{AUROC of tpr\_at\_1pct, 5\% level}" in latex
    assert r"metric\_loss & 0.812 ± 0.013 \\" in latex
    assert sorted(p.name for p in tmp_path.iterdir()) == ["auroc.csv", "auroc.md", "auroc.tex"]


def _summary() -> pd.DataFrame:
    rows = [
        ("toy", "mlp", "loss", "auroc", 0.8123, 0.0134, 5),
        ("toy", "mlp", "lira", "auroc", 0.9, 0.002, 5),
        ("toy", "cnn", "loss", "auroc", 0.7, 0.01, 5),  # lira missing here
        ("toy", "mlp", "loss", "tpr_at_1pct_fpr", 0.05, 0.01, 5),  # not AUROC
    ]
    return pd.DataFrame(
        rows, columns=["dataset", "target_model", "attack", "metric", "mean", "std", "n_repeats"]
    )


def test_auroc_table():
    table = auroc_table(_summary())
    assert list(table.columns) == ["attack", "toy/cnn", "toy/mlp"]
    assert table.set_index("attack").to_dict("index") == {
        "lira": {"toy/cnn": "–", "toy/mlp": "0.900 ± 0.002"},
        "loss": {"toy/cnn": "0.700 ± 0.010", "toy/mlp": "0.812 ± 0.013"},
    }
    caption = table.attrs["caption"]
    assert "ddof = 1" in caption and "over 5 target models" in caption


def test_auroc_table_marks_each_columns_best_and_what_its_test_does_not_separate():
    tests = pd.DataFrame(
        {
            "family": ["vs-best", "vs-best", "family-best"],
            "dataset": "toy",
            "target_model": ["mlp", "cnn", "mlp"],
            "metric": "auroc",
            "attack_a": ["lira", "loss", "lira"],
            "attack_b": ["loss", "other", "loss"],
            "reject_delong": [False, True, True],
        }
    )
    table = auroc_table(_summary(), tests).set_index("attack")
    assert table.loc["lira", "toy/mlp"] == "0.900 ± 0.002 (best)"
    assert table.loc["loss", "toy/mlp"] == "0.812 ± 0.013 (n.s.)"  # not rejected: a tie
    assert table.loc["loss", "toy/cnn"] == "0.700 ± 0.010 (best)"
    assert "not separated" in table.attrs["caption"]


def test_accuracy_table():
    models = pd.DataFrame(
        {
            "dataset": "toy",
            "arch": "mlp",
            "model_id": ["target-0", "target-1", "reference-0"],
            "role": ["target", "target", "reference"],
            "train_acc": [1.0, 0.9, 0.1],
            "test_acc": [0.8, 0.8, 0.1],
        }
    )
    table = accuracy_table(models)
    assert table.to_dict("records") == [
        {
            "dataset": "toy",
            "arch": "mlp",
            "n_models": 2,
            "train_acc": f"0.950 ± {np.std([1.0, 0.9], ddof=1):.3f}",
            "test_acc": "0.800 ± 0.000",
            "gap": f"0.150 ± {np.std([0.2, 0.1], ddof=1):.3f}",
        }
    ]


def _tests(min_p_perm_by: float) -> pd.DataFrame:
    """Rows as `miaflow.evaluation.stats.paired_tests` writes them: two questions on toy/mlp."""
    return pd.DataFrame(
        {
            "family": ["family-best", "vs-best", "vs-best"],
            "dataset": "toy",
            "target_model": "mlp",
            "metric": "auroc",
            "attack_a": ["a", "a", "a"],
            "attack_b": ["b", "b", "c"],
            "attack_family_a": "lira",
            "attack_family_b": ["metric", "metric", "lira"],
            "n_repeats": 5,
            "n_samples": 1000,
            "mean_a": 0.7,
            "mean_b": [0.6, 0.6, 0.69],
            "mean_diff": [0.1, 0.1, 0.01],
            "p_ttest_by": [0.004, 0.008, 0.5],
            "reject_ttest": [True, True, False],
            "p_perm_by": [0.01, 0.02, 0.6],
            "reject_perm": [True, True, False],
            "p_delong_by": [1e-9, 2e-9, 0.3],
            "reject_delong": [True, True, False],
            "n_resamples": 199,
            "min_p_perm_by": min_p_perm_by,
            "alpha": 0.05,
        }
    )


def test_tests_table():
    table = tables.tests_table(_tests(0.01))  # not imported by name: pytest would collect it
    assert list(table.columns) == tables.TESTS_COLUMNS
    assert {"attack_a", "attack_b", "p_ttest_by", "p_perm_by"} <= set(table.columns)
    assert table["sig"].tolist() == ["*†‡", "*†‡", ""]
    assert "5 target models" in table.attrs["caption"]
    assert "Warning" not in table.attrs["caption"]
    markdown = tables.tests_markdown(table)
    # A section per experiment, and per metric and question with its size and reach.
    assert markdown.count("## toy / mlp") == 1
    assert "**auroc, family-best**" in markdown and "**auroc, vs-best**" in markdown
    assert "2 comparisons, BY over these; p_perm_by ≥ 0.01." in markdown
    assert "cannot reject" not in markdown


def test_tests_table_warns_where_a_family_cannot_reject(tmp_path):
    tables.write_tests_table(_tests(0.08), tmp_path / "tests")
    markdown = (tmp_path / "tests.md").read_text()
    assert "Warning: 2 families cannot reject" in markdown
    assert markdown.count("the permutation test cannot reject here") == 2
    assert len(pd.read_csv(tmp_path / "tests.csv")) == 3


def _write_benchmark(path: Path, *records: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SNAKEMAKE_HEADER + "".join(r + "\n" for r in records))
    return path


def test_read_benchmarks_and_cost_table(tmp_path: Path):
    root = tmp_path / "results"
    paths = [
        _write_benchmark(
            root / "train" / "benchmarks" / "train_target" / "toy" / "mlp-0.tsv",
            "12.5000\t0:00:12\t512.25\t900.00\t500.00\t505.00\t1.00\t2.00\t95.00\t11.90",
        ),
        _write_benchmark(
            root / "train" / "benchmarks" / "train_target" / "toy" / "mlp-1.tsv",
            "7.5000\t0:00:07\t1024.00\t1500.00\t1000.00\t1001.00\t-\t-\t90.00\t6.80",
        ),
        _write_benchmark(
            root / "attack" / "benchmarks" / "score" / "toy" / "loss.tsv",
            "0.2500\t0:00:00\tNA\tNA\tNA\tNA\tNA\tNA\tNA\tNA",
        ),
    ]
    runs = read_benchmarks(paths)
    assert runs[["stage", "rule", "job"]].values.tolist() == [
        ["attack", "score", "toy/loss"],
        ["train", "train_target", "toy/mlp-0"],
        ["train", "train_target", "toy/mlp-1"],
    ]
    assert runs["s"].tolist() == [0.25, 12.5, 7.5]
    assert np.isnan(runs.loc[0, "max_rss"]) and np.isnan(runs.loc[2, "io_in"])
    assert "h:m:s" not in runs.columns

    misplaced = _write_benchmark(
        root / "train" / "train_target" / "x.tsv", "1.0\t0:00:01\t1\t1\t1\t1\t1\t1\t1\t1"
    )
    with pytest.raises(ValueError, match="benchmarks"):
        read_benchmarks([misplaced])

    table = cost_table(runs)
    assert table.columns.tolist() == [
        "stage",
        "rule",
        "jobs",
        "total_wall_s",
        "max_wall_s",
        "peak_max_rss_mib",
        "total_cpu_s",
    ]
    train = table[table.rule == "train_target"].iloc[0]
    assert (train.jobs, train.total_wall_s, train.max_wall_s) == (2, 20.0, 12.5)
    assert (train.peak_max_rss_mib, train.total_cpu_s) == (1024.0, pytest.approx(18.7))
    attack = table[table.rule == "score"].iloc[0]
    assert np.isnan(attack.total_cpu_s)  # not measured is not zero
    total = table.iloc[-1]
    assert (total.stage, total.jobs, total.total_wall_s, total.peak_max_rss_mib) == (
        "total",
        3,
        20.25,
        1024.0,
    )


def test_read_benchmarks_takes_a_jobs_cpu_and_a_forked_jobs_memory_from_its_log(tmp_path: Path):
    """Snakemake samples a job's processes (the last sample, every 30 s after the first 15) and
    cannot see a job forked from the run's warm process: the job's log has its own numbers."""
    record = "40.0\t0:00:40\t30.00\t900.00\t25.00\t26.00\t1.00\t2.00\t95.00\t0.40"
    records = tmp_path / "records" / "train" / "benchmarks" / "train_shard"
    forked, own, unlogged = (
        _write_benchmark(records / "toy" / f"{name}.tsv", record)
        for name in ("mlp-0.5", "lr", "cnn")
    )
    logs = tmp_path / "records" / "train" / "logs" / "train_shard" / "toy"
    logs.mkdir(parents=True)
    for name, how in [("mlp-0.5", joblog.FORKED), ("lr", joblog.OWN_PROCESS)]:
        lines = [joblog.WHOLE_LINE % (40.0, 38.5, "torch"), joblog.PEAK_LINE % (512.5, how)]
        (logs / f"{name}.log").write_text("".join(f"... INFO adapter: {line}\n" for line in lines))
    # A rule without wildcards: benchmarks/<rule>/all.tsv, logs/<rule>.log.
    single = _write_benchmark(records.parent / "collect" / "all.tsv", record)
    lines = [joblog.WHOLE_LINE % (3.0, 2.5, "none"), joblog.PEAK_LINE % (99.0, joblog.FORKED)]
    (logs.parent.parent / "collect.log").write_text("".join(f"x: {line}\n" for line in lines))
    runs = read_benchmarks([forked, own, unlogged, single]).set_index("job")
    assert runs.loc["all", ["cpu_time", "max_rss"]].tolist() == [2.5, 99.0]
    assert runs.loc["toy/mlp-0.5", ["cpu_time", "max_rss"]].tolist() == [38.5, 512.5]
    assert runs.loc["toy/lr", ["cpu_time", "max_rss"]].tolist() == [38.5, 30.0]
    assert runs.loc["toy/cnn", ["cpu_time", "max_rss"]].tolist() == [0.4, 30.0]


def _roc(dataset: str = "toy") -> pd.DataFrame:
    rows = []
    for attack, power in [("strong", 0.3), ("weak", 0.8)]:
        fpr = np.concatenate([[0.0], np.geomspace(1e-5, 1, 50)])
        for repeat in range(2):
            rows.append(
                pd.DataFrame(
                    {
                        "dataset": dataset,
                        "target_model": "mlp",
                        "attack": attack,
                        "repeat": repeat,
                        "fpr": fpr,
                        "tpr": fpr ** (power + 0.01 * repeat),
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def test_plot_roc_loglog_is_deterministic_png(tmp_path: Path):
    first, second = tmp_path / "a" / "roc.png", tmp_path / "b" / "roc.png"
    plot_roc_loglog(_roc(), first, "toy / mlp", auroc={"strong": 0.81, "weak": 0.6})
    plot_roc_loglog(_roc(), second, "toy / mlp", auroc={"strong": 0.81, "weak": 0.6})
    data = first.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert data == second.read_bytes()
    assert b"Software" not in data  # matplotlib's version string would vary across installs
    assert sorted(p.name for p in first.parent.iterdir()) == ["roc.png"]  # no temp file left
    plot_roc_loglog(_roc(), second, "toy / mlp")
    assert second.read_bytes() != data  # the legend changed


def test_plot_roc_loglog_rejects_several_models(tmp_path: Path):
    with pytest.raises(ValueError, match="one dataset"):
        plot_roc_loglog(pd.concat([_roc(), _roc("other")]), tmp_path / "roc.png", "mixed")


# --- TDDBench Tables 5, 7, 14–16 and Figures 2, 4 ------------------------------------------------


def _summary_rows() -> pd.DataFrame:
    rows = [
        ("d1", "mlp", "metric-loss", "auroc", 0.6, 0.01),
        ("d1", "cnn", "metric-loss", "auroc", 0.7, 0.02),
        ("d1", "mlp", "model-loss", "auroc", 0.8, 0.03),
        ("d1", "mlp", "model-loss", "fpr", 0.2, 0.1),
        ("d1", "mlp", "model-loss", "tpr_at_1pct_fpr", 0.05, 0.01),
    ]
    frame = pd.DataFrame(
        rows, columns=["dataset", "target_model", "attack", "metric", "mean", "std"]
    )
    return frame.assign(n_repeats=5)


def test_auroc_by_architecture_puts_architectures_in_columns():
    table = tables.auroc_by_architecture(_summary_rows())
    assert list(table.columns) == ["dataset", "attack", "cnn", "mlp"]
    loss = table[table["attack"] == "metric-loss"].iloc[0]
    assert loss["cnn"] == "0.700 ± 0.020" and loss["mlp"] == "0.600 ± 0.010"
    assert table[table["attack"] == "model-loss"].iloc[0]["cnn"] == tables.MISSING


def test_all_metrics_table_orders_metrics_as_reported():
    table = tables.all_metrics_table(_summary_rows(), "d1", "mlp")
    assert list(table.columns) == ["attack", "auroc", "tpr_at_1pct_fpr", "fpr"]
    assert table.set_index("attack").loc["metric-loss", "fpr"] == tables.MISSING


def test_family_table_averages_auroc_and_takes_the_costliest_attack_run():
    timings = pd.DataFrame(
        {
            "attack": ["metric-loss", "model-loss", "metric-loss"],
            "s": [1.0, 5.0, 3.0],
            "cpu_time": [0.5, 4.0, 2.5],
        }
    )
    families = {"metric-loss": "metric", "model-loss": "model"}
    table = tables.family_table(_summary_rows(), timings, families).set_index("family")
    assert table.loc["metric", "average_auroc"] == "0.650"
    assert table.loc["metric", "best_auroc"].startswith("0.700 (metric-loss, d1/cnn)")
    assert table.loc["metric", "max_wall_s"] == "3.0" and table.loc["model", "max_cpu_s"] == "4.0"


def test_study_figures_are_deterministic_pngs(tmp_path):
    metrics = pd.DataFrame(
        {
            "dataset": "d1",
            "target_model": "mlp",
            "attack": ["metric-loss"] * 2,
            "repeat": [0, 1],
            "metric": "auroc",
            "value": [0.6, 0.7],
        }
    )
    models = pd.DataFrame(
        {
            "dataset": "d1",
            "arch": "mlp",
            "model_id": ["target-0", "target-1"],
            "role": "target",
            "train_acc": [1.0, 0.9],
            "test_acc": [0.7, 0.8],
        }
    )
    sweep = pd.DataFrame(
        {
            "attack": ["model-loss"] * 4 + ["query-neighbor"] * 2,
            "axis": ["reference models"] * 4 + ["queries"] * 2,
            "count": [2, 2, 4, 4, 1, 10],
            "repeat": [0, 1, 0, 1, 0, 0],
            "auroc": [0.6, 0.62, 0.7, 0.71, 0.55, 0.6],
        }
    )
    for name in ("a", "b"):
        plots.plot_auroc_vs_gap(
            metrics, models, {"metric-loss": "metric"}, tmp_path / f"gap-{name}.png"
        )
        plots.plot_scaling_sweep(sweep, tmp_path / f"sweep-{name}.png", "d1 / mlp")
    for stem in ("gap", "sweep"):
        first = (tmp_path / f"{stem}-a.png").read_bytes()
        assert first[:8] == PNG_MAGIC and first == (tmp_path / f"{stem}-b.png").read_bytes()


def test_reference_mismatch_table_sets_mixed_references_beside_matched_ones():
    rows = [
        ("d1", "mlp", "model-loss", "auroc", 0.8, 0.01),
        ("d1", "mlp_ref_lr", "model-loss", "auroc", 0.7, 0.02),
        ("d1", "cnn", "model-loss", "auroc", 0.6, 0.01),
    ]
    summary = pd.DataFrame(
        rows, columns=["dataset", "target_model", "attack", "metric", "mean", "std"]
    )
    architectures = {
        ("d1", "mlp"): ("mlp", "mlp"),
        ("d1", "mlp_ref_lr"): ("mlp", "lr"),
        ("d1", "cnn"): ("cnn", "cnn"),
    }
    table = tables.reference_mismatch_table(summary.assign(n_repeats=5), architectures)
    assert list(table.columns) == ["attack", "d1: mlp ← lr", "d1: mlp ← mlp"]  # no cnn: never mixed
    assert table.iloc[0]["d1: mlp ← lr"] == "0.700 ± 0.020"


def test_table_modules_do_not_import_matplotlib():
    # Importing matplotlib costs about a second per job; only the plotting functions need it.
    modules = [
        "miaflow.evaluation.tables",
        "miaflow.evaluation.song_mittal_tables",
        "miaflow.hparams.tables",
        "miaflow.jobs.report",
        "miaflow.evaluation.stats",
        "miaflow.evaluation.metrics",
    ]
    code = (
        f"import sys, {', '.join(modules)}\n"
        "assert 'matplotlib' not in sys.modules, "
        "sorted(m for m in sys.modules if 'matplotlib' in m)"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=root,
        env=dict(os.environ, PYTHONPATH=str(root)),
    )
