"""Table and figure of the language-model attacks on copyright traps (Meeus et al., ICML 2024).

A trap experiment's targets train with generated traps inserted 1, 4, 16, ... times beside
twins that are never inserted (`miaflow.llm.traps`); each repetition count is an experiment of
its own in the trap metrics, labelled "<target>/r<count>" (`miaflow.llm.traps.group_label`).
These functions read those rows back as the memorisation curve: every attack's AUROC and TPR
at 1% FPR against the repetitions. The csv file is long (one row per experiment, attack and
repetition count, mean and std over repeats, ddof = 1, plain numbers); the Markdown file shows
attacks against repetitions. Like the other language-model reports, every function accepts
metrics without a trap row, and figures are byte-reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from miaflow.evaluation.llm_report import (
    CHANCE_AUROC,
    KNOWLEDGE_MARKS,
    MARKS_CAPTION,
    attack_rank,
    is_sweep,
    metric_label,
    summary_table,
)
from miaflow.evaluation.plots import (
    PANEL_SIZE,
    log_count_axis,
    save_placeholder,
    save_png,
    small_legend,
)
from miaflow.evaluation.tables import MISSING, count_range, format_mean_std
from miaflow.llm.traps import parse_group

TRAP_METRICS = ("auroc", "tpr_at_1pct_fpr")
TITLE = "Membership inference on copyright traps"
# The attacks the figure draws (the table has every one): each family's main score.
PLOTTED = (
    "llm-loss",
    "llm-zlib",
    "llm-mink",
    "llm-minkpp",
    "llm-ref",
    "llm-neighbor",
    "llm-recall",
    "em-mia",
    "llm-dcpdd",
    "llm-pac",
    "llm-conrecall",
    "llm-samia",
    "llm-camia",
    "llm-ezmia",
    "llm-blind-shots",
)
MARKERS = "osD^v<>px*hH+XdP"


def is_trap(target_models: pd.Series) -> np.ndarray:
    """Which metrics rows (their target_model) belong to a trap repetition group."""
    return np.array([parse_group(t) is not None for t in target_models], bool)


def traps_table(
    metrics: pd.DataFrame,
    knowledge: Mapping[str, str],
    metrics_shown: Sequence[str] = TRAP_METRICS,
) -> pd.DataFrame:
    """One row per (dataset, target, attack, repetitions) of the trap metrics rows:
    `<metric>_mean`, `<metric>_std` (ddof = 1) of each metric shown, the repeats, the attack's
    knowledge; repetitions ascending within each attack."""
    rows = metrics[is_trap(metrics["target_model"]) & metrics["attack"].isin(list(knowledge))]
    rows = rows[rows["metric"].isin(list(metrics_shown))]
    parsed = [parse_group(t) for t in rows["target_model"]]
    rows = rows.assign(target_model=[p[0] for p in parsed], repetitions=[int(p[1]) for p in parsed])
    keys = ["dataset", "target_model", "attack", "repetitions"]
    table = summary_table(
        rows,
        keys,
        metrics_shown,
        knowledge,
        lambda row: (
            row["dataset"],
            row["target_model"],
            attack_rank(row["attack"], knowledge),
            int(row["repetitions"]),
        ),
    )
    if table.empty:
        table.attrs["caption"] = f"{TITLE}: no language-model experiment with traps."
        return table
    counts = ", ".join(str(r) for r in sorted(set(table["repetitions"])))
    table.attrs["caption"] = (
        f"{TITLE} (Meeus et al.): generated traps inserted {counts} times into each target's "
        "training texts, against as many twins from the same generator never inserted; "
        f"{', '.join(map(metric_label, metrics_shown))} of each attack on the traps of each "
        f"repetition count and their twins, mean and standard deviation over "
        f"{count_range(table['repeats'])} target models (ddof = 1). Membership is exact and "
        f"drawn at random by construction: no selection shifts members from non-members. "
        f"{MARKS_CAPTION}"
    )
    return table


def traps_markdown(table: pd.DataFrame) -> str:
    """Per dataset/target, one row per attack (without the Min-K% sweep points), one column per
    repetition count, cells "AUROC mean ± std (TPR@1% mean)"."""
    lines = [table.attrs["caption"], ""]
    if table.empty:
        return "\n".join(lines)
    table = table.loc[np.array([not is_sweep(a) for a in table["attack"]], bool)]
    for (dataset, target), experiment in table.groupby(["dataset", "target_model"], sort=False):
        counts = sorted(set(experiment["repetitions"]))
        attacks = list(dict.fromkeys(experiment["attack"]))
        cells = experiment.set_index(["attack", "repetitions"])
        kinds = dict(zip(experiment["attack"], experiment["knowledge"]))
        shown = pd.DataFrame({"attack": [f"{a}{KNOWLEDGE_MARKS[kinds[a]]}" for a in attacks]})
        for count in counts:
            shown[f"{count}×"] = [_cell(cells, (a, count)) for a in attacks]
        lines += [f"## {dataset} / {target}", "", shown.to_markdown(index=False), ""]
    return "\n".join(lines)


def _cell(cells: pd.DataFrame, key: tuple[str, int]) -> str:
    if key not in cells.index:
        return MISSING
    row = cells.loc[key]
    auroc = format_mean_std(float(row["auroc_mean"]), float(row["auroc_std"]))
    return f"{auroc} ({float(row['tpr_at_1pct_fpr_mean']):.2f})"


def plot_traps(table: pd.DataFrame, path: str | Path) -> None:
    """AUROC (mean over the target models, the bars their standard deviation) of each family's
    main attack (PLOTTED) against the traps' repetitions (log scale), one panel per
    dataset/target: the memorisation curve, each attack's detectability as a text is seen more
    often. The dashed line is chance."""
    from matplotlib.figure import Figure

    title = "AUROC on copyright traps against their repetitions"
    shown = table[table["attack"].isin(PLOTTED)] if not table.empty else table
    panels = list(dict.fromkeys(zip(shown["dataset"], shown["target_model"])))
    if not panels:
        save_placeholder(path, title, "no language-model experiment with traps")
        return
    from matplotlib import colormaps

    palette = colormaps["tab20"].colors  # 20 colours: no two plotted attacks share one
    colours = {attack: palette[(2 * k) % 20 + (2 * k) // 20] for k, attack in enumerate(PLOTTED)}
    figure = Figure(figsize=(PANEL_SIZE[0] * 1.3 * len(panels) + 2.4, PANEL_SIZE[1] * 1.3))
    for p, (dataset, target) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), p + 1)
        mine = shown[(shown["dataset"] == dataset) & (shown["target_model"] == target)]
        for k, attack in enumerate(a for a in PLOTTED if a in set(mine["attack"])):
            rows = mine[mine["attack"] == attack].sort_values("repetitions")
            mark = KNOWLEDGE_MARKS[str(rows["knowledge"].iloc[0])]
            axes.errorbar(
                rows["repetitions"],
                rows["auroc_mean"],
                yerr=rows["auroc_std"].fillna(0.0),
                color=colours[attack],
                marker=MARKERS[k % len(MARKERS)],
                markersize=3,
                linewidth=1.0,
                capsize=2,
                label=f"{attack}{mark}",
            )
        counts = sorted(set(mine["repetitions"]))
        axes.axhline(CHANCE_AUROC, color="k", linestyle="--", linewidth=0.8)
        log_count_axis(
            axes,
            counts,
            xlabel="times each trap was inserted",
            ylabel="AUROC" if p == 0 else None,
            ylim=(0.0, 1.02),
            title=f"{dataset}/{target}",
        )
        if p == len(panels) - 1:
            small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.suptitle(title)
    save_png(figure, path)


def write_traps(
    metrics: pd.DataFrame, knowledge: Mapping[str, str], stem: str | Path, figure: str | Path
) -> None:
    """The traps table (`traps_table`, csv/md/tex at `stem`) and its figure (`plot_traps`)."""
    from miaflow.evaluation.tables import write_table

    table = traps_table(metrics, knowledge)
    write_table(table, stem, table.attrs["caption"], traps_markdown(table))
    plot_traps(table, figure)
