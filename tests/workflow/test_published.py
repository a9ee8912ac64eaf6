"""Published against reproduced: the one data file of published values is well formed and
sourced, and the table puts this run's target models beside it in units of their spread."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from test_workflow_e2e import SHARED_DATA, make_project, run, tiny_params

from miaflow.data import DATASETS
from miaflow.evaluation.published import PUBLISHED, counterparts, published_table


def test_every_published_value_names_its_source_and_a_known_dataset():
    published = pd.read_csv(PUBLISHED)
    assert not published.isna().any().any()
    assert set(published["dataset"]) <= set(DATASETS)
    assert published["value"].between(0, 1).all()
    assert all(
        q in ("train_acc", "test_acc") or q.startswith("auroc:") for q in published["quantity"]
    )
    assert not published.duplicated(["dataset", "target_model", "quantity"]).any()


def test_counterparts_are_the_targets_with_a_published_value():
    assert counterparts([("adult", "mlp"), ("adult", "lr"), ("location30", "mlp_sm")]) == [
        ("adult", "mlp"),
        ("location30", "mlp_sm"),
    ]


def test_the_table_puts_the_runs_mean_beside_the_published_value():
    published = pd.read_csv(PUBLISHED)
    models = pd.DataFrame(
        {
            "dataset": "students_dropout",
            "arch": "mlp",
            "role": ["target", "target", "target", "reference"],
            "train_acc": [0.80, 0.84, 0.82, 0.99],
            "test_acc": [0.70, 0.72, 0.74, 0.5],
        }
    )
    metrics = pd.DataFrame(
        {
            "dataset": "students_dropout",
            "target_model": "mlp",
            "attack": "metric-loss",
            "metric": ["auroc", "auroc", "tpr"],
            "repeat": [0, 1, 0],
            "value": [0.55, 0.57, 0.1],
        }
    )
    table = published_table(published, models, metrics, "fidelity").set_index("quantity")
    assert list(table.index) == ["train_acc", "test_acc", "auroc:metric-loss"]
    assert table.loc["train_acc", "reproduced"] == pytest.approx(0.82)
    assert table.loc["train_acc", "std"] == pytest.approx(0.02)
    assert table.loc["train_acc", "difference_in_std"] == pytest.approx(
        (0.82 - 0.855) / 0.02, abs=1e-3
    )
    assert table.loc["auroc:metric-loss", "n"] == 2
    assert table.loc["auroc:metric-loss", "published"] == pytest.approx(0.5661)
    assert "Table 8" in table.loc["train_acc", "source"]
    one = published_table(published, models[models.index != 1].head(1), metrics, "fidelity")
    assert math.isnan(one.loc[0, "difference_in_std"])  # one target model: no spread


@pytest.mark.e2e
@pytest.mark.skipif(not (SHARED_DATA / "students_dropout").is_dir(), reason="needs ../shared/data")
def test_a_run_with_a_published_counterpart_writes_the_table(tmp_path):
    """Through snakemake: Students' dropout with TDDBench's preprocessing and an MLP named as in
    the published file gets its row for each published quantity it measured."""
    params = tiny_params()
    params["experiments"] = [{"dataset": "students_dropout", "arch": "mlp"}]
    params["datasets"]["students_dropout"] = {
        "path": str(SHARED_DATA / "students_dropout/students_dropout_academic_success.csv"),
        "preprocessing": "tddbench",
    }
    params["architectures"]["mlp"].update(hidden=[64], epochs=5)
    params["attacks"] = ["metric-loss", "model-lira"]
    params["splits"].update(repeats=2, n_reference=2, n_population=0)
    params["llm"]["experiments"] = []
    params["hparam_study"]["settings"] = []
    root = make_project(tmp_path / "published", params)
    run(["snakemake", "published_table", "--cores", "2"], root)
    table = pd.read_csv(root / "results/tables/published.csv")
    assert list(table["quantity"]) == [
        "train_acc",
        "test_acc",
        "auroc:metric-loss",
        "auroc:model-lira",
    ]
    assert (table["n"] == 2).all() and table["reproduced"].between(0.3, 1).all()
    assert (
        "Published against reproduced (profile default)"
        in (root / "results/tables/published.md").read_text()
    )
