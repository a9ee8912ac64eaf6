"""One run of the hyperparameter study at one ε, as the steps `hparam_run` chains: HPO of every
split, the grid of heads and the ED targets, and every attack against the TD and ED targets
(docs/algorithms.md#hyperparameter-study).

A run trains heads on one side, or on two in the black-box setting (`Side`): the targets' side
on `backbone` features and the attacker's full grid, with its own HPO, on `shadow_backbone`
features (docs/algorithms.md#black-box-setting). Every step takes arrays and tables and returns
a table; the job reads and writes the files. Seeds are named after the run and the model, so a
step gives the same models alone or after the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from miaflow.hparams.grid import FAMILIES, GridSplits
from miaflow.hparams.training import setting_backbones
from miaflow.plan import epsilon_tag, setting_name, target_setting_name
from miaflow.progress import tracked
from miaflow.seeding import derive_seed

log = logging.getLogger(__name__)
# Stored with each grid model: its recipe, so the DP bound and figures need no other file.
RECIPE_COLUMNS = ["batch_size", "lr", "clip_norm", "noise_multiplier", "batches_per_epoch"]
NoiseLookup = Callable[[int], float] | None  # σ by batches per epoch; None when not private


class Side(NamedTuple):
    """One side that trains heads, its features read once per run: the targets' (which also
    give the shadows unless the setting is black-box) or the black-box attacker's."""

    backbone: str
    features: np.ndarray
    labels: np.ndarray
    n_classes: int
    seed_tag: tuple[object, ...]  # () for the targets' side, so its seeds are the white-box twin's
    role: str  # miaflow.hparams.training.ROLES


def study_model(setting: Mapping[str, Any]) -> str:
    """The setting's kind of model (`miaflow.hparams.models.MODELS`)."""
    return setting.get("model") or "head"


def tune_run(
    sides: Sequence[Side],
    drawn: GridSplits,
    setting: Mapping[str, Any],
    epsilon: float,
    run: int,
    search: Mapping[str, Any],
    epochs: int,
    seed: int,
    noise_for: NoiseLookup,
    device: str,
) -> pd.DataFrame:
    """η = HPO(D) for every split of both families, all trials of a number batched together; a
    black-box attacker tunes its own η_j on its features for the splits D_j of its grid (it needs
    no ED-HPO). Every trial, with its side's backbone and its family."""
    from miaflow.hparams.search import tune

    name, tag = target_setting_name(setting), epsilon_tag(epsilon)
    tables = []
    for side in sides:
        families = ("td",) if side.role == "attacker" else FAMILIES
        keys = [(family, split) for family in families for split in range(drawn.n_splits)]
        table = tune(
            side.features,
            side.labels,
            side.n_classes,
            [drawn.universe[f][drawn.train_set(f, s)] for f, s in keys],
            {**search, "epochs": epochs},
            [
                derive_seed(seed, "hparams", name, tag, run, *side.seed_tag, "hpo", f, s)
                for f, s in keys
            ],
            noise_for,
            device,
            study_model(setting),
        )
        table.insert(0, "family", [keys[k][0] for k in table["split"]])
        table.insert(0, "backbone", side.backbone)
        table["split"] = [keys[k][1] for k in table["split"]]
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def train_run(
    sides: Sequence[Side],
    drawn: GridSplits,
    tuned: pd.DataFrame,
    setting: Mapping[str, Any],
    epsilon: float,
    run: int,
    epochs: int,
    seed: int,
    noise_for: NoiseLookup,
    device: str,
) -> pd.DataFrame:
    """The grid train(D_i, η_j) for all i, j (one batch per column j) and the ED targets
    train(D_i, η_i^e), with each model's statistic φ on the universe V. In the black-box setting
    the targets' side trains only its targets, the diagonal and the ED targets (one batch each),
    and the attacker's side the whole grid on its own features."""
    from miaflow.hparams.search import chosen
    from miaflow.hparams.training import column_frame, grid_columns, head_recipe

    name, tag, size = target_setting_name(setting), epsilon_tag(epsilon), drawn.n_splits
    universe = drawn.universe["td"]
    train_sets = [universe[drawn.train_set("td", i)] for i in range(size)]
    rows = np.arange(size)
    frames = []
    for side in sides:
        mine = tuned[tuned["backbone"] == side.backbone]
        best = {f: chosen(mine[mine["family"] == f]) for f in set(mine["family"])}
        for family, column, etas in tracked(
            grid_columns(best, size, side.role), f"{side.backbone} heads", "columns"
        ):
            recipes = [head_recipe(eta, len(t), noise_for) for eta, t in zip(etas, train_sets)]
            seeds = [
                derive_seed(
                    seed, "hparams", name, tag, run, *side.seed_tag, family, i, int(column[i])
                )
                for i in rows
            ]
            frames.append(
                column_frame(
                    side.features,
                    side.labels,
                    side.n_classes,
                    universe,
                    drawn,
                    train_sets,
                    recipes,
                    family,
                    column,
                    epochs,
                    device,
                    seeds,
                    study_model(setting),
                ).assign(backbone=side.backbone)
            )
    table = pd.concat(frames, ignore_index=True)
    log.info(
        "%s eps %s run %d: %d models, held-out accuracy %.3f..%.3f",
        setting_name(setting),
        tag,
        run,
        len(table),
        table["heldout_accuracy"].min(),
        table["heldout_accuracy"].max(),
    )
    return table


