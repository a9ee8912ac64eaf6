"""Figures of the hyperparameter study (docs/algorithms.md#hyperparameter-study): the paper's
Figs. 3, 4, 7–11 and A10, from the inputs and tables described in `miaflow.hparams.tables`.

Figures follow `miaflow.evaluation.plots`: matplotlib is imported inside each function, drawing
uses a bare `Figure`, and PNGs carry no software version, so identical inputs give byte-identical
files.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from miaflow.evaluation.metrics import clopper_pearson
from miaflow.evaluation.plots import (
    PANEL_SIZE,
    decade_ticks,
    plot_mean_band,
    save_png,
    small_legend,
)
from miaflow.hparams.tables import (
    FULL_ATTACKS,
    HPO_NAMES,
    HPO_ORDER,
    SELECTING_ATTACKS,
    format_epsilon,
    kl_budget_table,
    relative_tpr_table,
    wrapped_name,
)

ATTACK_COLOURS = {"lira": "tab:blue", "acc-lira": "tab:orange", "kl-lira": "tab:green"}
HPO_STYLES = {"td": "-", "ed": "--"}
# -log10 of p-values below this would stretch the axis without telling more (t-tests of
# identical nonzero differences give p = 0).
P_FLOOR = 1e-12


def plot_study_roc(
    roc: pd.DataFrame, bound: pd.DataFrame, path: str | Path, title: str, lowest_fpr: float
) -> None:
    """The paper's Figs. 3, 7 and 8: log-log ROC of one setting, one panel per ε. Per (attack, hpo)
    the mean over runs with a min–max band; TD-HPO targets solid, ED-HPO dashed; for finite ε the
    DP upper bound on TPR (black dotted) shows how much room the attacks leave.

    The curves come on a fixed FPR grid that reaches below what the pooled targets can measure;
    they are drawn, and the axes start, from `lowest_fpr` (1 / the non-members pooled, see
    `lowest_measured_fpr`)."""
    from matplotlib.figure import Figure

    if roc["setting"].nunique() > 1:
        raise ValueError("plot_study_roc draws one setting; filter `roc` first")
    setting = roc["setting"].iloc[0] if len(roc) else None
    epsilons = sorted(roc["epsilon"].unique(), reverse=True)
    figure = Figure(figsize=(PANEL_SIZE[0] * max(1, len(epsilons)) + 1.5, PANEL_SIZE[1]))
    low = lowest_fpr
    roc = roc[roc["fpr"] >= low]
    bound = bound[bound["fpr"] >= low]
    for k, epsilon in enumerate(epsilons, start=1):
        axes = figure.add_subplot(1, len(epsilons), k)
        panel = roc[roc["epsilon"] == epsilon]
        for hpo in HPO_ORDER:
            for attack in FULL_ATTACKS:
                curves = panel[(panel["hpo"] == hpo) & (panel["attack"] == attack)]
                if curves.empty:
                    continue
                grid = np.sort(curves["fpr"].unique())
                tprs = np.array(
                    [
                        np.interp(grid, c["fpr"].to_numpy(), c["tpr"].to_numpy())
                        for _, c in curves.sort_values("fpr").groupby("run", sort=True)
                    ]
                )
                plot_mean_band(
                    axes,
                    grid,
                    tprs.mean(axis=0),
                    tprs.min(axis=0),
                    tprs.max(axis=0),
                    ATTACK_COLOURS[attack],
                    linestyle=HPO_STYLES[hpo],
                    label=f"{attack} ({HPO_NAMES[hpo]})",
                )
        if math.isfinite(epsilon):
            dp = bound[np.isclose(bound["epsilon"], epsilon)]
            if setting is not None and "setting" in dp.columns:
                dp = dp[dp["setting"] == setting]
            if not dp.empty:
                dp = dp.sort_values("fpr")
                axes.plot(
                    dp["fpr"],
                    dp["tpr_bound"],
                    color="k",
                    linestyle=":",
                    linewidth=1.2,
                    label=f"DP bound (ε = {format_epsilon(epsilon)})",
                )
        axes.plot(
            [low, 1.0], [low, 1.0], color="0.5", linestyle="--", linewidth=0.8, label="chance"
        )
        axes.set(
            xscale="log",
            yscale="log",
            xlim=(low, 1.0),
            ylim=(low, 1.0),
            xlabel="False positive rate",
            ylabel="True positive rate" if k == 1 else None,
            title=f"ε = {format_epsilon(epsilon)}",
        )
        decade_ticks(axes, low)
        small_legend(axes, loc="lower right")
    figure.suptitle(title)
    save_png(figure, path)


def lowest_measured_fpr(study: pd.DataFrame) -> float:
    """The lowest FPR the study's pooled ROC curves measure: 1 / the fewest non-members pooled
    over a run's targets. The study records members (`positives`), not non-members; membership
    is drawn with probability 1/2 per sample and target (`miaflow.hparams.grid.draw_splits`), so
    the members stand for the non-members, within a few percent at the study's sizes."""
    return 1.0 / float(study["positives"].min()) if len(study) else 1e-3


