"""Dataset inference (Maini et al. 2024) on synthetic MIA features: false positives at about
alpha on IID non-member suspects, power on member suspects at large sizes, inflated false
positives with a shifted validation set, and the clipping, seeding and input checks."""

from __future__ import annotations

import numpy as np
import pytest

from miaflow.llm.dataset_inference import ROW_COLUMNS, clip_outliers, dataset_inference, simulate

ALPHA = 0.05
FEATURES = 4


def _pools(shift: float = 0.4, seed: int = 0) -> dict[str, np.ndarray]:
    """Member features shifted by `shift` in the first of 4 standard normal features (a real
    but weak per-text signal); non-members centred; a second non-member distribution shifted
    by 0.3 in every feature (non-members of another time, topic or source)."""
    draw = np.random.default_rng(seed)
    members = draw.normal(size=(1500, FEATURES))
    members[:, 0] += shift
    return {
        "members": members,
        "non_members": draw.normal(size=(3000, FEATURES)),
        "shifted_non_members": draw.normal(size=(1500, FEATURES)) + 0.3,
    }


def _rejected(table, suspect: str, size: int, iid: bool) -> float:
    rows = table[(table.suspect == suspect) & (table["size"] == size) & (table.iid == iid)]
    return float(np.mean(rows.p_value < ALPHA))


def test_clip_outliers_winsorises_each_column_at_the_papers_share():
    column = np.arange(40.0)
    column[0], column[39] = -100.0, 1000.0
    # 5 %: floor(0.025 * 40) = 1 value per side set to the nearest kept one (1 and 38)
    clipped = clip_outliers(np.column_stack([column, np.arange(40.0)]))
    assert clipped[[0, 39], 0].tolist() == [1.0, 38.0]
    assert clipped[1:39, 0].tolist() == column[1:39].tolist()
    assert clipped[[0, 39], 1].tolist() == [1.0, 38.0]


def test_non_member_suspects_reject_at_about_alpha_and_member_suspects_at_large_sizes():
    pools = _pools()  # no shifted pool: every validation set is IID
    table = simulate(pools["members"], pools["non_members"], sizes=[20, 500], repeats=150, seed=1)
    assert list(table.columns) == ROW_COLUMNS and len(table) == 2 * 2 * 150
    # 150 tests at alpha 0.05: rejections have standard deviation 0.018
    for size in (20, 500):
        assert 0.005 <= _rejected(table, "non-members", size, True) <= 0.11, size
    assert _rejected(table, "members", 500, True) > 0.9
    assert _rejected(table, "members", 20, True) < 0.5  # the weak signal needs many texts
    p_values = table[table.suspect == "non-members"].p_value
    assert 0.4 < p_values.mean() < 0.6  # uniform under the null


def test_a_shifted_validation_set_makes_non_member_suspects_look_trained_on():
    table = simulate(**_pools(), sizes=[200], repeats=40, seed=2)
    assert set(table.iid) == {True, False}
    assert _rejected(table, "non-members", 200, False) > 0.5
    assert _rejected(table, "non-members", 200, True) <= 0.15


def test_the_linear_model_learns_the_informative_feature_in_either_direction():
    pools = _pools(shift=-0.8)  # members lower on feature 0, as for a loss
    result = dataset_inference(pools["members"][:400], pools["non_members"][:400], seed=0)
    assert result.p_value < 1e-6 and result.statistic > 0
    assert result.weights[0] < 0 and abs(result.weights[0]) == np.abs(result.weights).max()


def test_simulation_is_seeded_and_checks_its_pools():
    pools = _pools()
    first = simulate(**pools, sizes=[30], repeats=3, seed=5)
    assert first.equals(simulate(**pools, sizes=[30], repeats=3, seed=5))
    assert not first.p_value.equals(simulate(**pools, sizes=[30], repeats=3, seed=6).p_value)
    with pytest.raises(ValueError, match="needs 1000 members and 2000 non-members"):
        simulate(pools["members"][:999], pools["non_members"], sizes=[1000], repeats=1, seed=0)
    with pytest.raises(ValueError, match="at least 4 texts"):
        dataset_inference(pools["members"][:3], pools["non_members"][:10], seed=0)
    with pytest.raises(ValueError, match="4 suspect and 3 validation features"):
        dataset_inference(pools["members"][:10], pools["non_members"][:10, :3], seed=0)
