"""Tables and figures of the hyperparameter study (docs/algorithms.md#hyperparameter-study).

Pradhan et al. (SaTML 2025), "Hyperparameters in score-based membership inference attacks":
LiRA (the attacker knows the target's hyperparameters) against ACC-LiRA and KL-LiRA (the attacker
selects them), on a grid of linear heads with and without differential privacy, and the test of
whether tuning the target's hyperparameters on its training data (TD-HPO) leaks more than tuning
them on external data (ED-HPO).

The data come from the study's jobs; this module only turns them into tables and figures:

* `study`: one row per (setting, epsilon, hpo, attack, run, fpr) with the TPR at that FPR level
  (`tpr`, the canonical "last ROC point with FPR < level"; `tpr_interp`, the interpolated ROC,
  which the TD-vs-ED tests use as the paper does), `tp`, `positives` and `auroc`;
* `roc`: each run's pooled ROC on a common log-spaced FPR grid;
* `selection`: per target model, its hyperparameters and those the attack chose (j*);
* `bound`: the upper bound DP puts on any attack's TPR as a function of FPR (per setting and ε).

Table builders return DataFrames and put their caption in `table.attrs["caption"]`, for
`miaflow.evaluation.tables.write_table`. Means and standard deviations are over runs, ddof = 1.
Figures follow `miaflow.evaluation.plots`: matplotlib is imported inside each function, drawing
uses a bare `Figure`, and PNGs carry no software version, so identical inputs give byte-identical
files.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control, spearmanr, ttest_rel

from miaflow.evaluation.metrics import clopper_pearson
from miaflow.evaluation.plots import save_png
from miaflow.evaluation.stats import permutation_pvalues
from miaflow.evaluation.tables import MISSING, format_mean_std

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# The three attacks of the full grid, in the paper's order; LiRA is the known-hyperparameter baseline.
FULL_ATTACKS = ("lira", "acc-lira", "kl-lira")
# Attacks that select hyperparameters, and so have both a TD-HPO and an ED-HPO target.
SELECTING_ATTACKS = ("acc-lira", "kl-lira")
# Reduced KL-LiRA variants are named "kl-lira-c{C}-n{N}".
REDUCED_KL_PREFIX = "kl-lira-c"
HPO_ORDER = ("td", "ed")
HPO_NAMES = {"td": "TD-HPO", "ed": "ED-HPO"}
TEST_COLUMNS = [
    "dataset", "setting", "epsilon", "attack", "fpr", "n_runs", "mean_td", "mean_ed", "mean_diff",
    "t_statistic", "p_ttest", "p_ttest_by", "reject_ttest", "p_perm", "p_perm_by", "reject_perm",
    "permutation",
]
ATTACK_COLOURS = {"lira": "tab:blue", "acc-lira": "tab:orange", "kl-lira": "tab:green"}
HPO_STYLES = {"td": "-", "ed": "--"}
PANEL_SIZE = (4.2, 3.8)  # inches per panel
# -log10 of p-values below this would stretch the axis without telling more (t-tests of
# identical nonzero differences give p = 0).
P_FLOOR = 1e-12


# --- helpers --------------------------------------------------------------------------------------------------

def format_epsilon(epsilon: float) -> str:
    """"∞" for the non-private setting, else the budget as written ("8", "0.5")."""
    return "∞" if math.isinf(epsilon) else f"{epsilon:g}"


def tpr_column(fpr: float) -> str:
    """0.001 -> "TPR@0.1%": the header names the FPR level in percent."""
    return f"TPR@{fpr * 100:g}%"


def _attack_rank(attack: str) -> tuple[int, str]:
    return (FULL_ATTACKS.index(attack), "") if attack in FULL_ATTACKS else (len(FULL_ATTACKS), attack)


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
    return frame.sort_values(list(by), ascending=ascending, key=_sort_key, kind="stable").reset_index(drop=True)


def _full_td(study: pd.DataFrame) -> pd.DataFrame:
    return study[(study["hpo"] == "td") & study["attack"].isin(FULL_ATTACKS)]


def _is_kl_variant(attacks: pd.Series) -> pd.Series:
    return (attacks == "kl-lira") | attacks.str.startswith(REDUCED_KL_PREFIX)


def _legend(axes: Axes, **options: object) -> None:
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="x-small", **options)


# --- tables ---------------------------------------------------------------------------------------------------

def headline_table(study: pd.DataFrame) -> pd.DataFrame:
    """The headline result: TPR at each FPR level of LiRA, ACC-LiRA and KL-LiRA
    per setting, privacy budget and HPO, "mean ± std" over runs, so the cost of not knowing the
    target's hyperparameters can be read off row by row."""
    rows = study[study["attack"].isin(FULL_ATTACKS)]
    keys = ["setting", "epsilon", "hpo", "attack"]
    levels = sorted(rows["fpr"].unique())
    stats = rows.groupby([*keys, "fpr"], sort=False)["tpr"].agg(["mean", "std"])
    groups = rows.groupby(keys, sort=False)["run"].nunique().rename("runs").reset_index()
    groups = _ordered(groups, keys)
    table = pd.DataFrame({
        "setting": groups["setting"],
        "epsilon": groups["epsilon"].map(format_epsilon),
        "hpo": groups["hpo"],
        "attack": groups["attack"],
    })
    for level in levels:
        cells = []
        for key in zip(*(groups[k] for k in keys)):
            if (*key, level) in stats.index:
                mean, std = stats.loc[(*key, level)]
                cells.append(format_mean_std(float(mean), float(std)))
            else:
                cells.append(MISSING)
        table[tpr_column(level)] = cells
    table["runs"] = groups["runs"].astype(int)
    runs = f"{table['runs'].min()}–{table['runs'].max()}" if table["runs"].nunique() > 1 else (
        f"{table['runs'].iloc[0]}" if len(table) else "0")
    table.attrs["caption"] = (
        "TPR at fixed FPR of LiRA (target hyperparameters known), ACC-LiRA and KL-LiRA (hyperparameters "
        "selected by the attack) per setting, privacy budget ε (∞: no DP) and target HPO (td: tuned on "
        f"the training data, ed: on external data): mean ± standard deviation over {runs} runs, ddof = 1."
    )
    return table


