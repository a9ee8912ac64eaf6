"""Auditing the study's DP linear heads: an honest head at ε = 1 is not refuted, one trained with
a twentieth of the accountant's noise is, a non-private one leaks; 256 runs or one run each."""

from __future__ import annotations

import numpy as np
import pytest

from miaflow.hparams.privacy import epsilons
from miaflow.models.heads import HeadRecipe, batches_per_epoch
from miaflow.privacy import estimators
from miaflow.privacy.canaries import dirac_canaries, make_canaries
from miaflow.privacy.trials import claimed_noise, one_run_trials, repeated_trials

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLAIM, DELTA = 1.0, 1e-5
N, CLASSES, EPOCHS = 400, 4, 10
# 400 samples plus up to 200 canaries keep 2 batches per epoch (sample rate 1/2) at batch 300
BATCH, RUNS, CANARIES = 300, 256, 200
LR, CLIP = 0.05, 1.0


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    """Four Gaussian classes in 16 dimensions, as fixed features."""
    rng = np.random.default_rng(0)
    centres = 2 * rng.normal(size=(CLASSES, 16))
    labels = rng.integers(0, CLASSES, size=N)
    return (centres[labels] + rng.normal(size=(N, 16))).astype(np.float32), labels


@pytest.fixture(scope="module")
def sigma() -> float:
    return claimed_noise(CLAIM, DELTA, N, BATCH, EPOCHS)


def audits(data, noise: float) -> tuple[estimators.EpsilonBound, estimators.EpsilonBound]:
    """Clopper–Pearson over 256 runs with one Dirac canary, and the one-run audit of 200."""
    features, labels = data
    recipe = HeadRecipe(BATCH, LR, clip_norm=CLIP, noise_multiplier=noise)
    padded, canary = dirac_canaries(features, CLASSES, 1, seed=1)
    runs = repeated_trials(
        padded, labels, CLASSES, canary.inputs[0], int(canary.table["label"][0]), recipe, EPOCHS,
        RUNS, seed=2,
    )  # fmt: skip
    padded, canaries = dirac_canaries(features, CLASSES, CANARIES, seed=3)
    one = one_run_trials(padded, labels, CLASSES, canaries, recipe, EPOCHS, seed=4)
    return (
        estimators.clopper_pearson(runs["score"], runs["included"], DELTA, runs=runs["run"]),
        estimators.one_run(one["score"], one["included"], DELTA),
    )


def test_claimed_noise_is_the_accountant_s(sigma):
    batches = batches_per_epoch(N, BATCH)
    spent = epsilons(sigma, 1 / batches, EPOCHS * batches, [DELTA])[0]
    assert CLAIM - 0.01 < spent <= CLAIM


def test_an_honest_head_is_not_refuted(data, sigma):
    rows = audits(data, sigma)
    assert all(row.epsilon_lower <= CLAIM for row in rows)
    assert not estimators.falsified(rows, CLAIM)


def test_a_head_with_too_little_noise_is_refuted(data, sigma):
    """σ/20: the runs can tell the canary apart, so both bounds pass the claimed ε (σ/10 gave
    Clopper–Pearson bounds of 1.0 to 1.5 over five data seeds, too close to call)."""
    runs, one = audits(data, sigma / 20)
    assert runs.epsilon_lower > CLAIM and one.epsilon_lower > CLAIM
    assert estimators.falsified([runs, one], CLAIM)


def test_a_non_private_head_leaks_a_mislabelled_canary(data):
    features, labels = data
    rng = np.random.default_rng(5)
    pool_labels = rng.integers(0, CLASSES, size=20)
    pool = features[:20] + rng.normal(size=(20, 16))
    canary = make_canaries(pool, pool_labels, CLASSES, {"mislabelled": 1}, seed=6)
    runs = repeated_trials(
        features, labels, CLASSES, canary.inputs[0], int(canary.table["label"][0]),
        HeadRecipe(BATCH, LR), EPOCHS, RUNS, seed=7,
    )  # fmt: skip
    assert runs["included"].sum() not in (0, RUNS)
    assert estimators.clopper_pearson(runs["score"], runs["included"], DELTA).epsilon_lower > 0


def test_runs_repeat_and_one_run_keeps_the_canary_table(data):
    features, labels = data
    recipe = HeadRecipe(BATCH, LR, clip_norm=CLIP, noise_multiplier=1.0)
    padded, canary = dirac_canaries(features, CLASSES, 1, seed=1)
    args = (padded, labels, CLASSES, canary.inputs[0], 0, recipe, EPOCHS, 6)
    first = repeated_trials(*args, seed=8)
    assert first.equals(repeated_trials(*args, seed=8))
    assert list(first.columns) == ["run", "included", "score"] and (first["score"] < 0).all()
    padded, canaries = dirac_canaries(features, CLASSES, 5, seed=9)
    one = one_run_trials(padded, labels, CLASSES, canaries, recipe, EPOCHS, seed=10)
    assert one[["sample_id", "kind", "included"]].equals(
        canaries.table[["sample_id", "kind", "included"]]
    )


def test_canaries_that_change_the_sample_rate_are_refused(data):
    features, labels = data
    recipe = HeadRecipe(100, LR, clip_norm=CLIP, noise_multiplier=1.0)  # 400 -> 4, 401 -> 5
    with pytest.raises(ValueError, match="sample rate"):
        repeated_trials(features, labels, CLASSES, features[0], 0, recipe, EPOCHS, 4, seed=0)
