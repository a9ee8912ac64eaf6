"""Song & Mittal: class-dependent / global threshold attacks and the privacy risk score."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
from test_attacks import _write_toy_store

from miaflow.attacks import song_mittal as sm
from miaflow.attacks.inputs import AttackInputs, attack_inputs
from miaflow.attacks.options import SmRiskOptions
from miaflow.attacks.scoring import run_attack
from miaflow.evaluation import tables
from miaflow.evaluation.song_mittal_tables import risk_precision_table, song_mittal_table
from miaflow.jobs.report import risk_score_report
from miaflow.plan import Experiment

SM_ATTACKS = [
    "sm-corr",
    "sm-conf",
    "sm-ent",
    "sm-ment",
    "sm-conf-global",
    "sm-ent-global",
    "sm-ment-global",
    "sm-risk",
]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    store, splits = _write_toy_store(tmp_path_factory.mktemp("toy"))
    return attack_inputs(store, splits, repeat=0)


def _thre_setting(train, test):
    """Literal port of Song & Mittal's loop, the reference the vectorised version must match."""
    best_acc, best_tau = 0.0, 0.0
    for tau in np.concatenate([train, test]):
        acc = 0.5 * (np.sum(train >= tau) / len(train) + np.sum(test < tau) / len(test))
        if acc > best_acc:
            best_acc, best_tau = acc, tau
    return best_tau


# --- thresholds --------------------------------------------------------------------------------


def test_best_threshold_known_answer():
    # τ = 0.8: train ≥ 0.8 is 2/3, test < 0.8 is 3/3 -> 5/6, the best of the six candidates.
    assert sm.best_threshold(np.array([0.9, 0.6, 0.8]), np.array([0.7, 0.2, 0.6])) == 0.8


def test_best_threshold_keeps_the_first_maximiser_in_train_then_test_order():
    # Candidates 2 and 1 both reach ½(½ + 1) = ¾; whichever comes first wins.
    assert sm.best_threshold(np.array([2.0, 1.0]), np.array([0.0, 1.5])) == 2.0
    assert sm.best_threshold(np.array([1.0, 2.0]), np.array([0.0, 1.5])) == 1.0


def test_best_threshold_matches_the_original_loop_with_ties():
    rng = np.random.default_rng(5)
    for _ in range(50):
        train = rng.integers(0, 6, size=rng.integers(1, 15)).astype(float)
        test = rng.integers(0, 6, size=rng.integers(1, 15)).astype(float)
        assert sm.best_threshold(train, test) == _thre_setting(train, test)


def test_missing_class_falls_back_to_the_global_threshold(caplog):
    values = np.array([0.9, 0.8, 0.7, 0.6, 0.4, 0.3])
    labels = np.array([0, 0, 0, 0, 1, 1])
    is_member = np.array([True, True, False, False, True, True])  # class 1 has no non-members
    with caplog.at_level(logging.INFO, logger="miaflow.attacks.song_mittal"):
        thresholds = sm.class_thresholds(values, labels, is_member, np.array([0, 1, 2]))
    global_tau = sm.best_threshold(values[is_member], values[~is_member])
    assert thresholds == {0: 0.8, 1: global_tau, 2: global_tau}
    assert "class 1 has 2 shadow members and 0 non-members" in caplog.text
    assert "class 2 has 0 shadow members" in caplog.text


# Shadow (reference 0) on 8 samples: class 0 members p_y 0.9, 0.8 / non-members 0.7, 0.6;
# class 1 members 0.4, 0.3 / non-members 0.2, 0.1. Per class τ_0 = 0.8, τ_1 = 0.3; one global
# threshold over all classes is 0.8 (½(2/4 + 4/4) = ¾, first reached there).
SHADOW_CONF = np.array([0.9, 0.8, 0.7, 0.6, 0.4, 0.3, 0.2, 0.1])
SHADOW_LABEL = np.array([0, 0, 0, 0, 1, 1, 1, 1])
SHADOW_MEMBER = np.array([1, 1, 0, 0, 1, 1, 0, 0], dtype=bool)
TARGET_CONF = np.array([0.85, 0.65, 0.35, 0.15])
TARGET_LABEL = np.array([0, 0, 1, 1])
TARGET_MEMBER = np.array([True, False, True, False])


