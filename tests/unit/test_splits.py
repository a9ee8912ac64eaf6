"""Partition and membership matrix follow the TDDBench protocol and are reproducible."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from miaflow.seeding import derive_seed
from miaflow.splits import Splits, make_splits


@pytest.fixture
def splits() -> Splits:
    return make_splits(1000, seed=7, dataset="toy", repeats=3, n_reference=6, n_population=4)


def test_pools_are_a_disjoint_half(splits):
    assert len(splits.target_samples) == 500
    assert not set(splits.target_samples) & set(splits.auxiliary_samples)
    assert len(splits.target_samples) + len(splits.auxiliary_samples) == 1000


def test_targets_train_on_about_half_of_the_target_pool(splits):
    for model in splits.models("target"):
        members = splits.members(model)
        assert not members[splits.auxiliary_samples].any()
        assert 0.4 < members[splits.target_samples].mean() < 0.6


def test_reference_design_is_paired_over_the_target_pool(splits):
    keep = np.stack([splits.members(m) for m in splits.models("reference")])
    in_counts = keep.sum(axis=0)
    assert (in_counts[splits.target_samples] == 3).all()  # every target sample IN for exactly M/2
    assert (in_counts[splits.auxiliary_samples] == 0).all()
    assert not (keep[0] & keep[1]).any()


def test_population_design_is_paired_over_the_auxiliary_pool(splits):
    keep = np.stack([splits.members(m) for m in splits.models("population")])
    assert (keep.sum(axis=0)[splits.auxiliary_samples] == 2).all()
    assert not keep[:, splits.target_samples].any()


def test_same_seed_same_splits_and_named_seeds_are_independent(splits):
    again = make_splits(1000, seed=7, dataset="toy", repeats=3, n_reference=6, n_population=4)
    assert np.array_equal(again.keep, splits.keep)
    more_refs = make_splits(1000, seed=7, dataset="toy", repeats=3, n_reference=8, n_population=4)
    assert np.array_equal(more_refs.members("target-2"), splits.members("target-2"))
    other = make_splits(1000, seed=8, dataset="toy", repeats=3, n_reference=6, n_population=4)
    assert not np.array_equal(other.keep, splits.keep)
    assert derive_seed(1, "a", "b") != derive_seed(1, "a/b", "")


def test_table_round_trip(splits):
    table = splits.to_table()
    assert table.column_names[:3] == ["sample_id", "pool", "target-0"]
    back = Splits.from_table(table)
    assert back.model_ids == splits.model_ids
    assert np.array_equal(back.keep, splits.keep)
    assert np.array_equal(back.in_target_pool, splits.in_target_pool)
    with pytest.raises(ValueError):
        Splits.from_table(pa.table({"sample_id": [1, 0], "pool": ["target", "auxiliary"]}))


def test_odd_paired_design_is_rejected():
    with pytest.raises(ValueError, match="even"):
        make_splits(100, seed=1, dataset="toy", n_reference=3)


def test_default_partition_is_tddbench_with_the_shadow_on_the_target_pool(splits):
    assert splits.reserved is None and splits.shadow_pool == "target"
    assert splits.shadow_model == "reference-0"
    explicit = make_splits(
        1000,
        seed=7,
        dataset="toy",
        repeats=3,
        n_reference=6,
        n_population=4,
        target_ratio=0.5,
        member_ratio=0.5,
        shadow="target",
    )
    assert np.array_equal(explicit.keep, splits.keep)


@pytest.fixture
def memguard() -> Splits:
    """MemGuard's Location30 protocol, scaled: |T| 400 with exactly 200 members per target, |A| 200
    (a shadow of 100 members and 100 non-members), the rest in reserve."""
    return make_splits(
        1000,
        seed=7,
        dataset="toy",
        target_size=400,
        members=200,
        auxiliary_size=200,
        shadow="auxiliary",
        repeats=3,
        n_reference=2,
        n_population=2,
    )


def test_sizes_and_exact_member_counts(memguard):
    assert len(memguard.target_samples) == 400 and len(memguard.auxiliary_samples) == 200
    reserved = np.flatnonzero(memguard.reserved)
    assert len(reserved) == 400
    assert not set(reserved) & (set(memguard.target_samples) | set(memguard.auxiliary_samples))
    for model in memguard.models("target"):
        members = memguard.members(model)
        assert members.sum() == 200  # exactly, not a Bernoulli draw
        assert not members[~memguard.in_target_pool].any()
    assert not np.array_equal(memguard.members("target-0"), memguard.members("target-1"))


def test_population_models_and_the_shadow_stay_in_the_auxiliary_pool(memguard):
    shadow = memguard.members(memguard.shadow_model)
    assert memguard.shadow_model == "population-0"
    assert not shadow[~memguard.in_auxiliary_pool].any()
    held_out = memguard.pool_of("population-0") & ~shadow
    assert (
        shadow.sum() + held_out.sum() == 200
    )  # its shadow-test set is the rest of A, not the reserve
    assert not memguard.members("reference-0")[~memguard.in_target_pool].any()


def test_partition_with_reserve_and_shadow_round_trips(memguard):
    back = Splits.from_table(memguard.to_table())
    assert back.shadow_pool == "auxiliary" and back.shadow_model == "population-0"
    assert np.array_equal(back.reserved, memguard.reserved)
    assert np.array_equal(back.auxiliary_samples, memguard.auxiliary_samples)
    assert set(memguard.to_table().column("pool").to_pylist()) == {"target", "auxiliary", "reserve"}


def test_partitions_that_do_not_fit_are_rejected():
    with pytest.raises(ValueError, match="cannot hold"):
        make_splits(100, seed=1, dataset="toy", target_size=60, auxiliary_size=50)
    with pytest.raises(ValueError, match="cannot hold"):
        make_splits(100, seed=1, dataset="toy", target_size=60, members=60)
    with pytest.raises(ValueError, match="shadow pool"):
        make_splits(100, seed=1, dataset="toy", shadow="reserve")
