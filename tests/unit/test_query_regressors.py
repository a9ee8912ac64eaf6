"""Query-qrm's regressors: their job (rule query_regressors, `miaflow.queries.regressors`) and
the attack's scores on them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import toy_texts
from sklearn.metrics import roc_auc_score
from test_query_surrogates import CATBOOST, LR, MLP, _digest, _scores, _write_experiment

from miaflow.io import read_parquet_metadata
from miaflow.jobs import queries
from miaflow.models.kinds import KINDS
from miaflow.queries.regressors import gaussian_nll
from miaflow.signals import SignalStore


def _qrm_target(features, labels):
    """phi (= hinge, two classes) = x·w + 3·[member]: difficulty is predictable from x on A."""
    w = np.linspace(-1, 1, features.shape[1])

    def logits_of(splits):
        phi = features @ w + 3.0 * splits.keep
        sign = np.where(np.arange(2) == labels[:, None], 0.5, -0.5)
        return (phi[..., None] * sign).astype(np.float32)

    return logits_of


@pytest.fixture(scope="module")
def qrm_toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("qrm")
    rng = np.random.default_rng(1)
    n = 500
    labels = rng.integers(0, 2, size=n)
    features = rng.normal(size=(n, 8))
    paths = _write_experiment(root, features, labels, 2, _qrm_target(features, labels))
    return root, paths, features


@pytest.mark.parametrize("arch", [LR, MLP, CATBOOST], ids=lambda a: a["kind"])
def test_query_qrm_detects_members(qrm_toy, arch):
    root, (data, splits_path, signals, splits), _ = qrm_toy
    output = root / f"regressors-{arch['kind']}.parquet"
    queries.query_regressors(
        data=data,
        splits=splits_path,
        signals=[signals],
        regressors=output,
        arch_name=arch["kind"],
        arch=arch,
        options={"epochs": 20, "catboost_iterations": 50},
        seed=0,
        threads=1,
    )
    scores = _scores(root, splits_path, signals, "query-qrm", {"regressors": output})
    assert roc_auc_score(scores["is_member"], scores["score"]) > 0.9
    assert read_parquet_metadata(output)["signal"] == KINDS[arch["kind"]].qrm_signal


def test_query_qrm_catboost_is_reproducible(qrm_toy):
    root, (data, splits_path, signals, _), _ = qrm_toy
    first, second = root / "cb-1.parquet", root / "cb-2.parquet"
    for path in (first, second):
        queries.query_regressors(
            data=data,
            splits=splits_path,
            signals=[signals],
            regressors=path,
            arch_name="catboost",
            arch=CATBOOST,
            options={"catboost_iterations": 30},
            seed=0,
            threads=1,
        )
    assert _digest(first) == _digest(second)
    table = pd.read_parquet(first)
    assert np.isfinite(table[["mu", "log_sigma"]].to_numpy()).all()


def test_query_qrm_linear_path_known_answer(qrm_toy):
    """LR path: mu = least-squares fit of phi on A, sigma = std of phi over A."""
    root, (data, splits_path, signals, splits), features = qrm_toy
    output = root / "regressors-known.parquet"
    queries.query_regressors(
        data=data,
        splits=splits_path,
        signals=[signals],
        regressors=output,
        arch_name="lr",
        arch=LR,
        options={},
        seed=0,
        threads=1,
    )
    store = SignalStore.read([signals])
    aux, pool = splits.auxiliary_samples, splits.target_samples
    phi_aux = store.matrix(["target-1"], "phi", aux)[0]
    design = (
        np.hstack([features[aux], np.ones((len(aux), 1))]).astype(np.float32).astype(np.float64)
    )
    coef = np.linalg.lstsq(design, phi_aux, rcond=None)[0]
    regressors = pd.read_parquet(output)
    mine = regressors[regressors["model_id"] == "target-1"]
    pool_design = np.hstack([features[pool], np.ones((len(pool), 1))]).astype(np.float32)
    np.testing.assert_allclose(mine["mu"], pool_design @ coef, atol=1e-4)
    np.testing.assert_allclose(mine["log_sigma"], np.log(phi_aux.std()), rtol=1e-9)
    # On A, phi = x·w exactly (no member there): the fit is exact and sigma its spread.
    scores = _scores(root, splits_path, signals, "query-qrm", {"regressors": output})
    phi_t = store.matrix(["target-1"], "phi", pool)[0]
    np.testing.assert_allclose(scores["score"], (phi_t - mine["mu"]) / phi_aux.std(), rtol=1e-6)


def test_gaussian_nll_formula():
    output = torch.tensor([[1.0, np.log(2.0)], [0.0, 0.0]])
    target = torch.tensor([3.0, 0.0])
    # log 2 + ½·(3 − 1)²/4 = log 2 + 0.5; and 0.
    np.testing.assert_allclose(
        gaussian_nll(output, target).numpy(), [np.log(2.0) + 0.5, 0.0], rtol=1e-6
    )


def _pinball(target: np.ndarray, prediction: np.ndarray, q: float) -> float:
    gap = target - prediction
    return float(np.mean(np.maximum(q * gap, (q - 1) * gap)))


@pytest.mark.usefixtures("one_torch_thread")
def test_text_regressor_learns_a_quantile_of_a_score_that_depends_on_the_words(tiny_masked_lm):
    # The score grows with the count of "good" and is noisier when "long" occurs: the sequence
    # regressor's mu + sigma·Phi^-1(q) must beat the best constant on held-out texts, in pinball
    # loss at q = 0.9, and its Gaussian NLL the best constant Gaussian's.
    from scipy.stats import norm

    from miaflow.queries.regressors import regress_text

    rng = np.random.default_rng(0)
    texts = np.array(toy_texts(400, seed=6, words=(4, 10)), dtype=object)
    good = np.array([t.split().count("good") for t in texts])
    spread = np.where([("long" in t.split()) for t in texts], 2.0, 0.3)
    score = 2.0 * good + spread * rng.standard_normal(len(texts))
    train, held = np.arange(300), np.arange(300, 400)
    arch = {
        "kind": "transformer",
        "model": str(tiny_masked_lm),
        "lr": 1e-3,
        "weight_decay": 0.0,
        "batch_size": 16,
        "max_length": 16,
    }
    mu, log_sigma = regress_text(arch, texts[train], score[train], texts[held], 20, seed=0)
    q = 0.9
    learned = _pinball(score[held], mu + np.exp(log_sigma) * norm.ppf(q), q)
    constant = _pinball(score[held], np.quantile(score[train], q), q)
    assert learned < 0.75 * constant
    nll = gaussian_nll(
        torch.from_numpy(np.stack([mu, log_sigma], axis=1)), torch.from_numpy(score[held])
    )
    flat = np.array([[score[train].mean(), np.log(score[train].std())]] * len(held))
    baseline = gaussian_nll(torch.from_numpy(flat), torch.from_numpy(score[held]))
    assert nll.mean() < baseline.mean()
