"""Jobs of the hparams stage: the hyperparameter study of Pradhan et al. (SaTML 2025) on linear
heads over frozen features (docs/algorithms.md#hyperparameter-study).

Per setting (a dataset and a number of shots S), run and ε: the grid's splits, HPO of every split
(TD-HPO on D_j, ED-HPO on the external D_j^e), the (M+1)² grid and the ED targets, the three
attacks with rotation and the baselines without shadow calibration; then the bound DP puts on
any attack, and the study's long tables.

Over 400 lines because it holds one keyword-only function per rule of rules/hparams.smk (stage =
rule file = jobs module), each adapting files to `miaflow.hparams`, where the study's logic is;
`hparam_run` chains three of them (HPO, grid, attacks) in one job.
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
from miaflow.jobs.common import Paths, torch_session
from miaflow.progress import tracked
from miaflow.workflow.plan import epsilon_tag, setting_name

log = logging.getLogger(__name__)
# Stored with each grid model: its recipe, so the DP bound and figures need no other file.
RECIPE_COLUMNS = ["batch_size", "lr", "clip_norm", "noise_multiplier", "batches_per_epoch"]


def _features(data: str | Path) -> tuple[np.ndarray, np.ndarray, int]:
    """(features flattened to (n, d) float32, labels, classes) of a prepared dataset."""
    from miaflow.data import read_dataset

    loaded = read_dataset(data)
    if loaded.is_raw_text:
        raise ValueError(
            f"{loaded.name}: the study trains linear heads on features; use "
            "representation: embedding"
        )
    flat = np.asarray(loaded.features, dtype=np.float32).reshape(len(loaded.labels), -1)
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
    write_dataset(
        features, Dataset(loaded.name, loaded.modality, embedded, loaded.labels, loaded.n_classes)
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
        labels, n_classes, setting["shots"], n_shadow, seed, setting_name(setting), run
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


def hparam_run(
    *,
    data: str | Path,
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
    _hpo(
        data=data,
        splits=splits,
        noise=noise,
        trials=trials,
        search=search,
        epochs=epochs,
        threads=threads,
        **run_of,
    )
    _grid(
        data=data,
        splits=splits,
        trials=trials,
        noise=noise,
        grid=grid,
        epochs=epochs,
        threads=threads,
        **run_of,
    )
    _attacks(
        data=data,
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
    data: str | Path,
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
    """η = HPO(D) for every split of both families, all trials of a number batched together."""
    from miaflow.compute import torch_device
    from miaflow.hparams.grid import FAMILIES, GridSplits
    from miaflow.hparams.search import tune
    from miaflow.seeding import derive_seed

    features, labels, n_classes = _features(data)
    drawn = GridSplits.from_frame(io.read_parquet(splits))
    keys = [(family, split) for family in FAMILIES for split in range(drawn.n_splits)]
    name, tag = setting_name(setting), epsilon_tag(epsilon)
    with torch_session(threads):
        table = tune(
            features,
            labels,
            n_classes,
            [drawn.universe[f][drawn.train_set(f, s)] for f, s in keys],
            {**search, "epochs": epochs},
            [derive_seed(seed, "hparams", name, tag, run, "hpo", f, s) for f, s in keys],
            _noise_lookup(noise),
            torch_device(),
        )
    table.insert(0, "family", [keys[k][0] for k in table["split"]])
    table["split"] = [keys[k][1] for k in table["split"]]
    io.write_parquet(trials, table)


def _grid(
    *,
    data: str | Path,
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
    train(D_i, η_i^e), with each model's statistic φ on the universe V."""
    from miaflow.compute import torch_device
    from miaflow.hparams.grid import GridSplits
    from miaflow.hparams.search import chosen
    from miaflow.seeding import derive_seed

    features, labels, n_classes = _features(data)
    drawn = GridSplits.from_frame(io.read_parquet(splits))
    tuned = io.read_parquet(trials)
    best = {family: chosen(tuned[tuned["family"] == family]) for family in ("td", "ed")}
    noise_for = _noise_lookup(noise)
    name, tag, size = setting_name(setting), epsilon_tag(epsilon), drawn.n_splits
    universe = drawn.universe["td"]
    train_sets = [universe[drawn.train_set("td", i)] for i in range(size)]
    # column j: every D_i with η_j; then one extra column, the ED targets D_i with η_i^e
    columns = [("grid", j, [best["td"].loc[j]] * size) for j in range(size)]
    columns.append(("ed", -1, [best["ed"].loc[i] for i in range(size)]))
    frames = []
    with torch_session(threads):
        device = torch_device()
        for family, column, etas in tracked(columns, f"grid of {size} heads per column", "columns"):
            recipes = [_recipe(eta, len(train), noise_for) for eta, train in zip(etas, train_sets)]
            frames.append(
                _column_frame(
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
                    [
                        derive_seed(seed, "hparams", name, tag, run, family, i, column)
                        for i in range(size)
                    ],
                )
            )
    table = pd.concat(frames, ignore_index=True)
    log.info(
        "%s eps %s run %d: %d models, held-out accuracy %.3f..%.3f",
        name,
        tag,
        run,
        len(table),
        table["heldout_accuracy"].min(),
        table["heldout_accuracy"].max(),
    )
    io.write_parquet(grid, table)


