"""Opacus' PRV accountant with its per-order RDP memoised (miaflow.accounting): the same ε and σ
as Opacus alone, each (sample rate, σ, order) computed once, and Opacus left as it was; the
study's σ search (miaflow.hparams.privacy) meets Opacus' condition with fewer evaluations."""

from __future__ import annotations

import warnings

import pytest
from opacus.accountants import PRVAccountant
from opacus.accountants.analysis import rdp

from miaflow.accounting import shared_rdp
from miaflow.defenses.dpsgd import noise_multiplier as dpsgd_noise_multiplier
from miaflow.hparams import privacy

DELTAS = [1e-2, 1e-5, 1e-8]


def opacus_epsilons(noise: float, sample_rate: float, steps: int) -> list[float]:
    accountant = PRVAccountant()
    accountant.history = [(noise, sample_rate, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [float(accountant.get_epsilon(delta)) for delta in DELTAS]


@pytest.fixture
def counted_rdp(monkeypatch) -> list[tuple]:
    """Every call of Opacus' per-order RDP, by its arguments."""
    calls, computed = [], rdp._compute_rdp

    def counting(q: float, sigma: float, alpha: float) -> float:
        calls.append((q, sigma, alpha))
        return computed(q, sigma, alpha)

    monkeypatch.setattr(rdp, "_compute_rdp", counting)
    return calls


@pytest.fixture
def counted_epsilons(monkeypatch) -> list[float]:
    """Every evaluation of the PRV accountant's ε, by its σ."""
    calls, spent = [], PRVAccountant.get_epsilon

    def counting(self, delta, **options):
        calls.append(self.history[0][0])
        return spent(self, delta, **options)

    monkeypatch.setattr(PRVAccountant, "get_epsilon", counting)
    return calls


def test_epsilons_equal_opacus_and_compute_each_order_once(counted_rdp):
    expected = opacus_epsilons(1.3, 0.25, 80)
    alone = len(counted_rdp)
    counted_rdp.clear()
    assert privacy.epsilons(1.3, 0.25, 80, DELTAS) == expected
    assert len(counted_rdp) == len(set(counted_rdp)) < alone / 4


def test_the_memo_ends_with_the_block(counted_rdp):
    counting = rdp._compute_rdp
    with shared_rdp():
        assert rdp._compute_rdp is not counting
    assert rdp._compute_rdp is counting


def test_the_defenses_sigma_search_is_opacus_own():
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = get_noise_multiplier(
            target_epsilon=8.0, target_delta=1e-5, sample_rate=0.5, steps=20, accountant="prv"
        )
    assert dpsgd_noise_multiplier(8.0, 1e-5, 0.5, 20) == expected


@pytest.mark.parametrize(
    ("epsilon", "batches", "guess"), [(8.0, 2, 2.0), (8.0, 7, 30.0), (1.0, 3, 0.5), (50.0, 1, 2.0)]
)
def test_the_study_sigma_search_accepts_what_opacus_accepts_in_fewer_evaluations(
    epsilon, batches, guess, counted_epsilons
):
    """Opacus' bisection and the study's search stop on the same condition: ε(σ) within the
    tolerance below the target. From a poor guess too, the study's evaluates the accountant
    less often."""
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opacus_sigma = get_noise_multiplier(
            target_epsilon=epsilon,
            target_delta=1e-5,
            sample_rate=1 / batches,
            steps=20 * batches,
            accountant="prv",
        )
    opacus_calls = len(counted_epsilons)
    counted_epsilons.clear()
    sigma = privacy.noise_multiplier(
        epsilon, 1e-5, batches_per_epoch=batches, epochs=20, guess=guess
    )
    assert len(counted_epsilons) < opacus_calls
    spent_epsilon = opacus_epsilons(sigma, 1 / batches, 20 * batches)[DELTAS.index(1e-5)]
    assert epsilon - privacy.EPSILON_TOLERANCE < spent_epsilon <= epsilon
    assert sigma == pytest.approx(opacus_sigma, rel=0.01)


def test_the_noise_table_starts_each_search_where_the_last_ended(counted_epsilons):
    """From the σ of the batch count before, about 4 evaluations per σ (Opacus' search: 14)."""
    table = privacy.noise_table(8.0, 1e-5, epochs=20, max_batches=3)
    assert len(counted_epsilons) <= 3 * 4
    assert table["batches_per_epoch"].tolist() == [1, 2, 3]
    assert table["noise_multiplier"].is_monotonic_decreasing
    for row in table.itertuples():
        spent = opacus_epsilons(row.noise_multiplier, row.sample_rate, row.steps)
        spent_epsilon = spent[DELTAS.index(1e-5)]
        assert 8.0 - privacy.EPSILON_TOLERANCE < spent_epsilon <= 8.0