def plot_relative_tpr(study: pd.DataFrame, path: str | Path, title: str) -> None:
    """The paper's Fig. 4: TPR of ACC-LiRA and KL-LiRA relative to LiRA (TD-HPO targets), one panel
    per FPR level, one group of bars per (setting, ε); the line at 1 is "as good as knowing the
    target's hyperparameters"."""
    from matplotlib.figure import Figure

    table = relative_tpr_table(study)
    levels = sorted(table["fpr"].unique())
    groups = table[["setting", "epsilon"]].drop_duplicates().reset_index(drop=True)
    labels = [
        f"{wrapped_name(s, 16)}\nε = {format_epsilon(e)}"
        for s, e in zip(groups["setting"], groups["epsilon"])
    ]
    width = 0.8 / len(SELECTING_ATTACKS)
    figure = Figure(
        figsize=(max(PANEL_SIZE[0], 1.1 * len(groups)) + 1.5, PANEL_SIZE[1] * max(1, len(levels)))
    )
    for k, level in enumerate(levels, start=1):
        axes = figure.add_subplot(max(1, len(levels)), 1, k)
        rows = groups.merge(table[table["fpr"] == level], on=["setting", "epsilon"], how="left")
        for j, attack in enumerate(SELECTING_ATTACKS):
            heights = rows[f"{attack} / lira"].to_numpy(np.float64)
            positions = np.arange(len(groups)) + (j - (len(SELECTING_ATTACKS) - 1) / 2) * width
            axes.bar(
                positions,
                np.nan_to_num(heights, nan=0.0),
                width=width,
                color=ATTACK_COLOURS[attack],
                label=attack,
            )
            # n/a: LiRA's TPR is 0 (or the attack is missing)
            for position in positions[np.isnan(heights)]:
                axes.text(position, 0.0, "n/a", ha="center", va="bottom", fontsize="x-small")
        axes.axhline(1.0, color="k", linestyle="--", linewidth=0.8)
        axes.set_xticks(np.arange(len(groups)), labels=labels, fontsize="x-small")
        axes.set(ylabel="TPR / TPR of LiRA", title=f"{title}: FPR = {level * 100:g}%")
        small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save_png(figure, path)


