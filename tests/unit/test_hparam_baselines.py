"""The study's baselines without shadow calibration (miaflow.hparams.baselines) on toy targets
that memorise their members."""

from __future__ import annotations

import numpy as np
import pytest

from miaflow.attacks.learning import features_top3
from miaflow.hparams import attacks, baselines


def _memorising_run(
    seed: int = 3, size: int = 5, n: int = 240, classes: int = 4, spread: float = 0.3
):
    """A run of `size` targets on a universe of n samples whose φ has a per-sample difficulty
    (`spread` times a linear function of the features) and a bonus on members; the targets'
    posteriors put more mass on the true class of members."""
    generator = np.random.default_rng(seed)
    features = generator.normal(size=(n, 6))
    difficulty = spread * features @ generator.normal(size=6)
    members = generator.random((size, n)) < 0.5
    phi = difficulty + 1.5 * members + 0.3 * generator.normal(size=(size, n))
    labels = generator.integers(classes, size=n)
    logits = generator.normal(size=(size, n, classes))
    logits[:, np.arange(n), labels] += 1.0 + 2.0 * members
    top3 = np.stack([features_top3({"logits": logits[i], "label": labels}) for i in range(size)])
    return phi, top3, members, features


@pytest.mark.parametrize("attack", baselines.BASELINES)
def test_each_baseline_scores_members_higher_on_a_memorising_target(attack):
    phi, top3, members, features = _memorising_run()
    scores, is_member = baselines.baseline_scores(
        attack, phi, top3, top3, members, features, seed=0, tag=("toy",)
    )
    np.testing.assert_array_equal(is_member, members.ravel())
    assert np.isfinite(scores).all()
    auroc = attacks.roc_metrics(scores, is_member, [0.1])[0]["auroc"]
    assert auroc > 0.75, (attack, auroc)


def test_qmia_uses_the_features_that_attack_p_cannot():
    """The difficulty dominates φ here, so a global loss threshold (Attack-P) is near chance
    while QMIA, which predicts each sample's φ from its features, is not."""
    phi, top3, members, features = _memorising_run(seed=4, spread=5.0)
    aurocs = {
        attack: attacks.roc_metrics(
            *baselines.baseline_scores(attack, phi, top3, top3, members, features, 0, ("t",)),
            [0.1],
        )[0]["auroc"]
        for attack in ("attack-p", "qmia")
    }
    assert aurocs["qmia"] > 0.85 and aurocs["attack-p"] < 0.65, aurocs


def test_no_sample_calibrates_its_own_score_and_the_population_holds_no_member():
    generator = np.random.default_rng(0)
    members = generator.random(50) < 0.5
    fold = baselines.folds(50, seed=1, tag=("x",))
    assert sorted(np.bincount(fold)) == [25, 25]
    np.testing.assert_array_equal(fold, baselines.folds(50, seed=1, tag=("x",)))  # seeded
    seen = np.zeros(50, dtype=int)

    def score(population, held):
        assert not (population & held).any() and not (population & members).any()
        assert population.sum() == (~members & ~held).sum()
        seen[held] += 1
        return np.zeros(held.sum())

    baselines._cross_fitted(score, members, fold)
    assert (seen == 1).all()  # every sample scored once


def test_attack_p_is_the_share_of_population_losses_at_least_the_samples():
    population = np.array([-1.0, 0.0, 1.0, 2.0])  # φ; loss falls as φ rises
    scores = baselines.attack_p_scores(np.array([-5.0, 0.0, 1.5, 9.0]), population)
    np.testing.assert_allclose(scores, [0.0, 0.5, 0.75, 1.0])


def test_ml_leaks_is_seeded_and_costs_one_tuned_shadow():
    phi, top3, members, features = _memorising_run(size=3, n=120)
    first = baselines.baseline_scores("ml-leaks", phi, top3, top3, members, features, 7, ("a",))
    again = baselines.baseline_scores("ml-leaks", phi, top3, top3, members, features, 7, ("a",))
    np.testing.assert_array_equal(first[0], again[0])
    assert baselines.cost("ml-leaks", 20) == 20
    assert baselines.cost("attack-p", 20) == baselines.cost("qmia", 20) == 0
    with pytest.raises(ValueError, match="unknown baseline"):
        baselines.baseline_scores("lira", phi, top3, top3, members, features, 0, ())


def test_the_report_names_the_baselines_the_study_computes():
    from miaflow.hparams.tables import BASELINES

    assert BASELINES == baselines.BASELINES