def attack_run(
    features: np.ndarray,
    drawn: GridSplits,
    grid: pd.DataFrame,
    setting: Mapping[str, Any],
    epsilon: float,
    run: int,
    n_shadow: int,
    n_trials: int,
    budgets: Sequence[Sequence[int]],
    divergence: str,
    fpr_levels: Sequence[float],
    seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """LiRA, ACC-LiRA and KL-LiRA (full grid and reduced budgets) against the TD targets, and
    ACC-LiRA and KL-LiRA against the ED targets; the baselines without shadow calibration
    (ML-Leaks, Attack-P, QMIA) against both: (pooled metrics, ROC, KL-LiRA's choices)."""
    from miaflow.evaluation.plots import ROC_FPR_GRID
    from miaflow.hparams import baselines
    from miaflow.hparams.attacks import Budget, cost, roc_metrics, roc_on_grid, rotate

    size, members = drawn.n_splits, drawn.members["td"]
    backbone, shadow_backbone = setting_backbones(setting)
    theirs, ours = grid[grid["backbone"] == backbone], grid[grid["backbone"] == shadow_backbone]
    # the shadows: the attacker's grid (the targets' own grid unless the setting is black-box)
    models = ours[ours["family"] == "grid"].sort_values(["row", "column"])
    stats = np.stack(models["stat"].to_numpy()).astype(np.float64).reshape(size, size, -1)
    diagonal = theirs[(theirs["family"] == "grid") & (theirs["row"] == theirs["column"])]
    diagonal = diagonal.sort_values("row")
    external = theirs[theirs["family"] == "ed"].sort_values("row")
    targets = {
        hpo: np.stack(frame["stat"].to_numpy()).astype(np.float64)
        for hpo, frame in (("td", diagonal), ("ed", external))
    }
    # the targets, and the attacker's diagonal: ML-Leaks' shadows, KL-LiRA's candidate recipes
    sides = {"td": diagonal, "ed": external, "shadow": models[models["row"] == models["column"]]}
    top3 = {  # top-3 posteriors, (M+1, n, 3)
        k: np.stack(frame["top3"].to_numpy()).reshape(size, members.shape[1], -1)
        for k, frame in sides.items()
    }
    recipes = {k: frame.set_index("row")[RECIPE_COLUMNS] for k, frame in sides.items()}
    name, tag = setting_name(setting), epsilon_tag(epsilon)
    key = {
        "dataset": setting["dataset"],
        "setting": name,
        "shots": setting["shots"],
        "backbone": backbone,
        "shadow_backbone": shadow_backbone,
        "model": study_model(setting),
        "epsilon": float(epsilon),
    }
    plans = [
        ("lira", Budget()),
        ("acc-lira", Budget()),
        ("kl-lira", Budget()),
        *(("kl-lira", Budget(c, n)) for c, n in budgets),
    ]
    metric_rows, roc_frames, choices = [], [], []

    def record(info: dict, scores: np.ndarray, is_member: np.ndarray) -> None:
        metric_rows.extend({**info, **row} for row in roc_metrics(scores, is_member, fpr_levels))
        roc_frames.append(
            roc_on_grid(scores, is_member, ROC_FPR_GRID).assign(
                **{k: info[k] for k in ("dataset", "setting", "epsilon", "hpo", "attack", "run")}
            )
        )

    for hpo in ("td", "ed"):
        for attack, budget in plans:
            if attack == "lira" and hpo == "ed":
                continue  # LiRA knows the target's η, which no grid column holds for ED targets
            scores, is_member, used = rotate(
                stats,
                targets[hpo],
                members,
                attack,
                budget,
                divergence,
                seed,
                ("hparams", target_setting_name(setting), tag, run, hpo),
            )
            label = budget.name() if attack == "kl-lira" else attack
            c, n = budget.sizes(n_shadow) if attack == "kl-lira" else (n_shadow, n_shadow)
            info = {
                **key,
                "hpo": hpo,
                "attack": label,
                "candidates": c,
                "models_per_candidate": n,
                "cost": cost(attack, n_shadow, n_trials, budget),
                "divergence": divergence,
                "run": run,
            }
            record(info, scores, is_member)
            if label == "kl-lira":
                choices.append(kl_choices(key, hpo, run, used, recipes[hpo], recipes["shadow"]))
        for attack in baselines.BASELINES:  # the paper's Fig. 5: no LiRA calibration
            shadows = int(attack == "ml-leaks")
            info = {
                **key,
                "hpo": hpo,
                "attack": attack,
                "candidates": shadows,
                "models_per_candidate": shadows,
                "cost": baselines.cost(attack, n_trials),
                "divergence": divergence,
                "run": run,
            }
            record(
                info,
                *baselines.baseline_scores(
                    attack,
                    targets[hpo],
                    top3[hpo],
                    top3["shadow"],
                    members,
                    features[drawn.universe["td"]].reshape(len(drawn.universe["td"]), -1),
                    seed,
                    ("hparams", name, tag, run, hpo),
                ),
            )
    return (
        pd.DataFrame(metric_rows),
        pd.concat(roc_frames, ignore_index=True),
        pd.concat(choices, ignore_index=True),
    )


def kl_choices(
    key: Mapping[str, Any],
    hpo: str,
    run: int,
    used: np.ndarray,
    targets: pd.DataFrame,
    columns: pd.DataFrame,
) -> pd.DataFrame:
    """KL-LiRA's j* per target beside the target's own hyperparameters (the paper's Fig. A10)."""
    frame = pd.DataFrame(
        {**key, "hpo": hpo, "run": run, "target": np.arange(len(used)), "chosen": used}
    )
    for prefix, source, index in (
        ("target", targets, np.arange(len(used))),
        ("chosen", columns, used),
    ):
        for column in ("lr", "batch_size", "clip_norm"):
            frame[f"{prefix}_{column}"] = source[column].to_numpy()[index]
    return frame
