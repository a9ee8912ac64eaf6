"""Jobs of the hparams stage: the hyperparameter study of Pradhan et al. (SaTML 2025) on linear
heads over frozen features (docs/algorithms.md#hyperparameter-study).

Per setting (a dataset and a number of shots S), run and ε: the grid's splits, HPO of every split
(TD-HPO on D_j, ED-HPO on the external D_j^e), the (M+1)² grid and the ED targets, the three
attacks with rotation and the baselines without shadow calibration; then the bound DP puts on
any attack, and the study's long tables.

In the black-box setting (a setting's `shadow_backbone`), the same job trains two sides on the
same splits: the targets (the diagonal and the ED targets) on `backbone` features, and the
attacker's full grid, with its own HPO, on `shadow_backbone` features; its trials and grid files
hold both, told apart by their `backbone` column.

Over 400 lines because it holds one keyword-only function per rule of rules/hparams.smk (stage =
rule file = jobs module), each adapting files to `miaflow.hparams`, where the study's logic is;
`hparam_run` chains three steps (HPO, grid, attacks) in one job, which share the run's sides (each
side's features read once) and the grid table's layout (which rows are targets, which shadows).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.hparams.training import setting_backbones
from miaflow.jobs.common import Paths, torch_session
from miaflow.plan import epsilon_tag, setting_name, target_setting_name
from miaflow.progress import tracked

log = logging.getLogger(__name__)
# Stored with each grid model: its recipe, so the DP bound and figures need no other file.
RECIPE_COLUMNS = ["batch_size", "lr", "clip_norm", "noise_multiplier", "batches_per_epoch"]


def _features(
    data: str | Path, components: int | None = None, images: bool = False
) -> tuple[np.ndarray, np.ndarray, int]:
    """(features flattened to (n, d) float32, on their first `components` principal components
    if given, or the images (n, c, h, w) as stored, labels, classes) of a prepared dataset."""
    from miaflow.data import read_dataset
    from miaflow.hparams.features import principal_components

    loaded = read_dataset(data)
    if loaded.is_raw_text:
        raise ValueError(
            f"{loaded.name}: the study trains linear heads on features; use "
            "representation: embedding"
        )
    if images:
        flat = np.asarray(loaded.features, dtype=np.float32)
    else:
        flat = np.asarray(loaded.features, dtype=np.float32).reshape(len(loaded.labels), -1)
    if components:
        flat = principal_components(flat, components)
    return flat, np.asarray(loaded.labels, dtype=np.int64), loaded.n_classes


def _noise_lookup(noise: Paths):
    """σ by batches per epoch from the ε's noise table (None when not private)."""
    if not noise:
        return None
    table = io.read_parquet(noise[0]).set_index("batches_per_epoch")["noise_multiplier"]

    def lookup(batches: int) -> float:
        if batches not in table.index:
            raise KeyError(f"no noise multiplier for {batches} batches per epoch in {noise[0]}")
        return float(table[batches])

    return lookup


def hparam_features(
    *, data: str | Path, features: str | Path, backbone: str, model: str | None, threads: int
) -> None:
    """A dataset's images through a frozen pretrained backbone, stored as a dataset of features."""
    from miaflow.compute import torch_device
    from miaflow.data import Dataset, read_dataset, write_dataset
    from miaflow.hparams.features import backbone_features

    loaded = read_dataset(data)
    with torch_session(threads):
        embedded = backbone_features(loaded.features, backbone, model, device=torch_device())
    log.info("%s through %s: features %s", loaded.name, backbone, embedded.shape)
    # feature vectors (n, d): stored as tabular, which is the shape a Dataset of them has
    write_dataset(
        features, Dataset(loaded.name, "tabular", embedded, loaded.labels, loaded.n_classes)
    )


