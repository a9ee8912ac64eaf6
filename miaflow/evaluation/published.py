"""Published against reproduced: each value a paper (or its authors' code) reports for a target
model, beside what this run measured for the same dataset and recipe.

The published values live in one file, `published.csv` next to this module, one row per value
with its source (paper, table, row) and a note; a quantity is `train_acc` or `test_acc` of the
target models, or `auroc:<attack>`. A run's target model matches a row by dataset and target
model name, so a profile reproduces a paper's setting by naming its recipe as the file does
(e.g. the `fidelity` profile's `mlp_sm` for Song & Mittal's Location30 classifier).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where a table is built, not while the workflow parses
    import pandas as pd

PUBLISHED = Path(__file__).with_name("published.csv")
ACCURACIES = ("train_acc", "test_acc")


def counterparts(
    targets: Iterable[tuple[str, str]], path: Path = PUBLISHED
) -> list[tuple[str, str]]:
    """The (dataset, target model) pairs of `targets` that have a published value (read without
    pandas: the workflow asks while it builds its plan)."""
    with path.open(newline="") as handle:
        published = {(row["dataset"], row["target_model"]) for row in csv.DictReader(handle)}
    return [pair for pair in targets if pair in published]


def published_table(
    published: pd.DataFrame, models: pd.DataFrame, metrics: pd.DataFrame, profile: str
) -> pd.DataFrame:
    """One row per published value this run reproduced: the value, our mean and standard
    deviation over target models, and the difference in units of that deviation.

    `models` is the train stage's model table (accuracy per model), `metrics` the metrics
    contract (one value per target model and attack)."""
    rows = []
    for row in published.itertuples(index=False):
        if row.quantity in ACCURACIES:
            values = models.loc[
                (models["dataset"] == row.dataset)
                & (models["arch"] == row.target_model)
                & (models["role"] == "target"),
                row.quantity,
            ]
        else:
            attack = row.quantity.removeprefix("auroc:")
            values = metrics.loc[
                (metrics["dataset"] == row.dataset)
                & (metrics["target_model"] == row.target_model)
                & (metrics["attack"] == attack)
                & (metrics["metric"] == "auroc"),
                "value",
            ]
        if values.empty:
            continue
        mean, std = float(values.mean()), float(values.std(ddof=1))
        rows.append(
            {
                "dataset": row.dataset,
                "target_model": row.target_model,
                "quantity": row.quantity,
                "published": row.value,
                "reproduced": mean,
                "std": std,
                "n": len(values),
                "difference": mean - row.value,
                "difference_in_std": (mean - row.value) / std if std > 0 else math.nan,
                "source": f"{row.paper}, {row.table}, {row.row}",
                "note": row.note,
            }
        )
    import pandas as pd

    columns = [
        "dataset",
        "target_model",
        "quantity",
        "published",
        "reproduced",
        "std",
        "n",
        "difference",
        "difference_in_std",
        "source",
        "note",
    ]
    table = pd.DataFrame(rows, columns=columns).round(4)
    table.attrs["caption"] = (
        f"Published against reproduced (profile {profile}): each published value, our mean and "
        "standard deviation over target models, and the difference in units of that deviation"
    )
    return table
