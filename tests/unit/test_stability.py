from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from miaflow.evaluation.stability import STABILITY_COLUMNS, stability_measures, stability_table

# Six samples a..f on three targets t0 t1 t2 (1 = the target holds it as a member / flags it).
#        held     flagged   true positives
#   a:  1 1 0     1 0 1     t0            (t2 flags a non-member: not a true positive)
#   b:  1 0 1     1 0 1     t0 t2         every target holding b flags it -> stable
#   c:  0 1 1     0 0 0     -             never found
#   d:  1 1 1     1 1 0     t0 t1         t2 holds d and misses it -> covered, not stable
#   e:  0 0 0     1 1 1     -             a non-member everywhere: not in the denominator
#   f:  0 0 1     0 0 1     t2            stable
# Held by at least one target: a b c d f (5). Covered: a b d f (4/5). Stable: b f (2/5).
# Jaccard over the members a pair of targets shares:
#   t0,t1 share a, d: TP {a, d} vs {d} -> 1/2;  t0,t2 share b, d: {b, d} vs {b} -> 1/2;
#   t1,t2 share c, d: {d} vs {} -> 0/1.  Mean (1/2 + 1/2 + 0) / 3 = 1/3.
HELD = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1], [0, 0, 0], [0, 0, 1]], bool)
FLAGGED = np.array([[1, 0, 1], [1, 0, 1], [0, 0, 0], [1, 1, 0], [1, 1, 1], [0, 0, 1]], bool)


def test_hand_example():
    measures = stability_measures(HELD, FLAGGED)
    assert measures == {
        "n_members": 5,
        "n_covered": 4,
        "n_stable": 2,
        "coverage": 4 / 5,
        "stability": 2 / 5,
        "jaccard": pytest.approx(1 / 3),
        "n_pairs": 3,
    }


def test_identical_targets_are_fully_consistent_and_nothing_found_has_no_index():
    held = np.ones((4, 3), bool)
    flagged = np.array([[1, 1, 1], [1, 1, 1], [0, 0, 0], [0, 0, 0]], bool)
    measures = stability_measures(held, flagged)
    # The same two members found by all three targets: coverage = stability = 2/4, Jaccard 1.
    assert (measures["coverage"], measures["stability"], measures["jaccard"]) == (0.5, 0.5, 1.0)
    nothing = stability_measures(held, np.zeros_like(held))
    assert (nothing["coverage"], nothing["stability"], nothing["n_pairs"]) == (0.0, 0.0, 0)
    assert np.isnan(nothing["jaccard"])


PADDING = 20  # non-members of every target, scoring 0, so that one false positive is < 10%


def _scores(held: np.ndarray, flagged: np.ndarray, unscored=()) -> pd.DataFrame:
    """Per-sample scores that reproduce `flagged` at FPR 10%: flagged samples score 10, others
    0, plus PADDING non-members; (sample, target) pairs in `unscored` are left out."""
    n, targets = held.shape
    rows = []
    for t in range(targets):
        for i in range(n + PADDING):
            if (i, t) in unscored:
                continue
            inside = i < n
            rows.append(
                {
                    "dataset": "toy",
                    "target_model": "mlp",
                    "attack": "loss",
                    "repeat": t,
                    "sample_id": i,
                    "score": 10.0 if inside and flagged[i, t] else 0.0,
                    "is_member": bool(inside and held[i, t]),
                }
            )
    return pd.DataFrame(rows)


def test_table_thresholds_each_target_and_matches_the_hand_example():
    # Target t0 has 23 non-members (c, e, f and the padding), one of them (e) scores 10: FPR
    # 1/23 < 10%, and the next cut (0) flags everyone, so the threshold is 10.
    table = stability_table(_scores(HELD, FLAGGED), fpr=0.1)
    assert table.columns.tolist() == STABILITY_COLUMNS
    row = table.iloc[0]
    assert (row["n_targets"], row["n_members"], row["resolved"]) == (3, 5, True)
    assert (row["coverage"], row["stability"]) == (4 / 5, 2 / 5)
    assert row["jaccard"] == pytest.approx(1 / 3)


def test_a_sample_a_target_did_not_score_is_not_held_there():
    # t2 skips d (a subset attack): d is then held by t0 and t1, which both flag it -> stable
    # (b, d, f: 3/5). Jaccard: t0,t1 1/2 as before; t0,t2 share only b, found by both -> 1;
    # t1,t2 share only c, found by neither -> no index. Mean (1/2 + 1) / 2.
    row = stability_table(_scores(HELD, FLAGGED, unscored={(3, 2)}), fpr=0.1).iloc[0]
    assert (row["coverage"], row["stability"]) == (4 / 5, 3 / 5)
    assert (row["jaccard"], row["n_pairs"]) == (0.75, 2)


def test_unresolved_fpr_gives_no_measures():
    # 1% of 23 non-members is below one false positive: no threshold, not "nothing found".
    row = stability_table(_scores(HELD, FLAGGED), fpr=0.01).iloc[0]
    assert not row["resolved"]
    assert np.isnan([row["coverage"], row["stability"], row["jaccard"]]).all()
    assert row["n_members"] == 5
