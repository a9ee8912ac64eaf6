from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from miaflow.evaluation.metrics import score_metrics
from miaflow.evaluation.stats import paired_tests
from miaflow.evaluation.verdicts import (
    JSON_KEYS,
    RANKING_COLUMNS,
    VERDICT_COLUMNS,
    is_few_distinct,
    low_fpr,
    named_level,
    rankings,
    score_shape,
    ties_text,
    verdict_json,
    verdict_lines,
    verdicts,
)

N_RESAMPLES = 199

Attack = Callable[[np.ndarray, np.random.Generator], np.ndarray]


def _experiment(
    dataset: str, attacks: dict[str, Attack], n: int = 400, repeats: int = 3, seed: int = 0
) -> pd.DataFrame:
    """Per-sample scores of `attacks` on `repeats` target models that share n samples, each
    trained on its own random half of them."""
    rng = np.random.default_rng(seed)
    frames = []
    for repeat in range(repeats):
        member = np.zeros(n, bool)
        member[rng.permutation(n)[: n // 2]] = True
        for name, attack in attacks.items():
            frames.append(
                pd.DataFrame(
                    {
                        "dataset": dataset,
                        "target_model": "mlp",
                        "attack": name,
                        "repeat": repeat,
                        "sample_id": np.arange(n),
                        "score": attack(member, rng),
                        "is_member": member,
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def _strong(member, rng):
    return 1.5 * member + rng.normal(size=member.size)


def _noise(member, rng):
    return rng.normal(size=member.size)


@pytest.fixture(scope="module")
def toy() -> pd.DataFrame:
    """ "strong" (AUROC ~0.86), "weak" (noise) and "twin": strong's scores plus a perturbation
    of 1/100 of their spread, which DeLong cannot tell from strong."""
    scores = _experiment("toy", {"strong": _strong, "weak": _noise})
    twin = scores[scores["attack"] == "strong"].assign(attack="twin")
    twin["score"] += 0.01 * np.random.default_rng(1).normal(size=len(twin))
    return pd.concat([scores, twin], ignore_index=True)


@pytest.fixture(scope="module")
def toy_rankings(toy) -> pd.DataFrame:
    return rankings(score_metrics(toy), toy, n_resamples=N_RESAMPLES)


def test_rankings_shape_and_separation(toy_rankings):
    assert toy_rankings.columns.tolist() == RANKING_COLUMNS
    auroc = toy_rankings[toy_rankings["ranking"] == "auroc"].set_index("attack")
    assert set(auroc.index) == {"strong", "twin", "weak"}
    best = auroc.index[auroc["rank"] == 1][0]
    other_twin = ({"strong", "twin"} - {best}).pop()
    assert not auroc.loc[other_twin, "separated"]  # a perturbed copy: not separated
    assert auroc.loc["weak", "separated"]  # noise: AUROC ~0.5 against ~0.85
    assert np.isnan(auroc.loc[best, "p_value"])
    # 3 targets x 400 shared samples, every pair scored on all of them.
    assert auroc.loc["weak", "n_samples"] == 1200


def test_by_adjustment_by_hand(toy_rankings):
    # A vs-best family of two p-values p1 <= p2: c(2) = 1 + 1/2 = 1.5;
    # adjusted p2 = min(1, 1.5 * p2 * 2/2), adjusted p1 = min(adjusted p2, 1.5 * p1 * 2/1).
    family = toy_rankings[toy_rankings["ranking"] == "auroc"].dropna(subset=["p_value"])
    p1, p2 = sorted(family["p_value"])
    by2 = min(1.0, 1.5 * p2)
    by1 = min(by2, 3.0 * p1)
    assert sorted(family["p_by"]) == pytest.approx(sorted([by1, by2]))


def test_same_p_values_as_paired_tests(toy, toy_rankings):
    metrics = score_metrics(toy)
    tests = paired_tests(
        metrics,
        toy,
        {a: a for a in ("strong", "twin", "weak")},
        ("auroc", "tpr_at_1pct_fpr"),
        n_resamples=N_RESAMPLES,
    )
    vs_best = tests[tests["family"] == "vs-best"]
    for ranking, metric, column in (
        ("auroc", "auroc", "delong"),
        ("low_fpr", "tpr_at_1pct_fpr", "perm"),
    ):
        mine = toy_rankings[toy_rankings["ranking"] == ranking].set_index("attack")
        theirs = vs_best[vs_best["metric"] == metric].set_index("attack_b")
        assert mine["rank"].idxmin() == theirs["attack_a"].iloc[0]
        assert mine.loc[theirs.index, "p_value"].tolist() == theirs[f"p_{column}"].tolist()
        assert mine.loc[theirs.index, "p_by"].tolist() == pytest.approx(
            theirs[f"p_{column}_by"].tolist()
        )
    # The low-FPR means are the metrics table's TPR@1%FPR means (the level is 1%: 200
    # non-members per target resolve it).
    low = toy_rankings[toy_rankings["ranking"] == "low_fpr"].set_index("attack")
    assert (low["low_fpr"] == 0.01).all()
    table = metrics[metrics["metric"] == "tpr_at_1pct_fpr"].groupby("attack")["value"].mean()
    assert low.loc[table.index, "mean"].tolist() == table.tolist()


def test_deterministic(toy, toy_rankings):
    again = rankings(score_metrics(toy), toy, n_resamples=N_RESAMPLES)
    pd.testing.assert_frame_equal(again, toy_rankings)


def _binned(member: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """9 distinct values: 23% of the non-members and 80% of the members at the top value 9, the
    rest spread evenly over 1..8. AUROC ~ 0.8*0.77 + 0.5*0.8*0.23 + 0.2*0.77*0.5 ~ 0.78."""
    scores = np.empty(member.size)
    for group, top_share in ((~member, 0.23), (member, 0.8)):
        k = int(group.sum())
        n_top = round(top_share * k)
        values = np.r_[np.full(n_top, 9.0), 1 + np.arange(k - n_top) % 8]
        scores[group] = rng.permutation(values)
    return scores


def _smooth(member, rng):
    return 0.6 * member + rng.normal(size=member.size)  # AUROC ~ Phi(0.6 / sqrt 2) ~ 0.66


def test_coarse_auroc_winner_is_flagged():
    scores = _experiment("coarse", {"binned": _binned, "smooth": _smooth}, n=600)
    table = verdicts(rankings(score_metrics(scores), scores, n_resamples=N_RESAMPLES))
    row = table.iloc[0]
    assert row["best_attack"] == "binned" and row["best_attack_low_fpr"] == "smooth"
    assert row["tpr_at_low_fpr"] > 0
    assert row["flags"] == ["auroc_best_tpr_zero", "auroc_best_few_distinct"]
    line = verdict_lines(table)[0]
    assert line.startswith("  coarse/mlp  binned  AUROC ")
    assert "TPR@1%FPR: smooth" in line
    assert line.endswith("flags: auroc_best_tpr_zero, auroc_best_few_distinct")


def test_score_shape_and_few_distinct_by_hand():
    # Top value 9 held by 1 of 4 non-members (25%) and 1 member; 4 distinct values in all.
    scores = np.array([9.0, 9, 5, 3, 3, 1])
    member = np.array([1, 0, 0, 1, 0, 0], bool)
    assert score_shape(scores, member) == (0.25, 4)
    assert is_few_distinct(0.25, 1000, 0.01)  # the top value blocks FPR < 1%
    assert is_few_distinct(0.0, 99, 0.01)  # fewer than 1/0.01 distinct values
    assert not is_few_distinct(0.005, 100, 0.01)


def test_low_fpr_raised_to_the_fewest_nonmembers_of_a_subset_attack():
    scores = _experiment("llm", {"loss": _strong, "subset": _strong}, n=24, repeats=2)
    # "subset" scores 2 fewer non-members per target: 10 left, so 1/10 > 1%.
    dropped = scores.index[(scores["attack"] == "subset") & ~scores["is_member"]]
    dropped = scores.loc[dropped].groupby("repeat").head(2).index
    scores = scores.drop(dropped)
    assert low_fpr(scores).loc[("llm", "mlp")] == 0.1
    assert named_level(1 / 12) == 0.0833333  # 1/12 as the metric name "tpr_at_8.33333pct_fpr"
    ranked = rankings(score_metrics(scores), scores, n_resamples=N_RESAMPLES)
    assert (ranked["low_fpr"] == 0.1).all()
    table = verdicts(ranked)
    assert "low_fpr_raised" in table.iloc[0]["flags"]
    assert "TPR@10%FPR" in verdict_lines(table)[0]
    # Paired on the samples both scored: 2 targets x (24 - 2) samples.
    assert ranked["n_samples"].max() == 44


def test_exact_ties_list_both_and_show_the_first_id():
    def copy(member, rng):
        return np.round(_strong(member, np.random.default_rng(5)), 6)

    scores = _experiment("tie", {"b_copy": copy, "a_copy": copy, "weak": _noise})
    table = verdicts(rankings(score_metrics(scores), scores, n_resamples=N_RESAMPLES))
    row = table.iloc[0]
    # Equal means: "a_copy" shown first by id; the tie is the verdict, in both rankings.
    assert row["best_attack"] == "a_copy" and row["tied_with"] == ["b_copy"]
    assert row["best_attack_low_fpr"] == "a_copy" and row["tied_with_low_fpr"] == ["b_copy"]
    line = verdict_lines(table)[0]
    assert "(not separated from: b_copy)" in line and "equal" not in line.lower()


def test_experiment_without_scores_separates_nothing(toy):
    metrics = pd.concat(
        [score_metrics(toy), score_metrics(toy).assign(dataset="other")], ignore_index=True
    )
    table = verdicts(rankings(metrics, toy, n_resamples=N_RESAMPLES)).set_index("dataset")
    other = table.loc["other"]
    assert len(other["tied_with"]) == 2 and other["flags"] == ["untested"]
    assert pd.isna(other["best_attack_low_fpr"]) and np.isnan(other["tpr_at_low_fpr"])
    assert verdict_json(table.reset_index())["other/mlp"]["best_attack_low_fpr"] is None
    line = verdict_lines(table.reset_index())[0]
    assert line.startswith("  other/mlp") and "TPR@" not in line


def test_ties_text():
    assert ties_text(["b", "c", "d", "e", "f"], 7) == "(not separated from: b, c (+3))"
    assert ties_text(["b", "c"], 2) == "(not separated from: b, c)"
    assert ties_text([], 4) == "(separated from all 4 others)"
    assert ties_text([], 1) == "(separated from the other attack)"
    assert ties_text([], 0) == ""


def _verdict_row(**overrides) -> dict:
    row = {
        "dataset": "adult",
        "target_model": "mlp",
        "best_attack": "lira",
        "auroc": 0.71234,
        "auroc_std": 0.0101,
        "n_target_models": 5,
        "tied_with": ["rmia", "reference", "a", "b", "c"],
        "n_attacks": 9,
        "best_attack_low_fpr": "rmia",
        "tpr_at_low_fpr": 0.0814,
        "low_fpr": 0.01,
        "tied_with_low_fpr": ["lira"],
        "n_attacks_low_fpr": 9,
        "flags": [],
    }
    return row | overrides


def test_summary_line_and_json_entry():
    table = pd.DataFrame([_verdict_row()], columns=VERDICT_COLUMNS)
    assert verdict_lines(table) == [
        "  adult/mlp  lira  AUROC 0.712 ± 0.010 (not separated from: rmia, reference (+3)); "
        "TPR@1%FPR: rmia 0.081 (not separated from: lira)"
    ]
    entry = verdict_json(table)["adult/mlp"]
    assert tuple(entry) == JSON_KEYS
    assert entry == {
        "best_attack": "lira",
        "auroc": 0.71234,
        "best_attack_low_fpr": "rmia",
        "tpr_at_low_fpr": 0.0814,
        "low_fpr": 0.01,
        "tied_with": ["rmia", "reference", "a", "b", "c"],
        "tied_with_low_fpr": ["lira"],
        "flags": [],
    }


def test_one_target_model_has_no_spread():
    row = _verdict_row(auroc_std=np.nan, tied_with=[], n_attacks=1, tied_with_low_fpr=[])
    row |= {"n_attacks_low_fpr": 1, "low_fpr": 0.0833333, "flags": ["low_fpr_raised"]}
    line = verdict_lines(pd.DataFrame([row], columns=VERDICT_COLUMNS))[0]
    assert line == "  adult/mlp  lira  AUROC 0.712; TPR@8.33%FPR: rmia 0.081; flags: low_fpr_raised"