def _threshold_inputs() -> AttackInputs:
    # Other models' rows (reference 1) must not matter: the shadow is reference 0 only.
    def two_models(row):
        return np.stack([row, row[::-1]])

    # Entropy (base 2) 1 − p_y and Mentr 1 − p_y, so −H and −Mentr are p_y − 1: same thresholds
    # shifted by −1, and ln 2 times that for entropy in natural log.
    shadow = {
        "confidence": SHADOW_CONF,
        "entropy": 1 - SHADOW_CONF,
        "mentr": 1 - SHADOW_CONF,
        "label": SHADOW_LABEL,
        "loss": -np.log(SHADOW_CONF),
    }
    target = {
        "confidence": TARGET_CONF,
        "entropy": 1 - TARGET_CONF,
        "mentr": 1 - TARGET_CONF,
        "label": TARGET_LABEL,
        "correct": np.array([1.0, 1.0, 0.0, 1.0]),
        "loss": -np.log(TARGET_CONF),
    }
    return AttackInputs(
        target=target,
        reference={k: two_models(v) for k, v in shadow.items()},
        reference_keep=two_models(SHADOW_MEMBER),
        target_on_population={},
        population={},
        population_keep=np.zeros((0, 0), bool),
    )


def test_class_dependent_and_global_threshold_scores():
    inputs = _threshold_inputs()
    per_class = TARGET_CONF - np.array([0.8, 0.8, 0.3, 0.3])
    np.testing.assert_allclose(run_attack("sm-conf", inputs), per_class)
    np.testing.assert_allclose(run_attack("sm-conf-global", inputs), TARGET_CONF - 0.8)
    np.testing.assert_allclose(run_attack("sm-ment", inputs), per_class)
    np.testing.assert_allclose(run_attack("sm-ment-global", inputs), TARGET_CONF - 0.8)
    np.testing.assert_allclose(run_attack("sm-ent", inputs), np.log(2) * per_class)
    np.testing.assert_allclose(run_attack("sm-ent-global", inputs), np.log(2) * (TARGET_CONF - 0.8))
    np.testing.assert_array_equal(run_attack("sm-corr", inputs), [1, 1, 0, 1])


def test_an_auxiliary_shadow_is_population_model_0():
    """`shadow_pool="auxiliary"`: thresholds come from population model 0 and its membership."""
    inputs = _threshold_inputs()
    moved = dataclasses.replace(
        inputs,
        population=inputs.reference,
        population_keep=inputs.reference_keep,
        shadow_pool="auxiliary",
        reference_keep=~inputs.reference_keep,
    )
    for name in ("sm-conf", "sm-ment-global", "sm-risk"):
        np.testing.assert_array_equal(run_attack(name, moved), run_attack(name, inputs))


def test_decision_accuracy_at_the_learned_thresholds():
    inputs = _threshold_inputs()
    # Class-dependent: members 0.85 ≥ 0.8 and 0.35 ≥ 0.3, non-members below: accuracy 1.
    assert sm.decision_accuracy("sm-conf", run_attack("sm-conf", inputs), TARGET_MEMBER) == 1.0
    # Global τ = 0.8 misses the class-1 member: ½(½ + 1).
    assert (
        sm.decision_accuracy("sm-conf-global", run_attack("sm-conf-global", inputs), TARGET_MEMBER)
        == 0.75
    )
    # Correctness: members correct 1/2, non-members incorrect 0/2 -> ¼.
    assert sm.decision_accuracy("sm-corr", run_attack("sm-corr", inputs), TARGET_MEMBER) == 0.25


# --- privacy risk score --------------------------------------------------------------------------


def test_risk_histograms_bins_and_lookup():
    edges, train_hist, test_hist = sm.risk_histograms(
        np.array([1.0, 10.0, 100.0]), np.array([1000.0, 10000.0, 100.0]), bins=4
    )
    np.testing.assert_allclose(edges, [1, 10, 100, 1000, 10000])
    np.testing.assert_allclose(train_hist, [1 / 3, 1 / 3, 1 / 3, 0])
    np.testing.assert_allclose(test_hist, [0, 0, 1 / 3, 2 / 3])
    # Beyond the edges -> outer bins; inside, left-closed bins.
    np.testing.assert_array_equal(
        sm.bin_index(np.array([0.5, 1.0, 10.0, 50.0, 100.0, 9999.0, 10000.0, 1e5]), edges),
        [0, 0, 1, 1, 2, 3, 3, 3],
    )
    np.testing.assert_allclose(sm.bin_risks(train_hist, test_hist), [1, 1, 0.5, 0])


