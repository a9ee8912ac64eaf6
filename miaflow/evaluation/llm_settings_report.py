"""Table and figure of the language-model attacks on EM-MIA's benchmark settings.

The EM-MIA paper (Kim et al.) reports its OLMoMIA benchmark as one table: methods (rows) against
settings (random, easy, medium, hard, mix-1, mix-2) at each text length, AUROC and TPR at 1% FPR.
Here each setting of a target is an experiment of its own in the metrics, labelled
"<target>/<setting>" or "<target>/<setting>/<L>w" (`miaflow.llm.settings.label`); these functions
read those rows back into that shape. The csv file is long (one row per experiment, length,
setting and attack, mean and std over repeats, ddof = 1); the Markdown file shows the paper's
layout. Like `miaflow.evaluation.llm_report`, every function accepts metrics without any
settings row, and figures are byte-reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from miaflow.evaluation.llm_report import (
    EM_VARIANT_PREFIX,
    KNOWLEDGE_MARKS,
    MARKS_CAPTION,
    attack_rank,
    is_sweep,
    metric_label,
    summary_table,
)
from miaflow.evaluation.metrics import METRICS_COLUMNS
from miaflow.evaluation.plots import PANEL_SIZE, save_placeholder, save_png
from miaflow.evaluation.tables import MISSING, count_range, format_mean_std
from miaflow.llm.separability import FORMS, SELECTION
from miaflow.llm.settings import SETTINGS, parse_label

SETTING_METRICS = ("auroc", "tpr_at_1pct_fpr")
WHOLE_TEXTS = "whole texts"
KEYS = ["dataset", "target_model", "length", "setting", "attack"]
TITLE = "Membership inference on EM-MIA's benchmark settings"


def is_setting(target_models: pd.Series) -> np.ndarray:
    """Which metrics rows (their target_model) belong to a benchmark setting."""
    return np.array([parse_label(t) is not None for t in target_models], bool)


def beside_attacks(
    metrics: pd.DataFrame, setting_metrics: pd.DataFrame, selection: pd.DataFrame | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The experiments' and the settings' metrics with the selection's AUROC rows (attack
    `miaflow.llm.separability.SELECTION`, knowledge "selection") of each added where the tables
    and the figure show them, beside the attacks."""
    if selection is None or selection.empty:
        return metrics, setting_metrics
    on_setting = is_setting(selection["target_model"])
    return (
        pd.concat([metrics, selection[~on_setting]], ignore_index=True),
        pd.concat([setting_metrics, selection[on_setting]], ignore_index=True),
    )


def selection_metrics(separable: pd.DataFrame) -> pd.DataFrame:
    """The separability of every experiment of `separable` (`selection_scores`) as rows of the
    long metrics table (`metrics.METRICS_COLUMNS`): attack `SELECTION`, metric "auroc", one row
    per repeat, the form with the higher mean AUROC (as `selection_table` chooses it)."""
    from sklearn.metrics import roc_auc_score

    keys = ["dataset", "target_model", "form", "repeat"]
    aurocs = (
        separable.groupby(keys, sort=True)
        .apply(lambda s: roc_auc_score(s["is_member"], s["score"]), include_groups=False)
        .rename("value")
        .reset_index()
    )
    experiment = ["dataset", "target_model"]
    means = aurocs.groupby([*experiment, "form"], as_index=False)["value"].mean()
    means["order"] = means["form"].map(FORMS.index)  # the first of FORMS on equal means
    best = means.sort_values([*experiment, "value", "order"], ascending=[True, True, False, True])
    chosen = best.groupby(experiment).head(1)[[*experiment, "form"]]
    kept = aurocs.merge(chosen, on=[*experiment, "form"])
    return kept.assign(attack=SELECTION, metric="auroc", ci_low=np.nan, ci_high=np.nan)[
        METRICS_COLUMNS
    ].reset_index(drop=True)


def _length_name(length: int | None) -> str:
    return WHOLE_TEXTS if length is None else f"{length} words"


def _length_rank(name: str) -> int:
    return 0 if name == WHOLE_TEXTS else int(name.split()[0])


def settings_table(
    metrics: pd.DataFrame,
    knowledge: Mapping[str, str],
    metrics_shown: Sequence[str] = SETTING_METRICS,
) -> pd.DataFrame:
    """One row per (dataset, target, length, setting, attack) of the settings' metrics rows:
    `<metric>_mean`, `<metric>_std` (ddof = 1) of each metric shown, the repeats, the attack's
    knowledge; settings in the paper's order, attacks in the main table's."""
    rows = metrics[is_setting(metrics["target_model"]) & metrics["attack"].isin(list(knowledge))]
    rows = rows[rows["metric"].isin(list(metrics_shown))]
    parsed = [parse_label(t) for t in rows["target_model"]]
    rows = rows.assign(
        target_model=[p[0] for p in parsed],
        setting=[p[1] for p in parsed],
        length=[_length_name(p[2]) for p in parsed],
    )
    table = summary_table(
        rows,
        KEYS,
        metrics_shown,
        knowledge,
        lambda row: (
            row["dataset"],
            row["target_model"],
            _length_rank(row["length"]),
            SETTINGS.index(row["setting"]),
            attack_rank(row["attack"], knowledge),
        ),
    )
    if table.empty:
        table.attrs["caption"] = f"{TITLE}: no language-model experiment with settings."
        return table
    table.attrs["caption"] = (
        f"{TITLE} (Kim et al.'s OLMoMIA settings: random, easy, medium, hard, mix-1, mix-2; "
        "members and non-members clustered on MiniLM embeddings, easy the farthest pair of "
        "clusters, hard the closest): "
        f"{', '.join(map(metric_label, metrics_shown))} of each attack per target, text length "
        f"and setting, mean and standard deviation over {count_range(table['repeats'])} repeats "
        f"(ddof = 1). Membership is exact in every setting: each target trained on all its "
        f"members. {MARKS_CAPTION}"
    )
    return table


