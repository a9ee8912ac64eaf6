"""Defended targets through the real workflow: adversarial regularization, DP-SGD and MemGuard
recipes train (or release) their target, reference and population models, and every attack the
experiment plans scores them, beside the undefended recipe."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_workflow_e2e import make_project, run, tiny_params

from miaflow import io

pytestmark = pytest.mark.e2e

MLP = {
    "kind": "mlp",
    "hidden": [64],
    "activation": "tanh",
    "optimizer": "adam",
    "lr": 0.01,
    "weight_decay": 0.0,
    "epochs": 20,
    "batch_size": 32,
    "patience": 0,
}
DEFENDED = {
    "mlp": MLP,
    "mlp_advreg": {**MLP, "defense": {"kind": "adversarial_regularization", "lambda": 3}},
    "mlp_dp": {
        **MLP,
        "defense": {
            "kind": "dp_sgd",
            "epsilon": 4,
            "delta": 1e-5,
            "max_grad_norm": 1.0,
            "accountant": "gdp",
        },
    },
    "mlp_memguard": {
        **MLP,
        "defense": {
            "kind": "memguard",
            "budget": 0.5,
            "classifier_epochs": 30,
            "classifier_lr": 0.05,
        },
    },
}
ATTACKS = [
    "metric-loss",
    "sm-corr",
    "sm-conf",
    "sm-ent",
    "sm-ment",
    "sm-risk",
    "lira-offline",
    "learn-original",
]


def test_every_defense_trains_and_is_attacked_by_the_suite(tmp_path: Path):
    params = tiny_params()
    params["experiments"] = [{"dataset": "purchase", "arch": name} for name in DEFENDED]
    params["datasets"]["purchase"] = {
        "n_samples": 1000,
        "n_features": 300,
        "n_classes": 50,
        "density": 0.05,
    }
    params["architectures"].update(DEFENDED)
    params["attacks"] = ATTACKS
    params["splits"].update(repeats=2, n_reference=2, n_population=2)
    # MemGuard's protocol, scaled: exactly 200 members and 200 evaluated non-members per target,
    # a shadow (population-0) of 100 members and 100 non-members disjoint from them, 400 in reserve
    params["splits"]["datasets"] = {
        "purchase": {
            "target_size": 400,
            "members": 200,
            "auxiliary_size": 200,
            "shadow": "auxiliary",
        }
    }
    params["llm"]["experiments"] = []
    root = make_project(tmp_path / "defended", params)
    run(["snakemake", "evaluate", "--cores", "2"], root)
    splits = io.read_table(root / "results/prepare/splits/purchase.parquet")
    assert splits.schema.metadata[b"shadow_pool"] == b"auxiliary"
    assert splits.column("pool").to_pandas().value_counts().to_dict() == {
        "target": 400,
        "auxiliary": 200,
        "reserve": 400,
    }
    assert [sum(splits.column(m).to_pylist()) for m in ("target-0", "target-1")] == [200, 200]
    scores = {}
    for arch in DEFENDED:
        metrics = io.read_parquet(root / f"results/evaluate/metrics/purchase/{arch}.parquet")
        auroc = metrics[metrics["metric"] == "auroc"]
        assert set(auroc["attack"]) == set(ATTACKS), arch
        scored = io.read_parquet(root / f"results/evaluate/scores/purchase/{arch}.parquet")
        assert (
            (scored.groupby(["attack", "repeat"])["is_member"].agg(["size", "sum"]) == [400, 200])
            .all()
            .all()
        )
        scores[arch] = auroc.groupby("attack")["value"].mean()
    # MemGuard releases other confidences than its model's, never another label
    from miaflow.data import read_dataset
    from miaflow.models.shards import load_shard, shard_logits
    from miaflow.signals import signals_from_logits

    dataset = read_dataset(root / "results/prepare/data/purchase.parquet")
    for shard in sorted(
        (root / "results/train/models/purchase/mlp_memguard").glob("*.safetensors")
    ):
        weights, metadata = load_shard(shard)
        own = signals_from_logits(shard_logits(weights, metadata, dataset.features), dataset.labels)
        released = io.read_parquet(
            root
            / "results/train/signals/purchase/mlp_memguard"
            / shard.with_suffix(".parquet").name
        )
        assert np.array_equal(released["correct"], own["correct"].reshape(-1))
        shift = np.abs(released["confidence"] - own["confidence"].reshape(-1))
        assert shift.max() > 0.01 and shift.mean() < 0.5
    log = (root / "records/train/logs/train_shard/purchase/mlp_dp/shard-0.log").read_text()
    assert "DP-SGD: sigma" in log and "epsilon" in log

    # Song & Mittal's defense table and trade-off figure
    run(["snakemake", "defense_report", "--cores", "2"], root)
    table = pd.read_csv(root / "results/tables/defenses.csv").set_index("target_model")
    assert list(table.index) == list(DEFENDED)
    assert table.loc["mlp_advreg", "defense"] == "adversarial regularization (λ = 3, 20 epochs)"
    assert table.loc["mlp_dp", "defense"] == "dp sgd (ε = 4, δ = 1e-05, 20 epochs)"
    assert table.loc["mlp", "defense"] == "none (20 epochs)"
    assert (table.drop(index="mlp")["matched_undefended"] == "mlp").all()
    for column in (
        "train_acc",
        "test_acc",
        "nn_attack",
        "corr",
        "conf",
        "ent",
        "mentr",
        "best_tpr_at_1pct_fpr",
    ):
        assert table[column].between(0, 1).all(), column
    assert table.loc["mlp", "train_acc"] > table.loc["mlp_dp", "train_acc"]
    for figure in ("defense-tradeoff.png", "defense-risk-cdf.png"):
        assert (root / "results/figures" / figure).stat().st_size > 10_000
