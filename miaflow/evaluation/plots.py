"""Paper figures (PNG): log-log ROC curves, AUROC against the generalisation gap and against the
number of reference models and queries, privacy-risk CDFs; and the drawing helpers that the
figures of `hparam_figures` and `llm_report` share.

matplotlib is imported inside each function (it takes about a second, and table-only jobs never
need it), and figures are drawn on a bare `Figure`, without pyplot's global state. The PNGs carry
no software version, so identical inputs give byte-identical files.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from miaflow.io import write_with

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ROC_FPR_GRID = np.geomspace(1e-4, 1.0, 200)
FIGURE_SIZE = (7.5, 4.5)  # inches: a square plot plus the legend on its right
FIGURE_DPI = 150
PANEL_SIZE = (4.2, 3.8)  # inches per panel of a multi-panel figure


def plot_roc_loglog(
    roc: pd.DataFrame, path: str | Path, title: str, auroc: Mapping[str, float] | None = None
) -> None:
    """Log-log ROC of each attack, averaged over repeats, for one dataset/target model.

    `roc` holds `miaflow.evaluation.metrics.roc_table` rows of a single (dataset, target_model). Each repeat's
    TPR is interpolated onto a common log-spaced FPR grid (1e-4..1) and averaged, as in LiRA-style
    plots; `auroc` (attack -> mean AUROC) adds the value to the legend.
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    if len(roc[["dataset", "target_model"]].drop_duplicates()) > 1:
        raise ValueError("plot_roc_loglog draws one dataset/target model; filter `roc` first")
    # A bare Figure (no pyplot) needs no GUI backend and leaves no global state behind.
    figure = Figure(figsize=FIGURE_SIZE)
    axes = figure.add_subplot()
    colours = colormaps["tab20"].colors  # 20 distinct colours: attacks never share one
    for k, (attack, curves) in enumerate(roc.groupby("attack", sort=True)):
        tprs = [np.interp(ROC_FPR_GRID, c["fpr"], c["tpr"]) for _, c in curves.groupby("repeat")]
        label = f"{attack} (AUROC {auroc[attack]:.3f})" if auroc and attack in auroc else str(attack)
        axes.plot(ROC_FPR_GRID, np.mean(tprs, axis=0), label=label, linewidth=1.2,
                  color=colours[k % len(colours)], linestyle=("-", "--", ":")[k // len(colours) % 3])
    axes.plot(ROC_FPR_GRID, ROC_FPR_GRID, "k--", linewidth=0.8, label="chance")
    axes.set(xscale="log", yscale="log", xlim=(1e-4, 1), ylim=(1e-4, 1),
             xlabel="False positive rate", ylabel="True positive rate", title=title)
    axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="x-small")
    save_png(figure, path)


def save_png(figure: Figure, path: str | Path) -> None:
    """Write a PNG atomically, without the "Software" entry (matplotlib's version string), so
    only the drawing decides the bytes."""
    figure.tight_layout()
    write_with(path, lambda tmp: figure.savefig(tmp, format="png", dpi=FIGURE_DPI,
                                                metadata={"Software": None}))


def small_legend(axes: Axes, **options: Any) -> None:
    """An x-small legend, only when something on `axes` has a label: matplotlib would otherwise
    warn and draw an empty box."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="x-small", **options)


def plot_mean_band(axes: Axes, x: Any, mean: Any, low: Any, high: Any, color: Any,
                   **line: Any) -> None:
    """A line of means over a shaded band of the same colour from `low` to `high` (min and max
    over runs or repeats), so the spread is seen without hiding the other lines."""
    axes.plot(x, mean, color=color, linewidth=1.2, **line)
    axes.fill_between(x, low, high, color=color, alpha=0.12, linewidth=0)


def plot_auroc_vs_gap(metrics: pd.DataFrame, models: pd.DataFrame,
                      families: Mapping[str, str], path: str | Path) -> None:
    """TDDBench Fig. 2: AUROC of each target model against its train − test accuracy gap, one
    point per (experiment, attack, repeat), coloured by attack family."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    targets = models[models["role"] == "target"]
    gaps = pd.DataFrame({"dataset": targets["dataset"], "target_model": targets["arch"],
                         "repeat": targets["model_id"].str.rsplit("-", n=1).str[-1].astype(int),
                         "gap": targets["train_acc"] - targets["test_acc"]})
    auroc = metrics[metrics["metric"] == "auroc"].merge(gaps, on=["dataset", "target_model", "repeat"])
    figure = Figure(figsize=FIGURE_SIZE)
    axes = figure.add_subplot()
    colours = colormaps["tab10"].colors
    for k, (family, points) in enumerate(auroc.groupby(auroc["attack"].map(families), sort=True)):
        axes.scatter(points["gap"], points["value"], s=10, alpha=0.6, label=family,
                     color=colours[k % len(colours)])
    axes.axhline(0.5, color="k", linestyle="--", linewidth=0.8)
    axes.set(xlabel="Target train − test accuracy", ylabel="AUROC",
             title="Attack AUROC against the target's generalisation gap")
    axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small")
    save_png(figure, path)


def plot_scaling_sweep(sweep: pd.DataFrame, path: str | Path, title: str) -> None:
    """TDDBench Fig. 4: AUROC (mean ± std over target models) against the number of reference
    models and, in a second panel, of queries, one line per attack."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    axes_names = [a for a in ("reference models", "queries") if a in set(sweep["axis"])] or ["reference models"]
    figure = Figure(figsize=(FIGURE_SIZE[0] * len(axes_names), FIGURE_SIZE[1]))
    colours = colormaps["tab20"].colors
    for k, axis in enumerate(axes_names, start=1):
        axes = figure.add_subplot(1, len(axes_names), k)
        rows = sweep[sweep["axis"] == axis]
        for j, (attack, runs) in enumerate(rows.groupby("attack", sort=True)):
            stats = runs.groupby("count")["auroc"].agg(["mean", "std"]).reset_index()
            axes.errorbar(stats["count"], stats["mean"], yerr=stats["std"].fillna(0.0),
                          label=attack, color=colours[j % len(colours)], marker="o", markersize=3,
                          linewidth=1.2, capsize=2)
        counts = sorted(rows["count"].unique())
        axes.set(xscale="log", xlabel=f"Number of {axis}", ylabel="AUROC", title=title)
        if counts:
            axes.set_xticks(counts, labels=[str(c) for c in counts])
            axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="x-small")
        axes.minorticks_off()
    save_png(figure, path)


def _draw_risk_cdf(axes: Any, risk: np.ndarray, **style: Any) -> None:
    """The empirical CDF of risk scores as a step line from (0, 0) to (1, 1)."""
    from miaflow.attacks.song_mittal import risk_cdf

    values, cdf = risk_cdf(risk)
    axes.step(np.concatenate([[0.0], values, [1.0]]), np.concatenate([[0.0], cdf, [1.0]]),
              where="post", **style)


def plot_risk_cdf(scores: pd.DataFrame, path: str | Path, title: str) -> None:
    """Empirical CDF of privacy risk scores over the target's members and non-members (pooled
    over repeats) of one dataset/target model: the further apart, the more members stand out."""
    from matplotlib.figure import Figure

    risk = scores[scores["attack"] == "sm-risk"]
    if len(risk[["dataset", "target_model"]].drop_duplicates()) > 1:
        raise ValueError("plot_risk_cdf draws one dataset/target model; filter `scores` first")
    figure = Figure(figsize=(5.0, 4.0))
    axes = figure.add_subplot()
    for is_member, label, colour in [(True, "members", "tab:red"),
                                     (False, "non-members", "tab:blue")]:
        values = risk.loc[risk["is_member"] == is_member, "score"].to_numpy()
        _draw_risk_cdf(axes, values, label=f"{label} (n = {len(values)})", color=colour)
    axes.set(xlim=(0, 1), ylim=(0, 1.01), xlabel="Privacy risk score", ylabel="Cumulative fraction",
             title=title)
    axes.legend(loc="upper left", fontsize="small")
    save_png(figure, path)


def _compared_datasets(defenses: pd.DataFrame) -> list[str]:
    """The datasets of a `defense_table` with more than one recipe to compare (all of them when
    none has)."""
    counts = defenses["dataset"].value_counts()
    return sorted(counts[counts > 1].index) or sorted(counts.index)


def plot_defense_tradeoff(table: pd.DataFrame, path: str | Path) -> None:
    """Utility against privacy over defenses and their strengths (Song & Mittal's trade-off):
    each target model's test accuracy against its best attack's TPR at 1% FPR, one panel per
    dataset with more than one recipe, each point labelled by its defense (`defense_table`
    rows)."""
    from matplotlib.figure import Figure

    datasets = _compared_datasets(table)
    figure = Figure(figsize=(7.0 * len(datasets), 4.5))
    for index, dataset in enumerate(datasets, start=1):
        axes = figure.add_subplot(1, len(datasets), index)
        rows = table[table["dataset"] == dataset]
        axes.scatter(rows["test_acc"], rows["best_tpr_at_1pct_fpr"], color="tab:blue")
        for _, row in rows.iterrows():
            axes.annotate(row["defense"], (row["test_acc"], row["best_tpr_at_1pct_fpr"]),
                          fontsize="x-small", xytext=(3, 3), textcoords="offset points")
        axes.set(xlabel="Test accuracy of the target", ylabel="Best attack's TPR at 1% FPR",
                 title=f"Defenses: {dataset}")
    save_png(figure, path)


def plot_defense_risk_cdfs(risk: pd.DataFrame, defenses: pd.DataFrame, path: str | Path) -> None:
    """Song & Mittal's per-defense risk analysis: the CDF of the privacy risk score over each
    target model's members (pooled over repeats), one line per defense, one panel per dataset;
    a defense that works moves its line up and left (fewer members at high risk). Datasets with a
    single recipe get no panel, as in `plot_defense_tradeoff`.

    `risk` holds sm-risk score rows; `defenses` the `defense_table` (dataset, target_model,
    defense) that labels them."""
    from matplotlib.figure import Figure

    members = risk[risk["is_member"]]
    datasets = _compared_datasets(defenses)
    figure = Figure(figsize=(6.0 * len(datasets), 4.5))
    for index, dataset in enumerate(datasets, start=1):
        axes = figure.add_subplot(1, len(datasets), index)
        for row in defenses[defenses["dataset"] == dataset].itertuples(index=False):
            mine = members[(members["dataset"] == dataset)
                           & (members["target_model"] == row.target_model)]
            if mine.empty:
                continue
            _draw_risk_cdf(axes, mine["score"].to_numpy(), label=row.defense)
        axes.set(xlim=(0, 1), ylim=(0, 1.01), xlabel="Privacy risk score of members",
                 ylabel="Cumulative fraction", title=f"Risk by defense: {dataset}")
        axes.legend(loc="upper left", fontsize="x-small")
    save_png(figure, path)
