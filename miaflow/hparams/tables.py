"""Tables and tests of the hyperparameter study (docs/algorithms.md#hyperparameter-study); its
figures are in `miaflow.hparams.figures`.

Pradhan et al. (SaTML 2025), "Hyperparameters in score-based membership inference attacks":
LiRA (the attacker knows the target's hyperparameters) against ACC-LiRA and KL-LiRA (the attacker
selects them), on a grid of linear heads with and without differential privacy, and the test of
whether tuning the target's hyperparameters on its training data (TD-HPO) leaks more than tuning
them on external data (ED-HPO); and, as the paper's Fig. 5, attacks without LiRA's shadow
calibration on the same targets (`miaflow.hparams.baselines`).

The data come from the study's jobs; this module and `miaflow.hparams.figures` only turn them
into tables and figures:

* `study`: one row per (setting, epsilon, hpo, attack, run, fpr) with the TPR at that FPR level
  (`tpr`, the canonical "last ROC point with FPR < level"; `tpr_interp`, the interpolated ROC,
  which the TD-vs-ED tests use as the paper does), `tp`, `positives` and `auroc`;
* `roc`: each run's pooled ROC on a common log-spaced FPR grid;
* `selection`: per target model, its hyperparameters and those the attack chose (j*);
* `bound`: the upper bound DP puts on any attack's TPR as a function of FPR (per setting and ε).

Table builders return DataFrames and put their caption in `table.attrs["caption"]`, for
`miaflow.evaluation.tables.write_table`. Means and standard deviations are over runs, ddof = 1.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from miaflow.evaluation.stats import adjust_by, one_sided_tests
from miaflow.evaluation.tables import count_range, mean_std_cell

# The three attacks of the full grid, in the paper's order; LiRA is the known-hyperparameter
# baseline.
FULL_ATTACKS = ("lira", "acc-lira", "kl-lira")
# The attacks without LiRA's shadow calibration (the paper's Fig. 5), in the report's order:
# miaflow.hparams.baselines.BASELINES, named here so that the report imports no attack code.
BASELINES = ("ml-leaks", "attack-p", "qmia")
# Attacks that select hyperparameters, and so have both a TD-HPO and an ED-HPO target.
SELECTING_ATTACKS = ("acc-lira", "kl-lira")
# Reduced KL-LiRA variants are named "kl-lira-c{C}-n{N}".
REDUCED_KL_PREFIX = "kl-lira-c"
HPO_ORDER = ("td", "ed")
HPO_NAMES = {"td": "TD-HPO", "ed": "ED-HPO"}
TEST_COLUMNS = [
    "dataset",
    "setting",
    "epsilon",
    "attack",
    "fpr",
    "n_runs",
    "mean_td",
    "mean_ed",
    "mean_diff",
    "t_statistic",
    "p_ttest",
    "p_ttest_by",
    "reject_ttest",
    "p_perm",
    "p_perm_by",
    "reject_perm",
    "permutation",
]


# --- helpers --------------------------------------------------------------------------------------


def format_epsilon(epsilon: float) -> str:
    """ "∞" for the non-private setting, else the budget as written ("8", "0.5")."""
    return "∞" if math.isinf(epsilon) else f"{epsilon:g}"


def wrapped_name(name: str, width: int) -> str:
    """A long snake_case name (a study setting's, e.g.
    mnist5k_s32_efficientnet_lite0_pc128_shadow_efficientnet_lite2) broken after underscores into
    lines of at most `width` characters, so that titles and tick labels stay apart; a longer
    part stays whole."""
    lines = [""]
    for part in re.split(r"(?<=_)", name):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def tpr_column(fpr: float) -> str:
    """0.001 -> "TPR@0.1%": the header names the FPR level in percent."""
    return f"TPR@{fpr * 100:g}%"


def _attack_rank(attack: str) -> tuple[int, str]:
    """The paper's order, then the baselines without shadow calibration, then the rest by name."""
    ranked = (*FULL_ATTACKS, *BASELINES)
    if attack in ranked:
        return ranked.index(attack), ""
    return len(ranked), attack


