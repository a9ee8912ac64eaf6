"""Table and figure of dataset inference (Maini et al., NeurIPS 2024) on the language models.

The llm stage tests suspect sets of each trained target's members and of its non-members at
several sizes against validation sets of other non-members (`miaflow.llm.dataset_inference`):
IID with the suspects (`iid` True), or drawn from part of the corpus' classes only (`iid` False,
the shifted setting). The csv file is long: one row per test with its p-value (plain numbers);
the Markdown file and the figure show the rejection rate at α per size: the power on member
sets, the false-positive rate on non-member sets (which must stay near α when the IID assumption
holds, and does not when it fails).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from miaflow.evaluation.plots import (
    PANEL_SIZE,
    log_count_axis,
    save_placeholder,
    save_png,
    small_legend,
)

COLUMNS = [
    "dataset",
    "target_model",
    "target_repeat",
    "suspect",
    "size",
    "repeat",
    "iid",
    "p_value",
]
SUSPECTS = ("members", "non-members")
TITLE = "Dataset inference on the language models"
# The figure's lines: (suspect, iid) -> label and style.
LINES = {
    ("members", True): ("member sets, IID validation (power)", "C0", "-"),
    ("non-members", True): ("non-member sets, IID validation (false positives)", "C1", "-"),
    ("members", False): ("member sets, shifted validation", "C0", ":"),
    ("non-members", False): ("non-member sets, shifted validation", "C1", ":"),
}


def inference_table(tests: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """The tests in COLUMNS, sorted by experiment, target, suspect, IID first, size and draw;
    its caption says how to read them at `alpha`."""
    table = tests[COLUMNS].copy() if len(tests) else pd.DataFrame(columns=COLUMNS)
    table = table.sort_values(
        ["dataset", "target_model", "target_repeat", "suspect", "iid", "size", "repeat"],
        ascending=[True, True, True, True, False, True, True],
        kind="stable",
    ).reset_index(drop=True)
    if table.empty:
        table.attrs["caption"] = f"{TITLE}: no trained language-model experiment tested."
        return table
    sizes = ", ".join(str(int(s)) for s in sorted(set(table["size"])))
    table.attrs["caption"] = (
        f"{TITLE} (Maini et al.): per target model (target_repeat), suspect sets of {sizes} of "
        "its members or of its non-members, each tested against as many other non-members "
        "(iid True) or against non-members of half the corpus' classes only (iid False, a "
        "validation set that is not IID); a linear model on MIA features learnt on half of "
        "each set, a one-sided Welch t-test on the other halves. p_value: small = the suspect "
        f"set was trained on. At α = {alpha:g}, member sets should reject (power) and "
        "non-member sets with an IID validation set should reject in about α of the draws."
    )
    return table


def rejection_rates(tests: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Per dataset, target model, suspect, iid and size: the tests, the share with p < `alpha`
    (over every target and draw) and the median p-value."""
    keys = ["dataset", "target_model", "suspect", "iid", "size"]
    if tests.empty:
        return pd.DataFrame(columns=[*keys, "tests", "rejected", "median_p"])
    grouped = tests.assign(rejected=tests["p_value"] < alpha).groupby(keys, sort=True)
    rates = grouped.agg(
        tests=("p_value", "size"), rejected=("rejected", "mean"), median_p=("p_value", "median")
    ).reset_index()
    return rates.sort_values(
        ["dataset", "target_model", "iid", "suspect", "size"],
        ascending=[True, True, False, True, True],
        kind="stable",
    ).reset_index(drop=True)


def inference_markdown(table: pd.DataFrame, alpha: float) -> str:
    """The caption, then per dataset/target the rejection rate at `alpha` of each kind of suspect
    set (rows) per size (columns), with the number of tests."""
    lines = [table.attrs["caption"], ""]
    rates = rejection_rates(table, alpha)
    for (dataset, target), experiment in rates.groupby(["dataset", "target_model"], sort=False):
        sizes = sorted(set(experiment["size"]))
        kinds = list(dict.fromkeys(zip(experiment["suspect"], experiment["iid"])))
        cells = experiment.set_index(["suspect", "iid", "size"])
        shown = pd.DataFrame(
            {"suspect sets": [f"{s}, {'IID' if iid else 'shifted'}" for s, iid in kinds]}
        )
        for size in sizes:
            shown[f"n = {int(size)}"] = [_rate(cells, (s, iid, size)) for s, iid in kinds]
        lines += [
            f"## {dataset} / {target}: share of tests with p < {alpha:g} (tests)",
            "",
            shown.to_markdown(index=False),
            "",
        ]
    return "\n".join(lines)


def _rate(cells: pd.DataFrame, key: tuple[str, bool, int]) -> str:
    if key not in cells.index:
        return "–"
    return f"{cells.at[key, 'rejected']:.2f} ({int(cells.at[key, 'tests'])})"


def plot_inference(table: pd.DataFrame, alpha: float, path: str | Path) -> None:
    """The rejection rate at `alpha` against the suspect set's size, one panel per
    dataset/target: member sets (power) and non-member sets (false positives), against IID
    (solid) and shifted (dotted) validation sets; the dashed line is α."""
    from matplotlib.figure import Figure

    title = f"Dataset inference: share of suspect sets rejected at α = {alpha:g}"
    rates = rejection_rates(table, alpha)
    panels = list(dict.fromkeys(zip(rates["dataset"], rates["target_model"])))
    if not panels:
        save_placeholder(path, title, "no trained language-model experiment tested")
        return
    figure = Figure(figsize=(PANEL_SIZE[0] * 1.2 * len(panels) + 3.2, PANEL_SIZE[1] * 1.2))
    for p, (dataset, target) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), p + 1)
        mine = rates[(rates["dataset"] == dataset) & (rates["target_model"] == target)]
        for (suspect, iid), (label, colour, style) in LINES.items():
            rows = mine[(mine["suspect"] == suspect) & (mine["iid"] == iid)]
            if not rows.empty:
                axes.plot(
                    rows["size"],
                    rows["rejected"],
                    color=colour,
                    linestyle=style,
                    marker="o",
                    markersize=3,
                    label=label,
                )
        axes.axhline(alpha, color="k", linestyle="--", linewidth=0.8, label=f"α = {alpha:g}")
        sizes = sorted(int(s) for s in set(mine["size"]))
        log_count_axis(
            axes,
            sizes,
            xlabel="texts per suspect set",
            ylabel="share rejected" if p == 0 else None,
            ylim=(-0.02, 1.02),
            title=f"{dataset}/{target}",
        )
        if p == len(panels) - 1:
            small_legend(axes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.suptitle(title)
    save_png(figure, path)


def write_inference(
    tests: pd.DataFrame, alpha: float, stem: str | Path, figure: str | Path
) -> None:
    """The tests' table (`inference_table`, csv/md/tex at `stem`, the md file its rejection
    rates) and its figure (`plot_inference`)."""
    from miaflow.evaluation.tables import write_table

    table = inference_table(tests, alpha)
    write_table(table, stem, table.attrs["caption"], inference_markdown(table, alpha))
    plot_inference(table, alpha, figure)
