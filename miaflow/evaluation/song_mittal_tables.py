"""Song & Mittal's tables (USENIX Security 2021, docs/algorithms.md#song--mittal): decision
accuracy of their threshold attacks, precision and recall of the privacy risk score, and the
defense tables; their figures are in `plots`.

Builders follow `miaflow.evaluation.tables`: DataFrames of display strings with the caption in
`table.attrs["caption"]`, for `write_table`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from miaflow.evaluation.tables import MISSING, format_mean_std, mean_std_cell

# Song & Mittal's attack columns in their defense tables (Tables 2-4): the NN attack (here
# TDDBench's learning attack on the prediction vector) and the metric attacks with
# class-dependent thresholds.
DEFENSE_ATTACKS = {
    "learn-original": "nn_attack",
    "sm-corr": "corr",
    "sm-conf": "conf",
    "sm-ent": "ent",
    "sm-ment": "mentr",
}


def _mean_std_cells(values: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    """Per group of `keys`: "mean ± std" (ddof = 1, NaN values skipped) of each column, and the
    number of repeats."""
    grouped = values.groupby(keys, sort=True)
    cells = grouped[columns].agg(["mean", "std"])
    table = pd.DataFrame(
        {
            column: [
                format_mean_std(m, s)
                for m, s in zip(cells[(column, "mean")], cells[(column, "std")])
            ]
            for column in columns
        },
        index=cells.index,
    )
    table["n_repeats"] = grouped.size()
    return table.reset_index()


def decision_accuracies(scores: pd.DataFrame) -> pd.DataFrame:
    """Decision accuracy ½(TPR + TNR) of Song & Mittal's threshold attacks (score ≥ the attack's
    `DECISION_THRESHOLDS` entry) per dataset, target model, attack and repeat; other attacks'
    rows of `scores` are left out."""
    from miaflow.attacks.song_mittal import DECISION_THRESHOLDS, decision_accuracy

    mine = scores[scores["attack"].isin(list(DECISION_THRESHOLDS))]
    keys = ["dataset", "target_model", "attack", "repeat"]
    return pd.DataFrame(
        [
            (
                *key,
                decision_accuracy(key[2], group["score"].to_numpy(), group["is_member"].to_numpy()),
            )
            for key, group in mine.groupby(keys, sort=True)
        ],
        columns=[*keys, "accuracy"],
    )


def song_mittal_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Decision accuracy ½(TPR + TNR) of Song & Mittal's threshold attacks at their learned
    thresholds: class-dependent (rows) beside the class-independent version, per dataset/model.

    `scores` holds score-file rows of sm-* threshold attacks (decision: score ≥ the attack's
    `DECISION_THRESHOLDS` entry).
    """
    from miaflow.attacks.song_mittal import GLOBAL_COUNTERPART

    stats = (
        decision_accuracies(scores)
        .groupby(["dataset", "target_model", "attack"], sort=True)["accuracy"]
        .agg(["mean", "std", "size"])
    )
    rows = [
        {
            "dataset": dataset,
            "target_model": model,
            "attack": attack,
            "class_dependent": mean_std_cell(stats, (dataset, model, attack)),
            "class_independent": mean_std_cell(stats, (dataset, model, GLOBAL_COUNTERPART[attack])),
            "n_repeats": int(stats.at[(dataset, model, attack), "size"]),
        }
        for dataset, model, attack in stats.index
        if attack in GLOBAL_COUNTERPART
    ]
    table = pd.DataFrame(
        rows,
        columns=[
            "dataset",
            "target_model",
            "attack",
            "class_dependent",
            "class_independent",
            "n_repeats",
        ],
    )
    table.attrs["caption"] = (
        "Song & Mittal threshold attacks: attack accuracy ½(TPR + TNR) at the thresholds learned "
        "on the shadow model (reference 0), per-class thresholds (class_dependent) vs one "
        "threshold over all classes (class_independent, the -global attacks; none for "
        "correctness); mean ± standard deviation (ddof = 1) over target models."
    )
    return table