def test_log_bins_clamp_small_values_and_linear_bins_do_not():
    edges, _, _ = sm.risk_histograms(np.array([0.0, 1.0]), np.array([1e-12, 10.0]), bins=5)
    assert edges[0] == pytest.approx(1e-10) and edges[-1] == pytest.approx(10.0)
    edges, train_hist, _ = sm.risk_histograms(
        np.array([0.0, 1.0]), np.array([-1.0, 4.0]), bins=5, log_bins=False
    )
    np.testing.assert_allclose(edges, [-1, 0, 1, 2, 3, 4])
    np.testing.assert_allclose(train_hist, [0, 0.5, 0.5, 0, 0])
    # The extreme values stay counted although 10**log10(v) may miss v by an ulp.
    for low in (1.01 - 1.0, 0.3, 7e-5):
        _, train_hist, test_hist = sm.risk_histograms(np.array([low]), np.array([1.0]), bins=3)
        assert train_hist.sum() == test_hist.sum() == 1.0


def test_empty_bins_take_the_nearest_non_empty_bin_lower_side_first():
    # Occupied bins 0 (risk 1), 3 (risk 0) and 4 (risk ½).
    risks = sm.bin_risks(np.array([0.5, 0, 0, 0, 0.5]), np.array([0, 0, 0, 0.5, 0.5]))
    np.testing.assert_allclose(risks, [1, 1, 0, 0, 0.5])
    # Bin 1 is empty with both neighbours at distance 1: the lower one (risk 1) wins over 1/3.
    np.testing.assert_allclose(
        sm.bin_risks(np.array([0.5, 0, 0.5]), np.array([0, 0, 1.0])), [1, 1, 1 / 3]
    )


def test_prior_weights_the_histograms():
    # π·h_tr / (π·h_tr + (1 − π)·h_te) with h_tr = h_te = ½ and π = ¼ -> ¼.
    assert sm.bin_risks(np.array([0.5]), np.array([0.5]), prior=0.25)[0] == pytest.approx(0.25)


def _risk_inputs(options: dict) -> AttackInputs:
    # Class 0: shadow members' Mentr 0.01, non-members 1; class 1 the reverse. The loss says the
    # opposite of Mentr everywhere. A class-2 target sample has no shadow class.
    mentr = np.array([0.01, 0.01, 1.0, 1.0, 1.0, 1.0, 0.01, 0.01])
    target_mentr = np.array([0.01, 1.0, 0.01, 1.0, 0.01])
    return AttackInputs(
        target={
            "mentr": target_mentr,
            "loss": 1.01 - target_mentr,
            "label": np.array([0, 0, 1, 1, 2]),
        },
        reference={"mentr": mentr[None], "loss": 1.01 - mentr[None], "label": SHADOW_LABEL[None]},
        reference_keep=SHADOW_MEMBER[None],
        target_on_population={},
        population={},
        population_keep=np.zeros((0, 0), bool),
        options=SmRiskOptions(**options),
    )


def test_risk_is_per_class_with_a_global_fallback(caplog):
    # The class-2 sample uses histograms over all classes (members {0.01, 1}, non-members
    # {1, 0.01}): risk ½ everywhere.
    with caplog.at_level(logging.INFO, logger="miaflow.attacks.song_mittal"):
        np.testing.assert_allclose(
            run_attack("sm-risk", _risk_inputs({"bins": 2})), [1, 0, 0, 1, 0.5]
        )
    assert "class 2 has 0 shadow members and 0 non-members" in caplog.text


def test_risk_signal_option_reads_that_signal():
    np.testing.assert_allclose(
        run_attack("sm-risk", _risk_inputs({"bins": 2, "signal": "loss"})), [1, 0, 0, 1, 0.5]
    )
    with pytest.raises(ValueError, match="risk-score signal"):
        sm.privacy_risk(_risk_inputs({}), signal="confidence")


# --- analyses -------------------------------------------------------------------------------------


def test_risk_cdf_precision_recall_and_leakage():
    x, cdf = sm.risk_cdf(np.array([0.9, 0.1, 0.5, 0.5]))
    np.testing.assert_allclose(x, [0.1, 0.5, 0.5, 0.9])
    np.testing.assert_allclose(cdf, [0.25, 0.5, 0.75, 1.0])

    risk = np.array([1.0, 0.95, 0.85, 0.6, 0.55, 0.3])
    member = np.array([True, True, False, True, False, False])
    rows = sm.risk_precision_recall(risk, member, thresholds=(1.0, 0.9, 0.8, 0.5))
    assert rows[0] == (1.0, 1.0, 1 / 3)  # {1.0}
    assert rows[1] == (0.9, 1.0, 2 / 3)  # {1.0, 0.95}
    assert rows[2] == pytest.approx((0.8, 2 / 3, 2 / 3))  # adds the non-member 0.85
    assert rows[3] == pytest.approx((0.5, 3 / 5, 1.0))
    assert np.isnan(sm.risk_precision_recall(risk, member, thresholds=(1.5,))[0][1])

    assert sm.leakage_distance(np.array([0.9, 0.5, 0.7]), prior=0.3) == pytest.approx(0.4)


