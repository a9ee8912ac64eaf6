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
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.hparams.study import Side, study_model
from miaflow.hparams.training import setting_backbones
from miaflow.jobs.common import Paths, torch_session
from miaflow.plan import epsilon_tag, setting_name, target_setting_name

log = logging.getLogger(__name__)


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


def _sides(setting: Mapping[str, Any], data: str | Path, shadow_data: Paths) -> list[Side]:
    """The targets' side, and the black-box attacker's when the setting names one."""
    backbone, shadow = setting_backbones(setting)
    role = "targets" if shadow_data else "both"
    components, images = setting.get("components"), study_model(setting) == "cnn"
    sides = [Side(backbone, *_features(data, components, images), (), role)]
    if shadow_data:
        shadow_features = _features(shadow_data[0], components)
        sides.append(Side(shadow, *shadow_features, ("shadow", shadow), "attacker"))
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
    """One run at one ε: HPO, the grid and the attacks (miaflow.hparams.study) in one process,
    so that the run pays interpreter, torch and data start-up once instead of three times (each
    step still writes its own artifact)."""
    from miaflow.compute import torch_device
    from miaflow.hparams import study
    from miaflow.hparams.grid import GridSplits

    run_of = {"setting": setting, "epsilon": epsilon, "run": run}
    sides = _sides(setting, data, shadow_data)
    drawn = GridSplits.from_frame(io.read_parquet(splits))
    noise_for = _noise_lookup(noise)
    with torch_session(threads):
        device = torch_device()
        tuned = study.tune_run(
            sides,
            drawn,
            **run_of,
            search=search,
            epochs=epochs,
            seed=seed,
            noise_for=noise_for,
            device=device,
        )
        io.write_parquet(trials, tuned)
        table = study.train_run(
            sides,
            drawn,
            tuned,
            **run_of,
            epochs=epochs,
            seed=seed,
            noise_for=noise_for,
            device=device,
        )
        io.write_parquet(grid, table)
    scored = study.attack_run(
        sides[0].features,
        drawn,
        table,
        **run_of,
        n_shadow=n_shadow,
        n_trials=search["trials"],
        budgets=budgets,
        divergence=divergence,
        fpr_levels=fpr_levels,
        seed=seed,
    )
    for path, frame in zip((metrics, roc, selection), scored):
        io.write_parquet(path, frame)


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
    from miaflow.hparams.privacy import targets_tpr_bound

    configs, backbone = set(), setting_backbones(setting)[0]
    for path in grids:
        columns = ["backbone", "family", "row", "column", "noise_multiplier", "batches_per_epoch"]
        table = io.read_parquet(path, columns=columns)
        table = table[table["backbone"] == backbone]  # a black-box attacker's heads are no targets
        targets = table[(table["family"] == "ed") | (table["row"] == table["column"])]
        configs |= set(zip(targets["noise_multiplier"], targets["batches_per_epoch"]))
    fpr = np.concatenate([[0.0], ROC_FPR_GRID])
    curve = targets_tpr_bound(configs, epochs, deltas, fpr)
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
