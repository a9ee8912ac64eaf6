"""Canary sets: kinds, labels, Poisson inclusion, seeds, the training set they make."""

from __future__ import annotations

import numpy as np
import pytest

from miaflow.privacy.canaries import COLUMNS, dirac_canaries, make_canaries


@pytest.fixture
def pool() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(300, 5)), rng.integers(0, 4, size=300)


def test_kinds_labels_and_sources(pool):
    inputs, labels = pool
    canaries = make_canaries(inputs, labels, 4, {"natural": 30, "mislabelled": 40, "ood": 20}, 1)
    table = canaries.table
    assert list(table.columns) == COLUMNS
    assert table["kind"].value_counts().to_dict() == {"mislabelled": 40, "natural": 30, "ood": 20}
    assert table["sample_id"].tolist() == list(range(90))
    natural, mislabelled, ood = (
        table[table["kind"] == k] for k in ("natural", "mislabelled", "ood")
    )
    # natural: the pool sample as it is
    np.testing.assert_array_equal(canaries.inputs[natural.index], inputs[natural["source"]])
    assert (natural["label"].to_numpy() == labels[natural["source"]]).all()
    # mislabelled: the pool sample with another class
    np.testing.assert_array_equal(canaries.inputs[mislabelled.index], inputs[mislabelled["source"]])
    assert (mislabelled["label"].to_numpy() != labels[mislabelled["source"]]).all()
    assert set(mislabelled["label"]) <= {0, 1, 2, 3}
    # natural and mislabelled canaries are distinct pool samples
    taken = table.loc[table["kind"] != "ood", "source"]
    assert taken.is_unique
    # ood: inside the pool's range on every feature, from no pool sample
    assert (ood["source"] == -1).all()
    ood_inputs = canaries.inputs[ood.index]
    assert (ood_inputs >= inputs.min(0)).all() and (ood_inputs <= inputs.max(0)).all()
    assert not np.isin(ood_inputs, inputs).any()


def test_inclusion_is_a_fair_coin_per_canary(pool):
    inputs, labels = pool
    canaries = make_canaries(inputs, labels, 4, {"ood": 2000}, 2)
    included = canaries.table["included"].to_numpy()
    assert included.dtype == bool
    # Binomial(2000, 1/2): mean 1000, sd 22.4; 5 sd either side
    assert 888 < included.sum() < 1112


def test_same_seed_same_canaries_another_seed_others(pool):
    inputs, labels = pool
    counts = {"mislabelled": 10, "ood": 10}
    first, again = (make_canaries(inputs, labels, 4, counts, 7, first_id=1000) for _ in range(2))
    assert first.table.equals(again.table)
    np.testing.assert_array_equal(first.inputs, again.inputs)
    other = make_canaries(inputs, labels, 4, counts, 8, first_id=1000)
    assert not first.table.equals(other.table)
    assert first.table["sample_id"].min() == 1000


def test_training_set_appends_the_included_canaries(pool):
    inputs, labels = pool
    canaries = make_canaries(inputs, labels, 4, {"natural": 10, "ood": 10}, 3)
    base_inputs, base_labels = inputs[:50], labels[:50]
    train_inputs, train_labels = canaries.training_set(base_inputs, base_labels)
    included = canaries.table["included"].to_numpy()
    assert len(train_inputs) == len(train_labels) == 50 + included.sum()
    np.testing.assert_array_equal(train_inputs[50:], canaries.inputs[included])
    np.testing.assert_array_equal(train_labels[50:], canaries.table["label"][included])


def test_bad_requests_are_refused(pool):
    inputs, labels = pool
    with pytest.raises(ValueError, match="unknown"):
        make_canaries(inputs, labels, 4, {"poisoned": 3}, 0)
    with pytest.raises(ValueError, match="pool"):
        make_canaries(inputs, labels, 4, {"natural": 200, "mislabelled": 101}, 0)
    with pytest.raises(ValueError, match="classes"):
        make_canaries(inputs, labels, 1, {"mislabelled": 1}, 0)


def test_dirac_canaries_own_one_axis_each():
    features = np.ones((6, 3), dtype=np.float32)
    padded, canaries = dirac_canaries(features, 5, 4, seed=0, scale=2.0)
    assert padded.shape == (6, 7) and padded.dtype == np.float32
    np.testing.assert_array_equal(padded[:, :3], features)
    assert (padded[:, 3:] == 0).all()  # no real sample touches the canaries' axes
    # canary j is 2.0 on axis 3 + j and 0 elsewhere
    np.testing.assert_array_equal(canaries.inputs, np.c_[np.zeros((4, 3)), 2.0 * np.eye(4)])
    assert (canaries.table["kind"] == "dirac").all()
    assert canaries.table["label"].between(0, 4).all()
