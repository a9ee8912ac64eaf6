"""Two runs' headlines side by side (miaflow.tools.compare) on synthetic metrics."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from test_summary import metric_rows

from miaflow import io
from miaflow.tools.compare import comparison, main


def run_at(root: Path, rows: list[dict]) -> Path:
    io.write_parquet(root / "results/metrics.parquet", pd.DataFrame(rows))
    return root


def test_experiments_of_both_runs_first_then_those_of_one(tmp_path):
    first = run_at(
        tmp_path / "a",
        metric_rows("digits", "cnn", "lira", [0.70, 0.72, 0.68], 0.1)
        + metric_rows("digits", "cnn", "loss", [0.60, 0.60, 0.60])
        + metric_rows("adult", "mlp", "loss", [0.55]),
    )
    second = run_at(
        tmp_path / "b",
        metric_rows("digits", "cnn", "loss", [0.80, 0.80], 0.2)
        + metric_rows("cifar10", "wrn", "rmia", [0.9, 0.9], tpr=None),
    )
    lines = comparison(first, second)
    assert lines[1].split() == ["experiment", str(first), str(second)]
    assert [line.split()[0] for line in lines[2:]] == ["digits/cnn", "adult/mlp", "cifar10/wrn"]
    columns = [re.split(r"\s{2,}", line.strip()) for line in lines[2:]]
    assert columns == [
        [
            "digits/cnn",
            "lira AUROC 0.700 ± 0.020, TPR@1%FPR 0.100 (3)",
            "loss AUROC 0.800 ± 0.000, TPR@1%FPR 0.200 (2)",
        ],
        ["adult/mlp", "loss AUROC 0.550, TPR@1%FPR 0.050 (1)", "-"],
        ["cifar10/wrn", "-", "rmia AUROC 0.900 ± 0.000 (2)"],
    ]
    # aligned: each run's column starts where its header does
    assert lines[2].index("loss AUROC 0.8") == lines[1].index(str(second))


def test_a_run_without_metrics_is_named(tmp_path, capsys):
    run_at(tmp_path / "a", metric_rows("digits", "cnn", "lira", [0.7]))
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    assert f"{tmp_path / 'b/results/metrics.parquet'} not found" in capsys.readouterr().err
