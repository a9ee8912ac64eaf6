"""Tables and figures of the membership-inference attacks on language models.

The main table has the layout of the EM-MIA paper (Kim et al., "Detecting training data of large
language models via expectation maximization"): one row per attack, and per dataset/target model
its AUROC and TPR at low FPR, so label-free attacks, attacks that use known non-member texts and
oracles (which use the true membership labels) can be compared on one page. The marks after the
attack names keep the last two from being read as fair competitors of the first.

Inputs:

* `metrics`: the project's long metrics table (`miaflow.evaluation.metrics.METRICS_COLUMNS`), all
  attacks of all experiments; the language-model attacks are those listed in `knowledge`;
* `knowledge`: attack id -> "none" (label-free), "shots" (known non-member texts: prefix shots,
  a population, a reference corpus), "members" (known member texts) or "oracle" (true
  membership labels), from the attack registry;
* `iterates`: EM-MIA's AUROC after each of its iterations (iteration 0: the initial scores), a
  diagnostic computed with the true labels;
* `prefix_fit`: per experiment and repeat, the share of scored targets whose ReCaLL prefix lost
  shots to the context (`cut_share`, `miaflow.attacks.llm_inputs.PREFIX_FIT_COLUMNS`).

Table builders return DataFrames of display strings and put their caption in
`table.attrs["caption"]`, for `miaflow.evaluation.tables.write_table`. Means and standard
deviations are over repeats, ddof = 1. Figures follow `miaflow.evaluation.plots`: matplotlib is
imported inside each function, drawing uses a bare `Figure`, and PNGs carry no software version,
so identical inputs give byte-identical files. Every function also accepts inputs without any
language-model row, because the workflow writes these files whether or not a language-model
experiment is configured.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from miaflow.evaluation.plots import PANEL_SIZE, plot_mean_band, save_png, small_legend
from miaflow.evaluation.tables import MISSING, TRACED, count_range, mean_std_cell

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# Label-free attacks in the order of the EM-MIA paper's tables; EM-MIA's variants follow, sorted.
LABEL_FREE = (
    "llm-loss",
    "llm-zlib",
    "llm-lowercase",
    "llm-mink",
    "llm-minkpp",
    "llm-ref",
    "llm-neighbor",
    "llm-recall-avg",
    "llm-recall-avgp",
    "em-mia",
    # the recent attacks (docs/algorithms.md#recent-language-model-attacks)
    "llm-pac",
    "llm-samia",
    "llm-samia-zlib",
    "llm-ezmia",
)
SHOTS = (
    "llm-recall",
    "llm-blind-shots",
    "llm-blind-bow",
    "llm-dcpdd",
    "llm-camia",
    "llm-camia-fisher",
)
MEMBERS = ("llm-conrecall",)
# Attacks scored with ReCaLL's shot prefix: their rows carry the prefix-cut column.
PREFIXED = ("llm-recall",)
BLIND_PREFIX = "llm-blind"
PREFIX_CUT = "prefix cut"
ORACLES = ("llm-recall-toppref", "llm-recall-randm", "llm-recall-randnm")
ATTACK_ORDER = (*LABEL_FREE, *SHOTS, *MEMBERS, *ORACLES)
EM_VARIANT_PREFIX = "em-mia-"
# What an attack knows; the last kind is no attack: what a labelled model-free classifier of the
# texts gets on the selection (`miaflow.llm.separability.SELECTION`), shown beside the attacks.
KNOWLEDGE_ORDER = ("none", "shots", "members", "oracle", "selection")
KNOWLEDGE_MARKS = {"none": "", "shots": "‡", "members": "§", "oracle": "†", "selection": "¶"}
MARKS_CAPTION = (
    "† oracle: uses true membership labels; ‡ uses known non-member texts (prefix shots, a "
    "population or reference corpus); § uses known member texts (Con-ReCall's prefix); "
    "¶ not an attack: the AUROC a labelled model-free classifier of the texts reaches "
    "(cross-fitted), what the member/non-member selection alone gives."
)
DEFAULT_METRICS = ("auroc", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr")
# Min-K% and Min-K%++ at k = 20% are `llm-mink` and `llm-minkpp`; the sweep adds "-k<percent>".
SWEEP_SUFFIX = re.compile(r"-k\d+$")
SWEEP_ID = re.compile(r"(llm-minkpp|llm-mink)-k(\d+)")
SWEEP_FAMILIES = {"llm-mink": "Min-K%", "llm-minkpp": "Min-K%++"}
BASE_K = 0.2
CHANCE_AUROC = 0.5
NO_EXPERIMENTS = "no language-model experiments"
DIAGNOSTIC = "diagnostic: uses true labels"
_TPR_METRIC = re.compile(r"tpr_at_(.+)pct_fpr")


# --- helpers --------------------------------------------------------------------------------------


def metric_label(metric: str) -> str:
    """ "auroc" -> "AUROC", "tpr_at_1pct_fpr" -> "TPR@1%": the paper's column headers; other
    metric names are shown as they are."""
    if metric == "auroc":
        return "AUROC"
    match = _TPR_METRIC.fullmatch(metric)
    return f"TPR@{match.group(1)}%" if match else metric


def is_sweep(attack: str) -> bool:
    """Whether `attack` is one point of a Min-K% sweep ("llm-mink-k50"): those have a table of
    their own and would crowd the main one."""
    return SWEEP_SUFFIX.search(attack) is not None


def attack_rank(attack: str, knowledge: Mapping[str, str]) -> tuple[int, int, str]:
    """Label-free attacks first, then those with known texts, then oracles (then the selection's
    row); within each, the paper's order, then EM-MIA's variants by name, then any other attack
    by name: every language-model table's order."""
    kind = knowledge[attack]
    if kind not in KNOWLEDGE_ORDER:
        raise ValueError(f"{attack}: unknown knowledge {kind!r}; expected one of {KNOWLEDGE_ORDER}")
    if attack in ATTACK_ORDER:
        return KNOWLEDGE_ORDER.index(kind), ATTACK_ORDER.index(attack), ""
    variant = attack.startswith(EM_VARIANT_PREFIX)
    return KNOWLEDGE_ORDER.index(kind), len(ATTACK_ORDER) + (0 if variant else 1), attack