def hparam_splits(
    *,
    data: str | Path,
    splits: str | Path,
    setting: Mapping[str, Any],
    n_shadow: int,
    run: int,
    seed: int,
) -> None:
    """One run's universes V and V^e and their M+1 Bernoulli halves."""
    from miaflow.hparams.grid import draw_splits

    _, labels, n_classes = _features(data)
    drawn = draw_splits(
        labels, n_classes, setting["shots"], n_shadow, seed, target_setting_name(setting), run
    )
    log.info(
        "%s run %d: |V| = %d, |D_i| = %d..%d",
        setting_name(setting),
        run,
        len(drawn.universe["td"]),
        drawn.members["td"].sum(1).min(),
        drawn.members["td"].sum(1).max(),
    )
    io.write_parquet(splits, drawn.to_frame())


def hparam_noise(
    *,
    splits: Paths,
    noise: str | Path,
    epsilon: float,
    delta: float,
    epochs: int,
    batch_size: Sequence[int],
) -> None:
    """σ for every batches-per-epoch count a head of this setting can have at this ε: up to the
    largest split of any run (HPO trials train on less) at the smallest batch size."""
    from miaflow.hparams.grid import GridSplits
    from miaflow.hparams.privacy import noise_table

    largest = max(
        int(members.sum(1).max())
        for path in splits
        for members in GridSplits.from_frame(io.read_parquet(path)).members.values()
    )
    io.write_parquet(noise, noise_table(epsilon, delta, epochs, math.ceil(largest / batch_size[0])))


class _Side(NamedTuple):
    """One side that trains heads, its features read once per job: the targets' (which also
    give the shadows unless the setting is black-box) or the black-box attacker's."""

    backbone: str
    features: np.ndarray
    labels: np.ndarray
    n_classes: int
    seed_tag: tuple[object, ...]  # () for the targets' side, so its seeds are the white-box twin's
    role: str  # miaflow.hparams.training.ROLES


def _model(setting: Mapping[str, Any]) -> str:
    """The setting's kind of model (`miaflow.hparams.models.MODELS`)."""
    return setting.get("model") or "head"


def _sides(setting: Mapping[str, Any], data: str | Path, shadow_data: Paths) -> list[_Side]:
    """The targets' side, and the black-box attacker's when the setting names one."""
    backbone, shadow = setting_backbones(setting)
    role = "targets" if shadow_data else "both"
    components, images = setting.get("components"), _model(setting) == "cnn"
    sides = [_Side(backbone, *_features(data, components, images), (), role)]
    if shadow_data:
        shadow_features = _features(shadow_data[0], components)
        sides.append(_Side(shadow, *shadow_features, ("shadow", shadow), "attacker"))
    return sides


def hparam_run(
    *,
    data: str | Path,
    shadow_data: Paths,
    splits: str | Path,
    noise: Paths,
    trials: str | Path,
    grid: str | Path,
    metrics: str | Path,
    roc: str | Path,
    selection: str | Path,
    setting: Mapping[str, Any],
    epsilon: float,
    run: int,
    n_shadow: int,
    search: Mapping[str, Any],
    epochs: int,
    budgets: Sequence[Sequence[int]],
    divergence: str,
    fpr_levels: Sequence[float],
    seed: int,
    threads: int,
) -> None:
    """One run at one ε: HPO, the grid and the attacks in one process, so that the run pays
    interpreter, torch and data start-up once instead of three times (each step still writes its
    own artifact)."""
    run_of = {"setting": setting, "epsilon": epsilon, "run": run, "seed": seed}
    sides = _sides(setting, data, shadow_data)
    _hpo(
        sides=sides,
        splits=splits,
        noise=noise,
        trials=trials,
        search=search,
        epochs=epochs,
        threads=threads,
        **run_of,
    )
    _grid(
        sides=sides,
        splits=splits,
        trials=trials,
        noise=noise,
        grid=grid,
        epochs=epochs,
        threads=threads,
        **run_of,
    )
    _attacks(
        features=sides[0].features,
        splits=splits,
        trials=trials,
        grid=grid,
        metrics=metrics,
        roc=roc,
        selection=selection,
        n_shadow=n_shadow,
        n_trials=search["trials"],
        budgets=budgets,
        divergence=divergence,
        fpr_levels=fpr_levels,
        **run_of,
    )