def relative_tpr_table(study: pd.DataFrame) -> pd.DataFrame:
    """Mean TPR of ACC-LiRA and KL-LiRA divided by that of LiRA (TD-HPO targets) per setting, ε and
    FPR level (the paper's Fig. 4): 1 means that selecting hyperparameters costs the attack nothing.
    NaN where LiRA's mean TPR is 0."""
    rows = _full_td(study)
    means = rows.groupby(["dataset", "setting", "epsilon", "fpr", "attack"], sort=False)["tpr"].mean()
    table = means.unstack("attack").reindex(columns=list(FULL_ATTACKS)).rename_axis(columns=None)
    lira = table["lira"].where(table["lira"] != 0)
    for attack in SELECTING_ATTACKS:
        table[f"{attack} / lira"] = table[attack] / lira
    table["runs"] = rows.groupby(["dataset", "setting", "epsilon", "fpr"], sort=False)["run"].nunique()
    table = _ordered(table.reset_index(), ["dataset", "setting", "epsilon", "fpr"])
    table.attrs["caption"] = (
        "Mean TPR (over runs) of LiRA, ACC-LiRA and KL-LiRA on TD-HPO targets, and the ratio of "
        "ACC-LiRA's and KL-LiRA's to LiRA's, per setting, privacy budget ε and FPR level; undefined "
        "where LiRA's mean TPR is 0."
    )
    return table


