"""MemGuard (miaflow/defenses/memguard.py) on a toy where members are far more confident than
non-members, so the defender's classifier separates them well before the defense."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load, save
from sklearn.metrics import roc_auc_score

from miaflow.defenses.memguard import (
    DefenseClassifier,
    craft_noise,
    memguard,
    randomized_release,
    train_defense_classifier,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_CLASSES = 10
N_EVAL = 300  # members, and as many non-members, to defend
TRAINING = dict(
    epochs=50, learning_rate=0.05, hidden_sizes=(32, 16)
)  # small and quick; the paper's is 256-128-64


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def toy_probs(rng: np.random.Generator, n: int, member: bool) -> np.ndarray:
    """Confidence vectors whose top class stands out by 5-9 logits (members) or 0-4
    (non-members)."""
    low, high = (5.0, 9.0) if member else (0.0, 4.0)
    z = rng.normal(size=(n, N_CLASSES))
    z[np.arange(n), rng.integers(N_CLASSES, size=n)] += rng.uniform(low, high, size=n)
    return softmax(z)


@pytest.fixture(scope="module")
def classifier() -> DefenseClassifier:
    rng = np.random.default_rng(0)
    return train_defense_classifier(
        toy_probs(rng, 500, True), toy_probs(rng, 500, False), seed=1, **TRAINING
    )


@pytest.fixture(scope="module")
def evaluation() -> tuple[np.ndarray, np.ndarray]:
    """Fresh members and non-members (not used in training) and their membership labels."""
    rng = np.random.default_rng(2)
    probs = np.vstack([toy_probs(rng, N_EVAL, True), toy_probs(rng, N_EVAL, False)])
    return probs, np.r_[np.ones(N_EVAL), np.zeros(N_EVAL)]


@pytest.fixture(scope="module")
def noisy(classifier, evaluation) -> np.ndarray:
    """Phase I on the evaluation vectors, shared by the tests of Phase II."""
    return craft_noise(evaluation[0], classifier)


def test_predicted_label_never_changes(classifier):
    rng = np.random.default_rng(3)
    spread = [rng.dirichlet(np.full(N_CLASSES, alpha), size=200) for alpha in (0.1, 1.0, 10.0)]
    # exact ties (argmax takes the first) and near-ties that float32 cannot tell apart, the
    # larger entry placed after the smaller one so that rounding would pick the wrong label
    tied = rng.dirichlet(np.ones(N_CLASSES), size=200)
    top = tied.max(axis=1)
    tied[:, 3], tied[:, 7] = top, top * (1 + np.where(np.arange(200) % 2, 1e-12, 0.0))
    tied /= tied.sum(axis=1, keepdims=True)
    probs = np.vstack([*spread, tied])

    result = memguard(probs, classifier, budget=np.inf, seed=0)

    assert (result.noise_size > 0).mean() > 0.5  # noise was added, so the check means something
    assert (result.noisy_probs.argmax(axis=1) == probs.argmax(axis=1)).all()
    assert (result.probs.argmax(axis=1) == probs.argmax(axis=1)).all()


def test_rows_are_probability_vectors(classifier, evaluation):
    probs32 = evaluation[0][::5].astype(np.float32)
    result = memguard(probs32, classifier, budget=np.inf, seed=0)
    for out in (result.probs, result.noisy_probs):
        assert out.dtype == np.float64 and out.shape == probs32.shape
        assert (out >= 0).all()
        np.testing.assert_allclose(
            out.sum(axis=1), 1.0, rtol=0, atol=1e-6
        )  # float32 inputs, kept as given


@pytest.mark.parametrize("budget", [0.01, 0.05, 0.2, 0.5])
def test_released_distortion_within_budget(classifier, evaluation, noisy, budget):
    probs = evaluation[0]
    result = randomized_release(probs, noisy, classifier, budget, seed=4)

    np.testing.assert_allclose(
        result.distortion, np.abs(result.probs - probs).sum(axis=1), atol=1e-12
    )
    assert (result.expected_distortion <= budget * (1 + 1e-12)).all()
    # the draws make the mean random around its expectation (at most the budget): allow four
    # standard errors of a mean of independent Bernoulli(p) · ||r||_1 terms
    p, size = result.release_probability, result.noise_size
    standard_error = np.sqrt(np.sum(p * (1 - p) * size**2)) / len(p)
    assert result.distortion.mean() <= budget + 4 * standard_error
    # the budget is spent where noise helps: p · ||r||_1 = min(ε, ||r||_1) there
    helps = p > 0
    assert helps.mean() > 0.9
    np.testing.assert_allclose(
        result.expected_distortion[helps], np.minimum(budget, size[helps]), rtol=1e-12
    )


def test_zero_budget_releases_inputs_unchanged(classifier, evaluation):
    probs = evaluation[0][::5]
    result = memguard(probs, classifier, budget=0.0, seed=0)
    assert np.array_equal(result.probs, probs)
    assert (result.distortion == 0).all()
    assert (result.noise_size > 0).any()  # Phase I did find noise; Phase II withheld it


def test_unlimited_budget_moves_the_classifier_to_one_half(classifier, evaluation, noisy):
    probs, is_member = evaluation
    before = classifier.member_probability(probs)
    assert roc_auc_score(is_member, before) > 0.95
    assert np.abs(before - 0.5).mean() > 0.35

    result = randomized_release(probs, noisy, classifier, np.inf, seed=0)
    after = classifier.member_probability(result.probs)
    released = result.distortion > 0
    assert released.mean() > 0.95
    assert ((after - 0.5) * (before - 0.5) <= 0)[
        released
    ].all()  # every released vector crossed 0.5
    # Descents stop at the first step (length 0.1 in logit space) that crosses 0.5, so g lands
    # within one step's change of 0.5: on this toy about 0.04 on average, never above 0.15.
    assert np.abs(after - 0.5)[released].mean() < 0.06
    assert np.abs(after - 0.5)[released].max() < 0.15
    # Crossing inverts the classifier's ranking: it does no better than chance (here far worse).
    assert roc_auc_score(is_member, after) < 0.5


def test_smaller_steps_land_closer_to_one_half(classifier, evaluation):
    """The leftover distance to 0.5 is one step's overshoot, so it shrinks with the step size."""
    probs = evaluation[0][::10]
    noisy = craft_noise(probs, classifier, step_size=0.02, max_iterations=1500)
    found = np.abs(noisy - probs).sum(axis=1) > 0
    assert found.mean() > 0.95
    assert np.abs(classifier.member_probability(noisy) - 0.5)[found].max() < 0.03


