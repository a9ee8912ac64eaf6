"""Baselines without LiRA's shadow calibration on the study's targets (the paper's Fig. 5;
docs/algorithms.md#baselines-without-shadow-calibration).

Each scores every target of a run on the whole universe V, as `miaflow.hparams.attacks.rotate`
does, so that its pooled ROC has the same members and non-members as LiRA's:

* `ml-leaks`: Salem et al.'s attack MLP on the three largest posteriors (miaflow's
  `learn-top3`), trained on one shadow, the diagonal model (k, k) of the next row, which the
  attacker tuned on its own data (no knowledge of the target's η), labelled by D_k;
* `attack-p`: Ye et al.'s population attack, the share of population losses at least the
  sample's loss under the same target;
* `qmia`: Bertran et al.'s Gaussian regressor of the target's φ on the features of known
  non-members (Bayesian ridge regression), the score (φ − μ(x)) / σ(x), as Query-qrm's.

Attack-P and QMIA need known non-members of the target. They are V \\ D_i, cross-fitted: V is
split into `FOLDS` seeded folds, and the samples of each fold are scored with the non-members of
the other folds only, so no sample calibrates its own score and every member and non-member is
treated alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from miaflow.seeding import derive_seed, rng

BASELINES = ("ml-leaks", "attack-p", "qmia")
FOLDS = 2


def folds(n: int, seed: int, tag: Sequence[object]) -> np.ndarray:
    """Fold of each universe sample: `FOLDS` folds of equal size (±1), in a seeded order."""
    return rng(seed, *tag, "baseline-folds").permutation(n) % FOLDS


def attack_p_scores(target_phi: np.ndarray, population_phi: np.ndarray) -> np.ndarray:
    """Attack-P: share of the population whose loss under the target is at least the sample's.

    Thresholding it at 1 − α is Ye et al.'s threshold at the α-quantile of the population's
    losses. The loss −log p_y = log(1 + e^−φ) is computed from φ, which the grid stores."""
    loss = np.logaddexp(0.0, -np.asarray(target_phi, dtype=np.float64))
    population = np.sort(np.logaddexp(0.0, -np.asarray(population_phi, dtype=np.float64)))
    return 1.0 - np.searchsorted(population, loss, side="left") / population.size


def qmia_scores(
    population_x: np.ndarray, population_phi: np.ndarray, x: np.ndarray, phi: np.ndarray
) -> np.ndarray:
    """QMIA: φ standardised, (φ − μ(x)) / σ(x) as Query-qrm scores, by a Gaussian regressor of φ
    fitted on known non-members: scikit-learn's Bayesian ridge regression, whose evidence-tuned
    prior copes with fewer non-members than feature dimensions (few-shot) and whose predictive
    σ(x) is per sample (Query-qrm's linear path, least squares with one σ, does neither)."""
    from sklearn.linear_model import BayesianRidge
    from threadpoolctl import threadpool_limits

    # One BLAS thread (set after the import, which may load BLAS): the matrices are small, so more
    # threads only contend (0.015 s against 0.4-1 s a fit on 384 features on two busy cores).
    with threadpool_limits(limits=1):
        regressor = BayesianRidge().fit(population_x, population_phi)
        mu, sigma = regressor.predict(x, return_std=True)
    return (phi - mu) / sigma


def ml_leaks_scores(
    target_top3: np.ndarray, shadow_top3: np.ndarray, shadow_members: np.ndarray, seed: int
) -> np.ndarray:
    """ML-Leaks: the member probability of TDDBench's attack MLP trained on the shadow's top-3
    posteriors, labelled by the shadow's membership."""
    from miaflow.attacks.learning import member_probability, train_attack_classifier

    model = train_attack_classifier(shadow_top3, shadow_members, seed)
    return member_probability(model, target_top3)


def _calibrated(
    attack: str, phi: np.ndarray, features: np.ndarray, population: np.ndarray, held: np.ndarray
) -> np.ndarray:
    """Attack-P's or QMIA's scores of the samples `held`, calibrated on `population`."""
    if attack == "attack-p":
        return attack_p_scores(phi[held], phi[population])
    return qmia_scores(features[population], phi[population], features[held], phi[held])


def _cross_fitted(score, members: np.ndarray, fold: np.ndarray) -> np.ndarray:
    """score(population, held) on each fold `held`, the population the non-members outside it."""
    scores = np.empty(len(members))
    for f in range(FOLDS):
        held = fold == f
        scores[held] = score(~members & ~held, held)
    return scores


def baseline_scores(
    attack: str,
    targets: np.ndarray,
    targets_top3: np.ndarray,
    shadows_top3: np.ndarray,
    members: np.ndarray,
    features: np.ndarray,
    seed: int,
    tag: Sequence[object],
) -> tuple[np.ndarray, np.ndarray]:
    """Pooled (scores, is_member) of one baseline over every target of a run.

    `targets` (M+1, n) the targets' φ on V, `targets_top3` (M+1, n, k) their largest posteriors,
    `shadows_top3` those of the diagonal models, `members` (M+1, n) membership of D_i, `features`
    (n, d) the features of V."""
    fold = folds(members.shape[1], seed, tag)
    scores = [
        _target_scores(
            attack, i, targets, targets_top3, shadows_top3, members, features, fold, seed, tag
        )
        for i in range(len(targets))
    ]
    return np.concatenate(scores), members.ravel()


def _target_scores(
    attack: str,
    i: int,
    targets: np.ndarray,
    targets_top3: np.ndarray,
    shadows_top3: np.ndarray,
    members: np.ndarray,
    features: np.ndarray,
    fold: np.ndarray,
    seed: int,
    tag: Sequence[object],
) -> np.ndarray:
    """One target's scores of one baseline (see `baseline_scores`)."""
    size = len(targets)
    if attack == "ml-leaks":
        shadow = (i + 1) % size
        return ml_leaks_scores(
            targets_top3[i],
            shadows_top3[shadow],
            members[shadow],
            derive_seed(seed, *tag, attack, i),
        )
    if attack in ("attack-p", "qmia"):
        return _cross_fitted(partial(_calibrated, attack, targets[i], features), members[i], fold)
    raise ValueError(f"unknown baseline {attack!r}; known: {', '.join(BASELINES)}")


def cost(attack: str, trials: int) -> int:
    """Models of the target's kind the attacker trains: ML-Leaks its one tuned shadow (T trials),
    Attack-P and QMIA none (QMIA's regressor and ML-Leaks' attack MLP are not counted)."""
    return trials if attack == "ml-leaks" else 0
