"""Jobs of the queries stage: what query attacks read beside the signal store (`Attack.reads`).

Each job is named after the artifact it writes (rule `query_<artifact>`, folder
results/queries/<artifact>/): the dataset's query `sets`, every target's and the shadow's
`outputs` on them, HopSkipJump boundary `distances`, and what Query-transfer, -qrm and -ref fit
themselves: `surrogates`, `regressors` and `canaries` (`miaflow.queries.<artifact>`), all on the
target pool T.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.jobs.common import Paths, compute_session, read_splits, torch_session

log = logging.getLogger(__name__)


def query_sets(
    *,
    data: str | Path,
    splits: str | Path,
    query_set: str | Path,
    neighbour: Mapping[str, Any],
    augment: Mapping[str, Any],
    seed: int,
    threads: int,
) -> None:
    """Neighbour and augmentation queries of the target pool (Query-neighbor/-augment/-adv), as
    `neighbour` and `augment` (params.yaml's overrides of Query-neighbor's and Query-augment's
    options) ask.

    Raw-text neighbours come from a masked LM (torch, on the job's GPU slot if any); with none
    named, one is trained on the texts of the auxiliary pool A, which no target is evaluated on.
    """
    from miaflow.attacks.options import QueryAugmentOptions, QueryNeighborOptions
    from miaflow.data import read_dataset
    from miaflow.queries.sets import info_metadata, make_query_set

    loaded, keep = read_dataset(data), read_splits(splits)
    pool = keep.target_samples
    public = list(loaded.features[keep.auxiliary_samples]) if loaded.is_raw_text else []
    with torch_session(threads) if loaded.is_raw_text else nullcontext():
        made = make_query_set(
            loaded.features[pool],
            pool,
            loaded.modality,
            seed,
            loaded.name,
            QueryNeighborOptions.filled(neighbour),
            QueryAugmentOptions.filled(augment),
            public_texts=public,
        )
    log.info(
        "%s: %s queries over %d samples",
        loaded.name,
        {kind: len(v) for kind, v in made.features.items()},
        len(pool),
    )
    io.write_parquet(
        query_set, made.to_table(), {"data_hash": loaded.content_hash(), **info_metadata(made.info)}
    )


def query_outputs(
    *, data: str | Path, query_set: str | Path, models: Paths, outputs: str | Path, threads: int
) -> None:
    """Outputs (logits and signals) of every target and the shadow model g_0 on every query."""
    from miaflow.data import read_dataset
    from miaflow.models.shards import load_shard, shard_logits
    from miaflow.queries.sets import query_outputs as outputs_on
    from miaflow.queries.sets import read_queries
    from miaflow.splits import role_of

    loaded = read_dataset(data)
    meta = io.read_parquet_metadata(query_set)
    if meta["data_hash"] != loaded.content_hash():
        raise ValueError(f"{query_set} was generated from other data than {data}")
    blocks = read_queries(io.read_table(query_set), loaded.feature_shape)
    shards = [load_shard(path) for path in models]
    wanted = [
        (
            weights,
            {
                **metadata,
                "model_ids": [
                    m for m in metadata["model_ids"] if role_of(m) == "target" or m == "reference-0"
                ],
            },
        )
        for weights, metadata in shards
    ]
    model_ids = [m for _, metadata in wanted for m in metadata["model_ids"]]

    def logits_of(features: np.ndarray) -> np.ndarray:
        return np.concatenate([shard_logits(w, m, features) for w, m in wanted if m["model_ids"]])

    with compute_session(shards[0][1]["arch"], threads):
        table = outputs_on(blocks, loaded.labels, model_ids, logits_of)
    log.info("%d models x %d query blocks", len(model_ids), len(blocks))
    io.write_parquet(outputs, table, {"data_hash": meta["data_hash"], "queries": meta["queries"]})


def query_distances(
    *,
    data: str | Path,
    splits: str | Path,
    models: Paths,
    distances: str | Path,
    arch_name: str,
    options: Mapping[str, Any],
    seed: int,
    threads: int,
) -> None:
    """Query-adv (image): HopSkipJump boundary distances of every target on the evaluated subset,
    with the budget `options` gives (params.yaml's overrides of Query-adv's options).

    Other modalities need no distances (Query-adv is mean correctness under noise there): the
    table is written empty so that the rule's output exists for every experiment.
    """
    from miaflow.attacks.options import QueryAdvOptions
    from miaflow.data import read_dataset
    from miaflow.models.shards import classifier, load_shard
    from miaflow.queries.hopskipjump import Budget, empty_distances, model_distances
    from miaflow.queries.sets import evaluated_subset
    from miaflow.seeding import derive_seed
    from miaflow.splits import role_of

    loaded = read_dataset(data)
    adv = QueryAdvOptions.filled(options)
    frames = [empty_distances()]
    if loaded.modality == "image":
        targets = read_splits(splits).target_samples
        subset = np.sort(evaluated_subset(targets, adv.boundary_eva_num, seed, loaded.name))
        budget = Budget(adv.max_iter, adv.max_eval, adv.init_eval, adv.init_size)
        for path in models:
            weights, metadata = load_shard(path)
            with compute_session(metadata["arch"], threads):
                frames += [
                    model_distances(
                        model,
                        classifier(metadata, weights[model], loaded.feature_shape),
                        loaded.features[subset],
                        loaded.labels[subset],
                        subset,
                        budget,
                        adv.batch_size,
                        derive_seed(seed, "queries", loaded.name, arch_name, "hsj", model),
                    )
                    for model in metadata["model_ids"]
                    if role_of(model) == "target"
                ]
    io.write_parquet(
        distances,
        pd.concat(frames, ignore_index=True),
        {"data_hash": loaded.content_hash(), "hsj": json.dumps(adv.hopskipjump(), sort_keys=True)},
    )


def query_surrogates(
    *,
    data: str | Path,
    splits: str | Path,
    signals: Paths,
    surrogates: str | Path,
    arch_name: str,
    arch: Mapping[str, Any],
    options: Mapping[str, Any],
    seed: int,
    threads: int,
) -> None:
    """Query-transfer: per target, a surrogate trained on pool T relabelled by the target's
    predictions (argmax of its cached logits); writes the surrogates' outputs on T. `options`:
    params.yaml's overrides of Query-transfer's options."""
    from miaflow.attacks.options import QueryTransferOptions
    from miaflow.data import read_dataset
    from miaflow.queries.surrogates import surrogates_logits
    from miaflow.seeding import derive_seed
    from miaflow.signals import SignalStore, outputs_table

    val_ratio = QueryTransferOptions.filled(options).val_ratio
    loaded, keep = read_dataset(data), read_splits(splits)
    pool, targets = keep.target_samples, keep.models("target")
    predicted = SignalStore.read(list(signals)).matrix(targets, "logits", pool).argmax(axis=-1)
    with compute_session(arch, threads):
        logits = surrogates_logits(
            arch,
            loaded.features[pool],
            dict(zip(targets, predicted)),
            loaded.n_classes,
            val_ratio,
            lambda target: derive_seed(seed, "query-transfer", loaded.name, arch_name, target),
            threads,
        )
    io.write_parquet(
        surrogates,
        outputs_table(targets, pool, loaded.labels[pool], logits),
        {"data_hash": loaded.content_hash()},
    )


def query_regressors(
    *,
    data: str | Path,
    splits: str | Path,
    signals: Paths,
    regressors: str | Path,
    arch_name: str,
    arch: Mapping[str, Any],
    options: Mapping[str, Any],
    seed: int,
    threads: int,
) -> None:
    """Query-qrm: per target, a Gaussian regressor of its score on the auxiliary pool A (known
    non-members); writes (mu, log sigma) on T and, as metadata, which signal was regressed.
    `options`: params.yaml's overrides of Query-qrm's options."""
    from miaflow.attacks.options import QueryQrmOptions
    from miaflow.data import read_dataset
    from miaflow.models.kinds import KINDS
    from miaflow.queries.regressors import regressor_table
    from miaflow.seeding import derive_seed
    from miaflow.signals import SignalStore

    qrm = QueryQrmOptions.filled(options)
    loaded, keep = read_dataset(data), read_splits(splits)
    pool, auxiliary, targets = keep.target_samples, keep.auxiliary_samples, keep.models("target")
    signal = KINDS[arch["kind"]].qrm_signal
    scores = SignalStore.read(list(signals)).matrix(targets, signal, auxiliary)
    with compute_session(arch, threads):
        table = regressor_table(
            arch,
            loaded.features[auxiliary],
            dict(zip(targets, scores)),
            loaded.features[pool],
            pool,
            qrm.epochs,
            qrm.catboost_iterations,
            lambda target: derive_seed(seed, "query-qrm", loaded.name, arch_name, target),
            threads,
        )
    io.write_parquet(regressors, table, {"data_hash": loaded.content_hash(), "signal": signal})


def query_canaries(
    *,
    data: str | Path,
    splits: str | Path,
    models: Paths,
    canaries: str | Path,
    arch_name: str,
    options: Mapping[str, Any],
    seed: int,
    threads: int,
) -> None:
    """Query-ref: canaries for the evaluated points of T, optimised on the reference models;
    writes phi of every canary under every reference and every target model. `options`:
    params.yaml's overrides of Query-ref's options."""
    from miaflow.attacks.options import QueryRefOptions
    from miaflow.data import read_dataset
    from miaflow.models.shards import load_shard, torch_modules
    from miaflow.queries.canaries import evaluated_points, reference_canaries
    from miaflow.seeding import derive_seed

    ref = QueryRefOptions.filled(options)
    loaded, keep = read_dataset(data), read_splits(splits)
    named_seed = derive_seed(seed, "query-ref", loaded.name, arch_name)
    points = evaluated_points(keep.target_samples, ref.boundary_eva_num, named_seed)
    references, targets = keep.models("reference"), keep.models("target")
    weights, arch = {}, None
    for path in models:
        shard, metadata = load_shard(path)
        weights.update({m: w for m, w in shard.items() if m in references + targets})
        arch = metadata["arch"]
    with compute_session(arch, threads):
        table = reference_canaries(
            torch_modules(weights, arch, loaded.feature_shape, loaded.n_classes),
            references,
            targets,
            np.stack([keep.members(m)[points] for m in references]),
            loaded.features[points],
            loaded.labels[points],
            points,
            ref.n_canaries,
            ref.steps,
            named_seed,
        )
    io.write_parquet(canaries, table, {"data_hash": loaded.content_hash()})