def test_larger_budgets_lower_the_auroc(classifier, evaluation, noisy):
    probs, is_member = evaluation
    aurocs = [
        roc_auc_score(
            is_member,
            classifier.member_probability(
                randomized_release(probs, noisy, classifier, budget, seed=5).probs
            ),
        )
        for budget in (0.0, 0.05, 0.2, np.inf)
    ]
    assert all(a > b for a, b in zip(aurocs, aurocs[1:])), aurocs


def test_deterministic_given_seeds(classifier, evaluation, noisy):
    rng = np.random.default_rng(6)
    members, nonmembers = toy_probs(rng, 100, True), toy_probs(rng, 100, False)
    quick = dict(TRAINING, epochs=3)
    first = train_defense_classifier(members, nonmembers, seed=7, **quick).to_arrays()
    again = train_defense_classifier(members, nonmembers, seed=7, **quick).to_arrays()
    other = train_defense_classifier(members, nonmembers, seed=8, **quick).to_arrays()
    assert all(np.array_equal(first[name], again[name]) for name in first)
    assert not np.array_equal(first["weight_0"], other["weight_0"])

    probs = evaluation[0]
    assert np.array_equal(craft_noise(probs, classifier), noisy)
    a, b = (randomized_release(probs, noisy, classifier, 0.1, seed=9) for _ in range(2))
    assert np.array_equal(a.probs, b.probs) and np.array_equal(a.distortion, b.distortion)
    c = randomized_release(probs, noisy, classifier, 0.1, seed=10)
    assert not np.array_equal(a.probs, c.probs)  # the seed does drive the draws


def test_arrays_round_trip_through_safetensors(classifier, evaluation):
    arrays = classifier.to_arrays()
    assert all(isinstance(value, np.ndarray) for value in arrays.values())
    restored = DefenseClassifier.from_arrays(load(save(arrays)))

    probs = evaluation[0][:60]
    assert np.array_equal(restored.member_probability(probs), classifier.member_probability(probs))
    ours, theirs = (memguard(probs, c, budget=0.1, seed=0) for c in (classifier, restored))
    assert np.array_equal(ours.probs, theirs.probs)


def test_rejects_malformed_inputs(classifier, evaluation):
    probs = evaluation[0]
    with pytest.raises(ValueError, match="sum to 1"):
        craft_noise(probs * 0.9, classifier)
    with pytest.raises(ValueError, match="classes"):
        craft_noise(softmax(np.zeros((2, N_CLASSES + 1))), classifier)
    with pytest.raises(ValueError, match="budget"):
        randomized_release(probs, probs, classifier, -0.1, seed=0)
    with pytest.raises(ValueError, match="weight_"):
        DefenseClassifier.from_arrays({"weight_0": np.zeros((1, 3))})