def risk_precision_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Precision and recall of "member iff privacy risk r ≥ τ" for τ = 1.0 … 0.5, per
    dataset/target model, mean ± std over repeats (precision undefined where nothing is predicted:
    those repeats are left out of its mean)."""
    from miaflow.attacks.song_mittal import risk_precision_recall

    risk = scores[scores["attack"] == "sm-risk"]
    rows = [
        {
            "dataset": dataset,
            "target_model": model,
            "repeat": repeat,
            "threshold": tau,
            "precision": precision,
            "recall": recall,
        }
        for (dataset, model, repeat), group in risk.groupby(
            ["dataset", "target_model", "repeat"], sort=True
        )
        for tau, precision, recall in risk_precision_recall(
            group["score"].to_numpy(), group["is_member"].to_numpy()
        )
    ]
    values = pd.DataFrame(
        rows, columns=["dataset", "target_model", "repeat", "threshold", "precision", "recall"]
    )
    table = _mean_std_cells(
        values, ["dataset", "target_model", "threshold"], ["precision", "recall"]
    )
    table = table.sort_values(
        ["dataset", "target_model", "threshold"], ascending=[True, True, False], ignore_index=True
    )
    table.attrs["caption"] = (
        "Privacy risk score (Song & Mittal, per-class shadow histograms): precision and recall of "
        "predicting member iff risk ≥ threshold on the target's pool, mean ± standard deviation "
        "(ddof = 1) over target models; precision skips repeats where no sample reaches the "
        "threshold."
    )
    return table


def describe_defense(arch: Mapping[str, Any]) -> str:
    """A recipe's defense, its strength and epochs, e.g. "adversarial regularization (λ = 3, 50
    epochs)"; an undefended recipe reads "none (30 epochs)" (early stopping at a chosen epoch is
    a shorter recipe)."""
    defense = arch.get("defense")
    epochs = [f"{arch['epochs']} epochs"] if "epochs" in arch else []
    if not defense:
        return f"none ({epochs[0]})" if epochs else "none"
    strength = {
        "adversarial_regularization": lambda d: f"λ = {d['lambda']:g}",
        "dp_sgd": lambda d: f"ε = {d['epsilon']:g}, δ = {d['delta']:g}",
        "memguard": lambda d: f"budget {d['budget']:g}",
    }[defense["kind"]](defense)
    return f"{defense['kind'].replace('_', ' ')} ({', '.join([strength, *epochs])})"


def defense_table(
    models: pd.DataFrame,
    metrics: pd.DataFrame,
    scores: pd.DataFrame,
    recipes: Mapping[tuple[str, str], tuple[str, Mapping[str, Any]]],
) -> pd.DataFrame:
    """Song & Mittal's defense tables (USENIX Security 2021, Tables 2-4): per dataset and target
    model, its defense, the targets' train and test accuracy, each attack's membership-inference
    accuracy (NN attack: best balanced accuracy over thresholds; metric attacks: decision accuracy
    at their class-dependent thresholds learned on shadow models), and the best attack's TPR at
    1% FPR. `matched_undefended` names the undefended recipe of the dataset whose test accuracy is
    nearest (their early-stopping comparison at matched test accuracy).

    `recipes` maps (dataset, target_model) to (architecture name, architecture)."""
    decisions = (
        decision_accuracies(scores)
        .groupby(["dataset", "target_model", "attack"])["accuracy"]
        .mean()
    )
    rows = []
    for (dataset, target_model), (arch_name, arch) in recipes.items():
        targets = models[
            (models["dataset"] == dataset)
            & (models["arch"] == arch_name)
            & (models["role"] == "target")
        ]
        mine = metrics[(metrics["dataset"] == dataset) & (metrics["target_model"] == target_model)]
        row = {
            "dataset": dataset,
            "target_model": target_model,
            "defense": describe_defense(arch),
            "undefended": not arch.get("defense"),
            "train_acc": targets["train_acc"].mean(),
            "test_acc": targets["test_acc"].mean(),
        }
        nn_accuracy = mine.loc[
            (mine["attack"] == "learn-original") & (mine["metric"] == "accuracy"), "value"
        ]
        for attack, column in DEFENSE_ATTACKS.items():
            if attack == "learn-original":
                row[column] = nn_accuracy.mean() if len(nn_accuracy) else math.nan
            else:
                row[column] = decisions.get((dataset, target_model, attack), math.nan)
        tpr = mine[mine["metric"] == "tpr_at_1pct_fpr"].groupby("attack")["value"].mean()
        row["best_attack"], row["best_tpr_at_1pct_fpr"] = (
            (tpr.idxmax(), tpr.max()) if len(tpr) else (MISSING, math.nan)
        )
        rows.append(row)
    table = pd.DataFrame(rows)
    table["matched_undefended"] = [_nearest_undefended(table, row) for _, row in table.iterrows()]
    table = table.drop(columns="undefended").round(4)
    table.attrs["caption"] = (
        "Defenses (Song & Mittal Tables 2-4): target train/test accuracy (mean over target "
        "models), membership-inference accuracy of the NN attack and of the metric attacks with "
        "class-dependent thresholds, the best attack's TPR at 1% FPR, and the undefended recipe "
        "of matched test accuracy (early-stopping comparison)"
    )
    return table


def _nearest_undefended(table: pd.DataFrame, row: pd.Series) -> str:
    """The undefended target model of the row's dataset whose test accuracy is nearest, other than
    the row itself; MISSING when there is none."""
    others = table[
        (table["dataset"] == row["dataset"])
        & table["undefended"]
        & (table["target_model"] != row["target_model"])
    ]
    if others.empty:
        return MISSING
    return others.loc[(others["test_acc"] - row["test_acc"]).abs().idxmin(), "target_model"]
