"""Opacus' PRV accountant with its per-order RDP memoised (miaflow.accounting): the same ε and σ
as Opacus alone, each (sample rate, σ, order) computed once, and Opacus left as it was."""

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


def test_the_sigma_search_is_opacus_own():
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = get_noise_multiplier(
            target_epsilon=8.0, target_delta=1e-5, sample_rate=0.5, steps=20, accountant="prv"
        )
    assert privacy.noise_multiplier(8.0, 1e-5, batches_per_epoch=2, epochs=10) == expected
    assert dpsgd_noise_multiplier(8.0, 1e-5, 0.5, 20) == expected
