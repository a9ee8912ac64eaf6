from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from miaflow.io import read_parquet_metadata
from miaflow.signals import (
    SIGNALS,
    SignalStore,
    outputs_table,
    signals_from_logits,
    write_signal_shard,
)

LN = np.log


def test_two_class_known_answers():
    # z = [0, ln 3]  ->  p = [1/4, 3/4].
    logits = np.array([[0.0, LN(3)], [0.0, LN(3)]])
    s = signals_from_logits(logits, np.array([1, 0]))
    # Label 1: loss = ln(4/3), p_y = 3/4, phi = margin = ln 3, correct.
    # Label 0: loss = ln 4,   p_y = 1/4, phi = margin = -ln 3, wrong.
    np.testing.assert_allclose(s["loss"], [LN(4 / 3), LN(4)])
    np.testing.assert_allclose(s["confidence"], [0.75, 0.25])
    np.testing.assert_allclose(s["phi"], [LN(3), -LN(3)])
    np.testing.assert_allclose(s["margin"], [LN(3), -LN(3)])
    np.testing.assert_array_equal(s["correct"], [1.0, 0.0])
    # H = 1/4·2 + 3/4·log2(4/3) = 2 − 3/4·log2 3 bits, whatever the label.
    np.testing.assert_allclose(s["entropy"], [2 - 0.75 * np.log2(3)] * 2)
    # Mentr, label 1: −(1/4)·ln(3/4) − (1/4)·ln(1 − 1/4) = −(1/2)·ln(3/4).
    # Mentr, label 0: −(3/4)·ln(1/4) − (3/4)·ln(1 − 3/4) = 3·ln 2.
    np.testing.assert_allclose(s["mentr"], [-0.5 * LN(0.75), 3 * LN(2)])


def test_three_class_known_answers():
    # z = [ln 1, ln 2, ln 5]  ->  p = [1/8, 2/8, 5/8]; label 1.
    s = signals_from_logits(np.array([[0.0, LN(2), LN(5)]]), np.array([1]))
    np.testing.assert_allclose(s["loss"], [LN(4)])
    np.testing.assert_allclose(s["confidence"], [0.25])
    np.testing.assert_allclose(s["phi"], [LN(2) - LN(1 + 5)])  # ln(2/6)
    np.testing.assert_allclose(s["margin"], [LN(2) - LN(5)])
    np.testing.assert_array_equal(s["correct"], [0.0])
    # H = 1/8·3 + 1/4·2 + 5/8·log2(8/5).
    np.testing.assert_allclose(s["entropy"], [0.375 + 0.5 + 0.625 * np.log2(8 / 5)])
    # Mentr = −(3/4)·ln(1/4) − 1/8·ln(7/8) − 5/8·ln(3/8).
    np.testing.assert_allclose(s["mentr"], [-0.75 * LN(0.25) - LN(7 / 8) / 8 - 5 * LN(3 / 8) / 8])


def test_all_signals_have_the_batch_shape_and_match_per_model_calls():
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(3, 5, 4)), rng.integers(0, 4, size=5)
    batch = signals_from_logits(logits, labels)
    assert set(batch) == set(SIGNALS)
    for name in SIGNALS:
        assert batch[name].shape == (3, 5) and batch[name].dtype == np.float64
        np.testing.assert_allclose(batch[name][1], signals_from_logits(logits[1], labels)[name])


