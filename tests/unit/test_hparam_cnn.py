"""The study on models trained from scratch (the paper's Figure A2): a digits setting with
`model: cnn` runs the same jobs as the heads' settings, its grid models are the paper's CNN
(each statistic is that of a CNN with its recipe), and its rows name the model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_hparam_blackbox import SEED, _run

from miaflow.data import load_dataset, write_dataset
from miaflow.hparams.models import fit_models
from miaflow.models.heads import HeadRecipe

CNN = {"dataset": "digits", "shots": 3, "model": "cnn"}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict[str, pd.DataFrame]:
    root = tmp_path_factory.mktemp("cnn")
    write_dataset(root / "digits.parquet", load_dataset("digits", {}, seed=0))
    return _run(root / "cnn", CNN, root / "digits.parquet", [])


def test_a_cnn_setting_runs_the_study_and_names_its_model(run):
    metrics = run["metrics"]
    assert set(metrics["setting"]) == {"digits_s3_cnn"} and set(metrics["model"]) == {"cnn"}
    assert {"lira", "acc-lira", "kl-lira", "ml-leaks", "attack-p", "qmia"} <= set(metrics["attack"])
    assert metrics["tpr"].between(0, 1).all() and metrics["auroc"].between(0, 1).all()
    grid = run["grid"]
    stats = np.stack(grid["stat"].to_numpy())
    assert np.isfinite(stats).all() and stats.std() > 0  # trained models, not constants
    assert (run["trials"]["accuracy"] > 0.1).any()  # some trial beats chance


def test_fit_models_trains_heads_or_cnns_behind_one_interface():
    digits = load_dataset("digits", {}, seed=0)
    images = np.asarray(digits.features, dtype=np.float32)
    labels = np.asarray(digits.labels)
    train = [np.arange(0, 600, 2), np.arange(1, 600, 2)]
    recipes = [HeadRecipe(32, 5e-3)] * 2
    held = np.arange(1000, 1400)
    for model, samples in (("head", images.reshape(len(images), -1)), ("cnn", images)):
        trained = fit_models(model, samples, labels, 10, train, recipes, 5, [SEED, SEED + 1])
        logits = trained.logits(samples[held])
        assert logits.shape == (2, len(held), 10) and logits.dtype == np.float64
        np.testing.assert_allclose(trained.logits(samples[held], [1])[0], logits[1], atol=1e-5)
        assert ((logits.argmax(-1) == labels[held]).mean(1) > 0.5).all(), model
    with pytest.raises(ValueError, match="unknown model"):
        fit_models("resnet", images, labels, 10, train, recipes, 1, [0, 1])
