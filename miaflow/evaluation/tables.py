"""Paper tables (CSV + Markdown + LaTeX), written atomically; the figures are in `plots`, Song &
Mittal's tables in `song_mittal_tables`.

Table builders return a DataFrame of display strings and put their caption in
`table.attrs["caption"]`, so the caption is built from the same data as the cells; the cell and
caption helpers here serve every report's tables.
Outputs are deterministic: identical inputs give byte-identical files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from miaflow.evaluation.metrics import METRIC_NAMES
from miaflow.io import write_text
from miaflow.rule_io import Paths, table_stem

MISSING = "–"
_LATEX_SPECIALS = str.maketrans(
    {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}"}
)


def write_table(
    df: pd.DataFrame, stem: str | Path, caption: str, markdown: str | None = None
) -> None:
    """Write `stem.csv` (data), `stem.md` (`markdown`, by default the caption line, then the
    table) and `stem.tex`."""
    write_text(f"{stem}.csv", df.to_csv(index=False, lineterminator="\n"))
    write_text(f"{stem}.md", markdown or f"{caption}\n\n{df.to_markdown(index=False)}\n")
    # to_latex escapes the cells but not the caption, which often names metrics like tpr_at_1pct.
    latex = df.to_latex(index=False, escape=True, caption=caption.translate(_LATEX_SPECIALS))
    write_text(f"{stem}.tex", latex)


def write_outputs(table: pd.DataFrame, paths: Paths) -> None:
    """A table builder's table (its caption in `attrs`) to the files of one table output (a
    rule's `multiext(stem, ".csv", ".md", ".tex")`)."""
    write_table(table, table_stem(paths), table.attrs["caption"])


