from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from miaflow.attacks import scoring
from miaflow.attacks.inputs import AttackInputs, attack_inputs
from miaflow.attacks.options import ModelRobustOptions
from miaflow.attacks.registry import ATTACKS, FAMILIES, Attack
from miaflow.attacks.scoring import run_attack
from miaflow.signals import SignalStore, outputs_table, write_signal_shard
from miaflow.splits import make_splits

HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


# --- a toy benchmark whose models memorise their training sets ---------------------------------


def _write_toy_store(tmp_path, *, n_reference: int = 16, n_population: int = 16):
    """Splits and a signal store in which every model adds +3 to phi on its own members.

    phi(model, i) = d_i + 3·[i trains model] + noise, with per-sample difficulty d_i ~ N(−0.5, 1)
    (so correctness separates members too); each model's two-class logits are ±phi/2, so loss,
    confidence, entropy, ... all follow from phi. Every attack reaches AUROC >= 0.8 here.
    """
    n_samples = 600
    splits = make_splits(
        n_samples,
        seed=0,
        dataset="toy",
        repeats=2,
        n_reference=n_reference,
        n_population=n_population,
    )
    rng = np.random.default_rng(0)
    difficulty = rng.normal(loc=-0.5, size=n_samples)
    labels = rng.integers(0, 2, size=n_samples)
    phi = difficulty + 3.0 * splits.keep + rng.normal(scale=0.5, size=splits.keep.shape)
    sign = np.where(np.arange(2) == labels[:, None], 0.5, -0.5)  # (n, 2): +1/2 on the label
    logits = phi[..., None] * sign  # (n_models, n, 2); z_y − z_other = phi

    models = list(splits.model_ids)
    sample_ids = np.arange(n_samples)
    half = len(models) // 2  # two shards, as the workflow writes one per training shard
    for k, part in enumerate([slice(0, half), slice(half, None)]):
        table = outputs_table(models[part], sample_ids, labels, logits[part])
        write_signal_shard(tmp_path / f"shard-{k}.parquet", table, {"data_hash": "toy"})
    store = SignalStore.read(sorted(tmp_path.glob("shard-*.parquet")))
    return store, splits


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    store, splits = _write_toy_store(tmp_path_factory.mktemp("toy"))
    return attack_inputs(store, splits, repeat=1)


def test_registry_entries_are_documented():
    assert ATTACKS
    for name, attack in ATTACKS.items():
        assert attack.name == name
        assert attack.doc, f"{name} has no description"
        assert attack.family in FAMILIES, name
        assert attack.needs <= {"reference", "population"}, name


# Query attacks read artifacts of their own jobs (queries, surrogates, ...):
# tests/unit/test_query*.py; language-model attacks read token statistics: tests/unit/test_llm.py.
@pytest.mark.parametrize(
    "name", sorted(n for n, a in ATTACKS.items() if a.family not in ("query", "llm"))
)
def test_every_attack_detects_members_of_a_memorising_target(toy, name):
    inputs, is_member = toy
    scores = run_attack(name, inputs)
    assert scores.shape == is_member.shape and scores.dtype == np.float64
    assert np.all(np.isfinite(scores))
    assert roc_auc_score(is_member, scores) > 0.7


def test_attack_inputs_shapes_and_ground_truth(toy):
    inputs, is_member = toy
    splits = make_splits(600, seed=0, dataset="toy", repeats=2, n_reference=16, n_population=16)
    n, n_aux = len(splits.target_samples), len(splits.auxiliary_samples)
    np.testing.assert_array_equal(is_member, splits.members("target-1")[splits.target_samples])
    assert inputs.target["phi"].shape == (n,)
    assert inputs.reference["loss"].shape == inputs.reference_keep.shape == (16, n)
    assert inputs.target_on_population["confidence"].shape == (n_aux,)
    assert inputs.population["confidence"].shape == inputs.population_keep.shape == (16, n_aux)
    np.testing.assert_array_equal(inputs.reference_keep.sum(axis=0), 8)  # paired design
    # Logits and labels are served too (learning-based attacks read them), read on first use.
    assert inputs.reference["logits"].shape == (16, n, 2)
    assert inputs.target["label"].dtype == np.int64 and inputs.target["label"].shape == (n,)
    assert set(inputs.target) >= {"loss", "phi", "logits", "label"}


