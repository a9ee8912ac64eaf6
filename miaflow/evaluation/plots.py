"""Paper figures (PNG): log-log ROC curves, AUROC against the generalisation gap and against the
number of reference models and queries, privacy-risk CDFs; and the drawing helpers that the
figures of `miaflow.hparams.figures` and `llm_report` share.

matplotlib is imported inside each function (it takes about a second, and table-only jobs never
need it), and figures are drawn on a bare `Figure`, without pyplot's global state. The PNGs carry
no software version, so identical inputs give byte-identical files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
ROC_PANEL_ATTACKS = 8  # curves per ROC panel at most, so that its legend stays short
# Panels per row of a ROC figure: two panels at FIGURE_DPI are about 1080 px wide, so the report
# (about 1280 px wide) shows them unscaled and a legend's text stays legible.
ROC_COLUMNS = 2
REPORT_WIDTH_PX = 1280  # how wide the report shows a figure, at most
LEGEND_FONT = "small"  # about 8 pt: 17 px tall at FIGURE_DPI
ROC_PANEL = (3.6, 5.6)  # inches per ROC panel: a square plot over its legend
FIGURE_DPI = 150
SUPTITLE_INCHES = 0.4  # kept free at the top of a figure for its title
PANEL_SIZE = (4.2, 3.8)  # inches per panel of a multi-panel figure


def measured_from(curves: pd.DataFrame, runs: str = "repeat") -> float:
    """The lowest FPR at which the mean of `curves` (ROC points of one or more runs) is measured.

    A run's ROC moves off FPR 0 at its first threshold that admits a non-member: FPR 1/(its
    non-members), or k/(its non-members) where k non-members tie. The ROC tables keep that
    point (they thin curves above 1% FPR only) but not the counts, so the smallest positive FPR
    of each run stands for them; below it a curve is interpolation, not measurement. A mean is
    measured where every run is: the largest of the runs' values."""
    positive = curves[curves["fpr"] > 0]
    return float(positive.groupby(runs)["fpr"].min().max()) if len(positive) else 1.0