def plot_kl_budget(study: pd.DataFrame, path: str | Path, title: str) -> None:
    """The paper's Fig. 9: KL-LiRA's TPR (mean ± std over runs, TD-HPO; the bars clipped to
    [0, 1], where a TPR lies) against the number of models trained for the attack, one marker
    per budget (C candidates × N models, the cost in the legend), one row of panels per
    (setting, ε) and one column per FPR level, with LiRA and ACC-LiRA as horizontal reference
    lines. The x ticks are round numbers, not the costs, which may lie too close to label (175
    and 196 models by default). Filter `study` to a few settings for a readable figure."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    table = kl_budget_table(study)
    levels = sorted(table["fpr"].unique())
    groups = table[["setting", "epsilon"]].drop_duplicates().reset_index(drop=True)
    budgets = sorted(set(zip(table["candidates"], table["models_per_candidate"])))
    colours = colormaps["tab10"].colors[3:]  # the first three are LiRA's, ACC-LiRA's and KL-LiRA's
    markers = "osD^v<>ph*"
    style = {
        b: (colours[k % len(colours)], markers[k % len(markers)]) for k, b in enumerate(budgets)
    }
    n_rows, n_cols = max(1, len(groups)), max(1, len(levels))
    figure = Figure(figsize=(PANEL_SIZE[0] * n_cols + 1.5, PANEL_SIZE[1] * n_rows))
    for i, (setting, epsilon) in enumerate(zip(groups["setting"], groups["epsilon"])):
        for j, level in enumerate(levels):
            axes = figure.add_subplot(n_rows, n_cols, i * n_cols + j + 1)
            cell = table[
                (table["setting"] == setting)
                & (table["epsilon"] == epsilon)
                & (table["fpr"] == level)
            ]
            for _, point in cell.iterrows():
                budget = (point["candidates"], point["models_per_candidate"])
                colour, marker = style[budget]
                name = "reduced"
                if point["attack"] == "kl-lira":
                    colour, name = ATTACK_COLOURS["kl-lira"], "full grid"
                mean = point["mean_tpr"]
                spread = 0.0 if pd.isna(point["std_tpr"]) else point["std_tpr"]
                axes.errorbar(
                    [point["cost"]],
                    [mean],
                    yerr=[[min(spread, mean)], [min(spread, 1.0 - mean)]],
                    color=colour,
                    marker=marker,
                    markersize=5,
                    capsize=2,
                    linestyle="none",
                    label=f"KL-LiRA {name}, C = {budget[0]}, "
                    f"N = {budget[1]}: {point['cost']} models",
                )
            for attack, column in (("lira", "lira_tpr"), ("acc-lira", "acc_lira_tpr")):
                values = cell[column].dropna()
                if len(values):
                    axes.axhline(
                        float(values.iloc[0]),
                        color=ATTACK_COLOURS[attack],
                        linestyle="--",
                        linewidth=1.0,
                        label=attack,
                    )
            axes.set(
                xscale="log",
                xlabel="Models trained for the attack",
                ylabel=f"TPR at {level * 100:g}% FPR",
                title=f"{wrapped_name(setting, 32)}, ε = {format_epsilon(epsilon)}",
            )
            if len(cell):
                low, high = cell["cost"].min() / 1.5, cell["cost"].max() * 1.5
                axes.set_xlim(low, high)
                axes.set_xticks(*_round_ticks(low, high))
            axes.minorticks_off()
            if j == n_cols - 1:
                small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.suptitle(title)
    save_png(figure, path)


def _round_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Ticks of a log axis from `low` to `high` at 1, 2 and 5 times the powers of ten (at the
    powers of ten alone beyond two decades): at least 0.3 decades apart, so their labels never
    meet on a panel a few inches wide."""
    steps = (1, 2, 5) if math.log10(high / low) <= 2 else (1,)
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    ticks = [step * 10.0**d for d in decades for step in steps if low <= step * 10.0**d <= high]
    return ticks, [f"{tick:g}" for tick in ticks]


def plot_td_vs_ed(
    study: pd.DataFrame, path: str | Path, title: str, confidence: float = 0.95
) -> None:
    """The paper's Fig. 10: mean TPR over runs of TD-HPO targets (x) against ED-HPO targets (y),
    one point per (setting, ε, attack, FPR level), with Clopper–Pearson intervals from the true
    positives and members pooled over runs; points below y = x are cells where TD-HPO leaked
    more."""
    from matplotlib.figure import Figure

    rows = study[study["attack"].isin(SELECTING_ATTACKS) & study["hpo"].isin(HPO_ORDER)]
    keys = ["setting", "epsilon", "attack", "fpr"]
    pooled = rows.groupby([*keys, "hpo"], sort=True).agg(
        tpr=("tpr", "mean"), tp=("tp", "sum"), positives=("positives", "sum")
    )
    wide = pooled.unstack("hpo").dropna()
    levels = sorted(rows["fpr"].unique())
    markers = dict(zip(levels, "osD^v<>"))
    figure = Figure(figsize=(6.5, 5.0))
    axes = figure.add_subplot()
    positive: list[float] = []
    for attack in SELECTING_ATTACKS:
        for level in levels:
            at = wide[
                (wide.index.get_level_values("attack") == attack)
                & (wide.index.get_level_values("fpr") == level)
            ]
            if at.empty:
                continue
            x, y = at[("tpr", "td")].to_numpy(np.float64), at[("tpr", "ed")].to_numpy(np.float64)
            errors = []
            for centre, hpo in ((x, "td"), (y, "ed")):
                bounds = np.array(
                    [
                        clopper_pearson(int(tp), int(n), confidence)
                        for tp, n in zip(at[("tp", hpo)], at[("positives", hpo)])
                    ]
                )
                spread = np.stack([centre - bounds[:, 0], bounds[:, 1] - centre])
                errors.append(np.clip(spread, 0.0, None))
                positive.extend(bounds[bounds[:, 0] > 0, 0])
            positive.extend(x[x > 0])
            positive.extend(y[y > 0])
            axes.errorbar(
                x,
                y,
                xerr=errors[0],
                yerr=errors[1],
                color=ATTACK_COLOURS[attack],
                marker=markers[level],
                markersize=4,
                linestyle="none",
                elinewidth=0.6,
                capsize=1.5,
                label=f"{attack}, FPR = {level * 100:g}%",
            )
    low = min(positive) / 2 if positive else 1e-4
    axes.plot([low, 1.0], [low, 1.0], color="k", linestyle="--", linewidth=0.8, label="y = x")
    axes.set(
        xscale="log",
        yscale="log",
        xlim=(low, 1.0),
        ylim=(low, 1.0),
        xlabel="TPR, TD-HPO target",
        ylabel="TPR, ED-HPO target",
        title=title,
    )
    small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save_png(figure, path)


