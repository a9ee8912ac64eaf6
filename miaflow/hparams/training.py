"""Training MIA-Grid's heads (docs/algorithms.md#mia-grid): which columns of heads a run trains,
each head's recipe from its tuned η, and one column's statistics and recipes as a table.

A column is a batch of M+1 heads, one per split D_i. In the white-box setting one side trains
the whole grid and the ED targets; in the black-box setting the targets' side trains only its
targets (the diagonal and the ED targets) and the attacker's side the whole grid on its own
features (docs/algorithms.md#black-box-setting).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

ROLES = ("both", "targets", "attacker")


def setting_backbones(setting: Mapping[str, Any]) -> tuple[str, str]:
    """(backbone, shadow_backbone): the features the targets and the attacker's shadow heads
    train on, "pixels" for the dataset's own; equal except in the black-box setting."""
    backbone = setting.get("backbone") or "pixels"
    return backbone, setting.get("shadow_backbone") or backbone


def grid_columns(
    best: Mapping[str, pd.DataFrame], size: int, role: str
) -> list[tuple[str, np.ndarray, list[pd.Series]]]:
    """(family, column of each row, η of each row) of every batch a side trains: column j is
    every D_i with η_j; the ED targets are D_i with η_i^e (column −1); a black-box setting's
    targets alone are the diagonal, D_i with η_i (column i)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (known: {', '.join(ROLES)})")
    rows = np.arange(size)
    if role == "targets":
        columns = [("grid", rows, [best["td"].loc[i] for i in rows])]
    else:
        columns = [("grid", np.full(size, j), [best["td"].loc[j]] * size) for j in rows]
    if role != "attacker":
        columns.append(("ed", np.full(size, -1), [best["ed"].loc[i] for i in rows]))
    return columns


def head_recipe(eta: pd.Series, n_train: int, noise_for: Callable[[int], float] | None) -> Any:
    """A head's recipe from its tuned η: under DP with the σ of its batches per epoch."""
    from miaflow.models.heads import HeadRecipe, batches_per_epoch

    batch_size = int(eta["batch_size"])
    if noise_for is None:
        return HeadRecipe(batch_size, float(eta["lr"]))
    return HeadRecipe(
        batch_size,
        float(eta["lr"]),
        float(eta["clip_norm"]),
        noise_for(batches_per_epoch(n_train, batch_size)),
    )


def column_frame(
    features,
    labels,
    n_classes,
    universe,
    drawn,
    train_sets,
    recipes,
    family,
    column,
    epochs,
    device,
    seeds,
    model="head",
) -> pd.DataFrame:
    """Train one column of models (heads, or `model`); their φ on the universe and held-out
    accuracy on V \\ D_i; for the models that are targets (ED, diagonal) also their top-3
    posteriors (ML-Leaks)."""
    from miaflow.attacks.learning import features_top3
    from miaflow.hparams.models import fit_models
    from miaflow.models.heads import batches_per_epoch
    from miaflow.signals import signals_from_logits

    trained = fit_models(
        model, features, labels, n_classes, train_sets, recipes, epochs, seeds, device
    )
    logits = trained.logits(features[universe])  # (K, n, C)
    signals = signals_from_logits(logits, labels[universe])
    heldout = ~drawn.members["td"]
    return pd.DataFrame(
        {
            "family": family,
            "row": np.arange(len(train_sets)),
            "column": column,
            "batch_size": [r.batch_size for r in recipes],
            "lr": [r.lr for r in recipes],
            "clip_norm": [np.nan if r.clip_norm is None else r.clip_norm for r in recipes],
            "noise_multiplier": [r.noise_multiplier for r in recipes],
            "batches_per_epoch": [
                batches_per_epoch(len(t), r.batch_size) for t, r in zip(train_sets, recipes)
            ],
            "heldout_accuracy": (signals["correct"] * heldout).sum(1)
            / np.maximum(heldout.sum(1), 1),
            # float32, measured harmless (docs/algorithms.md#hyperparameter-study)
            "stat": list(signals["phi"].astype(np.float32)),
            "top3": [
                features_top3({"logits": logits[k]}).astype(np.float32).ravel()
                if family == "ed" or k == column[k]
                else np.empty(0, np.float32)
                for k in range(len(train_sets))
            ],
        }
    )