def kl_budget_table(study: pd.DataFrame) -> pd.DataFrame:
    """TPR of KL-LiRA with the full candidate grid and with reduced budgets (C candidates, N models
    each; `cost` models trained in all) on TD-HPO targets, beside LiRA and ACC-LiRA (the paper's
    Fig. 9): how much of KL-LiRA's gain survives a cheaper selection."""
    td = study[study["hpo"] == "td"]
    keys = ["dataset", "setting", "epsilon", "fpr"]
    kl = td[_is_kl_variant(td["attack"])]
    table = (kl.groupby([*keys, "attack", "candidates", "models_per_candidate", "cost"], sort=False)["tpr"]
             .agg(mean_tpr="mean", std_tpr="std", runs="count").reset_index())
    for attack in ("lira", "acc-lira"):
        reference = td[td["attack"] == attack].groupby(keys, sort=False)["tpr"].mean()
        table = table.merge(reference.rename(f"{attack.replace('-', '_')}_tpr").reset_index(), on=keys, how="left")
    table = _ordered(table, ["dataset", "setting", "epsilon", "fpr", "cost", "candidates",
                             "models_per_candidate", "attack"])
    table.attrs["caption"] = (
        "KL-LiRA with the full hyperparameter grid (kl-lira) and reduced budgets (kl-lira-cC-nN: C "
        "candidates, N models each; cost = models trained for the attack): mean and standard deviation "
        "(ddof = 1) over runs of the TPR at each FPR level on TD-HPO targets, with the mean TPR of "
        "LiRA and ACC-LiRA for reference."
    )
    return table


def td_vs_ed_tests(study: pd.DataFrame, alpha: float = 0.05, n_resamples: int | None = None, seed: int = 0,
                   attacks: Sequence[str] = SELECTING_ATTACKS) -> pd.DataFrame:
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
    pairs: list[np.ndarray] = []
    for key, group in rows.groupby(keys, sort=True):
        values = group.pivot_table(index="run", columns="hpo", values="tpr_interp", aggfunc="mean")
        if not set(HPO_ORDER) <= set(values.columns):
            continue
        values = values[list(HPO_ORDER)].dropna()
        if len(values) < 2:
            continue
        cells.append(key)
        pairs.append(values.to_numpy(np.float64).T)  # (2, runs): td, ed

    n_runs = np.array([p.shape[1] for p in pairs], dtype=np.int64)
    mean_td, mean_ed, t_statistic, p_ttest, p_perm = (np.empty(len(cells)) for _ in range(5))
    for n in np.unique(n_runs):
        at = np.flatnonzero(n_runs == n)
        td = np.stack([pairs[k][0] for k in at])
        ed = np.stack([pairs[k][1] for k in at])
        mean_td[at], mean_ed[at] = td.mean(axis=1), ed.mean(axis=1)
        with warnings.catch_warnings():
            # Identical nonzero differences: scipy warns about precision but returns the right limit.
            warnings.simplefilter("ignore", RuntimeWarning)
            ttest = ttest_rel(td, ed, axis=-1, alternative="greater")
        t_statistic[at] = ttest.statistic
        p_ttest[at] = np.where(np.isnan(ttest.pvalue), 1.0, ttest.pvalue)
        p_perm[at] = permutation_pvalues(td - ed, n_resamples, seed)

    tests = pd.DataFrame(cells, columns=keys).assign(
        n_runs=n_runs, mean_td=mean_td, mean_ed=mean_ed, mean_diff=mean_td - mean_ed,
        t_statistic=t_statistic, p_ttest=p_ttest, p_perm=p_perm,
        permutation=["exact" if n_resamples is None or n_resamples >= 2 ** int(n) else "monte-carlo"
                     for n in n_runs])
    for test in ("ttest", "perm"):
        adjusted = false_discovery_control(tests[f"p_{test}"].to_numpy(np.float64), method="by")
        tests[f"p_{test}_by"] = adjusted
        tests[f"reject_{test}"] = adjusted <= alpha
    tests = _ordered(tests[TEST_COLUMNS], keys)
    tests.attrs["caption"] = (
        "One-sided paired tests of H1: TD-HPO targets leak more than ED-HPO targets (TPR by "
        "interpolation of the ROC at each FPR level, paired over runs): paired t-test and sign-flip "
        f"permutation test, p-values Benjamini–Yekutieli-adjusted over all {len(tests)} cells per "
        f"test, rejection at adjusted p ≤ {alpha:g}."
    )
    return tests