def settings_markdown(table: pd.DataFrame) -> str:
    """The table in the paper's layout: per dataset/target, one row per attack (without the Min-K%
    sweep points), one column per (length, setting), cells "AUROC mean ± std (TPR@1% mean)"."""
    lines = [table.attrs["caption"], ""]
    if table.empty:
        return "\n".join(lines)
    table = table.loc[np.array([not is_sweep(a) for a in table["attack"]], bool)]
    for (dataset, target), experiment in table.groupby(["dataset", "target_model"], sort=False):
        columns = list(dict.fromkeys(zip(experiment["length"], experiment["setting"])))
        attacks = list(dict.fromkeys(experiment["attack"]))
        cells = experiment.set_index(["attack", "length", "setting"]).sort_index()
        kinds = dict(zip(experiment["attack"], experiment["knowledge"]))
        shown = pd.DataFrame({"attack": [f"{a}{KNOWLEDGE_MARKS[kinds[a]]}" for a in attacks]})
        for length, setting in columns:
            shown[f"{setting} ({length})"] = [_cell(cells, (a, length, setting)) for a in attacks]
        lines += [f"## {dataset} / {target}", "", shown.to_markdown(index=False), ""]
    return "\n".join(lines)


def _cell(cells: pd.DataFrame, key: tuple[str, str, str]) -> str:
    if key not in cells.index:
        return MISSING
    row = cells.loc[key]
    auroc = format_mean_std(float(row["auroc_mean"]), float(row["auroc_std"]))
    tpr = float(row["tpr_at_1pct_fpr_mean"])  # NaN: not resolved by the setting's non-members
    return f"{auroc} ({MISSING if np.isnan(tpr) else f'{tpr:.2f}'})"


def plot_settings(table: pd.DataFrame, path: str | Path) -> None:
    """AUROC (mean over repeats) of each attack (rows; the main table's attacks, without the
    Min-K% sweep and EM-MIA's other variants) on each setting (columns), one heat-map panel per
    dataset/target and text length, the value in every cell: whether attacks that sit at chance
    on random members separate easy ones."""
    from matplotlib.figure import Figure

    title = "AUROC on EM-MIA's benchmark settings"
    shown = table.loc[
        np.array(
            [not is_sweep(a) and not a.startswith(EM_VARIANT_PREFIX) for a in table["attack"]],
            bool,
        )
    ]
    panels = list(dict.fromkeys(zip(shown["dataset"], shown["target_model"], shown["length"])))
    if not panels:
        save_placeholder(path, title, "no language-model experiment with settings")
        return
    n_cols = min(2, len(panels))
    n_rows = -(-len(panels) // n_cols)
    attacks = list(dict.fromkeys(shown["attack"]))
    kinds = dict(zip(shown["attack"], shown["knowledge"]))
    names = [f"{a}{KNOWLEDGE_MARKS[kinds[a]]}" for a in attacks]
    height = max(PANEL_SIZE[1], 0.28 * len(attacks) + 1.2)
    figure = Figure(figsize=(PANEL_SIZE[0] * 1.4 * n_cols + 0.8, height * n_rows))
    for p, (dataset, target, length) in enumerate(panels):
        axes = figure.add_subplot(n_rows, n_cols, p + 1)
        mine = shown[
            (shown["dataset"] == dataset)
            & (shown["target_model"] == target)
            & (shown["length"] == length)
        ]
        settings = [s for s in SETTINGS if s in set(mine["setting"])]
        grid = (
            mine.pivot(index="attack", columns="setting", values="auroc_mean")
            .reindex(index=attacks, columns=settings)
            .to_numpy(np.float64)
        )
        image = axes.imshow(grid, cmap="RdBu_r", vmin=0.0, vmax=1.0, aspect="auto")
        for (i, j), value in np.ndenumerate(grid):
            if not np.isnan(value):
                # white on the saturated ends of the map (AUROC near 0 or 1), black elsewhere
                colour = "white" if abs(value - 0.5) > 0.3 else "black"
                axes.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6, color=colour)
        axes.set_xticks(range(len(settings)), labels=settings, fontsize=7)
        axes.set_yticks(range(len(attacks)), labels=names if p % n_cols == 0 else [], fontsize=7)
        axes.set_title(f"{dataset}/{target}, {length}", fontsize=9)
        if p % n_cols == n_cols - 1 or p == len(panels) - 1:
            figure.colorbar(image, ax=axes, label="AUROC", fraction=0.05)
    figure.suptitle(title)
    save_png(figure, path)
