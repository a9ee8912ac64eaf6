"""Query-transfer's surrogates: their job (rule query_surrogates, `miaflow.queries.surrogates`)
and the attack's scores on them.

Toy experiments are written to disk as the workflow would (dataset, splits, signal store, model
shards), so the job functions and `miaflow.jobs.evaluate.score_attacks` run exactly as in a
Snakemake job. The other query artifacts' test modules reuse these helpers.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from miaflow.attacks.inputs import attack_inputs
from miaflow.attacks.scoring import run_attack
from miaflow.data import Dataset, write_dataset
from miaflow.io import write_parquet
from miaflow.jobs import evaluate, queries
from miaflow.plan import Experiment
from miaflow.queries.surrogates import surrogate_logits
from miaflow.seeding import rng as named_rng
from miaflow.signals import SignalStore, outputs_table, write_signal_shard
from miaflow.splits import make_splits

LR = {"kind": "lr", "C": 100.0, "max_iter": 500}
MLP = {
    "kind": "mlp",
    "hidden": [32],
    "activation": "tanh",
    "optimizer": "adam",
    "lr": 0.01,
    "weight_decay": 0.0,
    "epochs": 5,
    "batch_size": 64,
    "patience": 0,
}
CNN = {
    "kind": "cnn",
    "channels": [4],
    "hidden": 16,
    "optimizer": "adam",
    "lr": 0.01,
    "weight_decay": 0.0,
    "epochs": 30,
    "batch_size": 32,
    "patience": 0,
}
CATBOOST = {
    "kind": "catboost",
    "iterations": 20,
    "learning_rate": 0.1,
    "depth": 3,
    "early_stopping_rounds": 0,
}


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_experiment(root, features, labels, n_classes, logits_of, modality="tabular"):
    """Dataset, splits (2 targets, 4 references) and one signal shard with `logits_of(splits)`
    (n_models, n, C) for every model. Returns the three paths and the splits."""
    dataset = Dataset(
        "toy", modality, features.astype(np.float32), labels.astype(np.int64), n_classes
    )
    splits = make_splits(
        len(labels), seed=0, dataset="toy", repeats=2, n_reference=4, n_population=0
    )
    data, split_path, signals = (
        root / "data.parquet",
        root / "splits.parquet",
        root / "signals.parquet",
    )
    write_dataset(data, dataset)
    write_parquet(split_path, splits.to_table(), {"data_hash": dataset.content_hash()})
    table = outputs_table(
        list(splits.model_ids), np.arange(len(labels)), dataset.labels, logits_of(splits)
    )
    write_signal_shard(signals, table, {"data_hash": dataset.content_hash()})
    return data, split_path, signals, splits


def _scores(root, splits_path, signals, attack, artifacts, options=None, repeat=1):
    """Scores of `attack` for target `repeat` through `miaflow.jobs.evaluate.score_attacks`, and
    its ground truth."""
    output = root / f"{attack}.parquet"
    evaluate.score_attacks(
        splits=splits_path,
        signals=[signals],
        reference_signals=[signals],
        scores=output,
        timings=root / f"{attack}.tsv",
        metrics=root / f"{attack}-metrics.parquet",
        roc=root / f"{attack}-roc.parquet",
        experiment=Experiment("toy", "arch", "arch"),
        attacks=[attack],
        options={attack: options or {}},
        seed=0,
        fpr_levels=[0.1],
        confidence=0.95,
        **artifacts,
    )
    table = pd.read_parquet(output)
    return table[table["repeat"] == repeat]


def _memorising_target(labels, n_classes, seed=1):
    """Every model puts logit 4 on the true label of its members and on a random label otherwise."""

    def logits_of(splits):
        rng = np.random.default_rng(seed)
        guess = rng.integers(0, n_classes, size=splits.keep.shape)
        predicted = np.where(splits.keep, labels, guess)
        return 4.0 * np.eye(n_classes, dtype=np.float32)[predicted]

    return logits_of


@pytest.fixture(scope="module")
def transfer_toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("transfer")
    rng = np.random.default_rng(0)
    n, n_classes = 400, 10
    labels = rng.integers(0, n_classes, size=n)
    features = rng.normal(size=(n, 60))
    paths = _write_experiment(
        root, features, labels, n_classes, _memorising_target(labels, n_classes)
    )
    return root, paths


def test_query_transfer_detects_members_of_a_memorising_target(transfer_toy):
    root, (data, splits_path, signals, splits) = transfer_toy
    output = root / "surrogates.parquet"
    queries.query_surrogates(
        data=data,
        splits=splits_path,
        signals=[signals],
        surrogates=output,
        arch_name="lr",
        arch=LR,
        options={},
        seed=0,
        threads=1,
    )
    surrogates = pd.read_parquet(output)
    assert sorted(surrogates["model_id"].unique()) == ["target-0", "target-1"]
    assert len(surrogates) == 2 * len(splits.target_samples)
    scores = _scores(root, splits_path, signals, "query-transfer", {"surrogates": output})
    assert roc_auc_score(scores["is_member"], scores["score"]) > 0.75
    # The score is minus the surrogate's true-label loss, row by row.
    mine = surrogates[surrogates["model_id"] == "target-1"]
    np.testing.assert_allclose(scores["score"].to_numpy(), -mine["loss"].to_numpy())

    again = root / "surrogates-again.parquet"
    queries.query_surrogates(
        data=data,
        splits=splits_path,
        signals=[signals],
        surrogates=again,
        arch_name="lr",
        arch=LR,
        options={},
        seed=0,
        threads=1,
    )
    assert _digest(again) == _digest(output)


def test_surrogate_learns_the_targets_labels_on_its_training_part():
    rng = np.random.default_rng(3)
    features = rng.normal(size=(200, 300)).astype(np.float32)
    predicted = rng.integers(0, 3, size=200)
    logits = surrogate_logits(LR, features, predicted, 3, 0.1, seed=5, threads=1, model_id="s")
    held_out = named_rng(5, "validation").random(200) < 0.1
    assert 0.03 < held_out.mean() < 0.2  # Bernoulli(0.1)
    agrees = logits.argmax(axis=1) == predicted
    assert agrees[~held_out].mean() == 1.0  # random labels in 300 dims: memorised
    assert agrees[held_out].mean() < 0.7  # ... and not learnable on the held-out part


def test_rows_of_another_pool_are_rejected(transfer_toy, tmp_path):
    root, (data, splits_path, signals, splits) = transfer_toy
    frame = pd.DataFrame(
        {"model_id": "target-0", "sample_id": splits.target_samples[:-1], "loss": 0.0}
    )
    path = tmp_path / "short.parquet"
    write_parquet(path, frame)
    inputs, _ = attack_inputs(SignalStore.read([signals]), splits, 0, extra={"surrogates": path})
    with pytest.raises(ValueError, match="do not cover"):
        run_attack("query-transfer", inputs)