def selection_table(selection: pd.DataFrame) -> pd.DataFrame:
    """How close the attack's selected hyperparameters (j*) come to the target's, per setting, ε and
    HPO: the median |log10(chosen / target)| of the learning rate and the batch size (0: exact
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
    columns = [*keys, "n_targets", "median_abs_log10_lr_ratio", "spearman_lr",
               "median_abs_log10_batch_ratio", "spearman_batch"]
    table = _ordered(pd.DataFrame(rows, columns=columns), keys)
    table.attrs["caption"] = (
        "Hyperparameters selected by the attack against the target's, per setting, privacy budget ε "
        "and target HPO: median |log10(chosen / target)| and Spearman correlation over target models, "
        "for the learning rate and the batch size."
    )
    return table


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    return float(spearmanr(a, b).statistic)


# --- figures --------------------------------------------------------------------------------------------------

def plot_study_roc(roc: pd.DataFrame, bound: pd.DataFrame, path: str | Path, title: str) -> None:
    """The paper's Figs. 3, 7 and 8: log-log ROC of one setting, one panel per ε. Per (attack, hpo)
    the mean over runs with a min–max band; TD-HPO targets solid, ED-HPO dashed; for finite ε the
    DP upper bound on TPR (black dotted) shows how much room the attacks leave."""
    from matplotlib.figure import Figure

    if roc["setting"].nunique() > 1:
        raise ValueError("plot_study_roc draws one setting; filter `roc` first")
    setting = roc["setting"].iloc[0] if len(roc) else None
    epsilons = sorted(roc["epsilon"].unique(), reverse=True)
    figure = Figure(figsize=(PANEL_SIZE[0] * max(1, len(epsilons)) + 1.5, PANEL_SIZE[1]))
    low = float(roc.loc[roc["fpr"] > 0, "fpr"].min()) if len(roc) else 1e-4
    for k, epsilon in enumerate(epsilons, start=1):
        axes = figure.add_subplot(1, len(epsilons), k)
        panel = roc[roc["epsilon"] == epsilon]
        for hpo in HPO_ORDER:
            for attack in FULL_ATTACKS:
                curves = panel[(panel["hpo"] == hpo) & (panel["attack"] == attack)]
                if curves.empty:
                    continue
                grid = np.sort(curves["fpr"].unique())
                tprs = np.array([np.interp(grid, c["fpr"].to_numpy(), c["tpr"].to_numpy())
                                 for _, c in curves.sort_values("fpr").groupby("run", sort=True)])
                colour = ATTACK_COLOURS[attack]
                axes.plot(grid, tprs.mean(axis=0), color=colour, linestyle=HPO_STYLES[hpo], linewidth=1.2,
                          label=f"{attack} ({HPO_NAMES[hpo]})")
                axes.fill_between(grid, tprs.min(axis=0), tprs.max(axis=0), color=colour, alpha=0.12,
                                  linewidth=0)
        if math.isfinite(epsilon):
            dp = bound[np.isclose(bound["epsilon"], epsilon)]
            if setting is not None and "setting" in dp.columns:
                dp = dp[dp["setting"] == setting]
            if not dp.empty:
                dp = dp.sort_values("fpr")
                axes.plot(dp["fpr"], dp["tpr_bound"], color="k", linestyle=":", linewidth=1.2,
                          label=f"DP bound (ε = {format_epsilon(epsilon)})")
        axes.plot([low, 1.0], [low, 1.0], color="0.5", linestyle="--", linewidth=0.8, label="chance")
        axes.set(xscale="log", yscale="log", xlim=(low, 1.0), ylim=(low, 1.0), xlabel="False positive rate",
                 ylabel="True positive rate" if k == 1 else None, title=f"ε = {format_epsilon(epsilon)}")
        _legend(axes, loc="lower right")
    figure.suptitle(title)
    save_png(figure, path)


def plot_relative_tpr(study: pd.DataFrame, path: str | Path, title: str) -> None:
    """The paper's Fig. 4: TPR of ACC-LiRA and KL-LiRA relative to LiRA (TD-HPO targets), one panel
    per FPR level, one group of bars per (setting, ε); the line at 1 is "as good as knowing the
    target's hyperparameters"."""
    from matplotlib.figure import Figure

    table = relative_tpr_table(study)
    levels = sorted(table["fpr"].unique())
    groups = table[["setting", "epsilon"]].drop_duplicates().reset_index(drop=True)
    labels = [f"{s}\nε = {format_epsilon(e)}" for s, e in zip(groups["setting"], groups["epsilon"])]
    width = 0.8 / len(SELECTING_ATTACKS)
    figure = Figure(figsize=(max(PANEL_SIZE[0], 0.9 * len(groups)) + 1.5, PANEL_SIZE[1] * max(1, len(levels))))
    for k, level in enumerate(levels, start=1):
        axes = figure.add_subplot(max(1, len(levels)), 1, k)
        rows = groups.merge(table[table["fpr"] == level], on=["setting", "epsilon"], how="left")
        for j, attack in enumerate(SELECTING_ATTACKS):
            heights = rows[f"{attack} / lira"].to_numpy(np.float64)
            positions = np.arange(len(groups)) + (j - (len(SELECTING_ATTACKS) - 1) / 2) * width
            axes.bar(positions, np.nan_to_num(heights, nan=0.0), width=width, color=ATTACK_COLOURS[attack],
                     label=attack)
            for position in positions[np.isnan(heights)]:  # LiRA's TPR is 0 (or the attack is missing)
                axes.text(position, 0.0, "n/a", ha="center", va="bottom", fontsize="x-small")
        axes.axhline(1.0, color="k", linestyle="--", linewidth=0.8)
        axes.set_xticks(np.arange(len(groups)), labels=labels, fontsize="x-small")
        axes.set(ylabel="TPR / TPR of LiRA", title=f"{title}: FPR = {level * 100:g}%")
        _legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save_png(figure, path)