# --- known answers on hand-made arrays -----------------------------------------------------------

# Four references, two samples. Sample 0: IN = models {0, 1}, OUT = {2, 3};
# sample 1: IN = {1, 3}, OUT = {0, 2}.
KEEP = np.array([[1, 0], [1, 1], [0, 0], [0, 1]], dtype=bool)
# Sample 0: IN values [1, 3] (median 2, std 1), OUT [-1, 1] (median 0, std 1).
# Sample 1: IN values [5, 7] (median 6, std 1), OUT [3, 5] (median 4, std 1).
# Pooled over samples, IN = {1, 3, 5, 7} and OUT = {-1, 1, 3, 5}: both have std sqrt(5).
REFERENCE = np.array([[1.0, 3.0], [3.0, 5.0], [-1.0, 5.0], [1.0, 7.0]])


def _inputs(
    target: dict,
    reference: dict,
    keep: np.ndarray = KEEP,
    *,
    target_on_population: dict | None = None,
    population: dict | None = None,
    population_keep: np.ndarray | None = None,
    options: object = None,
) -> AttackInputs:
    return AttackInputs(
        target={k: np.asarray(v, dtype=float) for k, v in target.items()},
        reference=reference,
        reference_keep=keep,
        target_on_population=target_on_population or {},
        population=population or {},
        population_keep=np.zeros((0, 0), bool) if population_keep is None else population_keep,
        options=options,
    )


def test_model_loss_and_calibration():
    inputs = _inputs({"loss": [0.5, 1.0]}, {"loss": REFERENCE})
    # ½(med_in + med_out) − ℓ: ½(2 + 0) − 0.5 = 0.5 and ½(6 + 4) − 1 = 4.
    np.testing.assert_allclose(run_attack("model-loss", inputs), [0.5, 4.0])
    # med_out − ℓ: 0 − 0.5 and 4 − 1.
    np.testing.assert_allclose(run_attack("model-calibration", inputs), [-0.5, 3.0])


def test_locations_are_medians_over_all_models_of_each_side():
    keep = np.array([[1, 1], [0, 1], [0, 0], [0, 0]], dtype=bool)
    # Sample 0: IN [4], OUT [0, 1, 5] (median 1; the mean would be 2, TDDBench's truncation to
    # min |OUT| = 2 models would give 0.5). Sample 1: IN [2, 4] (median 3), OUT [6, 8] (median 7).
    loss = np.array([[4.0, 2.0], [0.0, 4.0], [1.0, 6.0], [5.0, 8.0]])
    inputs = _inputs({"loss": [0.0, 0.0]}, {"loss": loss}, keep)
    np.testing.assert_allclose(run_attack("model-calibration", inputs), [1.0, 7.0])
    np.testing.assert_allclose(run_attack("model-loss", inputs), [0.5 * (4 + 1), 0.5 * (3 + 7)])


def test_model_lira_uses_uncentred_global_spreads():
    inputs = _inputs({"phi": [2.0, 4.0]}, {"phi": REFERENCE})
    # σ_in = σ_out = sqrt(5), so S = ((φ − μ_out)² − (φ − μ_in)²) / (2·5):
    # sample 0: (4 − 0) / 10 = 0.4; sample 1: (0 − 4) / 10 = −0.4.
    np.testing.assert_allclose(run_attack("model-lira", inputs), [0.4, -0.4])


def test_model_lira_keeps_separate_in_and_out_spreads():
    out_spread_3 = np.where(KEEP, REFERENCE, 3 * REFERENCE)  # OUT values {-3, 3, 9, 15}
    inputs = _inputs({"phi": [2.0, 4.0]}, {"phi": out_spread_3})
    mu_in, mu_out, sd_in, sd_out = np.array([2, 6]), np.array([0, 12]), np.sqrt(5), 3 * np.sqrt(5)
    expected = norm.logpdf([2, 4], mu_in, sd_in) - norm.logpdf([2, 4], mu_out, sd_out)
    np.testing.assert_allclose(run_attack("model-lira", inputs), expected)
    # Carlini's variant uses the IN spread on both sides.
    carlini = norm.logpdf([2, 4], mu_in, sd_in) - norm.logpdf([2, 4], mu_out, sd_in)
    np.testing.assert_allclose(run_attack("lira-online-fixvar", inputs), carlini)


