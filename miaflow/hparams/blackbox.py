"""The hyperparameter study's Fig. 6: the black-box setting, where the attacker's shadow heads
train on another backbone's features than the targets (docs/algorithms.md#black-box-setting).

A black-box setting attacks the very targets of its white-box twin (the same setting without
`shadow_backbone`, whose name is the black-box one's without its `_shadow_<backbone>` suffix:
`miaflow.plan.setting_name`), so the two settings' TPRs compare target by target: the
table gives each attack's mean TPR in both, the black-box one relative to the white-box one
(the paper: about −93% at 0.1% FPR), and KL-LiRA's black-box TPR relative to ACC-LiRA's (the
paper: +75%). A black-box setting without its twin in the run gets NaN there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from miaflow.evaluation.plots import PANEL_SIZE, save_png, small_legend
from miaflow.hparams.figures import ATTACK_COLOURS
from miaflow.hparams.tables import FULL_ATTACKS, format_epsilon, wrapped_name

COLUMNS = [
    "dataset",
    "setting",
    "white_box",
    "shadow_backbone",
    "epsilon",
    "fpr",
    "attack",
    "tpr_white_box",
    "tpr_black_box",
    "change",
    "over_acc_lira",
    "runs",
]


def _mean_tpr(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean TPR over runs of the full attacks' TD-HPO targets, and the number of runs."""
    rows = rows[(rows["hpo"] == "td") & rows["attack"].isin(FULL_ATTACKS)]
    keys = ["dataset", "setting", "backbone", "shadow_backbone", "epsilon", "fpr", "attack"]
    return rows.groupby(keys, sort=False).agg(tpr=("tpr", "mean"), runs=("run", "nunique"))


def twin_name(setting: str, shadow_backbone: str) -> str:
    """The white-box twin's name of a black-box setting (plan.setting_name's suffix removed)."""
    return setting.removesuffix(f"_shadow_{shadow_backbone}".replace("-", "_"))


def blackbox_table(study: pd.DataFrame) -> pd.DataFrame:
    """One row per black-box setting, ε, FPR level and attack: mean TPR (TD-HPO targets, over
    runs) with the shadows on the targets' backbone (`tpr_white_box`, the twin setting) and on
    the attacker's (`tpr_black_box`); `change` = black / white − 1; `over_acc_lira` = the
    attack's black-box TPR / ACC-LiRA's − 1. Empty when the run has no black-box setting."""
    means = _mean_tpr(study).reset_index()
    black = means[means["shadow_backbone"] != means["backbone"]].copy()
    white = means[means["shadow_backbone"] == means["backbone"]]
    black["white_box"] = [
        twin_name(s, b) for s, b in zip(black["setting"], black["shadow_backbone"])
    ]
    twins = white.rename(columns={"setting": "white_box", "tpr": "tpr_white_box"})
    table = black.rename(columns={"tpr": "tpr_black_box"}).merge(
        twins[["white_box", "epsilon", "fpr", "attack", "tpr_white_box"]],
        on=["white_box", "epsilon", "fpr", "attack"],
        how="left",
    )
    acc = table[table["attack"] == "acc-lira"].set_index(["setting", "epsilon", "fpr"])
    acc_tpr = table.set_index(["setting", "epsilon", "fpr"]).index.map(acc["tpr_black_box"])
    with np.errstate(divide="ignore", invalid="ignore"):
        table["change"] = (
            table["tpr_black_box"] / table["tpr_white_box"].where(table["tpr_white_box"] != 0) - 1.0
        )
        table["over_acc_lira"] = (
            table["tpr_black_box"]
            / np.where(acc_tpr.to_numpy(float) != 0, acc_tpr.to_numpy(float), np.nan)
            - 1.0
        )
    table["attack"] = pd.Categorical(table["attack"], FULL_ATTACKS, ordered=True)
    table = table.sort_values(
        ["setting", "epsilon", "fpr", "attack"], ascending=[True, False, True, True]
    )
    table["attack"] = table["attack"].astype(str)
    table = table.reindex(columns=COLUMNS).reset_index(drop=True)
    table["epsilon"] = table["epsilon"].map(format_epsilon)
    table.attrs["caption"] = (
        "The black-box setting: mean TPR over runs of LiRA, ACC-LiRA and KL-LiRA on the same "
        "TD-HPO targets with the shadow heads on the targets' backbone (white box, the twin "
        "setting) and on another backbone (black box, `shadow_backbone`); change = black / white "
        "− 1; over ACC-LiRA = the attack's black-box TPR / ACC-LiRA's − 1 (the paper: about "
        "−93% and +75% for KL-LiRA at 0.1% FPR)."
    )
    return table


def plot_blackbox(study: pd.DataFrame, path: str | Path, title: str) -> None:
    """One row of panels per (black-box setting, ε), one column per FPR level: per attack, the
    mean TPR with white-box shadows (solid) beside black-box shadows (hatched), over the same
    targets; the dashed line is chance (TPR = FPR). A run without black-box settings gets one
    panel saying so."""
    from matplotlib.figure import Figure

    table = blackbox_table(study)
    groups = table[["setting", "epsilon"]].drop_duplicates()
    levels = sorted(table["fpr"].unique())
    n_rows, n_cols = max(1, len(groups)), max(1, len(levels))
    figure = Figure(figsize=(PANEL_SIZE[0] * n_cols + 1.5, PANEL_SIZE[1] * n_rows))
    if table.empty:
        axes = figure.add_subplot(1, 1, 1)
        axes.text(0.5, 0.5, "no black-box setting in this run", ha="center", va="center")
        axes.set_axis_off()
    positions = np.arange(len(FULL_ATTACKS))
    for i, (setting, epsilon) in enumerate(groups.itertuples(index=False)):
        for j, level in enumerate(levels):
            axes = figure.add_subplot(n_rows, n_cols, i * n_cols + j + 1)
            cell = table[
                (table["setting"] == setting)
                & (table["epsilon"] == epsilon)
                & (table["fpr"] == level)
            ].set_index("attack")
            for position, attack in zip(positions, FULL_ATTACKS):
                if attack not in cell.index:
                    continue
                colour = ATTACK_COLOURS[attack]
                white, black = cell.loc[attack, ["tpr_white_box", "tpr_black_box"]]
                axes.bar(position - 0.2, white, 0.4, color=colour, label=f"{attack}, white box")
                axes.bar(
                    position + 0.2,
                    black,
                    0.4,
                    color="white",
                    edgecolor=colour,
                    hatch="//",
                    label=f"{attack}, black box",
                )
            axes.axhline(level, color="0.5", linestyle="--", linewidth=0.8, label="chance")
            axes.set_xticks(positions, labels=list(FULL_ATTACKS), fontsize="small")
            axes.set(
                ylim=(0.0, None),
                ylabel=f"TPR at {level * 100:g}% FPR",
                title=f"{wrapped_name(setting, 32)}, ε = {epsilon}",
            )
            if j == n_cols - 1:
                small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.suptitle(title)
    save_png(figure, path)