def test_argmax_ties_go_to_the_lowest_class():
    s = signals_from_logits(np.array([[1.0, 1.0], [1.0, 1.0]]), np.array([0, 1]))
    np.testing.assert_array_equal(s["correct"], [1.0, 0.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_extreme_logits_stay_finite_and_exact(dtype):
    logits = np.array([[0.0, 1e4], [0.0, 1e4], [1e4, -1e4]], dtype=dtype)
    s = signals_from_logits(logits, np.array([0, 1, 1]))
    for name in SIGNALS:
        assert np.all(np.isfinite(s[name])), name
    np.testing.assert_allclose(s["loss"], [1e4, 0.0, 2e4], atol=1e-9)
    np.testing.assert_allclose(s["phi"], [-1e4, 1e4, -2e4])
    # A confident wrong prediction: both clamped logs give ln(1e-30).
    np.testing.assert_allclose(s["mentr"][0], -2 * LN(1e-30))


def test_phi_of_three_classes_does_not_saturate():
    s = signals_from_logits(np.array([[1e4, -1e4, 0.0]]), np.array([0]))
    np.testing.assert_allclose(s["phi"], [1e4])  # 1e4 − LSE(−1e4, 0) = 1e4 − ln(1 + e^−1e4)


def test_log_probabilities_with_minus_inf():
    with np.errstate(divide="ignore"):
        log_probs = LN(np.array([[0.0, 0.3, 0.7], [0.0, 0.3, 0.7]]))
    s = signals_from_logits(log_probs, np.array([0, 2]))
    for name in SIGNALS:
        assert np.all(np.isfinite(s[name])), name
    # Probability 0 counts as 1e-45.
    np.testing.assert_allclose(s["loss"][0], -LN(1e-45), rtol=1e-12)
    np.testing.assert_allclose(s["phi"][0], LN(1e-45), rtol=1e-12)
    np.testing.assert_allclose(s["confidence"][1], 0.7)
    np.testing.assert_allclose(s["phi"][1], LN(0.7 / 0.3))


def test_phi_is_the_log_odds_of_the_true_label():
    rng = np.random.default_rng(1)
    logits, labels = rng.normal(scale=3, size=(200, 5)), rng.integers(0, 5, size=200)
    s = signals_from_logits(logits, labels)
    p = s["confidence"]
    np.testing.assert_allclose(s["phi"], LN(p / (1 - p)), rtol=1e-9)
    np.testing.assert_allclose(s["loss"], -LN(p), rtol=1e-9)


@pytest.mark.parametrize("n_classes", [2, 3, 10])
def test_entropy_of_uniform_is_log2_of_classes(n_classes):
    s = signals_from_logits(np.zeros((4, n_classes)), np.zeros(4, dtype=int))
    np.testing.assert_allclose(s["entropy"], np.log2(n_classes))


def test_modified_entropy_is_zero_for_a_confident_correct_prediction():
    s = signals_from_logits(np.array([[60.0, 0.0, 0.0]]), np.array([0]))
    assert 0.0 <= s["mentr"][0] < 1e-20
    assert s["entropy"][0] < 1e-20


def _toy_table(
    model_ids: list[str], sample_ids: np.ndarray, seed: int
) -> tuple[pa.Table, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(len(model_ids), len(sample_ids), 3)).astype(np.float32)
    labels = rng.integers(0, 3, size=len(sample_ids))
    return outputs_table(model_ids, sample_ids, labels, logits), logits


def test_outputs_table_schema_and_values():
    sample_ids = np.array([10, 3, 7])
    table, logits = _toy_table(["a", "b"], sample_ids, seed=0)
    schema = table.schema
    assert table.num_rows == 6
    assert schema.field("model_id").type == pa.string()
    assert schema.field("sample_id").type == pa.int64()
    assert schema.field("label").type == pa.int64()
    assert schema.field("logits").type == pa.list_(pa.float32(), 3)
    for name in SIGNALS:
        assert schema.field(name).type == pa.float64()
    assert table.column("model_id").to_pylist() == ["a"] * 3 + ["b"] * 3
    assert table.column("sample_id").to_pylist() == [10, 3, 7, 10, 3, 7]
    expected = signals_from_logits(logits, table.column("label").to_numpy()[:3])
    np.testing.assert_array_equal(table.column("phi").to_numpy(), expected["phi"].reshape(-1))


def test_store_round_trip(tmp_path):
    sample_ids = np.array([10, 3, 7, 5])
    first, logits_first = _toy_table(["target-0", "reference-0"], sample_ids, seed=1)
    second, logits_second = _toy_table(["reference-1"], sample_ids, seed=2)
    write_signal_shard(tmp_path / "a.parquet", first, {"data_hash": "d1", "model_hash": "m1"})
    write_signal_shard(tmp_path / "b.parquet", second, {"data_hash": "d1", "model_hash": "m2"})
    assert read_parquet_metadata(tmp_path / "b.parquet") == {"data_hash": "d1", "model_hash": "m2"}

    store = SignalStore.read([tmp_path / "a.parquet", str(tmp_path / "b.parquet")])
    assert store.model_ids == ("target-0", "reference-0", "reference-1")

    wanted = np.array([7, 10, 5])  # ids, not positions; a different order from the file
    at = [2, 0, 3]
    phi = store.matrix(["reference-1", "target-0"], "phi", wanted)
    assert phi.shape == (2, 3) and phi.dtype == np.float64
    np.testing.assert_array_equal(phi[0], second.column("phi").to_numpy()[at])
    np.testing.assert_array_equal(phi[1], first.column("phi").to_numpy()[at])

    logits = store.matrix(["reference-0", "reference-1"], "logits", wanted)
    assert logits.shape == (2, 3, 3) and logits.dtype == np.float32
    np.testing.assert_array_equal(logits[0], logits_first[1, at])
    np.testing.assert_array_equal(logits[1], logits_second[0, at])

    assert store.matrix([], "loss", wanted).shape == (0, 3)
    with pytest.raises(KeyError, match="reference-9"):
        store.matrix(["target-0", "reference-9"], "loss", wanted)
    with pytest.raises(KeyError, match="sample ids"):
        store.matrix(["target-0"], "loss", np.array([3, 4]))
    with pytest.raises(KeyError, match="no signal"):
        store.matrix(["target-0"], "nonsense", wanted)
