"""The hyperparameter study's Fig. 5: LiRA, ACC-LiRA and KL-LiRA beside the attacks without
LiRA's shadow calibration (`miaflow.hparams.baselines`), TPR at each of the study's FPR levels.

Beside `miaflow.hparams.figures`, as its own figure's module; drawing follows
`miaflow.evaluation.plots`, so identical inputs give byte-identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from miaflow.evaluation.plots import PANEL_SIZE, save_png, small_legend
from miaflow.hparams.figures import ATTACK_COLOURS
from miaflow.hparams.tables import BASELINES, FULL_ATTACKS, format_epsilon, wrapped_name

if TYPE_CHECKING:
    from matplotlib.axes import Axes

BASELINE_COLOURS = {"ml-leaks": "tab:red", "attack-p": "tab:purple", "qmia": "tab:brown"}


def plot_baselines(study: pd.DataFrame, path: str | Path, title: str) -> None:
    """One row of panels per (setting, ε), one column per FPR level: a bar per attack, the mean
    TPR over runs of TD-HPO targets (where LiRA exists), with the runs' minimum and maximum as
    error bars; the dashed line is chance (TPR = FPR). A TPR of 0 is drawn as a flat bar labelled
    "0", a level the pooled non-members do not resolve is labelled "n.r." (not resolved); an
    attack absent from a cell gets no bar."""
    from matplotlib.figure import Figure

    attacks = [*FULL_ATTACKS, *BASELINES]
    colours = {**ATTACK_COLOURS, **BASELINE_COLOURS}
    rows = study[(study["hpo"] == "td") & study["attack"].isin(attacks)]
    summary = rows.groupby(["setting", "epsilon", "fpr", "attack"])["tpr"].agg(
        ["mean", "min", "max"]
    )
    groups = (
        rows[["setting", "epsilon"]]
        .drop_duplicates()
        .sort_values(["setting", "epsilon"], ascending=[True, False])
    )
    levels = sorted(rows["fpr"].unique())
    n_rows, n_cols = max(1, len(groups)), max(1, len(levels))
    figure = Figure(figsize=(PANEL_SIZE[0] * n_cols + 1.5, PANEL_SIZE[1] * n_rows))
    positions = np.arange(len(attacks))
    for i, (setting, epsilon) in enumerate(groups.itertuples(index=False)):
        for j, level in enumerate(levels):
            axes = figure.add_subplot(n_rows, n_cols, i * n_cols + j + 1)
            for position, attack in zip(positions, attacks):
                key = (setting, epsilon, level, attack)
                if key not in summary.index:
                    continue
                mean, low, high = summary.loc[key, ["mean", "min", "max"]]
                if np.isnan(mean) or mean == 0:
                    _label_flat_bar(axes, position, mean, colours[attack], attack)
                    continue
                axes.bar(
                    position,
                    mean,
                    yerr=[[mean - low], [high - mean]],
                    color=colours[attack],
                    capsize=2,
                    label=attack,
                )
            axes.axhline(level, color="0.5", linestyle="--", linewidth=0.8, label="chance")
            axes.set_xticks(positions, labels=attacks, rotation=45, ha="right", fontsize="small")
            axes.set(
                ylim=(0.0, None),
                ylabel=f"TPR at {level * 100:g}% FPR",
                title=f"{wrapped_name(setting, 32)}, ε = {format_epsilon(epsilon)}",
            )
            if j == n_cols - 1:
                small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.suptitle(title)
    save_png(figure, path)


def _label_flat_bar(axes: Axes, position: float, mean: float, colour: str, attack: str) -> None:
    """A bar of height 0 (or none, where the level is not resolved) cannot be seen: its (empty)
    bar, a thick line at 0 in the attack's colour, and its value written above it."""
    axes.bar(position, 0.0, color=colour, label=attack)
    axes.plot([position - 0.4, position + 0.4], [0, 0], color=colour, linewidth=3)
    text = "n.r." if np.isnan(mean) else "0"
    axes.annotate(
        text, (position, 0), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7
    )