def _hpo(
    *,
    sides: Sequence[_Side],
    splits: str | Path,
    noise: Paths,
    trials: str | Path,
    setting: Mapping[str, Any],
    epsilon: float,
    run: int,
    search: Mapping[str, Any],
    epochs: int,
    seed: int,
    threads: int,
) -> None:
    """η = HPO(D) for every split of both families, all trials of a number batched together; a
    black-box attacker tunes its own η_j on its features for the splits D_j of its grid."""
    from miaflow.compute import torch_device
    from miaflow.hparams.grid import FAMILIES, GridSplits
    from miaflow.hparams.search import tune
    from miaflow.seeding import derive_seed

    drawn = GridSplits.from_frame(io.read_parquet(splits))
    name, tag = target_setting_name(setting), epsilon_tag(epsilon)
    tables = []
    for side in sides:
        # the attacker's grid needs no ED-HPO
        families = ("td",) if side.role == "attacker" else FAMILIES
        keys = [(family, split) for family in families for split in range(drawn.n_splits)]
        with torch_session(threads):
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
                _noise_lookup(noise),
                torch_device(),
                _model(setting),
            )
        table.insert(0, "family", [keys[k][0] for k in table["split"]])
        table.insert(0, "backbone", side.backbone)
        table["split"] = [keys[k][1] for k in table["split"]]
        tables.append(table)
    io.write_parquet(trials, pd.concat(tables, ignore_index=True))


def _grid(
    *,
    sides: Sequence[_Side],
    splits: str | Path,
    trials: str | Path,
    noise: Paths,
    grid: str | Path,
    setting: Mapping[str, Any],
    epsilon: float,
    run: int,
    epochs: int,
    seed: int,
    threads: int,
) -> None:
    """The grid train(D_i, η_j) for all i, j (one batch per column j) and the ED targets
    train(D_i, η_i^e), with each model's statistic φ on the universe V. In the black-box setting
    the targets' side trains only its targets, the diagonal and the ED targets (one batch each),
    and the attacker's side the whole grid on its own features."""
    from miaflow.compute import torch_device
    from miaflow.hparams.grid import GridSplits
    from miaflow.hparams.search import chosen
    from miaflow.hparams.training import column_frame, grid_columns, head_recipe
    from miaflow.seeding import derive_seed

    drawn = GridSplits.from_frame(io.read_parquet(splits))
    tuned = io.read_parquet(trials)
    noise_for = _noise_lookup(noise)
    name, tag, size = target_setting_name(setting), epsilon_tag(epsilon), drawn.n_splits
    universe = drawn.universe["td"]
    train_sets = [universe[drawn.train_set("td", i)] for i in range(size)]
    rows = np.arange(size)
    frames = []
    for side in sides:
        mine = tuned[tuned["backbone"] == side.backbone]
        best = {f: chosen(mine[mine["family"] == f]) for f in set(mine["family"])}
        with torch_session(threads):
            device = torch_device()
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
                        _model(setting),
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
    io.write_parquet(grid, table)