def format_mean_std(mean: float, std: float, digits: int = 3) -> str:
    """Format as "0.812 ± 0.013"; the mean alone when std is NaN (one repeat has no spread),
    MISSING when the mean itself is undefined."""
    if math.isnan(mean):
        return MISSING
    if math.isnan(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def mean_std_cell(stats: pd.DataFrame, key: tuple) -> str:
    """The "mean ± std" cell of row `key` of `stats` (columns mean and std, one row per cell),
    MISSING where there is no such row."""
    if key not in stats.index:
        return MISSING
    return format_mean_std(float(stats.at[key, "mean"]), float(stats.at[key, "std"]))


def _pivot_cells(
    summary: pd.DataFrame,
    index: str | list[str],
    columns: pd.Series,
    order: list[str] | None = None,
    suffix: Sequence[str] | None = None,
) -> pd.DataFrame:
    """A display table of `miaflow.evaluation.metrics.summary` rows: their "mean ± std" (and
    each row's `suffix`, when given) with one row per `index` and one column per value of
    `columns` (in `order` when given), MISSING where no summary row fills a cell."""
    display = [format_mean_std(m, s) for m, s in zip(summary["mean"], summary["std"])]
    if suffix is not None:
        display = [cell + mark for cell, mark in zip(display, suffix)]
    cells = summary.assign(column=columns, cell=display)
    table = cells.pivot(index=index, columns="column", values="cell")
    if order is not None:
        table = table.reindex(columns=order)
    return table.fillna(MISSING).rename_axis(columns=None).reset_index()


def count_range(counts: Iterable[int]) -> str:
    """The number of repeats (or runs) behind a table's cells, for its caption: "5", or "3–5"
    when cells rest on different numbers; "0" without any cell."""
    counts = [int(c) for c in counts]
    if not counts:
        return "0"
    low, high = min(counts), max(counts)
    return str(low) if low == high else f"{low}–{high}"


# Where every TPR at a fixed FPR of a table comes from, as its captions say.
TRACED = (
    "Each TPR's threshold, realized FPR and non-members, and the PPV columns' precision at "
    "membership priors: results/evaluate/operating_points.parquet."
)
# How the AUROC table marks each column's best and the attacks its test does not separate from
# it (`auroc_table`).
BEST_MARK, NOT_SEPARATED_MARK = " (best)", " (n.s.)"


def auroc_table(summary: pd.DataFrame, tests: pd.DataFrame | None = None) -> pd.DataFrame:
    """TDDBench Table-4 layout: one row per attack, one column per "dataset/target_model",
    cells "mean ± std" of AUROC over repeats. Takes `miaflow.evaluation.metrics.summary` output.
    With the tests of `miaflow.evaluation.stats.paired_tests`, each column's best is marked
    "(best)" and the attacks its vs-best DeLong test does not separate from it "(n.s.)": the
    verdicts' AUROC ranking (`miaflow.evaluation.verdicts`), which runs the same tests."""
    auroc = summary[summary["metric"] == "auroc"]
    column = auroc["dataset"] + "/" + auroc["target_model"]
    suffix = None
    if tests is not None:
        versus = tests[(tests["family"] == "vs-best") & (tests["metric"] == "auroc")]
        marks = {(d, t, a): BEST_MARK for d, t, a in zip(*_columns(versus, "attack_a"))}
        tied = versus[~versus["reject_delong"].astype(bool)]
        marks |= {key: NOT_SEPARATED_MARK for key in zip(*_columns(tied, "attack_b"))}
        keys = zip(auroc["dataset"], auroc["target_model"], auroc["attack"])
        suffix = [marks.get(key, "") for key in keys]
    table = _pivot_cells(auroc, "attack", column, suffix=suffix)
    table.attrs["caption"] = (
        "AUROC of each attack (rows) per dataset/target model (columns): mean ± standard deviation "
        f"over {count_range(auroc['n_repeats'])} target models (repeats), std with ddof = 1."
        + (
            ""
            if tests is None
            else " (best): the column's highest mean (the first by id among equal means); (n.s.): "
            "not separated from it by DeLong's one-sided test, Benjamini–Yekutieli-adjusted "
            "over the column at stats.alpha (results/tables/tests.md)."
        )
    )
    return table


def _columns(tests: pd.DataFrame, attack: str) -> tuple[pd.Series, pd.Series, pd.Series]:
    return tests["dataset"], tests["target_model"], tests[attack]


def accuracy_table(models: pd.DataFrame) -> pd.DataFrame:
    """Train and test accuracy of the target models per (dataset, arch), and the generalisation
    gap (train − test, per model), as mean ± std over target models: the gap explains leakage."""
    targets = models[models["role"] == "target"]
    targets = targets.assign(gap=targets["train_acc"] - targets["test_acc"])
    rows = [
        {
            "dataset": dataset,
            "arch": arch,
            "n_models": len(group),
            **{
                col: format_mean_std(group[col].mean(), group[col].std())
                for col in ("train_acc", "test_acc", "gap")
            },
        }
        for (dataset, arch), group in targets.groupby(["dataset", "arch"], sort=True)
    ]
    table = pd.DataFrame(
        rows, columns=["dataset", "arch", "n_models", "train_acc", "test_acc", "gap"]
    )
    table.attrs["caption"] = (
        "Target-model accuracy: mean ± standard deviation (ddof = 1) over target models; "
        "gap = train − test accuracy."
    )
    return table


# The questions of `miaflow.evaluation.stats.comparisons`, as the tests table introduces them.
QUESTIONS = {
    "family-best": "each attack family's best attack against the other families' bests",
    "vs-best": "the best attack against every other attack",
}
BY_GROUP = ["family", "dataset", "target_model", "metric"]  # one BY family of the tests table
TESTS_COLUMNS = [
    "family",
    "dataset",
    "target_model",
    "metric",
    "attack_a",
    "attack_b",
    "attack_family_a",
    "attack_family_b",
    "n_repeats",
    "n_samples",
    "mean_a",
    "mean_b",
    "mean_diff",
    "p_ttest_by",
    "p_perm_by",
    "p_delong_by",
    "min_p_perm_by",
    "sig",
]


def tests_table(tests: pd.DataFrame) -> pd.DataFrame:
    """The rows of `miaflow.evaluation.stats.paired_tests` with the adjusted p-values, in its
    order (experiment, metric, question, attack B by decreasing mean).

    `sig` marks the BY-adjusted rejections: "*" t-test, "†" permutation test, "‡" DeLong test.
    The caption says which families cannot reject at all (`min_p_perm_by` above alpha).
    """
    marks = [
        ("*" if t else "") + ("†" if p else "") + ("‡" if d else "")
        for t, p, d in zip(tests["reject_ttest"], tests["reject_perm"], tests["reject_delong"])
    ]
    table = tests.assign(sig=marks).reindex(columns=TESTS_COLUMNS).reset_index(drop=True)
    alpha = float(tests["alpha"].iloc[0]) if len(tests) else math.nan
    powerless = tests.loc[tests["min_p_perm_by"] > alpha, BY_GROUP].drop_duplicates()
    caption = (
        "One-sided tests of H1: attack A > attack B, A the attack with the higher mean over "
        "target models. Per experiment and metric, two families of questions: "
        + "; ".join(f"{name}: {text}" for name, text in QUESTIONS.items())
        + ". Benjamini–Yekutieli adjusts each test's p-values within one family on one "
        f"experiment and metric (α = {alpha:g}). p_ttest_by: paired t-test over "
        f"{count_range(tests['n_repeats'])} target models; p_perm_by: permutation test that "
        "swaps the two attacks' score ranks per sample within each target model "
        f"({count_range(tests['n_resamples'])} resamples; its least reachable value is "
        "min_p_perm_by); p_delong_by: DeLong's test of AUROC summed over target models. "
        "sig: * t-test, † permutation test, ‡ DeLong test rejects H0. The best attack is "
        "chosen on the same data (winner's curse): read its p-values as optimistic."
    )
    if len(powerless):
        caption += (
            f" Warning: {len(powerless)} families cannot reject by the permutation "
            f"test at α = {alpha:g} (min_p_perm_by > α): raise stats.n_resamples."
        )
    table.attrs["caption"] = caption
    table.attrs["alpha"] = alpha
    return table


def _p_cell(p: float) -> str:
    return MISSING if math.isnan(p) else f"{p:.3g}"


def tests_markdown(table: pd.DataFrame) -> str:
    """`tests_table` as Markdown: a section per experiment, metric and family of questions,
    each saying its size and the least p-value its permutation test can reach."""
    lines = [table.attrs["caption"], ""]
    shown = [
        "attack_a",
        "attack_b",
        "mean_a",
        "mean_b",
        "mean_diff",
        "p_ttest_by",
        "p_perm_by",
        "p_delong_by",
        "sig",
    ]
    for (dataset, target_model), experiment in table.groupby(
        ["dataset", "target_model"], sort=False
    ):
        lines += [f"## {dataset} / {target_model}", ""]
        for (metric, family), rows in experiment.groupby(["metric", "family"], sort=False):
            reach = float(rows["min_p_perm_by"].iloc[0])
            note = (
                f"**{metric}, {family}**: {QUESTIONS.get(family, family)}; "
                f"{len(rows)} comparisons, BY over these; p_perm_by ≥ {_p_cell(reach)}"
            )
            if reach > table.attrs["alpha"]:
                note += (
                    f" > α = {table.attrs['alpha']:g}: the permutation test cannot reject "
                    "here (raise stats.n_resamples)"
                )
            lines += [note + ".", ""]
            cells = rows[shown].copy()
            for column in ("mean_a", "mean_b", "mean_diff"):
                cells[column] = [f"{v:.3f}" for v in cells[column]]
            for column in ("p_ttest_by", "p_perm_by", "p_delong_by"):
                cells[column] = [_p_cell(v) for v in cells[column]]
            lines += [cells.to_markdown(index=False), ""]
    return "\n".join(lines)


def write_tests_table(tests: pd.DataFrame, stem: str | Path) -> None:
    """`stem.csv` and `stem.tex` with every row of `tests_table`, `stem.md` in sections
    (`tests_markdown`), so that a reader finds "does A beat B here" by its headings."""
    table = tests_table(tests)
    write_table(table, stem, table.attrs["caption"], markdown=tests_markdown(table))


def auroc_by_architecture(summary: pd.DataFrame) -> pd.DataFrame:
    """TDDBench Table-5 layout: per dataset, AUROC of each attack (rows) across target
    architectures (columns), "mean ± std" over repeats; datasets with one architecture included."""
    auroc = summary[summary["metric"] == "auroc"]
    table = _pivot_cells(auroc, ["dataset", "attack"], auroc["target_model"])
    table.attrs["caption"] = (
        "AUROC of each attack per dataset (rows) across target-model architectures (columns): "
        f"mean ± standard deviation over {count_range(auroc['n_repeats'])} target models, ddof = 1."
    )
    return table


def reference_mismatch_table(
    summary: pd.DataFrame, architectures: Mapping[tuple[str, str], tuple[str, str]]
) -> pd.DataFrame:
    """TDDBench Table-6 layout: AUROC when the reference (and shadow) models have another
    architecture than the target, beside the matched setting, for every dataset and target
    architecture that has such an experiment. Columns are "dataset: target ← reference".

    `architectures` maps each experiment's (dataset, target_model label) to its (target,
    reference) architectures."""
    auroc = summary[summary["metric"] == "auroc"]
    pairs = [architectures[key] for key in zip(auroc["dataset"], auroc["target_model"])]
    auroc = auroc.assign(target=[t for t, _ in pairs], reference=[r for _, r in pairs])
    mixed = auroc.loc[
        auroc["target"] != auroc["reference"], ["dataset", "target"]
    ].drop_duplicates()
    shown = auroc.merge(mixed, on=["dataset", "target"])
    table = _pivot_cells(
        shown, "attack", shown["dataset"] + ": " + shown["target"] + " ← " + shown["reference"]
    )
    table.attrs["caption"] = (
        "AUROC when the reference, population and shadow models have the architecture after the "
        "arrow and the target the one before it (limited knowledge), beside the matched setting: "
        f"mean ± standard deviation over {count_range(shown['n_repeats'])} "
        "target models, ddof = 1. Query attacks are not run with mismatched references."
    )
    return table


def all_metrics_table(summary: pd.DataFrame, dataset: str, target_model: str) -> pd.DataFrame:
    """TDDBench Tables 14–16 layout: every metric (columns) of every attack (rows) on one
    dataset and target architecture, "mean ± std" over repeats."""
    rows = summary[(summary["dataset"] == dataset) & (summary["target_model"] == target_model)]
    order = sorted(
        set(rows["metric"]),
        key=lambda m: (m not in METRIC_NAMES, METRIC_NAMES.index(m) if m in METRIC_NAMES else 0, m),
    )
    table = _pivot_cells(rows, "attack", rows["metric"], order)
    table.attrs["caption"] = (
        f"All metrics of every attack on {dataset} / {target_model}: mean ± standard deviation "
        f"over {count_range(rows['n_repeats'])} target models (ddof = 1); precision, recall, F1, "
        "accuracy (balanced), FPR, FNR and advantage at the threshold maximising balanced "
        f"accuracy; TPR at an FPR the non-members do not resolve (fewer than 1/FPR of them): "
        f"{MISSING}. "
        f"{TRACED}"
    )
    return table


def family_table(
    summary: pd.DataFrame, timings: pd.DataFrame, families: Mapping[str, str]
) -> pd.DataFrame:
    """TDDBench Table-7 layout: per attack family, average and best AUROC over its attacks and
    all experiments, and the largest wall and CPU time one of its attacks took on one experiment.

    `timings` has columns attack, s, cpu_time (rule score_attacks' run records). Memory is
    measured per scoring job (all attacks of an experiment) and is in the cost table, as is the
    training of the shared reference models.
    """
    auroc = summary[summary["metric"] == "auroc"].assign(family=lambda d: d["attack"].map(families))
    cost = timings.assign(family=timings["attack"].map(families))
    rows = []
    for family, group in auroc.groupby("family", sort=True):
        best = group.loc[group["mean"].idxmax()]
        mine = cost[cost["family"] == family]
        rows.append(
            {
                "family": family,
                "attacks": group["attack"].nunique(),
                "average_auroc": f"{group['mean'].mean():.3f}",
                "best_auroc": f"{best['mean']:.3f} "
                f"({best['attack']}, {best['dataset']}/{best['target_model']})",
                "max_wall_s": f"{mine['s'].max():.1f}" if len(mine) else MISSING,
                "max_cpu_s": f"{mine['cpu_time'].max():.1f}" if len(mine) else MISSING,
            }
        )
    table = pd.DataFrame(
        rows,
        columns=["family", "attacks", "average_auroc", "best_auroc", "max_wall_s", "max_cpu_s"],
    )
    table.attrs["caption"] = (
        "Attack families: mean AUROC over their attacks and experiments, the best attack, and the "
        "largest wall and CPU seconds one of its attacks took to score all target models of one "
        "experiment. Peak memory per scoring job, the shared reference-model training and the "
        "jobs that build query artifacts (query sets, surrogates, regressors, canaries, "
        "HopSkipJump) are in the cost table."
    )
    return table


def _total(values: pd.Series) -> float:
    """Sum that stays NaN, not 0, when no job reported the value."""
    return values.sum(min_count=1)


def cost_table(benchmarks: pd.DataFrame) -> pd.DataFrame:
    """Compute cost per (stage, rule) from `read_benchmarks` rows, plus a final "total" row."""
    table = (
        benchmarks.groupby(["stage", "rule"], sort=True)
        .agg(
            jobs=("job", "nunique"),
            total_wall_s=("s", _total),
            max_wall_s=("s", "max"),
            peak_max_rss_mib=("max_rss", "max"),
            total_cpu_s=("cpu_time", _total),
        )
        .reset_index()
    )
    total = {
        "stage": "total",
        "rule": "",
        "jobs": table["jobs"].sum(),
        "total_wall_s": _total(table["total_wall_s"]),
        "max_wall_s": table["max_wall_s"].max(),
        "peak_max_rss_mib": table["peak_max_rss_mib"].max(),
        "total_cpu_s": _total(table["total_cpu_s"]),
    }
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    seconds = ["total_wall_s", "max_wall_s", "total_cpu_s"]
    table[seconds] = table[seconds].round(
        2
    )  # benchmark files have centiseconds; sums add float noise
    table.attrs["caption"] = (
        "Compute cost per workflow stage and rule, from Snakemake benchmark files and job logs: "
        "wall-clock seconds, peak resident memory (MiB) and CPU seconds; GPU time and memory are "
        "not included."
    )
    return table
