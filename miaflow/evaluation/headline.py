"""The verdicts as a reader meets them: `results/summary.json` (every experiment and language-model
setting, with the ties as lists), one small JSON file per experiment for `dvc metrics show` (a row
each, a few columns) and the summary lines, with the selection's separability beside the attacks
of a language-model experiment.

The verdicts come from `miaflow.evaluation.verdicts`; the separability of a language-model
selection (a labelled model-free classifier of the texts, `miaflow.llm.separability`) is a
property of the benchmark, not an attack: it never enters the rankings, it is only said beside
them, with its flags added to the experiment's. `write_verdicts` is the report stage's job
`verdicts`: from the metrics and every stage's scores to all of these files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.evaluation import verdicts as judge
from miaflow.evaluation.metrics import SCORES_COLUMNS
from miaflow.evaluation.tables import write_outputs
from miaflow.rule_io import Paths, concat_parquet

SELECTION_KEYS = ("separability", "separability_form", "attack_minus_selection")
# What a row of `dvc metrics show` holds, in short names so that a row fits a wide terminal: the
# AUROC winner, its mean, how many attacks are not separated from it, the low-FPR winner, its
# TPR and that FPR, and a language-model selection's separability. The lists and the rest are
# in results/summary.json.
HEADLINE_KEYS = ("auroc_best", "auroc", "tied", "tpr_best", "tpr", "fpr", "selection")


def with_selection(verdicts: pd.DataFrame, selection: pd.DataFrame | None) -> pd.DataFrame:
    """`verdicts` with the `SELECTION_KEYS` of its language-model experiments (NaN elsewhere)
    and their selection flags appended to `flags`."""
    table = verdicts.copy()
    if selection is None or selection.empty:
        return table.assign(**dict.fromkeys(SELECTION_KEYS, np.nan))
    keys = ["dataset", "target_model"]
    table = table.merge(selection[[*keys, *SELECTION_KEYS, "selection_flags"]], on=keys, how="left")
    table["flags"] = [
        [*flags, *(extra if isinstance(extra, list) else [])]
        for flags, extra in zip(table["flags"], table.pop("selection_flags"))
    ]
    return table


def summary_json(table: pd.DataFrame) -> dict[str, dict]:
    """results/summary.json: per experiment ("<dataset>/<target model>"), the verdict's keys
    (`miaflow.evaluation.verdicts.JSON_KEYS`), the AUROC's
    spread and number of target models, and for a language-model experiment the selection's
    separability (the labelled blind classifier's mean AUROC), its form and the best attack's
    margin over it."""
    entries = judge.verdict_json(table)
    for name, row in zip(entries, table.itertuples(index=False)):
        entries[name] |= {
            "auroc_std": _number(row.auroc_std),
            "target_models": int(row.n_target_models),
        }
        if pd.notna(row.separability):
            entries[name] |= {
                "separability": _number(row.separability),
                "separability_form": row.separability_form,
                "attack_minus_selection": _number(row.attack_minus_selection),
            }
    return entries


def headline_files(table: pd.DataFrame) -> dict[str, dict]:
    """One flat JSON object (`HEADLINE_KEYS`, selection only where measured) per experiment,
    by file name ("<dataset>-<target model>.json", slashes as dashes): `dvc metrics show` prints
    a row per file."""
    files = {}
    for row in table.itertuples(index=False):
        values = (
            row.best_attack,
            _number(row.auroc),
            len(row.tied_with),
            row.best_attack_low_fpr,
            _number(row.tpr_at_low_fpr),
            _number(row.low_fpr),
            _number(row.separability),
        )
        entry = {k: v for k, v in zip(HEADLINE_KEYS, values) if k != "selection" or v is not None}
        name = f"{row.dataset}/{row.target_model}".replace("/", "-")
        files[f"{name}.json"] = entry
    return files


def _number(value: object) -> float | None:
    """Six decimals; None (JSON null) for NaN."""
    return None if pd.isna(value) else round(float(value), 6)


def verdict_table(table: pd.DataFrame, shown: int = 3) -> pd.DataFrame:
    """The verdicts as the report's start page shows them: a row per experiment with both
    winners, their values, the attacks not separated from each (at most `shown` names and a
    count), the selection's separability and the flags."""
    rows = [
        {
            "experiment": f"{row.dataset}/{row.target_model}",
            "best_by_auroc": row.best_attack,
            "auroc": _cell(row.auroc, row.auroc_std),
            "not_separated": judge.ties_text(row.tied_with, row.n_attacks - 1, shown).strip("()"),
            "low_fpr": _cell(row.low_fpr),
            "best_at_low_fpr": row.best_attack_low_fpr or "",
            "tpr": _cell(row.tpr_at_low_fpr),
            "not_separated_at_low_fpr": judge.ties_text(
                row.tied_with_low_fpr, row.n_attacks_low_fpr - 1, shown
            ).strip("()"),
            "selection_alone": _cell(row.separability),
            "flags": ", ".join(row.flags),
        }
        for row in table.itertuples(index=False)
    ]
    shown_table = pd.DataFrame(rows)
    shown_table.attrs["caption"] = (
        "Per experiment: the attack with the highest mean AUROC (± std over target models) and "
        "the one with the highest mean TPR at the low FPR (a fraction: stats.low_fpr, or 1/n "
        "where the fewest non-members n do not resolve it), each with the attacks its tests "
        "(DeLong; paired permutation of the TPR; Benjamini–Yekutieli at stats.alpha) do not "
        "separate from it; selection_alone: a labelled model-free classifier's AUROC on a "
        "language-model selection (not an attack). Flags: docs/algorithms.md#verdicts."
    )
    return shown_table


def _cell(value: float, spread: float = np.nan) -> str:
    """ "0.748 ± 0.021", "0.748", or "" for NaN."""
    if pd.isna(value):
        return ""
    return f"{value:.3f}" if pd.isna(spread) else f"{value:.3f} ± {spread:.3f}"


def write_verdicts(
    *,
    metrics: str | Path,
    scores: Paths,
    selection: Paths,
    rankings: str | Path,
    verdicts: str | Path,
    summary: str | Path,
    headline: str | Path,
    verdicts_table: Paths,
    low_fpr: float,
    alpha: float,
    n_resamples: int,
    seed: int,
) -> None:
    """Both rankings of every experiment and setting (AUROC, TPR at `low_fpr`) with the attacks
    not separated from each best, the flags, and a language-model selection's separability
    beside them: results/summary.json, one DVC metrics file per experiment (`headline`), the
    verdicts table the summary lines are printed from and its display (csv, md, tex)."""
    from miaflow.llm.separability import selection_table

    read = concat_parquet(scores, SCORES_COLUMNS)
    ranked = judge.rankings(io.read_parquet(metrics), read, low_fpr, alpha, n_resamples, seed)
    table = judge.verdicts(ranked)
    best = dict(zip(zip(table["dataset"], table["target_model"]), table["best_attack"]))
    separable = concat_parquet(selection) if selection else None
    chosen = None if separable is None else selection_table(separable, read, best, seed=seed)
    table = with_selection(table, chosen)
    io.write_parquet(rankings, ranked)
    io.write_parquet(verdicts, table)
    io.write_json(summary, summary_json(table))
    write_outputs(verdict_table(table), verdicts_table)
    with io.atomic_directory(headline) as folder:
        for name, entry in headline_files(table).items():
            io.write_json(folder / name, entry)