def _sort_key(column: pd.Series) -> pd.Series:
    """Sort keys common to every table: hpo td before ed, attacks in the paper's order."""
    if column.name == "hpo":
        return column.map(lambda h: HPO_ORDER.index(h) if h in HPO_ORDER else len(HPO_ORDER))
    if column.name == "attack":
        ranks = sorted(set(column), key=_attack_rank)
        return column.map({a: k for k, a in enumerate(ranks)})
    return column


def _ordered(frame: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Sort by `by`, epsilon descending (∞ first: no privacy, then weaker to stronger privacy)."""
    by = [column for column in by if column in frame.columns]
    ascending = [column != "epsilon" for column in by]
    ordered = frame.sort_values(list(by), ascending=ascending, key=_sort_key, kind="stable")
    return ordered.reset_index(drop=True)


def _full_td(study: pd.DataFrame) -> pd.DataFrame:
    return study[(study["hpo"] == "td") & study["attack"].isin(FULL_ATTACKS)]


def _is_kl_variant(attacks: pd.Series) -> pd.Series:
    return (attacks == "kl-lira") | attacks.str.startswith(REDUCED_KL_PREFIX)


# --- tables ---------------------------------------------------------------------------------------


def headline_table(study: pd.DataFrame) -> pd.DataFrame:
    """The headline result: TPR at each FPR level of LiRA, ACC-LiRA and KL-LiRA
    per setting, privacy budget and HPO, "mean ± std" over runs, so the cost of not knowing the
    target's hyperparameters can be read off row by row."""
    table = _tpr_table(study[study["attack"].isin(FULL_ATTACKS)])
    table.attrs["caption"] = (
        "TPR at fixed FPR of LiRA (target hyperparameters known), ACC-LiRA and KL-LiRA "
        "(hyperparameters selected by the attack) per setting, privacy budget ε (∞: no DP) and "
        "target HPO (td: tuned on the training data, ed: on external data): mean ± standard "
        f"deviation over {count_range(table['runs'])} runs, ddof = 1."
    )
    return table


def baselines_table(study: pd.DataFrame) -> pd.DataFrame:
    """The paper's Fig. 5 as a table: TPR at each FPR level of LiRA, ACC-LiRA and KL-LiRA beside
    the baselines without shadow calibration (ML-Leaks, Attack-P, QMIA) on the same targets,
    "mean ± std" over runs: what the shadow models buy."""
    table = _tpr_table(study[study["attack"].isin([*FULL_ATTACKS, *BASELINES])])
    table.attrs["caption"] = (
        "TPR at fixed FPR of LiRA, ACC-LiRA and KL-LiRA beside attacks without LiRA's shadow "
        "calibration on the same targets: ML-Leaks (attack MLP on the top-3 posteriors, one "
        "shadow tuned by the attacker), Attack-P (the target's loss against its losses on known "
        "non-members) and QMIA (the target's φ standardised by a regressor fitted on known "
        "non-members), per setting, privacy budget ε (∞: no DP) and target HPO: mean ± "
        f"standard deviation over {count_range(table['runs'])} runs, ddof = 1."
    )
    return table


def _tpr_table(rows: pd.DataFrame) -> pd.DataFrame:
    """TPR at each FPR level, mean ± std over runs, per setting, ε, HPO and attack."""
    keys = ["setting", "epsilon", "hpo", "attack"]
    levels = sorted(rows["fpr"].unique())
    stats = rows.groupby([*keys, "fpr"], sort=False)["tpr"].agg(["mean", "std"])
    groups = rows.groupby(keys, sort=False)["run"].nunique().rename("runs").reset_index()
    groups = _ordered(groups, keys)
    table = pd.DataFrame(
        {
            "setting": groups["setting"],
            "epsilon": groups["epsilon"].map(format_epsilon),
            "hpo": groups["hpo"],
            "attack": groups["attack"],
        }
    )
    for level in levels:
        table[tpr_column(level)] = [
            mean_std_cell(stats, (*key, level)) for key in zip(*(groups[k] for k in keys))
        ]
    table["runs"] = groups["runs"].astype(int)
    return table


def relative_tpr_table(study: pd.DataFrame) -> pd.DataFrame:
    """Mean TPR of ACC-LiRA and KL-LiRA divided by that of LiRA (TD-HPO targets) per setting, ε and
    FPR level (the paper's Fig. 4): 1 means that selecting hyperparameters costs the attack nothing.
    NaN where LiRA's mean TPR is 0."""
    rows = _full_td(study)
    keys = ["dataset", "setting", "epsilon", "fpr"]
    means = rows.groupby([*keys, "attack"], sort=False)["tpr"].mean()
    table = means.unstack("attack").reindex(columns=list(FULL_ATTACKS)).rename_axis(columns=None)
    lira = table["lira"].where(table["lira"] != 0)
    for attack in SELECTING_ATTACKS:
        table[f"{attack} / lira"] = table[attack] / lira
    table["runs"] = rows.groupby(keys, sort=False)["run"].nunique()
    table = _ordered(table.reset_index(), keys)
    table.attrs["caption"] = (
        "Mean TPR (over runs) of LiRA, ACC-LiRA and KL-LiRA on TD-HPO targets, and the ratio of "
        "ACC-LiRA's and KL-LiRA's to LiRA's, per setting, privacy budget ε and FPR level; "
        "undefined where LiRA's mean TPR is 0."
    )
    return table


def kl_budget_table(study: pd.DataFrame) -> pd.DataFrame:
    """TPR of KL-LiRA with the full candidate grid and with reduced budgets (C candidates, N models
    each; `cost` models trained in all) on TD-HPO targets, beside LiRA and ACC-LiRA (the paper's
    Fig. 9): how much of KL-LiRA's gain survives a cheaper selection."""
    td = study[study["hpo"] == "td"]
    keys = ["dataset", "setting", "epsilon", "fpr"]
    kl = td[_is_kl_variant(td["attack"])]
    budget = ["attack", "candidates", "models_per_candidate", "cost"]
    table = (
        kl.groupby([*keys, *budget], sort=False)["tpr"]
        .agg(mean_tpr="mean", std_tpr="std", runs="count")
        .reset_index()
    )
    for attack in ("lira", "acc-lira"):
        reference = td[td["attack"] == attack].groupby(keys, sort=False)["tpr"].mean()
        reference = reference.rename(f"{attack.replace('-', '_')}_tpr").reset_index()
        table = table.merge(reference, on=keys, how="left")
    table = _ordered(
        table,
        [
            "dataset",
            "setting",
            "epsilon",
            "fpr",
            "cost",
            "candidates",
            "models_per_candidate",
            "attack",
        ],
    )
    table.attrs["caption"] = (
        "KL-LiRA with the full hyperparameter grid (kl-lira) and reduced budgets (kl-lira-cC-nN: C "
        "candidates, N models each; cost = models trained for the attack): mean and standard "
        "deviation (ddof = 1) over runs of the TPR at each FPR level on TD-HPO targets, with the "
        "mean TPR of LiRA and ACC-LiRA for reference."
    )
    return table


def td_vs_ed_tests(
    study: pd.DataFrame,
    alpha: float = 0.05,
    n_resamples: int | None = None,
    seed: int = 0,
    attacks: Sequence[str] = SELECTING_ATTACKS,
) -> pd.DataFrame:
    """Test H1: "a target whose hyperparameters were tuned on its training data (TD-HPO) leaks
    more than one tuned on external data (ED-HPO)", the paper's privacy question.

    Per (dataset, setting, epsilon, attack in `attacks`, fpr) with both TD and ED rows, the
    `tpr_interp` values are paired by run (runs missing either are dropped; cells with fewer than
    2 pairs give no row) and tested one-sided:

    * paired t-test `ttest_rel(td, ed, alternative="greater")`; p = 1 when t is NaN (all
      differences 0);
    * sign-flip permutation test of mean(td − ed) (`miaflow.evaluation.stats.permutation_pvalues`):
      exact over all 2^R flips when `n_resamples` is None or ≥ 2^R, else `n_resamples` random
      flips from `seed`; the exact p is at least 1/2^R.

    p-values are Benjamini–Yekutieli-adjusted over all rows, per test type (valid under the
    dependence between cells that share runs); `reject_*` is adjusted p ≤ `alpha`.
    """
    keys = ["dataset", "setting", "epsilon", "attack", "fpr"]
    rows = study[study["attack"].isin(list(attacks)) & study["hpo"].isin(HPO_ORDER)]
    cells: list[tuple] = []
    td_rows: list[np.ndarray] = []
    ed_rows: list[np.ndarray] = []
    for key, group in rows.groupby(keys, sort=True):
        values = group.pivot_table(index="run", columns="hpo", values="tpr_interp", aggfunc="mean")
        if not set(HPO_ORDER) <= set(values.columns):
            continue
        values = values[list(HPO_ORDER)].dropna()
        if len(values) < 2:
            continue
        cells.append(key)
        td_rows.append(values["td"].to_numpy(np.float64))
        ed_rows.append(values["ed"].to_numpy(np.float64))

    n_runs = np.array([len(td) for td in td_rows], dtype=np.int64)
    mean_td = np.array([td.mean() for td in td_rows], dtype=np.float64)
    mean_ed = np.array([ed.mean() for ed in ed_rows], dtype=np.float64)
    t_statistic, p_ttest, p_perm = one_sided_tests(td_rows, ed_rows, n_resamples, seed)
    exact = [n_resamples is None or n_resamples >= 2 ** int(n) for n in n_runs]
    tests = pd.DataFrame(cells, columns=keys).assign(
        n_runs=n_runs,
        mean_td=mean_td,
        mean_ed=mean_ed,
        mean_diff=mean_td - mean_ed,
        t_statistic=t_statistic,
        p_ttest=p_ttest,
        p_perm=p_perm,
        permutation=["exact" if e else "monte-carlo" for e in exact],
    )
    adjust_by(tests, alpha)
    tests = _ordered(tests[TEST_COLUMNS], keys)
    tests.attrs["caption"] = (
        "One-sided paired tests of H1: TD-HPO targets leak more than ED-HPO targets (TPR by "
        "interpolation of the ROC at each FPR level, paired over runs): paired t-test and "
        "sign-flip permutation test, p-values Benjamini–Yekutieli-adjusted over all "
        f"{len(tests)} cells per test, rejection at adjusted p ≤ {alpha:g}."
    )
    return tests


def selection_table(selection: pd.DataFrame) -> pd.DataFrame:
    """How close the attack's selected hyperparameters (j*) come to the target's, per setting, ε
    and HPO: the median |log10(chosen / target)| of the learning rate and the batch size (0: exact
    order of magnitude), and their Spearman rank correlations over targets (does the attack track
    the target's choice?). NaN where a correlation is undefined (constant values, < 2 targets)."""
    keys = ["dataset", "setting", "epsilon", "hpo"]
    rows = []
    for key, group in selection.groupby(keys, sort=False):
        row = dict(zip(keys, key))
        row["n_targets"] = len(group)
        for name, short in (("lr", "lr"), ("batch_size", "batch")):
            target = np.log10(group[f"target_{name}"].to_numpy(np.float64))
            chosen = np.log10(group[f"chosen_{name}"].to_numpy(np.float64))
            row[f"median_abs_log10_{short}_ratio"] = float(np.median(np.abs(chosen - target)))
            row[f"spearman_{short}"] = _spearman(target, chosen)
        rows.append(row)
    columns = [
        *keys,
        "n_targets",
        "median_abs_log10_lr_ratio",
        "spearman_lr",
        "median_abs_log10_batch_ratio",
        "spearman_batch",
    ]
    table = _ordered(pd.DataFrame(rows, columns=columns), keys)
    table.attrs["caption"] = (
        "Hyperparameters selected by the attack against the target's, per setting, privacy "
        "budget ε and target HPO: median |log10(chosen / target)| and Spearman correlation over "
        "target models, for the learning rate and the batch size."
    )
    return table


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    return float(spearmanr(a, b).statistic)
