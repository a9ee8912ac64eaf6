"""Coverage, stability and consistency of an attack over the target models of an experiment,
after MIAE: Wang, Zhang, Chen, Baracaldo, Kadhe, Yu, "Membership Inference Attacks as Privacy
Tools: Reliability, Disparity and Ensemble" (CCS 2025, arXiv 2506.13972v2, Section 3.1).

A TPR says how many members an attack finds, not whether it finds the same ones again. MIAE
thresholds several instances of an attack at one low FPR and compares their true positives:
coverage is their union (eq. 7), stability their intersection (eq. 8), and the consistency
score the mean pairwise Jaccard index of the detected member sets (eq. 6). Here the instances
are the target models (repeats) of an experiment: they score the same samples (sample_id), but
each trains on its own members, so a sample is a member of some targets only. Adapted:

* a sample is *flagged* by a target when its score there is >= that target's threshold at the
  FPR (`operating_points`: the rule of the TPR tables, not MIAE's nearest-FPR threshold);
* a target *holds* a sample when it scored it and the sample is one of its members;
* the denominator of both shares is the samples held by at least one target: MIAE reports the
  union and intersection as TPRs over the members of its one target set (its Figures 7 and 8),
  and these are the members here;
* coverage = share of them flagged by at least one target that holds them (the union of the
  targets' true positives);
* stability = share of them flagged by every target that holds them (the intersection, taken
  over the targets where a sample can be a true positive at all), so stability <= coverage;
* jaccard = mean over pairs of targets of |TP_i n TP_j| / |TP_i u TP_j|, both restricted to the
  members the two targets share: across different member sets the plain index is capped by
  the member overlap (about 1/3 for random halves) and would measure the split, not the attack.
  Pairs with no true positive among their shared members have no index and are left out.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from miaflow.evaluation.metrics import RUN_KEYS
from miaflow.evaluation.operating_points import threshold_at

STABILITY_COLUMNS = [
    "dataset",
    "target_model",
    "attack",
    "fpr",
    "n_targets",
    "n_members",
    "n_covered",
    "n_stable",
    "coverage",
    "stability",
    "jaccard",
    "n_pairs",
    "resolved",
]
_UNRESOLVED = {
    **dict.fromkeys(["n_covered", "n_stable", "coverage", "stability", "jaccard"], np.nan),
    "n_pairs": 0,
}


def stability_measures(held: np.ndarray, flagged: np.ndarray) -> dict[str, float]:
    """Coverage, stability and mean pairwise Jaccard index from two (samples, targets) boolean
    matrices: `held` (the target scored the sample and trained on it) and `flagged` (its score
    there reached the target's threshold). See the module docstring for the definitions;
    n_pairs counts the pairs that have an index. NaN shares when no sample is held."""
    held = np.asarray(held, dtype=bool)
    true_positive = held & np.asarray(flagged, dtype=bool)
    members = held.any(axis=1)
    n_members = int(members.sum())
    n_covered = int(true_positive.any(axis=1).sum())
    n_stable = int((members & ~(held & ~true_positive).any(axis=1)).sum())
    indices = []
    for i, j in itertools.combinations(range(held.shape[1]), 2):
        shared = held[:, i] & held[:, j]
        union = int(np.sum((true_positive[:, i] | true_positive[:, j]) & shared))
        if union:
            indices.append(np.sum(true_positive[:, i] & true_positive[:, j]) / union)
    return {
        "n_members": n_members,
        "n_covered": n_covered,
        "n_stable": n_stable,
        "coverage": n_covered / n_members if n_members else np.nan,
        "stability": n_stable / n_members if n_members else np.nan,
        "jaccard": float(np.mean(indices)) if indices else np.nan,
        "n_pairs": len(indices),
    }


def stability_table(scores: pd.DataFrame, fpr: float = 0.01) -> pd.DataFrame:
    """One row (`STABILITY_COLUMNS`) per (dataset, target_model, attack) of `scores` (columns
    dataset, target_model, attack, repeat, sample_id, score, is_member): its targets' flagged
    members at `fpr`, compared across the targets. A target whose non-members do not resolve
    `fpr` has no threshold; the row's measures are then NaN and `resolved` False, since a
    target that flags nobody would pass for an attack that finds nothing."""
    rows = []
    for (dataset, target_model, attack), runs in scores.groupby(RUN_KEYS[:3], sort=True):
        sample_ids = runs["sample_id"].to_numpy()
        ids = np.unique(sample_ids)
        repeats = runs.groupby("repeat", sort=True).indices
        held = np.zeros((ids.size, len(repeats)), dtype=bool)
        flagged = np.zeros_like(held)
        resolved = True
        for k, positions in enumerate(repeats.values()):
            member = runs["is_member"].to_numpy(bool)[positions]
            values = runs["score"].to_numpy(np.float64)[positions]
            threshold = threshold_at(values, member, fpr)
            resolved &= not np.isnan(threshold)
            at = np.searchsorted(ids, sample_ids[positions])
            held[at, k] = member
            flagged[at, k] = values >= threshold
        measures = stability_measures(held, flagged)
        if not resolved:
            measures |= _UNRESOLVED
        rows.append(
            {
                "dataset": dataset,
                "target_model": target_model,
                "attack": attack,
                "fpr": fpr,
                "n_targets": len(repeats),
                **measures,
                "resolved": resolved,
            }
        )
    table = pd.DataFrame(rows, columns=STABILITY_COLUMNS)
    table.attrs["caption"] = (
        f"How consistently each attack flags the same members at FPR {fpr:g} across the target "
        "models of an experiment (after MIAE, CCS 2025): coverage = share of the members (of "
        "any target) flagged by at least one target that trained on them, stability = share "
        "flagged by every such target, jaccard = mean overlap of two targets' flagged shared "
        "members; NaN where a target's non-members do not resolve the FPR."
    )
    return table