def plot_kl_budget(study: pd.DataFrame, path: str | Path, title: str) -> None:
    """The paper's Fig. 9: KL-LiRA's TPR (mean ± std over runs, TD-HPO) against the number of
    models trained for the attack, one marker per budget (C candidates × N models), one row of
    panels per (setting, ε) and one column per FPR level, with LiRA and ACC-LiRA as horizontal
    reference lines. Filter `study` to a few settings for a readable figure."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    table = kl_budget_table(study)
    levels = sorted(table["fpr"].unique())
    groups = table[["setting", "epsilon"]].drop_duplicates().reset_index(drop=True)
    budgets = sorted(set(zip(table["candidates"], table["models_per_candidate"])))
    colours = colormaps["tab10"].colors[3:]  # the first three are LiRA's, ACC-LiRA's and KL-LiRA's
    markers = "osD^v<>ph*"
    style = {b: (colours[k % len(colours)], markers[k % len(markers)]) for k, b in enumerate(budgets)}
    n_rows, n_cols = max(1, len(groups)), max(1, len(levels))
    figure = Figure(figsize=(PANEL_SIZE[0] * n_cols + 1.5, PANEL_SIZE[1] * n_rows))
    for i, (setting, epsilon) in enumerate(zip(groups["setting"], groups["epsilon"])):
        for j, level in enumerate(levels):
            axes = figure.add_subplot(n_rows, n_cols, i * n_cols + j + 1)
            cell = table[(table["setting"] == setting) & (table["epsilon"] == epsilon) & (table["fpr"] == level)]
            for _, point in cell.iterrows():
                budget = (point["candidates"], point["models_per_candidate"])
                colour, marker = style[budget]
                full = point["attack"] == "kl-lira"
                colour, name = (ATTACK_COLOURS["kl-lira"], "full grid") if full else (colour, "reduced")
                axes.errorbar([point["cost"]], [point["mean_tpr"]],
                              yerr=[0.0 if pd.isna(point["std_tpr"]) else point["std_tpr"]],
                              color=colour, marker=marker, markersize=5, capsize=2, linestyle="none",
                              label=f"KL-LiRA {name}, C = {budget[0]}, N = {budget[1]}")
            for attack, column in (("lira", "lira_tpr"), ("acc-lira", "acc_lira_tpr")):
                values = cell[column].dropna()
                if len(values):
                    axes.axhline(float(values.iloc[0]), color=ATTACK_COLOURS[attack], linestyle="--",
                                 linewidth=1.0, label=attack)
            axes.set(xscale="log", xlabel="Models trained for the attack", ylabel=f"TPR at {level * 100:g}% FPR",
                     title=f"{setting}, ε = {format_epsilon(epsilon)}")
            costs = sorted(int(c) for c in cell["cost"].unique())
            if costs:
                axes.set_xticks(costs, labels=[str(c) for c in costs])
                axes.set_xlim(costs[0] / 1.5, costs[-1] * 1.5)
            axes.minorticks_off()
            if j == n_cols - 1:
                _legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.suptitle(title)
    save_png(figure, path)


def plot_td_vs_ed(study: pd.DataFrame, path: str | Path, title: str, confidence: float = 0.95) -> None:
    """The paper's Fig. 10: mean TPR over runs of TD-HPO targets (x) against ED-HPO targets (y), one
    point per (setting, ε, attack, FPR level), with Clopper–Pearson intervals from the true positives
    and members pooled over runs; points below y = x are cells where TD-HPO leaked more."""
    from matplotlib.figure import Figure

    rows = study[study["attack"].isin(SELECTING_ATTACKS) & study["hpo"].isin(HPO_ORDER)]
    keys = ["setting", "epsilon", "attack", "fpr"]
    pooled = rows.groupby([*keys, "hpo"], sort=True).agg(tpr=("tpr", "mean"), tp=("tp", "sum"),
                                                          positives=("positives", "sum"))
    wide = pooled.unstack("hpo").dropna()
    levels = sorted(rows["fpr"].unique())
    markers = dict(zip(levels, "osD^v<>"))
    figure = Figure(figsize=(6.5, 5.0))
    axes = figure.add_subplot()
    positive: list[float] = []
    for attack in SELECTING_ATTACKS:
        for level in levels:
            at = wide[(wide.index.get_level_values("attack") == attack) & (wide.index.get_level_values("fpr") == level)]
            if at.empty:
                continue
            x, y = at[("tpr", "td")].to_numpy(np.float64), at[("tpr", "ed")].to_numpy(np.float64)
            errors = []
            for centre, hpo in ((x, "td"), (y, "ed")):
                bounds = np.array([clopper_pearson(int(tp), int(n), confidence)
                                   for tp, n in zip(at[("tp", hpo)], at[("positives", hpo)])])
                errors.append(np.clip(np.stack([centre - bounds[:, 0], bounds[:, 1] - centre]), 0.0, None))
                positive.extend(bounds[bounds[:, 0] > 0, 0])
            positive.extend(x[x > 0])
            positive.extend(y[y > 0])
            axes.errorbar(x, y, xerr=errors[0], yerr=errors[1], color=ATTACK_COLOURS[attack], marker=markers[level],
                          markersize=4, linestyle="none", elinewidth=0.6, capsize=1.5,
                          label=f"{attack}, FPR = {level * 100:g}%")
    low = min(positive) / 2 if positive else 1e-4
    axes.plot([low, 1.0], [low, 1.0], color="k", linestyle="--", linewidth=0.8, label="y = x")
    axes.set(xscale="log", yscale="log", xlim=(low, 1.0), ylim=(low, 1.0), xlabel="TPR, TD-HPO target",
             ylabel="TPR, ED-HPO target", title=title)
    _legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save_png(figure, path)


def plot_pvalues(tests: pd.DataFrame, path: str | Path, title: str, alpha: float = 0.05) -> None:
    """The paper's Fig. 11: −log10 of the raw and Benjamini–Yekutieli-adjusted p-values of the
    TD-vs-ED t-tests and permutation tests (`td_vs_ed_tests` rows), one position per cell; points
    above the line at −log10(alpha) reject H0. p-values below 1e-12 are drawn at 1e-12."""
    from matplotlib.figure import Figure

    tests = tests.reset_index(drop=True)
    labels = [f"{s} ε={format_epsilon(e)} {a} {f * 100:g}%"
              for s, e, a, f in zip(tests["setting"], tests["epsilon"], tests["attack"], tests["fpr"])]
    positions = np.arange(len(tests))
    figure = Figure(figsize=(max(6.0, 0.18 * len(tests) + 2.5), 5.0))
    axes = figure.add_subplot()
    series = [("p_ttest", "t-test", "tab:blue", "o", "none"), ("p_ttest_by", "t-test, BY", "tab:blue", "o", None),
              ("p_perm", "permutation", "tab:red", "s", "none"), ("p_perm_by", "permutation, BY", "tab:red", "s", None)]
    for column, label, colour, marker, face in series:
        values = -np.log10(np.clip(tests[column].to_numpy(np.float64), P_FLOOR, 1.0))
        axes.scatter(positions, values, label=label, marker=marker, s=18, edgecolors=colour,
                     facecolors=face if face else colour, linewidths=0.8)
    axes.axhline(-math.log10(alpha), color="k", linestyle="--", linewidth=0.8, label=f"α = {alpha:g}")
    axes.set_xticks(positions, labels=labels, rotation=90, fontsize=5)
    axes.set(xlim=(-0.5, max(len(tests), 1) - 0.5), ylabel="−log10 p", title=title)
    _legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save_png(figure, path)


def plot_selection(selection: pd.DataFrame, path: str | Path, title: str) -> None:
    """The paper's Fig. A10: the target's learning rate (x) against the one the attack selected (y),
    log-log, coloured by ε, TD-HPO circles and ED-HPO crosses; marker area grows with the number of
    targets at the same point (the grid is discrete); the diagonal is a perfect match."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    counts = (selection.groupby(["epsilon", "hpo", "target_lr", "chosen_lr"], sort=True).size()
              .rename("count").reset_index())
    epsilons = sorted(counts["epsilon"].unique(), reverse=True)
    colours = colormaps["tab10"].colors
    largest = max(int(counts["count"].max()), 1) if len(counts) else 1
    figure = Figure(figsize=(6.5, 5.0))
    axes = figure.add_subplot()
    for k, epsilon in enumerate(epsilons):
        for hpo, marker in (("td", "o"), ("ed", "x")):
            points = counts[(counts["epsilon"] == epsilon) & (counts["hpo"] == hpo)]
            if points.empty:
                continue
            axes.scatter(points["target_lr"], points["chosen_lr"], s=10 + 150 * points["count"] / largest,
                         marker=marker, color=colours[k % len(colours)], alpha=0.6,
                         label=f"ε = {format_epsilon(epsilon)}, {HPO_NAMES[hpo]}")
    values = np.concatenate([selection["target_lr"].to_numpy(np.float64), selection["chosen_lr"].to_numpy(np.float64)])
    values = values[values > 0]
    low, high = (values.min() / 2, values.max() * 2) if values.size else (1e-5, 1.0)
    axes.plot([low, high], [low, high], color="k", linestyle="--", linewidth=0.8, label="chosen = target")
    axes.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high), xlabel="Target learning rate",
             ylabel="Learning rate selected by the attack", title=title)
    _legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save_png(figure, path)
