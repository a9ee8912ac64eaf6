"""The best attacks of a metrics table (results/metrics.parquet's long format): per experiment,
the highest mean AUROC and its TPR at a low FPR, as rows and as aligned text lines. The audit
jobs print them in their logs and `miaflow.tools.compare` sets two runs side by side with them.
Only pandas: a job that prints these lines does not depend on the report stage's statistics."""

from __future__ import annotations

import re

import pandas as pd

PREFERRED_TPR = "tpr_at_1pct_fpr"  # the headline low-FPR metric (results/summary.json's too)
TPR_NAME = re.compile(r"tpr_at_([\d.]+)pct_fpr")


def low_fpr_metric(names: set[str]) -> str | None:
    """TPR at 1% FPR when present, else at the lowest FPR level present, else None."""
    levels = {name: float(m[1]) for name in names if (m := TPR_NAME.fullmatch(name))}
    if PREFERRED_TPR in levels:
        return PREFERRED_TPR
    return min(levels, key=levels.get) if levels else None


def tpr_label(name: str) -> str:
    """tpr_at_1pct_fpr -> TPR@1%FPR."""
    return f"TPR@{TPR_NAME.fullmatch(name)[1]}%FPR"


def best_attacks(metrics: pd.DataFrame, top: int = 1) -> pd.DataFrame:
    """Per experiment (dataset and target model, as the tables name it: `catboost` and
    `catboost_ref_lr` are two experiments), the `top` attacks with the highest mean AUROC over
    its target models (repeats), best first; ties to the first name. Columns dataset,
    target_model, attack, auroc, auroc_std (ddof 1, NaN for one target model), tpr_metric, tpr
    (its mean, NaN if absent), target_models. Grouping by dataset alone would average different
    experiments together."""
    experiment = ["dataset", "target_model"]
    auroc = metrics[metrics["metric"] == "auroc"]
    per_attack = (
        auroc.groupby([*experiment, "attack"])
        .agg(
            auroc=("value", "mean"), auroc_std=("value", "std"), target_models=("repeat", "nunique")
        )
        .reset_index()
    )
    ranked = per_attack.sort_values(
        [*experiment, "auroc", "attack"], ascending=[True, True, False, True]
    )
    best = ranked.dropna(subset=["auroc"]).groupby(experiment, sort=True).head(top)
    tpr_metric = low_fpr_metric(set(metrics["metric"]))
    if tpr_metric is None:
        return best.assign(tpr_metric=None, tpr=float("nan")).reset_index(drop=True)
    tpr = (
        metrics[metrics["metric"] == tpr_metric]
        .groupby([*experiment, "attack"])["value"]
        .mean()
        .rename("tpr")
    )
    return (
        best.join(tpr, on=[*experiment, "attack"])
        .assign(tpr_metric=tpr_metric)
        .reset_index(drop=True)
    )


def best_lines(metrics: pd.DataFrame, top: int = 1) -> list[str]:
    """A line for each of the `top` best attacks of every experiment in `metrics` (long format,
    as results/metrics.parquet): `  <dataset>/<target model>  <attack>  AUROC <mean> ± <std>,
    TPR@1%FPR <mean>  (over <n> target models)`, in aligned columns."""
    best = best_attacks(metrics, top)
    names = [f"{row.dataset}/{row.target_model}" for row in best.itertuples()]
    width = {
        "name": max(map(len, names), default=0),
        "attack": max(map(len, best["attack"]), default=0),
    }
    lines = []
    for name, row in zip(names, best.itertuples()):
        spread = "" if pd.isna(row.auroc_std) else f" ± {row.auroc_std:.3f}"
        tpr = "" if pd.isna(row.tpr) else f", {tpr_label(row.tpr_metric)} {row.tpr:.3f}"
        lines.append(
            f"  {name:<{width['name']}}  {row.attack:<{width['attack']}}  "
            f"AUROC {row.auroc:.3f}{spread}{tpr}  "
            f"(over {_counted(row.target_models, 'target model')})"
        )
    return lines


def _counted(number: int, thing: str) -> str:
    return f"{number} {thing}" if number == 1 else f"{number} {thing}s"