def _recipe(eta: pd.Series, n_train: int, noise_for) -> Any:
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


def _column_frame(
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
) -> pd.DataFrame:
    """Train one column of heads; their φ on the universe and held-out accuracy on V \\ D_i;
    for the models that are targets (ED, diagonal) also their top-3 posteriors (ML-Leaks)."""
    from miaflow.attacks.learning import features_top3
    from miaflow.models.heads import batches_per_epoch, fit_heads, head_logits
    from miaflow.signals import signals_from_logits

    weight, bias = fit_heads(
        features, labels, n_classes, train_sets, recipes, epochs, seeds, device
    )
    logits = head_logits(features[universe], weight, bias)  # (K, n, C)
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
                if family == "ed" or k == column
                else np.empty(0, np.float32)
                for k in range(len(train_sets))
            ],
        }
    )


def _attacks(
    *,
    data: str | Path,
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
    models = table[table["family"] == "grid"].sort_values(["row", "column"])
    stats = np.stack(models["stat"].to_numpy()).astype(np.float64).reshape(size, size, -1)
    external = table[table["family"] == "ed"].sort_values("row")
    targets = {
        "td": stats[np.arange(size), np.arange(size)],
        "ed": np.stack(external["stat"].to_numpy()).astype(np.float64),
    }
    n_samples = members.shape[1]
    top3 = {  # the targets' top-3 posteriors; the diagonal's are ML-Leaks' shadows too
        "td": np.stack(models[models["row"] == models["column"]]["top3"].to_numpy()),
        "ed": np.stack(external["top3"].to_numpy()),
    }
    top3 = {hpo: values.reshape(size, n_samples, -1) for hpo, values in top3.items()}
    features, _, _ = _features(data)
    recipes = {
        "td": models[models["row"] == models["column"]].set_index("row")[RECIPE_COLUMNS],
        "ed": external.set_index("row")[RECIPE_COLUMNS],
    }
    name, tag = setting_name(setting), epsilon_tag(epsilon)
    key = {
        "dataset": setting["dataset"],
        "setting": name,
        "shots": setting["shots"],
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
                ("hparams", name, tag, run, hpo),
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
                choices.append(_choices(key, hpo, run, used, recipes[hpo], recipes["td"]))
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
                    top3["td"],
                    members,
                    features[drawn.universe["td"]],
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

    configs = set()
    for path in grids:
        table = io.read_parquet(
            path, columns=["family", "row", "column", "noise_multiplier", "batches_per_epoch"]
        )
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