def summary_table(
    rows: pd.DataFrame,
    keys: Sequence[str],
    metrics_shown: Sequence[str],
    knowledge: Mapping[str, str],
    sort_key: Callable[[pd.Series], tuple],
) -> pd.DataFrame:
    """One row per `keys` of long metrics rows: the attack's knowledge, `<metric>_mean` and
    `<metric>_std` (ddof = 1) of each metric shown and the repeats, ordered by `sort_key` of a
    row; with no rows, an empty table of `keys` and knowledge. The settings' and traps' tables."""
    wide = rows.groupby([*keys, "metric"])["value"].agg(["mean", "std", "count"]).unstack("metric")
    if wide.empty:
        return pd.DataFrame(columns=[*keys, "knowledge"])
    table = wide.index.to_frame(index=False)
    table["knowledge"] = [knowledge[a] for a in table["attack"]]
    for metric in metrics_shown:
        for stat in ("mean", "std"):
            table[f"{metric}_{stat}"] = wide[(stat, metric)].to_numpy()
    table["repeats"] = wide[("count", metrics_shown[0])].to_numpy().astype(int)
    order = sorted(range(len(table)), key=lambda i: sort_key(table.iloc[i]))
    return table.iloc[order].reset_index(drop=True)


def _experiments(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """The (dataset, target_model) pairs of `rows`, sorted."""
    return sorted(set(zip(rows["dataset"], rows["target_model"])))


def _stats(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean, std (ddof = 1) and count of `value` per `keys`."""
    return rows.groupby(keys, sort=True)["value"].agg(["mean", "std", "count"])


def _sweep_auroc(metrics: pd.DataFrame, knowledge: Mapping[str, str] | None = None) -> pd.DataFrame:
    """AUROC rows of Min-K% and Min-K%++ at every k, with columns dataset, target_model, family
    ("llm-mink" or "llm-minkpp"), k (a fraction), repeat, value. k = 0.2 comes from the base
    attack; a "-k20" sweep point, if one was also run, is dropped in its favour. With `knowledge`,
    only attacks it lists are taken."""
    auroc = metrics[metrics["metric"] == "auroc"]
    if knowledge is not None:
        auroc = auroc[auroc["attack"].isin(list(knowledge))]
    family, k, priority = [], [], []
    for attack in auroc["attack"]:
        match = SWEEP_ID.fullmatch(attack)
        if match:
            family.append(match.group(1))
            k.append(int(match.group(2)) / 100)
            priority.append(1)
        elif attack in SWEEP_FAMILIES:
            family.append(attack)
            k.append(BASE_K)
            priority.append(0)
        else:
            family.append(None)
            k.append(np.nan)
            priority.append(2)
    rows = auroc.assign(family=family, k=np.asarray(k, dtype=np.float64), priority=priority)
    rows = rows[rows["family"].notna()]
    keys = ["dataset", "target_model", "family", "k", "repeat"]
    rows = rows.sort_values([*keys, "priority"], kind="stable").drop_duplicates(keys, keep="first")
    return rows[[*keys, "value"]].reset_index(drop=True)


def _empty_figure(path: str | Path, title: str) -> None:
    """A figure that says there is nothing to draw, so the workflow's output exists regardless."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.0, 2.0))
    figure.text(0.5, 0.5, NO_EXPERIMENTS, ha="center", va="center")
    figure.suptitle(title)
    save_png(figure, path)


def _draw_spread(axes: Axes, stats: pd.DataFrame, line: int, label: str) -> None:
    """Line number `line` of a panel: the mean over repeats on a min–max band (`stats`: columns
    mean, min and max, indexed by x). Colours are tab20's ten dark shades, then its ten light
    ones, so the first ten lines get distinct hues (tab20 in its own order pairs each dark shade
    with a light one of the same hue); after twenty, lines are dashed."""
    from matplotlib import colormaps

    colours = list(colormaps["tab20"].colors)
    colours = colours[0::2] + colours[1::2]
    plot_mean_band(
        axes,
        stats.index,
        stats["mean"],
        stats["min"],
        stats["max"],
        colours[line % len(colours)],
        marker="o",
        markersize=3,
        linestyle=("-", "--")[line // len(colours) % 2],
        label=label,
    )


def _panel_grid(count: int, columns: int = 3) -> tuple[int, int]:
    """(rows, columns) of panels for `count` panels, at most `columns` wide."""
    n_cols = max(1, min(count, columns))
    return max(1, -(-count // n_cols)), n_cols


# --- tables ---------------------------------------------------------------------------------------


def llm_table(
    metrics: pd.DataFrame,
    knowledge: Mapping[str, str],
    metrics_shown: Sequence[str] = DEFAULT_METRICS,
    prefix_fit: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The EM-MIA paper's table: one row per language-model attack, one column per
    "dataset/target_model metric" (e.g. "wikimia/pythia_160m TPR@1%"), cells "mean ± std" over
    repeats, MISSING where an attack did not run on an experiment.

    Rows are the attacks in `knowledge` that have metrics, without the Min-K% sweep points
    (`mink_sweep_table` has those): label-free attacks, then attacks with non-member shots (‡),
    then oracles (†), each group in the paper's order; the `knowledge` column repeats the group.
    With `prefix_fit`, a "dataset/target_model prefix cut" column per experiment gives, on the
    rows of attacks scored with ReCaLL's prefix, the share of targets whose prefix lost shots to
    the context (0 = every target had all of them), so a ReCaLL AUROC on cut prefixes is seen.
    """
    shown = list(metrics_shown)
    rows = metrics[metrics["attack"].isin([a for a in knowledge if not is_sweep(a)])]
    experiments = _experiments(rows)
    attacks = sorted(set(rows["attack"]), key=lambda a: attack_rank(a, knowledge))
    keys = ["attack", "dataset", "target_model", "metric"]
    stats = _stats(rows[rows["metric"].isin(shown)], keys)
    table = pd.DataFrame({"attack": [f"{a}{KNOWLEDGE_MARKS[knowledge[a]]}" for a in attacks]})
    show_cut = prefix_fit is not None and any(a in PREFIXED for a in attacks)
    if show_cut:
        fits = prefix_fit.rename(columns={"cut_share": "value"})
        cuts = _stats(fits.astype({"value": "float64"}), ["dataset", "target_model"])
    for dataset, model in experiments:
        for metric in shown:
            table[f"{dataset}/{model} {metric_label(metric)}"] = [
                mean_std_cell(stats, (a, dataset, model, metric)) for a in attacks
            ]
        if show_cut:
            table[f"{dataset}/{model} {PREFIX_CUT}"] = [
                mean_std_cell(cuts, (dataset, model)) if a in PREFIXED else "" for a in attacks
            ]
    table["knowledge"] = [knowledge[a] for a in attacks]
    title = "Membership inference on language models"
    if table.empty:
        table.attrs["caption"] = f"{title}: {NO_EXPERIMENTS}."
        return table
    table.attrs["caption"] = (
        f"{title}: {', '.join(map(metric_label, shown))} of each attack (rows) per "
        "dataset/target model (columns), mean ± standard deviation over "
        f"{count_range(stats['count'])} repeats (member/non-member draws and seeds), std with "
        f"ddof = 1; {MISSING} where the attack was not run or the non-members do not resolve "
        f"the FPR. {MARKS_CAPTION} Min-K% and Min-K%++ are at k = 20%; other k are in the Min-K% "
        f"sweep table. {TRACED}"
    )
    if any(a.startswith(BLIND_PREFIX) for a in attacks):
        table.attrs["caption"] += (
            f" The {BLIND_PREFIX}-* baselines never query the target model (they read the texts "
            "and the shots only): their AUROC is what the selection of members and non-members "
            "gives by itself (0.5 on a random draw)."
        )
    if show_cut:
        table.attrs["caption"] += (
            f" {PREFIX_CUT}: share of scored targets whose ReCaLL prefix lost shots to the "
            f"context (llm.max_length), mean ± std over repeats; 0 = every target had all "
            "llm.n_shots shots."
        )
    return table


def mink_sweep_table(metrics: pd.DataFrame, knowledge: Mapping[str, str]) -> pd.DataFrame:
    """AUROC of Min-K% and Min-K%++ against k, the fraction of lowest-scored tokens averaged: one
    row per k, columns "dataset/target_model Min-K%" and "... Min-K%++", cells "mean ± std" over
    repeats. k = 0.2 is `llm-mink` / `llm-minkpp`, the attacks of the main table, so the sweep
    shows whether that default is near the best k."""
    rows = _sweep_auroc(metrics, knowledge)
    stats = _stats(rows, ["dataset", "target_model", "family", "k"])
    ks = sorted(set(rows["k"]))
    table = pd.DataFrame({"k": ks})
    for dataset, model in _experiments(rows):
        for family, name in SWEEP_FAMILIES.items():
            table[f"{dataset}/{model} {name}"] = [
                mean_std_cell(stats, (dataset, model, family, k)) for k in ks
            ]
    title = (
        "AUROC of Min-K% and Min-K%++ against k, the fraction of tokens with the lowest "
        "scores that are averaged"
    )
    if table.empty:
        table.attrs["caption"] = f"{title}: {NO_EXPERIMENTS}."
        return table
    table.attrs["caption"] = (
        f"{title}, per dataset/target model: mean ± standard deviation over "
        f"{count_range(stats['count'])} repeats, std with ddof = 1; the k = 0.2 row is the "
        f"attacks llm-mink and llm-minkpp of the main table; {MISSING} where a k was not run."
    )
    return table


# --- figures --------------------------------------------------------------------------------------


def plot_em_iterations(history: pd.DataFrame, path: str | Path) -> None:
    """AUROC of each EM-MIA attack after each iteration (0: its initial scores), one panel per
    dataset/target model, the mean over repeats with a min–max band: shows whether the EM
    refinement improves on its initialisation and whether it has converged. The AUROC needs the
    true labels, so the figure is a diagnostic, never an input to the attack."""
    from matplotlib.figure import Figure

    title = f"EM-MIA AUROC per iteration ({DIAGNOSTIC})"
    experiments = _experiments(history)
    if not experiments:
        _empty_figure(path, title)
        return
    attacks = sorted(set(history["attack"]), key=lambda a: (a != "em-mia", a))
    n_rows, n_cols = _panel_grid(len(experiments))
    figure = Figure(figsize=(PANEL_SIZE[0] * n_cols + 2.0, PANEL_SIZE[1] * n_rows))
    for p, (dataset, model) in enumerate(experiments):
        axes = figure.add_subplot(n_rows, n_cols, p + 1)
        panel = history[(history["dataset"] == dataset) & (history["target_model"] == model)]
        for j, attack in enumerate(attacks):
            runs = panel[panel["attack"] == attack]
            if runs.empty:
                continue
            stats = runs.groupby("iteration", sort=True)["auroc"].agg(["mean", "min", "max"])
            _draw_spread(axes, stats, j, attack)
        axes.axhline(CHANCE_AUROC, color="k", linestyle="--", linewidth=0.8, label="chance")
        iterations = sorted(int(i) for i in panel["iteration"].unique())
        axes.set_xticks(iterations, labels=[str(i) for i in iterations])
        axes.set(
            xlabel="EM iteration (0: initial scores)",
            ylabel="AUROC" if p % n_cols == 0 else None,
            title=f"{dataset}/{model}",
        )
        if p == min(n_cols, len(experiments)) - 1:  # the right end of the first row
            small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.suptitle(title)
    save_png(figure, path)


def plot_mink_sweep(metrics: pd.DataFrame, path: str | Path) -> None:
    """AUROC of Min-K% (left) and Min-K%++ (right) against k, one line per dataset/target model,
    the mean over repeats with a min–max band; the dotted line marks k = 0.2, the default of the
    main table."""
    from matplotlib.figure import Figure

    title = "Min-K% and Min-K%++: AUROC against k"
    rows = _sweep_auroc(metrics)
    experiments = _experiments(rows)
    if not experiments:
        _empty_figure(path, title)
        return
    figure = Figure(figsize=(PANEL_SIZE[0] * len(SWEEP_FAMILIES) + 2.0, PANEL_SIZE[1]))
    for p, (family, name) in enumerate(SWEEP_FAMILIES.items()):
        axes = figure.add_subplot(1, len(SWEEP_FAMILIES), p + 1)
        for j, (dataset, model) in enumerate(experiments):
            runs = rows[
                (rows["dataset"] == dataset)
                & (rows["target_model"] == model)
                & (rows["family"] == family)
            ]
            if runs.empty:
                continue
            stats = runs.groupby("k", sort=True)["value"].agg(["mean", "min", "max"])
            _draw_spread(axes, stats, j, f"{dataset}/{model}")
        axes.axhline(CHANCE_AUROC, color="k", linestyle="--", linewidth=0.8, label="chance")
        axes.axvline(BASE_K, color="0.5", linestyle=":", linewidth=0.8)
        axes.set(
            xlim=(0.0, 1.05),
            xlabel="k (fraction of tokens)",
            ylabel="AUROC" if p == 0 else None,
            title=name,
        )
        if p == len(SWEEP_FAMILIES) - 1:
            small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.suptitle(title)
    save_png(figure, path)