def plot_pvalues(tests: pd.DataFrame, path: str | Path, title: str, alpha: float = 0.05) -> None:
    """The paper's Fig. 11: −log10 of the raw and Benjamini–Yekutieli-adjusted p-values of the
    TD-vs-ED t-tests and permutation tests (`td_vs_ed_tests` rows), one position per cell; points
    above the line at −log10(alpha) reject H0. p-values below 1e-12 are drawn at 1e-12."""
    from matplotlib.figure import Figure

    tests = tests.reset_index(drop=True)
    labels = [
        f"{s} ε={format_epsilon(e)} {a} {f * 100:g}%"
        for s, e, a, f in zip(tests["setting"], tests["epsilon"], tests["attack"], tests["fpr"])
    ]
    positions = np.arange(len(tests))
    figure = Figure(figsize=(max(6.0, 0.18 * len(tests) + 2.5), 5.0))
    axes = figure.add_subplot()
    series = [
        ("p_ttest", "t-test", "tab:blue", "o", "none"),
        ("p_ttest_by", "t-test, BY", "tab:blue", "o", None),
        ("p_perm", "permutation", "tab:red", "s", "none"),
        ("p_perm_by", "permutation, BY", "tab:red", "s", None),
    ]
    for column, label, colour, marker, face in series:
        values = -np.log10(np.clip(tests[column].to_numpy(np.float64), P_FLOOR, 1.0))
        axes.scatter(
            positions,
            values,
            label=label,
            marker=marker,
            s=18,
            edgecolors=colour,
            facecolors=face if face else colour,
            linewidths=0.8,
        )
    axes.axhline(
        -math.log10(alpha), color="k", linestyle="--", linewidth=0.8, label=f"α = {alpha:g}"
    )
    axes.set_xticks(positions, labels=labels, rotation=90, fontsize=5)
    axes.set(xlim=(-0.5, max(len(tests), 1) - 0.5), ylabel="−log10 p", title=title)
    small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save_png(figure, path)


def plot_selection(selection: pd.DataFrame, path: str | Path, title: str) -> None:
    """The paper's Fig. A10: the target's learning rate (x) against the one the attack selected (y),
    log-log, coloured by ε, TD-HPO circles and ED-HPO crosses; marker area grows with the number of
    targets at the same point (the grid is discrete); the diagonal is a perfect match."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    counts = (
        selection.groupby(["epsilon", "hpo", "target_lr", "chosen_lr"], sort=True)
        .size()
        .rename("count")
        .reset_index()
    )
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
            axes.scatter(
                points["target_lr"],
                points["chosen_lr"],
                s=10 + 150 * points["count"] / largest,
                marker=marker,
                color=colours[k % len(colours)],
                alpha=0.6,
                label=f"ε = {format_epsilon(epsilon)}, {HPO_NAMES[hpo]}",
            )
    values = np.concatenate(
        [selection["target_lr"].to_numpy(np.float64), selection["chosen_lr"].to_numpy(np.float64)]
    )
    values = values[values > 0]
    low, high = (values.min() / 2, values.max() * 2) if values.size else (1e-5, 1.0)
    axes.plot(
        [low, high], [low, high], color="k", linestyle="--", linewidth=0.8, label="chosen = target"
    )
    axes.set(
        xscale="log",
        yscale="log",
        xlim=(low, high),
        ylim=(low, high),
        xlabel="Target learning rate",
        ylabel="Learning rate selected by the attack",
        title=title,
    )
    small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save_png(figure, path)
