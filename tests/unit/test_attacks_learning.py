"""Learning-based attacks (learn-*), Model-fpr and offline RMIA."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.metrics import roc_auc_score
from test_attacks import _write_toy_store

from miaflow.attacks import learning
from miaflow.attacks.inputs import AttackInputs, attack_inputs
from miaflow.attacks.options import RmiaOfflineOptions
from miaflow.attacks.scoring import run_attack
from miaflow.signals import LOG_ZERO_PROB, signals_from_logits

LEARN = ["learn-original", "learn-top3", "learn-sorted", "learn-label", "learn-merge"]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    store, splits = _write_toy_store(tmp_path_factory.mktemp("toy"))
    return attack_inputs(store, splits, repeat=0, seed=11)


# --- feature maps ------------------------------------------------------------------------------

PROBS = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
LABELS = np.array([2, 0])


def _signals(logits: np.ndarray, labels: np.ndarray = LABELS) -> dict[str, np.ndarray]:
    return {**signals_from_logits(logits, labels), "logits": logits, "label": labels}


def test_probability_feature_maps():
    signals = _signals(np.log(PROBS) + 7.0)  # logits up to a shift: softmax gives PROBS back
    np.testing.assert_allclose(learning.features_original(signals), PROBS)
    np.testing.assert_allclose(
        learning.features_sorted(signals), [[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]]
    )
    np.testing.assert_allclose(learning.features_top3(signals), [[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]])
    np.testing.assert_allclose(
        learning.features_label(signals), [[0.2, 0.5, 0.3, 0, 0, 1], [0.6, 0.1, 0.3, 1, 0, 0]]
    )


def test_top3_keeps_three_columns_of_many_classes_and_all_of_two():
    probs = np.array([[0.1, 0.05, 0.4, 0.25, 0.2]])
    signals = _signals(np.log(probs), np.array([0]))
    np.testing.assert_allclose(learning.features_top3(signals), [[0.4, 0.25, 0.2]])
    two = _signals(np.log(np.array([[0.3, 0.7]])), np.array([0]))
    np.testing.assert_allclose(learning.features_top3(two), [[0.7, 0.3]])


def test_merge_columns_in_tddbench_order():
    logits = np.array([[-5.0, 2.0, -3.0], [1.0, 0.5, 4.0]])
    labels = np.array([1, 0])
    signals = {
        "logits": logits,
        "label": labels,
        "loss": np.array([10.0, 11.0]),
        "mentr": np.array([20.0, 21.0]),
        "phi": np.array([30.0, 31.0]),
    }
    # [onehot(y), ℓ, Mentr, ULD, −φ, argmax]. ULD compat: sample 0's other logits (−5, −3) are
    # below the −1 that replaces z_y, so max = −1 and ULD = −1 − 2 = −3 (corrected: −3 − 2 = −5);
    # sample 1: max(−1, 0.5, 4) − 1 = 3 either way.
    expected = [[0, 1, 0, 10, 20, -3, -30, 1], [1, 0, 0, 11, 21, 3, -31, 2]]
    np.testing.assert_allclose(learning.features_merge(signals), expected)
    corrected = learning.features_merge(signals, compat_uld=False)
    np.testing.assert_allclose(corrected[:, 5], [-5, 3])


def test_log_probability_outputs_with_zero_probabilities_give_finite_features():
    # catboost/LR-style log-probabilities with probabilities of exactly 0
    log_probs = np.array([[0.0, -np.inf, -np.inf], [np.log(0.25), np.log(0.75), -np.inf]])
    signals = _signals(log_probs, np.array([0, 1]))
    for features in (learning.features_original, learning.features_label, learning.features_merge):
        assert np.all(np.isfinite(features(signals)))
    uld = learning.features_merge(signals, compat_uld=False)[:, 5]
    np.testing.assert_allclose(uld, [LOG_ZERO_PROB - 0.0, np.log(0.25) - np.log(0.75)])


# --- the attack classifier ---------------------------------------------------------------------


def test_classifier_learns_a_separable_rule_and_scores_the_member_class():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(400, 3))
    is_member = features[:, 0] > 0
    model = learning.train_attack_classifier(features, is_member, seed=1)
    fresh = rng.normal(size=(200, 3))
    probability = learning.member_probability(model, fresh)
    assert probability.dtype == np.float64 and np.all((probability >= 0) & (probability <= 1))
    assert roc_auc_score(fresh[:, 0] > 0, probability) > 0.95


def test_classifier_stops_early_without_improvement(monkeypatch):
    """Random labels give no validation gain for long: training ends far before 500 epochs, but
    only after the first epoch plus more than PATIENCE epochs without improvement."""
    import torch

    epochs = []  # one shuffle (randperm) per epoch
    real_randperm = torch.randperm
    monkeypatch.setattr(
        torch, "randperm", lambda *a, **k: epochs.append(1) or real_randperm(*a, **k)
    )
    rng = np.random.default_rng(0)
    learning.train_attack_classifier(rng.normal(size=(200, 2)), rng.random(200) < 0.5, seed=3)
    assert 1 + learning.PATIENCE + 1 <= len(epochs) < learning.MAX_EPOCHS


# --- the learn-* attacks -------------------------------------------------------------------------


@pytest.mark.parametrize("name", LEARN)
def test_learning_attack_detects_members_of_a_memorising_target(toy, name):
    inputs, is_member = toy
    scores = run_attack(name, inputs)
    assert scores.shape == is_member.shape
    assert np.all((scores >= 0) & (scores <= 1))
    assert roc_auc_score(is_member, scores) > 0.75


@pytest.mark.parametrize("name", ["learn-original", "learn-merge"])
def test_learning_attack_is_deterministic_given_the_seed(toy, name):
    inputs, _ = toy
    first, second = run_attack(name, inputs), run_attack(name, inputs)
    np.testing.assert_array_equal(first, second)
    other_seed = run_attack(name, dataclasses.replace(inputs, seed=inputs.seed + 1))
    assert not np.array_equal(first, other_seed)


def test_learning_attack_trains_on_the_shadow_models_membership(toy):
    """The shadow is reference 0 with its keep row as labels: inverting them inverts the attack."""
    inputs, is_member = toy
    keep = inputs.reference_keep.copy()
    keep[0] = ~keep[0]
    scores = run_attack("learn-label", dataclasses.replace(inputs, reference_keep=keep))
    assert roc_auc_score(is_member, scores) < 0.25


def test_an_auxiliary_shadow_is_population_model_0(tmp_path):
    """With `shadow: auxiliary` the attack classifier learns from population-0 on pool A, labelled
    by its membership there; reference 0 is not read."""
    store, splits = _write_toy_store(tmp_path, n_reference=2, n_population=2)
    auxiliary = dataclasses.replace(splits, shadow_pool="auxiliary")
    inputs, is_member = attack_inputs(store, auxiliary, repeat=0, seed=11)
    shadow, members = inputs.shadow()
    assert np.array_equal(members, splits.members("population-0")[splits.auxiliary_samples])
    assert np.array_equal(
        shadow["loss"], store.matrix(["population-0"], "loss", splits.auxiliary_samples)[0]
    )
    # The same shadow moved into reference 0 gives the same scores; inverting reference 0's
    # membership changes nothing, as it is not read.
    as_reference = dataclasses.replace(
        inputs,
        reference=inputs.population,
        reference_keep=inputs.population_keep,
        shadow_pool="target",
    )
    unread = dataclasses.replace(inputs, reference_keep=~inputs.reference_keep)
    scores = run_attack("learn-label", inputs)
    assert np.array_equal(scores, run_attack("learn-label", as_reference))
    assert np.array_equal(scores, run_attack("learn-label", unread))
    assert roc_auc_score(is_member, scores) > 0.8


# --- Model-fpr and offline RMIA -------------------------------------------------------------------


def _inputs(target: dict, reference: dict, keep: np.ndarray, **more) -> AttackInputs:
    fields = {
        "target_on_population": {},
        "population": {},
        "population_keep": np.zeros((0, 0), bool),
    }
    return AttackInputs(
        target=target, reference=reference, reference_keep=keep, **{**fields, **more}
    )


def test_model_fpr_is_the_targets_percentile_under_the_out_gaussian():
    keep = np.array([[1, 0], [0, 0], [0, 1], [0, 0]], dtype=bool)
    # Sample 0: OUT phi [0, 1, 5] (median 1, std sqrt(14/3)); sample 1: OUT [2, 2, 8] (median 2,
    # std sqrt(8)). IN values (100) must not matter.
    phi = np.array([[100.0, 2.0], [0.0, 2.0], [1.0, 100.0], [5.0, 8.0]])
    inputs = _inputs({"phi": np.array([3.0, 0.0])}, {"phi": phi}, keep)
    expected = [norm.cdf(2 / np.sqrt(14 / 3)), norm.cdf(-2 / np.sqrt(8))]
    np.testing.assert_allclose(run_attack("model-fpr", inputs), expected)


def _rmia_inputs(options: dict, in_value: float = 0.9) -> AttackInputs:
    # References: sample 0 is IN model 0 / OUT model 1, sample 1 the reverse; OUT p_y = 0.5 both.
    keep = np.array([[True, False], [False, True]])
    reference = np.array([[in_value, 0.5], [0.5, in_value]])
    # Population: OUT p_y = 0.25 at every point (IN values 0.9 must not matter).
    population = np.array([[0.25, 0.9, 0.25, 0.9], [0.9, 0.25, 0.9, 0.25]])
    population_keep = population > 0.5
    return _inputs(
        {"confidence": np.array([0.75, 0.25])},
        {"confidence": reference},
        keep,
        target_on_population={"confidence": np.array([0.125, 0.25, 0.375, 0.5])},
        population={"confidence": population},
        population_keep=population_keep,
        options=RmiaOfflineOptions(**options),
    )


def test_rmia_offline_corrects_out_means_on_both_sides():
    # a = 1: p̄ = mean OUT, so r(x) = [0.75, 0.25] / 0.5 = [1.5, 0.5] and r(z) = target / 0.25 =
    # [0.5, 1, 1.5, 2]; count r(z) < r(x)/2 = [0.75, 0.25]: {0.5} -> 1/4, none -> 0.
    np.testing.assert_array_equal(run_attack("rmia-offline", _rmia_inputs({"a": 1.0})), [0.25, 0.0])
    # a = 0.4 (default): p̄(x) = ½(1.4·0.5 + 0.6) = 0.65, p̄(z) = ½(1.4·0.25 + 0.6) = 0.475, so
    # r(x)/2 = [0.577, 0.192] and r(z) = [0.263, 0.526, 0.789, 1.053] -> 2/4 and 0.
    np.testing.assert_array_equal(run_attack("rmia-offline", _rmia_inputs({})), [0.5, 0.0])
    # IN reference values are not used (offline).
    np.testing.assert_array_equal(
        run_attack("rmia-offline", _rmia_inputs({}, in_value=0.1)), [0.5, 0.0]
    )
    # γ = 1: count r(z) < r(x) = [1.154, 0.385] -> 4/4 and {0.263} -> 1/4.
    np.testing.assert_array_equal(
        run_attack("rmia-offline", _rmia_inputs({"gamma": 1.0})), [1.0, 0.25]
    )


@pytest.mark.parametrize("name", ["model-fpr", "rmia-offline"])
def test_model_fpr_and_rmia_offline_detect_members(toy, name):
    inputs, is_member = toy
    assert roc_auc_score(is_member, run_attack(name, inputs)) > 0.9


READ_ONLY_FEATURES = """
import numpy as np
from miaflow.attacks.learning import train_attack_classifier

rng = np.random.default_rng(0)
features, is_member = rng.normal(size=(64, 3)).astype(np.float32), rng.integers(0, 2, 64)
features.flags.writeable = False  # as read from Parquet
train_attack_classifier(features, is_member, seed=0)
"""


def test_stored_read_only_features_train_without_torchs_warning():
    """torch warns (once per process, into the job's log) about a tensor over a read-only
    array; a fresh interpreter, so that an earlier test's warning cannot hide it."""
    ran = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", READ_ONLY_FEATURES],
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr
