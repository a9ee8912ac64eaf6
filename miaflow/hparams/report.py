"""The hyperparameter study's report: every table and figure of the study from its long tables
(results/hparam_study.parquet, the DP bound, the ROC curves and KL-LiRA's choices), for the
report stage's `hparam_report` (`write_report`, from the files to the files).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from miaflow import io
from miaflow.evaluation.tables import write_outputs
from miaflow.hparams import figures, tables
from miaflow.hparams.baselines_figure import plot_baselines
from miaflow.hparams.blackbox import blackbox_table, plot_blackbox
from miaflow.rule_io import Paths, file_named
from miaflow.seeding import derive_seed


def study_tables(
    results: pd.DataFrame, chosen: pd.DataFrame, tests: pd.DataFrame
) -> dict[str, pd.DataFrame]:
    """Every table of the study by name: headline, relative, budget, td_vs_ed (`tests`, from
    `td_vs_ed_tests`), choices, baselines, blackbox."""
    return {
        "headline": tables.headline_table(results),
        "relative": tables.relative_tpr_table(results),
        "budget": tables.kl_budget_table(results),
        "td_vs_ed": tests,
        "choices": tables.selection_table(chosen),
        "baselines": tables.baselines_table(results),
        "blackbox": blackbox_table(results),
    }


def draw_study(
    results: pd.DataFrame,
    curves: pd.DataFrame,
    limits: pd.DataFrame,
    chosen: pd.DataFrame,
    tests: pd.DataFrame,
    roc_path: Callable[[str], Path],
    named: Mapping[str, str | Path],
    alpha: float,
    confidence: float,
) -> None:
    """Every figure of the study: one ROC per setting (`roc_path(setting)`), and the figures
    `named` by their stem without `hparam-` (relative-tpr, kl-budget, td-vs-ed, pvalues,
    selection, baselines, blackbox)."""
    for setting, part in curves.groupby("setting"):
        figures.plot_study_roc(
            part,
            limits,
            roc_path(setting),
            f"LiRA, ACC-LiRA and KL-LiRA: {setting}",
            figures.lowest_measured_fpr(results[results["setting"] == setting]),
        )
    figures.plot_relative_tpr(results, named["relative-tpr"], "TPR relative to LiRA")
    figures.plot_kl_budget(
        results[results["hpo"] == "td"], named["kl-budget"], "KL-LiRA with reduced budgets"
    )
    figures.plot_td_vs_ed(results, named["td-vs-ed"], "TD-HPO vs ED-HPO", confidence)
    figures.plot_pvalues(tests, named["pvalues"], "TD-HPO vs ED-HPO: p-values", alpha)
    figures.plot_selection(chosen, named["selection"], "KL-LiRA's choice against the target's")
    plot_baselines(results, named["baselines"], "LiRA and attacks without shadow calibration")
    plot_blackbox(results, named["blackbox"], "Shadows on the targets' backbone or another")


def write_report(
    *,
    study: str | Path,
    bound: str | Path,
    roc: str | Path,
    selection: str | Path,
    headline: Paths,
    relative: Paths,
    budget: Paths,
    td_vs_ed: Paths,
    choices: Paths,
    baselines: Paths,
    blackbox: Paths,
    roc_figures: Paths,
    figures: Paths,
    alpha: float,
    resamples: int | None,
    confidence: float,
    seed: int,
) -> None:
    """Tables and figures of the hyperparameter study (docs/algorithms.md#hyperparameter-study)."""
    results = io.read_parquet(study)
    curves, limits, chosen = (io.read_parquet(path) for path in (roc, bound, selection))
    tests = tables.td_vs_ed_tests(results, alpha, resamples, derive_seed(seed, "td-vs-ed"))
    paths = {
        "headline": headline,
        "relative": relative,
        "budget": budget,
        "td_vs_ed": td_vs_ed,
        "choices": choices,
        "baselines": baselines,
        "blackbox": blackbox,
    }
    for name, table in study_tables(results, chosen, tests).items():
        write_outputs(table, paths[name])
    draw_study(
        results,
        curves,
        limits,
        chosen,
        tests,
        lambda setting: file_named(roc_figures, f"hparam-roc-{setting}.png"),
        {Path(p).stem.removeprefix("hparam-"): p for p in figures},
        alpha,
        confidence,
    )