def test_lira_online_residual_variance():
    inputs = _inputs({"phi": [2.0, 4.0]}, {"phi": REFERENCE})
    # Every value lies 1 from its sample's median on each side, so both residual spreads are 1
    # and the score equals the per-example one: ((φ − μ_out)² − (φ − μ_in)²) / 2 = [2, −2].
    np.testing.assert_allclose(run_attack("lira-online-residual", inputs), [2.0, -2.0])
    out_spread_3 = np.where(KEEP, REFERENCE, 3 * REFERENCE)  # OUT residuals ±3
    expected = norm.logpdf([2, 4], [2, 6], 1.0) - norm.logpdf([2, 4], [0, 12], 3.0)
    np.testing.assert_allclose(
        run_attack("lira-online-residual", _inputs({"phi": [2.0, 4.0]}, {"phi": out_spread_3})),
        expected,
    )


def test_lira_online_per_example_variance():
    inputs = _inputs({"phi": [2.0, 4.0]}, {"phi": REFERENCE})
    # Every per-sample std is 1: S = ((φ − μ_out)² − (φ − μ_in)²) / 2 = [2, −2].
    np.testing.assert_allclose(run_attack("lira-online", inputs), [2.0, -2.0])


def test_lira_online_fills_a_sample_without_in_models():
    keep = KEEP.copy()
    keep[:, 1] = False  # sample 1 has no IN model (possible under a Bernoulli design)
    scores = run_attack("lira-online", _inputs({"phi": [2.0, 4.0]}, {"phi": REFERENCE}, keep))
    # Sample 1's IN location and spread become their mean over samples with IN models (sample 0's):
    # μ_in = 2, σ_in = 1. Its OUT values are [3, 5, 5, 7]: μ_out = 5, σ_out = sqrt(2).
    expected = norm.logpdf(4, 2, 1) - norm.logpdf(4, 5, np.sqrt(2))
    np.testing.assert_allclose(scores, [2.0, expected])


def test_lira_offline_two_sided_pdf():
    inputs = _inputs({"phi": [2.0, 4.0]}, {"phi": REFERENCE})
    # −log N(φ; μ_out, 1) = ½·ln(2π) + (φ − μ_out)²/2: (2 − 0)²/2 = 2 for sample 0, 0 for sample 1.
    np.testing.assert_allclose(run_attack("lira-offline", inputs), HALF_LOG_2PI + np.array([2, 0]))
    # Global OUT std sqrt(5): ½·ln(2π) + ln sqrt(5) + (φ − μ_out)²/10.
    np.testing.assert_allclose(
        run_attack("lira-offline-fixvar", inputs),
        HALF_LOG_2PI + 0.5 * np.log(5) + np.array([0.4, 0.0]),
    )


def test_lira_offline_one_sided_cdf():
    inputs = _inputs({"phi": [2.0, 4.0]}, {"phi": REFERENCE})
    # Phi((φ − μ_out) / σ_out) with per-sample OUT std 1: Phi(2) for sample 0, Phi(0) = ½ for 1.
    np.testing.assert_allclose(run_attack("lira-offline-onesided", inputs), [norm.cdf(2.0), 0.5])


def test_model_robust_counts_population_points():
    # References: p̄(x) = ½(IN + OUT) = ½(0.75 + 0.25) = 0.5 for both samples.
    reference = np.array([[0.75, 0.25], [0.25, 0.75]])
    keep = np.array([[True, False], [False, True]])
    # Population: p̄(z) = 0.5 for all four points, and the target's p_y on them gives
    # r(z) = [0.25, 0.5, 0.75, 1].
    population = np.full((2, 4), 0.5)
    population_keep = np.array([[True, False, True, False], [False, True, False, True]])
    inputs = _inputs(
        {"confidence": [0.75, 0.25]},
        {"confidence": reference},
        keep,
        target_on_population={"confidence": np.array([0.125, 0.25, 0.375, 0.5])},
        population={"confidence": population},
        population_keep=population_keep,
    )
    # r(x) = [1.5, 0.5]. With γ = 2, count r(z) < r(x)/2 = [0.75, 0.25] strictly:
    # sample 0: {0.25, 0.5} (0.75 ties and is left out) -> 2/4; sample 1: none -> 0.
    np.testing.assert_array_equal(run_attack("model-robust", inputs), [0.5, 0.0])
    # With γ = 1: r(z) < [1.5, 0.5] -> 4/4 and {0.25} -> 1/4.
    inputs = _inputs(
        inputs.target,
        inputs.reference,
        keep,
        target_on_population=inputs.target_on_population,
        population=inputs.population,
        population_keep=population_keep,
        options=ModelRobustOptions(gamma=1.0),
    )
    np.testing.assert_array_equal(run_attack("model-robust", inputs), [1.0, 0.25])