def plot_roc_loglog(
    roc: pd.DataFrame,
    path: str | Path,
    title: str,
    auroc: Mapping[str, float] | None = None,
    families: Mapping[str, str] | None = None,
) -> None:
    """Log-log ROC of each attack, averaged over repeats, for one dataset/target model.

    `roc` holds `miaflow.evaluation.metrics.roc_table` rows of a single (dataset, target_model).
    One panel per attack family (`families`: attack -> family; others are "other"), split so
    that no panel holds more than ROC_PANEL_ATTACKS curves, and a first panel with the best
    attack (by AUROC) of each family, so each legend stays short enough to read. Each repeat's
    TPR is interpolated onto a log-spaced FPR grid and averaged, as in LiRA-style plots; each
    curve starts at the lowest FPR its repeats measure (`measured_from`), and every axis at the
    lowest FPR any curve measures. `auroc` (attack -> mean AUROC) adds the value to the legend
    and ranks the attacks; without it, the mean area under the repeats' ROC points ranks them.
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    if len(roc[["dataset", "target_model"]].drop_duplicates()) > 1:
        raise ValueError("plot_roc_loglog draws one dataset/target model; filter `roc` first")
    means: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    area: dict[str, float] = {}
    for attack, curves in roc.groupby("attack", sort=True):
        grid = np.geomspace(measured_from(curves), 1.0, 200)
        runs = [c.sort_values(["fpr", "tpr"]) for _, c in curves.groupby("repeat")]
        means[attack] = grid, np.mean([np.interp(grid, c["fpr"], c["tpr"]) for c in runs], axis=0)
        area[attack] = float(np.mean([np.trapezoid(c["tpr"], c["fpr"]) for c in runs]))
    score = {a: auroc[a] if auroc and a in auroc else area[a] for a in means}
    label = {a: f"{a} ({auroc[a]:.3f})" if auroc and a in auroc else a for a in means}
    family_of = {a: (families or {}).get(a, "other") for a in means}
    order = sorted(set(family_of.values()), key=lambda f: (f == "other", f))
    panels: list[tuple[str, list[tuple[str, str]]]] = []  # title, (attack, legend entry) each
    if len(order) > 1:
        best = {
            f: max((a for a in means if family_of[a] == f), key=score.__getitem__) for f in order
        }
        panels.append(("best of each family", [(best[f], f"{f}: {label[best[f]]}") for f in order]))
    for family in order:
        members = [(a, label[a]) for a in means if family_of[a] == family]
        parts = -(-len(members) // ROC_PANEL_ATTACKS)
        panels += [
            (
                family if parts == 1 else f"{family} ({k + 1}/{parts})",
                members[k * ROC_PANEL_ATTACKS : (k + 1) * ROC_PANEL_ATTACKS],
            )
            for k in range(parts)
        ]
    low = min((grid[0] for grid, _ in means.values()), default=1e-3)
    n_cols = min(ROC_COLUMNS, max(1, len(panels)))
    n_rows = max(1, -(-len(panels) // n_cols))
    # A bare Figure (no pyplot) needs no GUI backend and leaves no global state behind.
    figure = Figure(figsize=(ROC_PANEL[0] * n_cols, ROC_PANEL[1] * n_rows))
    colours = colormaps["tab10"].colors
    for index, (name, entries) in enumerate(panels, start=1):
        axes = figure.add_subplot(n_rows, n_cols, index)
        for k, (attack, entry) in enumerate(entries):
            axes.plot(*means[attack], color=colours[k % len(colours)], linewidth=1.2, label=entry)
        axes.plot([low, 1.0], [low, 1.0], "k--", linewidth=0.8, label="chance")
        axes.set(
            xscale="log",
            yscale="log",
            xlim=(low, 1.0),
            ylim=(low, 1.0),
            xlabel="False positive rate",
            ylabel="True positive rate",
            title=name,
        )
        decade_ticks(axes, low)
        axes.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.2),
            fontsize=LEGEND_FONT,
            title="attack (AUROC)" if auroc else None,
            title_fontsize=LEGEND_FONT,
        )
    figure.suptitle(f"{title}: ROC from FPR {low:.1e}, the lowest the data measure")
    save_png(figure, path)


def decade_ticks(axes: Axes, low: float) -> None:
    """Ticks of both log axes at the powers of ten from `low` to 1, and at `low` itself (where
    the measured curves start) unless a power of ten lies within 0.4 decades of it; no minor
    ticks (they halved the drawing time of a log-log figure and mark nothing one reads).
    Labels that stay apart, also in the corner where the two axes meet."""
    decades = 10.0 ** np.arange(np.ceil(np.log10(low)), 1)
    ticks = [*([low] if np.log10(decades[0] / low) >= 0.4 else []), *decades]
    for axis in (axes.xaxis, axes.yaxis):
        axis.set_ticks(ticks, labels=[f"{tick:.2g}" for tick in ticks])
    axes.minorticks_off()


def save_png(figure: Figure, path: str | Path) -> None:
    """Write a PNG atomically, without the "Software" entry (matplotlib's version string), so
    only the drawing decides the bytes. The panels are laid out below the figure's title, if it
    has one (tight_layout alone lets the title cover the first row's titles)."""
    top = 1 - SUPTITLE_INCHES / figure.get_figheight() if figure.get_suptitle() else 1
    figure.tight_layout(rect=(0, 0, 1, top))
    write_with(
        path,
        lambda tmp: figure.savefig(tmp, format="png", dpi=FIGURE_DPI, metadata={"Software": None}),
    )


def save_placeholder(path: str | Path, title: str, message: str) -> None:
    """A small figure that says why there is nothing to draw (`message`), so that the rule's
    output exists whatever the config."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.0, 2.0))
    figure.text(0.5, 0.5, message, ha="center")
    figure.suptitle(title)
    save_png(figure, path)


def log_count_axis(
    axes: Axes, counts: Sequence[int], *, xlabel: str, ylabel: str | None, ylim: tuple, title: str
) -> None:
    """A panel whose x axis is a count on a log scale, ticked at the counts drawn."""
    axes.set_xscale("log")
    axes.set_xticks(counts, labels=[str(c) for c in counts])
    axes.minorticks_off()
    axes.set(ylim=ylim, xlabel=xlabel, ylabel=ylabel, title=title)


def layout_problems(figure: Figure) -> list[str]:
    """What makes `figure` hard to read whatever its data: a legend, tick label or text (title,
    axis label, annotation) that leaves the canvas, or a legend or tick label that overlaps
    another legend, tick label or text. Drawn as `save_png` would; empty when the layout is
    sound. The tests hold every figure of the report to it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure).draw()
    renderer = figure.canvas.get_renderer()
    legends = [*figure.legends, *(a.get_legend() for a in figure.axes if a.get_legend())]
    ticks, texts = [], []
    for axes in figure.axes:
        for axis, side in ((axes.xaxis, 0), (axes.yaxis, 1)):
            low, high = axes.bbox.extents[side] - 1, axes.bbox.extents[side + 2] + 1
            for label in axis.get_ticklabels(which="both"):
                # labels of ticks outside the view limits are kept by matplotlib, not drawn
                at = label.get_transform().transform(label.get_position())[side]
                if label.get_text() and low <= at <= high:
                    ticks.append((f"tick label {label.get_text()!r}", label))
        texts += [axes.title, axes.xaxis.label, axes.yaxis.label, *axes.texts]
    texts += [*figure.texts, *([figure._suptitle] if figure._suptitle else [])]
    boxes = [
        (f"legend {k}", legend.get_window_extent(renderer)) for k, legend in enumerate(legends)
    ]
    boxes += [(name, label.get_window_extent(renderer)) for name, label in ticks]
    checked = len(boxes)  # legends and tick labels: none may overlap anything
    boxes += [
        (f"text {t.get_text()!r}", t.get_window_extent(renderer))
        for t in texts
        if t.get_visible() and t.get_text()
    ]
    canvas = figure.bbox.padded(1)
    problems = [
        f"{name} leaves the canvas"
        for name, box in boxes
        if not (
            canvas.containsx(box.x0)
            and canvas.containsx(box.x1)
            and canvas.containsy(box.y0)
            and canvas.containsy(box.y1)
        )
    ]
    for i, (name, box) in enumerate(boxes[:checked]):
        for other, other_box in boxes[i + 1 :]:
            if box.overlaps(other_box):
                problems.append(f"{name} overlaps {other}")
    return problems


def small_legend(axes: Axes, **options: Any) -> None:
    """A legend in LEGEND_FONT, only when something on `axes` has a label: matplotlib would
    otherwise warn and draw an empty box."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=LEGEND_FONT, **options)


def plot_mean_band(
    axes: Axes, x: Any, mean: Any, low: Any, high: Any, color: Any, **line: Any
) -> None:
    """A line of means over a shaded band of the same colour from `low` to `high` (min and max
    over runs or repeats), so the spread is seen without hiding the other lines."""
    axes.plot(x, mean, color=color, linewidth=1.2, **line)
    axes.fill_between(x, low, high, color=color, alpha=0.12, linewidth=0)


def plot_auroc_vs_gap(
    metrics: pd.DataFrame, models: pd.DataFrame, families: Mapping[str, str], path: str | Path
) -> None:
    """TDDBench Fig. 2: AUROC of each target model against its train − test accuracy gap, one
    point per (experiment, attack, repeat), coloured by attack family."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    targets = models[models["role"] == "target"]
    gaps = pd.DataFrame(
        {
            "dataset": targets["dataset"],
            "target_model": targets["arch"],
            "repeat": targets["model_id"].str.rsplit("-", n=1).str[-1].astype(int),
            "gap": targets["train_acc"] - targets["test_acc"],
        }
    )
    auroc = metrics[metrics["metric"] == "auroc"].merge(
        gaps, on=["dataset", "target_model", "repeat"]
    )
    figure = Figure(figsize=FIGURE_SIZE)
    axes = figure.add_subplot()
    colours = colormaps["tab10"].colors
    for k, (family, points) in enumerate(auroc.groupby(auroc["attack"].map(families), sort=True)):
        axes.scatter(
            points["gap"],
            points["value"],
            s=10,
            alpha=0.6,
            label=family,
            color=colours[k % len(colours)],
        )
    axes.axhline(0.5, color="k", linestyle="--", linewidth=0.8)
    axes.set(
        xlabel="Target train − test accuracy",
        ylabel="AUROC",
        title="Attack AUROC against the target's generalisation gap",
    )
    axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small")
    save_png(figure, path)


def plot_scaling_sweep(sweep: pd.DataFrame, path: str | Path, title: str) -> None:
    """TDDBench Fig. 4: AUROC (mean ± std over target models) against the number of reference
    models and, in a second panel below, of queries, one line per attack (one above the other,
    so the figure stays as wide as the report)."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    axes_names = [a for a in ("reference models", "queries") if a in set(sweep["axis"])] or [
        "reference models"
    ]
    figure = Figure(figsize=(FIGURE_SIZE[0], FIGURE_SIZE[1] * len(axes_names)))
    colours = colormaps["tab20"].colors
    for k, axis in enumerate(axes_names, start=1):
        axes = figure.add_subplot(len(axes_names), 1, k)
        rows = sweep[sweep["axis"] == axis]
        for j, (attack, runs) in enumerate(rows.groupby("attack", sort=True)):
            stats = runs.groupby("count")["auroc"].agg(["mean", "std"]).reset_index()
            axes.errorbar(
                stats["count"],
                stats["mean"],
                yerr=stats["std"].fillna(0.0),
                label=attack,
                color=colours[j % len(colours)],
                marker="o",
                markersize=3,
                linewidth=1.2,
                capsize=2,
            )
        counts = sorted(rows["count"].unique())
        axes.set(xscale="log", xlabel=f"Number of {axis}", ylabel="AUROC", title=title)
        if counts:
            axes.set_xticks(counts, labels=[str(c) for c in counts])
            axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=LEGEND_FONT)
        axes.minorticks_off()
    save_png(figure, path)


def _draw_risk_cdf(axes: Any, risk: np.ndarray, **style: Any) -> None:
    """The empirical CDF of risk scores as a step line from (0, 0) to (1, 1)."""
    from miaflow.attacks.song_mittal import risk_cdf

    values, cdf = risk_cdf(risk)
    axes.step(
        np.concatenate([[0.0], values, [1.0]]),
        np.concatenate([[0.0], cdf, [1.0]]),
        where="post",
        **style,
    )


def plot_risk_cdf(scores: pd.DataFrame, path: str | Path, title: str) -> None:
    """Empirical CDF of privacy risk scores over the target's members and non-members (pooled
    over repeats) of one dataset/target model: the further apart, the more members stand out."""
    from matplotlib.figure import Figure

    risk = scores[scores["attack"] == "sm-risk"]
    if len(risk[["dataset", "target_model"]].drop_duplicates()) > 1:
        raise ValueError("plot_risk_cdf draws one dataset/target model; filter `scores` first")
    figure = Figure(figsize=(5.0, 4.0))
    axes = figure.add_subplot()
    for is_member, label, colour in [
        (True, "members", "tab:red"),
        (False, "non-members", "tab:blue"),
    ]:
        values = risk.loc[risk["is_member"] == is_member, "score"].to_numpy()
        _draw_risk_cdf(axes, values, label=f"{label} (n = {len(values)})", color=colour)
    axes.set(
        xlim=(0, 1),
        ylim=(0, 1.01),
        xlabel="Privacy risk score",
        ylabel="Cumulative fraction",
        title=title,
    )
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
            axes.annotate(
                row["defense"],
                (row["test_acc"], row["best_tpr_at_1pct_fpr"]),
                fontsize="x-small",
                xytext=(3, 3),
                textcoords="offset points",
            )
        axes.set(
            xlabel="Test accuracy of the target",
            ylabel="Best attack's TPR at 1% FPR",
            title=f"Defenses: {dataset}",
        )
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
            mine = members[
                (members["dataset"] == dataset) & (members["target_model"] == row.target_model)
            ]
            if mine.empty:
                continue
            _draw_risk_cdf(axes, mine["score"].to_numpy(), label=row.defense)
        axes.set(
            xlim=(0, 1),
            ylim=(0, 1.01),
            xlabel="Privacy risk score of members",
            ylabel="Cumulative fraction",
            title=f"Risk by defense: {dataset}",
        )
        axes.legend(loc="upper left", fontsize=LEGEND_FONT)
    save_png(figure, path)


def legend_pixels(figure: Figure) -> float:
    """The height in pixels of the smallest legend text of `figure` as the report shows it: its
    font size at FIGURE_DPI, scaled down where the figure is wider than REPORT_WIDTH_PX (inf
    without a legend). The tests hold every figure of the report to a legible size."""
    width = figure.get_figwidth() * FIGURE_DPI
    scale = min(1.0, REPORT_WIDTH_PX / width)
    sizes = [
        text.get_fontsize()
        for axes in figure.axes
        if (legend := axes.get_legend()) is not None
        for text in legend.get_texts()
    ]
    return min(sizes, default=float("inf")) * FIGURE_DPI / 72 * scale