def _attacks(
    *,
    features: np.ndarray,
    splits: str | Path,
    trials: str | Path,
    grid: str | Path,
    metrics: str | Path,
    roc: str | Path,
    selection: str | Path,
    setting: Mapping[str, Any],
    epsilon: float,
    run: int,
    n_shadow: int,
    n_trials: int,
    budgets: Sequence[Sequence[int]],
    divergence: str,
    fpr_levels: Sequence[float],
    seed: int,
) -> None:
    """LiRA, ACC-LiRA and KL-LiRA (full grid and reduced budgets) against the TD targets, and
    ACC-LiRA and KL-LiRA against the ED targets; the baselines without shadow calibration
    (ML-Leaks, Attack-P, QMIA) against both: pooled metrics, ROC and KL-LiRA's choices."""
    from miaflow.evaluation.plots import ROC_FPR_GRID
    from miaflow.hparams import baselines
    from miaflow.hparams.attacks import Budget, cost, roc_metrics, roc_on_grid, rotate
    from miaflow.hparams.grid import GridSplits

    drawn = GridSplits.from_frame(io.read_parquet(splits))
    table = io.read_parquet(grid)
    size, members = drawn.n_splits, drawn.members["td"]
    backbone, shadow_backbone = setting_backbones(setting)
    theirs, ours = table[table["backbone"] == backbone], table[table["backbone"] == shadow_backbone]
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
        "model": _model(setting),
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
                choices.append(_choices(key, hpo, run, used, recipes[hpo], recipes["shadow"]))
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
    io.write_parquet(metrics, pd.DataFrame(metric_rows))
    io.write_parquet(roc, pd.concat(roc_frames, ignore_index=True))
    io.write_parquet(selection, pd.concat(choices, ignore_index=True))


def _choices(
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


def hparam_bound(
    *,
    grids: Paths,
    bound: str | Path,
    setting: Mapping[str, Any],
    epsilon: float,
    delta: float,
    deltas: Sequence[float],
    epochs: int,
) -> None:
    """The TPR no attack can exceed at each FPR against any target of this setting and ε: each
    target's tightest Kairouz bound over the accountant's (ε(δ), δ) pairs, maximised over the
    targets' training configurations: it holds for every target, and only approximately for
    their pooled ROC (docs/algorithms.md#differential-privacy)."""
    from miaflow.evaluation.plots import ROC_FPR_GRID
    from miaflow.hparams.privacy import epsilons, tpr_bound

    configs, backbone = set(), setting_backbones(setting)[0]
    for path in grids:
        columns = ["backbone", "family", "row", "column", "noise_multiplier", "batches_per_epoch"]
        table = io.read_parquet(path, columns=columns)
        table = table[table["backbone"] == backbone]  # a black-box attacker's heads are no targets
        targets = table[(table["family"] == "ed") | (table["row"] == table["column"])]
        configs |= set(zip(targets["noise_multiplier"], targets["batches_per_epoch"]))
    fpr = np.concatenate([[0.0], ROC_FPR_GRID])
    curve = np.zeros_like(fpr)
    for noise, batches in tracked(sorted(configs), "DP bound", "target configurations"):
        guarantees = zip(epsilons(noise, 1.0 / batches, epochs * batches, deltas), deltas)
        curve = np.maximum(curve, tpr_bound(fpr, guarantees))
    log.info(
        "%s eps %s: %d target configurations; bound at FPR 0.1/1/10%%: %s",
        setting_name(setting),
        epsilon_tag(epsilon),
        len(configs),
        np.interp([1e-3, 1e-2, 1e-1], fpr, curve).round(4),
    )
    io.write_parquet(
        bound,
        pd.DataFrame(
            {
                "dataset": setting["dataset"],
                "setting": setting_name(setting),
                "epsilon": float(epsilon),
                "delta": delta,
                "fpr": fpr,
                "tpr_bound": curve,
            }
        ),
    )


def hparam_collect(
    *,
    metrics: Paths,
    rocs: Paths,
    selections: Paths,
    bounds: Paths,
    study: str | Path,
    roc: str | Path,
    selection: str | Path,
    bound: str | Path,
) -> None:
    """The study's long tables: results/hparam_study.parquet (the contract), its ROC curves,
    KL-LiRA's choices and results/dp_bound.parquet."""
    keys = ["setting", "epsilon", "hpo", "attack", "run"]
    for paths, output, order in (
        (metrics, study, [*keys, "fpr"]),
        (rocs, roc, [*keys, "fpr"]),
        (selections, selection, ["setting", "epsilon", "hpo", "run", "target"]),
        (bounds, bound, ["setting", "epsilon", "fpr"]),
    ):
        frames = [io.read_parquet(path) for path in paths]
        table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=order)
        io.write_parquet(output, table.sort_values(order, kind="stable", ignore_index=True))