# --- every Song & Mittal attack on a memorising target ------------------------------------------


@pytest.mark.parametrize("name", SM_ATTACKS)
def test_song_mittal_attack_detects_members_of_a_memorising_target(toy, name):
    inputs, is_member = toy
    scores = run_attack(name, inputs)
    assert roc_auc_score(is_member, scores) > 0.75
    if name in sm.DECISION_THRESHOLDS:
        assert sm.decision_accuracy(name, scores, is_member) > 0.7
    else:
        assert np.all((scores >= 0) & (scores <= 1))


# --- tables and figures ---------------------------------------------------------------------------


def _score_rows(attack: str, repeat: int, scores, is_member, dataset: str = "toy") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "dataset": dataset,
            "target_model": "mlp",
            "attack": attack,
            "repeat": repeat,
            "sample_id": np.arange(len(scores)),
            "score": np.asarray(scores, dtype=float),
            "is_member": is_member,
        }
    )


def test_song_mittal_table_compares_class_dependent_and_global_accuracy():
    member = np.array([True, True, False, False])
    scores = pd.concat(
        [
            # sm-conf decides right on everything in repeat 0, misses one member in repeat 1.
            _score_rows("sm-conf", 0, [0.1, 0.0, -0.1, -0.2], member),
            _score_rows("sm-conf", 1, [0.1, -0.1, -0.1, -0.2], member),
            # Global: ½(½ + ½) in both repeats.
            _score_rows("sm-conf-global", 0, [0.1, -0.1, 0.0, -0.2], member),
            _score_rows("sm-conf-global", 1, [0.1, -0.1, 0.0, -0.2], member),
            # Correctness: member iff score ≥ 1: ½(1 + ½).
            _score_rows("sm-corr", 0, [1, 1, 1, 0], member),
            _score_rows("metric-loss", 0, [1, 1, 1, 0], member),  # other attacks are ignored
        ]
    )
    table = song_mittal_table(scores)
    assert list(table["attack"]) == ["sm-conf", "sm-corr"]
    conf, corr = table.iloc[0], table.iloc[1]
    assert conf["class_dependent"] == tables.format_mean_std(0.875, np.std([1, 0.75], ddof=1))
    assert conf["class_independent"] == "0.500 ± 0.000"
    assert conf["n_repeats"] == 2
    assert corr["class_dependent"] == "0.750" and corr["class_independent"] == tables.MISSING


def test_risk_precision_table_and_cdf_figure(tmp_path):
    member = np.array([True, True, False, False])
    scores = pd.concat(
        [
            _score_rows("sm-risk", 0, [1.0, 0.6, 0.6, 0.2], member),
            _score_rows("sm-risk", 1, [0.9, 0.4, 0.2, 0.1], member),
        ]
    )
    table = risk_precision_table(scores)
    assert list(table["threshold"]) == [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]
    at_1, at_06 = table.iloc[0], table.iloc[4]
    # τ = 1: repeat 0 predicts {1.0} (precision 1, recall ½), repeat 1 predicts nothing
    # (precision skipped, recall 0).
    assert at_1["precision"] == "1.000" and at_1["recall"] == tables.format_mean_std(
        0.25, np.std([0.5, 0.0], ddof=1)
    )
    # τ = 0.6: repeat 0 predicts 3 samples (2 members), repeat 1 one member.
    assert at_06["precision"] == tables.format_mean_std(5 / 6, np.std([2 / 3, 1.0], ddof=1))

    tables_out = [tmp_path / f"risk_precision{suffix}" for suffix in (".csv", ".md", ".tex")]
    figure = tmp_path / "risk-cdf-toy-mlp.png"
    paths = [tmp_path / "scores.parquet"]
    scores.to_parquet(paths[0])
    report = dict(
        scores=paths,
        risk_precision=tables_out,
        risk_figures=[figure],
        experiments=[Experiment("toy", "mlp", "mlp")],
    )
    risk_score_report(**report)
    assert (tmp_path / "risk_precision.md").read_text().startswith("Privacy risk score")
    first = figure.read_bytes()
    assert first.startswith(b"\x89PNG")
    risk_score_report(**report)
    assert figure.read_bytes() == first  # deterministic bytes