# --- sanitisation and missing model sets --------------------------------------------------------


def test_non_finite_scores_are_replaced_and_counted(monkeypatch, caplog):
    raw = np.array([1.0, np.inf, -np.inf, np.nan, -2.0], dtype=np.float32)
    broken = Attack("broken", "metric", "miaflow.attacks.toy.broken", "Non-finite scores.")
    monkeypatch.setitem(ATTACKS, "broken", broken)
    monkeypatch.setitem(
        scoring.MODULES, "miaflow.attacks.toy", SimpleNamespace(broken=lambda _: raw)
    )
    with caplog.at_level(logging.WARNING, logger="miaflow.attacks"):
        scores = run_attack("broken", _inputs({}, {}))
    assert scores.dtype == np.float64
    np.testing.assert_array_equal(scores, [1.0, 1.0 + 1e-6, -2.0 - 1e-6, 0.0, -2.0])
    assert "3 non-finite" in caplog.text


def test_attacks_without_their_models_raise(tmp_path):
    store, splits = _write_toy_store(tmp_path, n_reference=0, n_population=0)
    inputs, _ = attack_inputs(store, splits, repeat=0)
    n = len(splits.target_samples)
    assert inputs.reference["phi"].shape == inputs.reference_keep.shape == (0, n)
    assert inputs.population_keep.shape == (0, len(splits.auxiliary_samples))
    assert run_attack("metric-loss", inputs).shape == (n,)
    for name, attack in ATTACKS.items():
        if "reference" in attack.needs:
            with pytest.raises(ValueError, match="no reference models"):
                run_attack(name, inputs)


def test_model_robust_without_population_raises():
    inputs = _inputs({"confidence": [0.5, 0.5]}, {"confidence": np.full((4, 2), 0.5)})
    with pytest.raises(ValueError, match="no population models"):
        run_attack("model-robust", inputs)


def test_reference_subset_keeps_the_first_whole_pairs(tmp_path):
    store, splits = _write_toy_store(tmp_path)
    inputs, _ = attack_inputs(store, splits, repeat=0, n_reference=4)
    assert inputs.reference["phi"].shape[0] == inputs.reference_keep.shape[0] == 4
    np.testing.assert_array_equal(inputs.reference_keep.sum(axis=0), 2)  # two complementary pairs


def test_metric_attacks_negate_loss_like_signals():
    target = {
        "loss": [0.1, 2.0],
        "confidence": [0.9, 0.2],
        "correct": [1.0, 0.0],
        "entropy": [0.3, 1.5],
        "mentr": [0.2, 3.0],
    }
    inputs = _inputs(target, {})
    expected = {
        "metric-loss": [-0.1, -2.0],
        "metric-conf": [0.9, 0.2],
        "metric-corr": [1.0, 0.0],
        "metric-ent": [-0.3, -1.5],
        "metric-ment": [-0.2, -3.0],
    }
    for name, scores in expected.items():
        np.testing.assert_allclose(run_attack(name, inputs), scores)


def test_references_can_come_from_another_store(tmp_path):
    """With `ref_arch`, targets come from one architecture's shards and references from
    another's."""
    store, splits = _write_toy_store(tmp_path / "a")
    other, _ = _write_toy_store(tmp_path / "b", n_reference=16, n_population=16)
    inputs, _ = attack_inputs(store, splits, repeat=0, reference_store=other)
    np.testing.assert_array_equal(
        inputs.reference["phi"],
        other.matrix(splits.models("reference"), "phi", splits.target_samples),
    )
    np.testing.assert_array_equal(
        inputs.target["phi"], store.matrix(["target-0"], "phi", splits.target_samples)[0]
    )
