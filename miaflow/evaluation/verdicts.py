"""Verdicts a reviewer can defend: per experiment, the best attack by mean AUROC and the best by
mean TPR at one low FPR, each with the attacks its tests do not separate from it, and flags
that say when a "best" is hollow (issue #43).

A ranking by mean AUROC alone names one winner where several attacks are statistically
indistinguishable, and breaks ties by id order; an AUROC winner may find no member at all at a
low FPR. So each experiment (dataset and target model, as the tables name it) gets two
rankings:

* by mean AUROC over its target models (the metrics table's values); the attacks not separated
  from the best are those whose one-sided DeLong test "best > attack" (`stats.delong_test`,
  combined over target models) is not rejected after Benjamini–Yekutieli over the vs-best
  family of the experiment at `alpha`, as `stats.paired_tests` does;
* by mean TPR at one low FPR: the configured level, or the lowest level the experiment's
  non-members resolve (1/n, n the fewest non-members of any attack on any target model, since a
  subset attack scores fewer samples) when that is larger; TPRs are the operating points of
  `operating_points` (the tables' rule). Not separated: the sample permutation test
  (`stats.sample_permutation_pvalues`) of that TPR not rejected after the same correction. Its
  draws are those `paired_tests` makes for the experiment, so at a level the tests table holds
  both give the same p-values.

The first attack by id among equal means is only a display order; the tied lists are the
verdict. An experiment without per-sample scores gets no p-values: nothing separates its
attacks, so every other attack is listed as not separated and the experiment is flagged.

Inputs: the long metrics table (columns dataset, target_model, attack, repeat, metric, value;
`metrics.score_metrics`) for the AUROC means, and the per-sample scores (columns dataset,
target_model, attack, repeat, sample_id, score, is_member) for the tests and the low-FPR TPRs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from miaflow.evaluation.metrics import tpr_metric_name
from miaflow.evaluation.operating_points import lowest_resolved_fpr, tpr_at
from miaflow.seeding import derive_seed

DEFAULT_FPR = 0.01  # the headline low FPR, as best.PREFERRED_TPR
EXPERIMENT = ["dataset", "target_model"]
RANKINGS = ("auroc", "low_fpr")
RANKING_COLUMNS = [
    "dataset",
    "target_model",
    "ranking",
    "attack",
    "rank",
    "mean",
    "std",
    "n_target_models",
    "low_fpr",
    "requested_fpr",
    "test",
    "n_samples",
    "p_value",
    "p_by",
    "separated",
    "top_nonmember_share",
    "n_distinct",
    "few_distinct",
    "alpha",
]
VERDICT_COLUMNS = [
    "dataset",
    "target_model",
    "best_attack",
    "auroc",
    "auroc_std",
    "n_target_models",
    "tied_with",
    "n_attacks",
    "best_attack_low_fpr",
    "tpr_at_low_fpr",
    "low_fpr",
    "tied_with_low_fpr",
    "n_attacks_low_fpr",
    "flags",
]
JSON_KEYS = (
    "best_attack",
    "auroc",
    "best_attack_low_fpr",
    "tpr_at_low_fpr",
    "low_fpr",
    "tied_with",
    "tied_with_low_fpr",
    "flags",
)
# Flags, in the order they are listed:
FLAGS = (
    "auroc_best_tpr_zero",  # the AUROC winner finds no member at the low FPR on any target
    "auroc_best_few_distinct",  # ... and/or its score is too coarse to be cut there
    "low_fpr_best_tpr_zero",  # no attack finds a member at the low FPR
    "low_fpr_best_few_distinct",
    "low_fpr_raised",  # the low FPR is 1/n, above the configured level
    "untested",  # some comparison with a best attack has no p-value (no paired samples)
)

PairTest = Callable[[str, str], tuple[float, int]]  # (best, other) -> (p-value, paired samples)


def named_level(level: float) -> float:
    """`level` as its metric name writes it (six significant digits), so that the TPRs here
    and the permutation test, which reads the level from the name, use the same level."""
    from miaflow.evaluation.stats import tpr_level

    return tpr_level(tpr_metric_name(level))


def low_fpr(scores: pd.DataFrame, fpr: float = DEFAULT_FPR) -> pd.Series:
    """The low FPR of each experiment of `scores`: max(`fpr`, 1/n), n the fewest non-members
    over its (attack, repeat) runs (`named_level`). Indexed by (dataset, target_model)."""
    nonmembers = (~scores["is_member"].astype(bool)).groupby(
        [scores[c] for c in [*EXPERIMENT, "attack", "repeat"]]
    )
    fewest = nonmembers.sum().groupby(level=[0, 1]).min()
    return fewest.map(lambda n: named_level(max(fpr, lowest_resolved_fpr(int(n))))).rename(
        "low_fpr"
    )


def score_shape(scores: np.ndarray, is_member: np.ndarray) -> tuple[float, int]:
    """(share of the non-members holding the top score value, number of distinct scores) of one
    run. Under the TPR rule the first cut below +inf flags the whole top value, so a top value
    holding a share >= c of the non-members leaves (0, 0) as the only point with FPR < c:
    TPR 0 there by ties, whatever the signal."""
    top = scores == scores.max()
    return float(np.sum(top & ~is_member) / np.sum(~is_member)), int(np.unique(scores).size)


def is_few_distinct(top_nonmember_share: float, n_distinct: int, level: float) -> bool:
    """A score "takes few distinct values" at FPR `level` when its top value holds a share >=
    `level` of the non-members (it cannot be cut at that FPR, see `score_shape`) or it has
    fewer than 1/level distinct values: then its values hold more than `level` of the samples
    each on average, and reaching the level depends on how the top values happen to fall."""
    return top_nonmember_share >= level or n_distinct < 1 / level


class _Paired:
    """An experiment's per-sample scores as one (repeat, sample_id) x attack matrix, to pair two
    attacks on the samples both scored in each repeat."""

    def __init__(self, runs: pd.DataFrame) -> None:
        wide = runs.pivot_table(
            index=["repeat", "sample_id"], columns="attack", values="score", aggfunc="first"
        )
        member = runs.groupby(["repeat", "sample_id"])["is_member"].first()
        self.member = member.reindex(wide.index).to_numpy(bool)
        self.values = wide.to_numpy(np.float64)
        self.column = {attack: k for k, attack in enumerate(wide.columns)}
        _, starts = np.unique(wide.index.get_level_values("repeat"), return_index=True)
        self.repeats = np.split(np.arange(len(wide)), starts[1:])

    def pair(self, a: str, b: str) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """Scores of `a`, of `b` and membership per repeat, on the samples both scored; repeats
        with fewer than two members or two non-members are left out (DeLong's variances)."""
        first, second, members = [], [], []
        if a not in self.column or b not in self.column:
            return first, second, members
        for at in self.repeats:
            pair = self.values[at][:, [self.column[a], self.column[b]]]
            kept = ~np.isnan(pair).any(axis=1)
            member = self.member[at][kept]
            if 2 <= member.sum() <= member.size - 2:
                first.append(pair[kept, 0])
                second.append(pair[kept, 1])
                members.append(member)
        return first, second, members


def _by(p_values: pd.Series) -> pd.Series:
    """Benjamini–Yekutieli over the non-NaN p-values of one family; NaN stays NaN."""
    from scipy.stats import false_discovery_control

    adjusted = pd.Series(np.nan, index=p_values.index)
    present = p_values.dropna()
    if len(present):
        adjusted[present.index] = false_discovery_control(present.to_numpy(), method="by")
    return adjusted


def _ranked(per_attack: pd.DataFrame) -> pd.DataFrame:
    """Attacks by mean, highest first, ties by id (a display order only); rank from 1."""
    ranked = per_attack.sort_values(["mean", "attack"], ascending=[False, True], kind="stable")
    return ranked.reset_index(drop=True).assign(rank=lambda t: np.arange(1, len(t) + 1))


def _tested(ranked: pd.DataFrame, test: PairTest, alpha: float) -> pd.DataFrame:
    """p_value of `test(best, other)` -> (p, n_samples) for each attack below the best, their
    BY adjustment within this vs-best family and `separated` (adjusted p <= alpha)."""
    best = ranked["attack"].iloc[0]
    results = [(np.nan, 0)] + [test(best, other) for other in ranked["attack"].iloc[1:]]
    ranked["p_value"] = [p for p, _ in results]
    ranked["n_samples"] = [n for _, n in results]
    ranked["p_by"] = _by(ranked["p_value"])
    ranked["separated"] = ranked["p_by"] <= alpha
    ranked["alpha"] = alpha
    return ranked


def rankings(
    metrics: pd.DataFrame,
    scores: pd.DataFrame,
    fpr: float = DEFAULT_FPR,
    alpha: float = 0.05,
    n_resamples: int = 999,
    seed: int = 0,
) -> pd.DataFrame:
    """Both rankings of every experiment of `metrics`, one row per (experiment, ranking, attack)
    (`RANKING_COLUMNS`): its mean (AUROC, or TPR at the experiment's `low_fpr`) and std (ddof 1)
    over target models, display rank, the vs-best test's p-value ("delong" or "permutation", NaN
    for the best itself and for pairs without paired samples), its BY adjustment and whether it
    separates the attack from the best; and the score's shape over the attack's target models
    (largest top-value non-member share, fewest distinct values, `few_distinct` at the low FPR).
    `seed` is `paired_tests`' seed (the same permutation draws)."""
    by_experiment = dict(iter(scores.groupby(EXPERIMENT, sort=True)))
    levels = low_fpr(scores, fpr) if len(scores) else pd.Series(dtype=float)
    auroc = metrics[metrics["metric"] == "auroc"]
    frames = []
    for (dataset, target_model), values in auroc.groupby(EXPERIMENT, sort=True):
        per_attack = values.groupby("attack")["value"].agg(
            mean="mean", std="std", n_target_models="count"
        )
        runs = by_experiment.get((dataset, target_model))
        key = {"dataset": dataset, "target_model": target_model}
        if runs is None:
            untested = _tested(_ranked(per_attack.reset_index()), lambda *_: (np.nan, 0), alpha)
            frames.append(untested.assign(**key, requested_fpr=fpr, ranking="auroc", test="delong"))
            continue
        level = levels[(dataset, target_model)]
        paired = _Paired(runs)
        shapes = _shapes(runs, level)
        permutation_seed = derive_seed(seed, "paired_tests", dataset, target_model)
        by_auroc = _tested(_ranked(per_attack.reset_index()), _delong(paired), alpha)
        by_tpr = _tested(
            _ranked(_tprs(runs, level)),
            _permutation(paired, level, n_resamples, permutation_seed),
            alpha,
        )
        levels_here = {"low_fpr": level, "requested_fpr": fpr}
        frames += [
            by_auroc.assign(**key, **levels_here, ranking="auroc", test="delong"),
            by_tpr.assign(**key, **levels_here, ranking="low_fpr", test="permutation"),
        ]
        frames[-2:] = [frame.join(shapes, on="attack") for frame in frames[-2:]]
    if not frames:
        return pd.DataFrame(columns=RANKING_COLUMNS)
    return pd.concat(frames, ignore_index=True).reindex(columns=RANKING_COLUMNS)


def _delong(paired: _Paired) -> PairTest:
    from miaflow.evaluation.stats import delong_test

    def test(best: str, other: str) -> tuple[float, int]:
        a, b, member = paired.pair(best, other)
        return (delong_test(a, b, member)[1], sum(map(len, a))) if a else (np.nan, 0)

    return test


def _permutation(paired: _Paired, level: float, n_resamples: int, seed: int) -> PairTest:
    from miaflow.evaluation.stats import sample_permutation_pvalues

    metric = [tpr_metric_name(level)]

    def test(best: str, other: str) -> tuple[float, int]:
        a, b, member = paired.pair(best, other)
        if not a:
            return np.nan, 0
        p = sample_permutation_pvalues(a, b, member, metric, n_resamples, seed)[0]
        return float(p), sum(map(len, a))

    return test


def _tprs(runs: pd.DataFrame, level: float) -> pd.DataFrame:
    """Mean, std and count over target models of each attack's TPR at `level`."""
    rows = [
        (attack, tpr_at(*_arrays(run), level))
        for (attack, _), run in runs.groupby(["attack", "repeat"], sort=True)
    ]
    tprs = pd.DataFrame(rows, columns=["attack", "tpr"])
    per_attack = tprs.groupby("attack")["tpr"].agg(mean="mean", std="std", n_target_models="count")
    return per_attack.reset_index()


def _shapes(runs: pd.DataFrame, level: float) -> pd.DataFrame:
    """Per attack: the largest top-value non-member share and the fewest distinct scores over
    its target models, and `is_few_distinct` of either at `level`."""
    rows = [
        (attack, *score_shape(*_arrays(run)))
        for (attack, _), run in runs.groupby(["attack", "repeat"], sort=True)
    ]
    shapes = (
        pd.DataFrame(rows, columns=["attack", "top_nonmember_share", "n_distinct"])
        .groupby("attack")
        .agg(top_nonmember_share=("top_nonmember_share", "max"), n_distinct=("n_distinct", "min"))
    )
    shapes["few_distinct"] = [
        is_few_distinct(share, n, level)
        for share, n in zip(shapes["top_nonmember_share"], shapes["n_distinct"])
    ]
    return shapes


def _arrays(run: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return run["score"].to_numpy(np.float64), run["is_member"].to_numpy(bool)


def verdicts(ranked: pd.DataFrame) -> pd.DataFrame:
    """One row per experiment (`VERDICT_COLUMNS`) from `rankings`: each ranking's best (first by
    id among equal means), its mean, the attacks not separated from it (lists, in display order)
    and the `FLAGS` that apply. The low-FPR fields are missing (NaN) for an experiment without
    per-sample scores."""
    rows = []
    for (dataset, target_model), experiment in ranked.groupby(EXPERIMENT, sort=True):
        by_auroc = experiment[experiment["ranking"] == "auroc"].sort_values("rank")
        by_tpr = experiment[experiment["ranking"] == "low_fpr"].sort_values("rank")
        best = by_auroc.iloc[0]
        row = {
            "dataset": dataset,
            "target_model": target_model,
            "best_attack": best["attack"],
            "auroc": best["mean"],
            "auroc_std": best["std"],
            "n_target_models": int(best["n_target_models"]),
            "tied_with": _not_separated(by_auroc),
            "n_attacks": len(by_auroc),
            "best_attack_low_fpr": None,
            "tpr_at_low_fpr": np.nan,
            "low_fpr": np.nan,
            "tied_with_low_fpr": [],
            "n_attacks_low_fpr": len(by_tpr),
        }
        if len(by_tpr):
            winner = by_tpr.iloc[0]
            row |= {
                "best_attack_low_fpr": winner["attack"],
                "tpr_at_low_fpr": winner["mean"],
                "low_fpr": winner["low_fpr"],
                "tied_with_low_fpr": _not_separated(by_tpr),
            }
        rows.append(row | {"flags": _flags(by_auroc, by_tpr)})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def _not_separated(ranking: pd.DataFrame) -> list[str]:
    """The attacks below the best whose test did not separate them from it (untested ones
    included: nothing separated them)."""
    others = ranking.iloc[1:]
    return others.loc[~others["separated"].astype(bool), "attack"].tolist()


def _flags(by_auroc: pd.DataFrame, by_tpr: pd.DataFrame) -> list[str]:
    """The `FLAGS` of one experiment's two rankings."""
    found = {"untested": len(by_tpr) == 0 or _untested(by_auroc) or _untested(by_tpr)}
    if len(by_tpr):
        winner = by_tpr.iloc[0]
        found |= {
            "low_fpr_best_tpr_zero": winner["mean"] == 0,
            "low_fpr_best_few_distinct": bool(winner["few_distinct"]),
            "low_fpr_raised": winner["low_fpr"] > named_level(winner["requested_fpr"]),
        }
        auroc_best = by_tpr[by_tpr["attack"] == by_auroc["attack"].iloc[0]]
        if len(auroc_best):
            found |= {
                "auroc_best_tpr_zero": auroc_best["mean"].iloc[0] == 0,
                "auroc_best_few_distinct": bool(auroc_best["few_distinct"].iloc[0]),
            }
    return [flag for flag in FLAGS if found.get(flag, False)]


def _untested(ranking: pd.DataFrame) -> bool:
    """Whether some comparison with the best has no p-value."""
    return bool(ranking["p_value"].iloc[1:].isna().any())


def ties_text(tied: Sequence[str], n_others: int, shown: int = 2) -> str:
    """ "(not separated from: a, b (+3))" with at most `shown` names; "(separated from all 4
    others)" when the tests separate every other attack; "" for a lone attack."""
    tied = list(tied)  # a list, or an array as a parquet file gives it back
    if n_others == 0:
        return ""
    if tied:
        more = f" (+{len(tied) - shown})" if len(tied) > shown else ""
        return f"(not separated from: {', '.join(tied[:shown])}{more})"
    if n_others == 1:
        return "(separated from the other attack)"
    return f"(separated from all {n_others} others)"


def _percent(level: float) -> str:
    """0.01 -> "1%", 0.0833333 -> "8.33%"."""
    return f"{level * 100:.3g}%"


def verdict_lines(table: pd.DataFrame, shown: int = 2) -> list[str]:
    """The summary line of each experiment of `verdicts`, in aligned columns:
    `  <dataset>/<target model>  <AUROC best>  AUROC <mean> ± <std> (ties); TPR@<fpr>FPR:
    <low-FPR best> <TPR> (ties); selection alone AUROC <separability> (<form>); flags: ...`
    (the selection's part where the table has `separability`, `headline.with_selection`). The
    first id among equal means is shown; the ties are in the parentheses, at most `shown`
    names."""
    names = [f"{row.dataset}/{row.target_model}" for row in table.itertuples()]
    name_width = max(map(len, names), default=0)
    attack_width = max(map(len, table["best_attack"]), default=0)
    lines = []
    for name, row in zip(names, table.itertuples()):
        spread = "" if pd.isna(row.auroc_std) else f" ± {row.auroc_std:.3f}"
        ties = ties_text(row.tied_with, row.n_attacks - 1, shown)
        parts = [
            f"  {name:<{name_width}}  {row.best_attack:<{attack_width}}  "
            f"AUROC {row.auroc:.3f}{spread} {ties}".rstrip()
        ]
        if pd.notna(row.best_attack_low_fpr):
            ties = ties_text(row.tied_with_low_fpr, row.n_attacks_low_fpr - 1, shown)
            parts.append(
                f"TPR@{_percent(row.low_fpr)}FPR: {row.best_attack_low_fpr} "
                f"{row.tpr_at_low_fpr:.3f} {ties}".rstrip()
            )
        separability = getattr(row, "separability", np.nan)
        if pd.notna(separability):
            form = row.separability_form.replace("_", " ")
            parts.append(f"selection alone AUROC {separability:.3f} ({form})")
        if len(row.flags):
            parts.append(f"flags: {', '.join(row.flags)}")
        lines.append("; ".join(parts))
    return lines


def verdict_json(table: pd.DataFrame) -> dict[str, dict]:
    """The summary JSON entry (`JSON_KEYS`) of each experiment of `verdicts`, keyed by
    "<dataset>/<target model>": numbers rounded to six decimals, missing values as None."""
    return {
        f"{row['dataset']}/{row['target_model']}": {key: _plain(row[key]) for key in JSON_KEYS}
        for _, row in table.iterrows()
    }


def _plain(value: object) -> object:
    """A JSON value: lists as lists, NaN/None as None, floats to six decimals."""
    if isinstance(value, (list, np.ndarray)):  # an array as a parquet file gives a list back
        return list(value)
    if pd.isna(value):
        return None
    return round(float(value), 6) if isinstance(value, float) else value
