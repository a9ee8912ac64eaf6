"""One function per workflow rule: read artifacts, call the library, write artifacts.

The files in `scripts/` only unpack Snakemake's `snakemake` object into these calls, so every
job can also be run (and tested) from plain Python.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from miaflow import io

log = logging.getLogger(__name__)
Paths = Sequence[str | Path]


@contextmanager
def job_log(path: str | Path | None) -> Iterator[None]:
    """Send this job's log records (and warnings) to the rule's log file."""
    handler: logging.Handler = logging.FileHandler(path, mode="w") if path else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield
    except Exception:
        log.exception("job failed")
        raise
    finally:
        root.removeHandler(handler)
        handler.close()


def read_splits(path: str | Path):
    from miaflow.splits import Splits

    return Splits.from_table(pq.read_table(path))


def prepare_dataset(name: str, options: Mapping[str, Any], splits: Mapping[str, Any], seed: int,
                    output: str | Path, splits_out: str | Path) -> None:
    """Load (or generate) a dataset and store it, then draw its target/auxiliary pools and every
    model's membership (`splits`, the TDDBench protocol) from it, in one job."""
    from miaflow.data import load_dataset, write_dataset
    from miaflow.splits import make_splits

    dataset = load_dataset(name, options, seed)
    log.info("%s: %s samples, %d classes, features %s", name, len(dataset.labels),
             dataset.n_classes, dataset.features.shape[1:])
    write_dataset(output, dataset)
    drawn = make_splits(len(dataset.labels), seed=seed, dataset=name, **splits)
    log.info("%s: |T| = %d, |A| = %d, %d models", name, len(drawn.target_samples),
             len(drawn.auxiliary_samples), len(drawn.model_ids))
    # The hash of the data as stored: read_dataset checks that it equals the in-memory one.
    io.write_parquet(splits_out, drawn.to_table(), metadata={"data_hash": dataset.content_hash()})


def train_shard(data: str | Path, splits: str | Path, model_ids: Sequence[str], dataset: str,
                arch_name: str, arch: Mapping[str, Any], seed: int, threads: int,
                models_out: str | Path, records_out: str | Path, signals_out: str | Path) -> None:
    """Train one shard, save it, and cache its models' outputs on all samples (`signals_out`) in
    the same job and GPU slot, so that data and torch load once. The signals are computed from
    the shard as saved, so they equal those `compute_signals` computes from the file."""
    from miaflow.data import read_dataset
    from miaflow.training import save_shard, train_models

    loaded = read_dataset(data)
    with _compute_session(arch, threads):
        weights, records = train_models(loaded, read_splits(splits), model_ids, arch_name, arch,
                                        seed, threads)
        data_hash = loaded.content_hash()
        save_shard(models_out, weights, {"arch_name": arch_name, "arch": dict(arch),
                                         "n_classes": loaded.n_classes,
                                         "data_hash": data_hash, "seed": seed})
        io.write_json(records_out, [{"dataset": dataset, "arch": arch_name, **asdict(r)}
                                    for r in records])
        _write_signals(loaded, data_hash, models_out, signals_out)


def compute_signals(data: str | Path, models: str | Path, threads: int, output: str | Path) -> None:
    """Every model's outputs on all samples (logits and derived signals) of a saved shard."""
    from miaflow.data import read_dataset
    from miaflow.training import load_shard

    _, metadata = load_shard(models)
    with _compute_session(metadata["arch"], threads):
        loaded = read_dataset(data)
        _write_signals(loaded, loaded.content_hash(), models, output)


def _write_signals(loaded, data_hash: str, models: str | Path, output: str | Path) -> None:
    """The signal shard of the saved model shard `models` (run inside a compute session);
    `data_hash` is `loaded`'s content hash, passed in so that a job computes it once."""
    from miaflow.signals import outputs_table, write_signal_shard
    from miaflow.training import load_shard, shard_logits

    weights, metadata = load_shard(models)
    logits = shard_logits(weights, metadata, loaded.features)
    table = outputs_table(metadata["model_ids"], np.arange(len(loaded.labels)), loaded.labels, logits)
    write_signal_shard(output, table, {"data_hash": data_hash,
                                       "models_sha256": io.sha256_file(models)})


def _signal_stores(splits: str | Path, signals: Paths, reference_signals: Paths):
    """The splits, the target models' signal store and the reference models' one (the same
    store unless the references have another architecture), after checking that every shard
    was computed on the data the splits were drawn from."""
    from miaflow.signals import SignalStore

    expected = io.read_parquet_metadata(splits)["data_hash"]
    for path in [*signals, *reference_signals]:
        if io.read_parquet_metadata(path)["data_hash"] != expected:
            raise ValueError(f"{path} was computed on other data than the splits {splits}")
    store = SignalStore.read(list(signals))
    same = sorted(map(str, signals)) == sorted(map(str, reference_signals))
    return read_splits(splits), store, store if same else SignalStore.read(list(reference_signals))


def _artifacts_by_attack(artifact_names: Sequence[tuple[str, str]],
                         artifacts: Paths) -> dict[str, dict[str, str | Path]]:
    """{attack: {artifact name: path}} from the rule's parallel lists of names and paths."""
    extra: dict[str, dict[str, str | Path]] = {}
    for (attack, name), path in zip(artifact_names, artifacts):
        extra.setdefault(attack, {})[name] = path
    return extra


def _attack_frame(attack: str, keep, store, reference_store, options: Mapping[str, Any],
                  dataset: str, arch: str, seed: int,
                  artifacts: Mapping[str, str | Path] | None) -> pd.DataFrame:
    """Scores of one attack against every target model (repeat) of one experiment. Samples a
    `subset` attack did not evaluate (NaN scores) are left out."""
    from miaflow.attacks import ATTACKS, attack_inputs, run_attack
    from miaflow.seeding import derive_seed

    frames = []
    for repeat in range(len(keep.models("target"))):
        inputs, is_member = attack_inputs(
            store, keep, repeat, options, seed=derive_seed(seed, "attack", dataset, arch, attack, repeat),
            extra=artifacts, reference_store=reference_store)
        scores = run_attack(attack, inputs)
        evaluated = ~np.isnan(scores) if ATTACKS[attack].subset else np.ones(len(scores), bool)
        frames.append(pd.DataFrame({
            "dataset": dataset, "target_model": arch, "attack": attack, "repeat": repeat,
            "sample_id": keep.target_samples[evaluated], "score": scores[evaluated],
            "is_member": is_member[evaluated],
        }))
    return pd.concat(frames, ignore_index=True)


def score_attacks(splits: str | Path, signals: Paths, reference_signals: Paths,
                  attacks: Sequence[str], options: Mapping[str, Mapping[str, Any]], dataset: str,
                  arch: str, seed: int, artifacts: Paths, artifact_names: Sequence[tuple[str, str]],
                  output: str | Path, timings_out: str | Path, *, metrics_out: str | Path | None = None,
                  roc_out: str | Path | None = None, fpr_levels: Sequence[float] = (),
                  confidence: float | None = None) -> None:
    """Scores of every attack of one experiment, in one job: the signal stores are read once and
    one interpreter start serves all attacks (per-job start-up dominated one job per attack).
    With `metrics_out` and `roc_out` the job also writes the metrics (at `fpr_levels`, with
    `confidence` intervals) and ROC curves of the scores it wrote (`compute_metrics`).

    `signals` are the shards of the target models' architecture, `reference_signals` those of
    the reference models' one (the same files unless the experiment sets `ref_arch`);
    `artifacts` are the attacks' extra files, named by the (attack, name) pairs of
    `artifact_names`. Each attack's wall and CPU seconds go to `timings_out` (a run record, like
    Snakemake's benchmark files), so that costs can still be compared per attack.
    """
    keep, store, reference_store = _signal_stores(splits, signals, reference_signals)
    extra = _artifacts_by_attack(artifact_names, artifacts)
    frames, timings = [], []
    for attack in attacks:
        wall, cpu = time.perf_counter(), time.process_time()
        frames.append(_attack_frame(attack, keep, store, reference_store, options.get(attack, {}),
                                    dataset, arch, seed, extra.get(attack)))
        timings.append({"attack": attack, "s": time.perf_counter() - wall,
                        "cpu_time": time.process_time() - cpu})
        log.info("%s: %.1f s", attack, timings[-1]["s"])
    io.write_parquet(output, pd.concat(frames, ignore_index=True))
    io.write_text(timings_out, pd.DataFrame(timings).to_csv(sep="\t", index=False))
    if metrics_out is not None:
        compute_metrics(output, fpr_levels, confidence, metrics_out, roc_out)


def scaling_sweep(splits: str | Path, signals: Paths, reference_signals: Paths,
                  reference_attacks: Sequence[str], reference_counts: Sequence[int],
                  query_attacks: Mapping[str, Sequence[int]], artifacts: Paths,
                  artifact_names: Sequence[tuple[str, str]],
                  options: Mapping[str, Mapping[str, Any]], dataset: str, arch: str, seed: int,
                  output: str | Path) -> None:
    """TDDBench Fig. 4: AUROC per target model when attacks use only the first k reference models
    (`axis` "reference models") or only the first k of their extra queries ("queries").

    `query_attacks` maps each swept query attack to its counts; `artifacts` are their files,
    named by the (attack, artifact name) pairs of `artifact_names`.
    """
    from sklearn.metrics import roc_auc_score

    from miaflow.attacks import attack_inputs, run_attack
    from miaflow.seeding import derive_seed

    keep, store, reference_store = _signal_stores(splits, signals, reference_signals)
    extra = _artifacts_by_attack(artifact_names, artifacts)
    plan = [("reference models", attack, count, {"n_reference": count}, {})
            for count in reference_counts for attack in reference_attacks]
    plan += [("queries", attack, count, {}, {"queries_used": count})
             for attack, counts in query_attacks.items() for count in counts]
    rows = []
    for repeat in range(len(keep.models("target"))):
        for axis, attack, count, subset, option in plan:
            inputs, is_member = attack_inputs(
                store, keep, repeat, {**options.get(attack, {}), **option},
                seed=derive_seed(seed, "attack", dataset, arch, attack, repeat),
                extra=extra.get(attack), reference_store=reference_store, **subset)
            scores = run_attack(attack, inputs)
            evaluated = ~np.isnan(scores)
            auroc = roc_auc_score(is_member[evaluated], scores[evaluated])
            rows.append((dataset, arch, attack, repeat, axis, count, float(auroc)))
    io.write_parquet(output, pd.DataFrame(rows, columns=["dataset", "target_model", "attack",
                                                         "repeat", "axis", "count", "auroc"]))


def compute_metrics(scores: str | Path, fpr_levels: Sequence[float], confidence: float,
                    metrics_out: str | Path, roc_out: str | Path) -> None:
    """Metrics and ROC curves of every attack and target model of one experiment's score table
    (read back from its file, so they are those of the scores as stored)."""
    from miaflow.metrics import roc_table, score_metrics

    table = pd.read_parquet(scores)
    io.write_parquet(metrics_out, score_metrics(table, tuple(fpr_levels), confidence))
    io.write_parquet(roc_out, roc_table(table))


def collect_metrics(parts: Paths, output: str | Path, summary_out: str | Path) -> None:
    """The `results/metrics.parquet` contract and DVC's metrics file (mean over repeats)."""
    from miaflow.metrics import summary

    metrics = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    io.write_parquet(output, metrics)
    means = summary(metrics)
    headline = means[means["metric"].isin(["auroc", "tpr_at_1pct_fpr"])]
    nested: dict[str, Any] = {}
    for row in headline.itertuples(index=False):
        experiment = nested.setdefault(f"{row.dataset}/{row.target_model}", {})
        experiment.setdefault(row.attack, {})[row.metric] = round(float(row.mean), 6)
    io.write_json(summary_out, nested)


def collect_models(records: Paths, output: str | Path) -> None:
    rows = [row for path in records for row in io.read_json(path)]
    io.write_parquet(output, pd.DataFrame(rows))


def paired_tests(metrics: str | Path, metrics_tested: Sequence[str], alpha: float,
                 output: str | Path) -> None:
    from miaflow.stats import paired_tests as run_tests

    io.write_parquet(output, run_tests(pd.read_parquet(metrics), tuple(metrics_tested), alpha))


def make_tables(metrics: str | Path, tests: str | Path, models: str | Path, tables_dir: str | Path,
                figures: Mapping[tuple[str, str], str | Path], roc: Paths) -> None:
    """Paper tables (csv, md, tex) and one log-log ROC figure per (dataset, arch) experiment."""
    from miaflow import tables
    from miaflow.metrics import summary

    tables_dir = Path(tables_dir)
    means = summary(pd.read_parquet(metrics))
    for name, table in [("auroc", tables.auroc_table(means)),
                        ("accuracy", tables.accuracy_table(pd.read_parquet(models))),
                        ("tests", tables.tests_table(pd.read_parquet(tests)))]:
        tables.write_table(table, tables_dir / name, table.attrs["caption"])
    curves = pd.concat([pd.read_parquet(p) for p in roc], ignore_index=True)
    auroc = means[means["metric"] == "auroc"]
    for (dataset, arch), path in figures.items():
        mine = (curves["dataset"] == dataset) & (curves["target_model"] == arch)
        chosen = auroc[(auroc["dataset"] == dataset) & (auroc["target_model"] == arch)]
        tables.plot_roc_loglog(curves[mine], path, f"{dataset} / {arch}",
                               auroc=dict(zip(chosen["attack"], chosen["mean"])))


def study_tables(metrics: str | Path, models: str | Path, sweeps: Paths, attack_timings: Paths,
                 tables_dir: str | Path, experiments: Sequence[tuple[str, str]],
                 gap_figure: str | Path, sweep_figures: Paths) -> None:
    """TDDBench's further tables and figures: AUROC across architectures (Table 5), with
    references of another architecture (Table 6), attack families with cost (Table 7), all metrics per experiment (Tables 14–16), AUROC against the
    generalisation gap (Fig. 2) and against the number of reference models (Fig. 4)."""
    from miaflow import tables
    from miaflow.attacks import ATTACKS
    from miaflow.metrics import summary

    tables_dir = Path(tables_dir)
    long = pd.read_parquet(metrics)
    means = summary(long)
    families = {name: attack.family for name, attack in ATTACKS.items()}
    timings = pd.concat([pd.read_csv(p, sep="\t") for p in attack_timings], ignore_index=True)
    named = [("by_architecture", tables.auroc_by_architecture(means)),
             ("families", tables.family_table(means, timings, families)),
             ("reference_mismatch", tables.reference_mismatch_table(means)),
             *[(f"metrics-{d}-{a}", tables.all_metrics_table(means, d, a)) for d, a in experiments]]
    for name, table in named:
        tables.write_table(table, tables_dir / name, table.attrs["caption"])
    tables.plot_auroc_vs_gap(long, pd.read_parquet(models), families, gap_figure)
    for (dataset, arch), sweep, figure in zip(experiments, sweeps, sweep_figures):
        tables.plot_scaling_sweep(pd.read_parquet(sweep), figure, f"{dataset} / {arch}")


def cost_table(benchmarks: Paths, root: str | Path, output_stem: str | Path) -> None:
    from miaflow import tables

    table = tables.cost_table(tables.read_benchmarks([Path(p) for p in benchmarks], Path(root)))
    tables.write_table(table, output_stem, table.attrs["caption"])


@contextmanager
def _compute_session(arch: Mapping[str, Any], threads: int) -> Iterator[None]:
    """For torch models: hold a free GPU (if any), use the job's threads, stay deterministic.

    Other kinds (LR, CatBoost) run on CPU and never take a GPU slot.
    """
    from miaflow.workflow import TORCH_KINDS

    if arch["kind"] not in TORCH_KINDS:
        yield
        return
    from miaflow.gpu import gpu_slot

    with gpu_slot():
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # needed by deterministic cuBLAS
        import torch

        torch.set_num_threads(threads)
        use_deterministic_algorithms(compiled=bool(arch.get("compile")))
        torch.backends.cudnn.benchmark = False
        yield


def use_deterministic_algorithms(compiled: bool) -> None:
    """`torch.use_deterministic_algorithms(True, warn_only=True)`, without its start-up cost
    where nothing is compiled: the public call also sets inductor's flag and imports
    `torch._inductor` to do so (about 2 s per job), so an uncompiled job sets the kernel flag
    alone, the call's only other effect."""
    import torch

    if compiled:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=True)


# --- query attacks that train models or optimise inputs (miaflow.query_models) ----------------

def query_transfer(data: str | Path, splits: str | Path, signals: Paths, arch_name: str,
                   arch: Mapping[str, Any], options: Mapping[str, Any], seed: int, threads: int,
                   output: str | Path) -> None:
    """Query-transfer: per target, a surrogate trained on pool T relabelled by the target's
    predictions (argmax of its cached logits); writes the surrogates' outputs on T."""
    from miaflow.data import read_dataset
    from miaflow.query_models import TRANSFER_DEFAULTS, options_with_defaults, surrogate_logits
    from miaflow.seeding import derive_seed
    from miaflow.signals import SignalStore, outputs_table

    options = options_with_defaults(options, TRANSFER_DEFAULTS)
    loaded, keep = read_dataset(data), read_splits(splits)
    pool, targets = keep.target_samples, keep.models("target")
    predicted = SignalStore.read(list(signals)).matrix(targets, "logits", pool).argmax(axis=-1)
    with _compute_session(arch, threads):
        logits = np.stack([
            surrogate_logits(arch, loaded.features[pool], predicted[t], loaded.n_classes,
                             options["val_ratio"],
                             derive_seed(seed, "query-transfer", loaded.name, arch_name, target),
                             threads, f"surrogate-of-{target}")
            for t, target in enumerate(targets)])
    io.write_parquet(output, outputs_table(targets, pool, loaded.labels[pool], logits),
                     {"data_hash": loaded.content_hash()})


def query_qrm(data: str | Path, splits: str | Path, signals: Paths, arch_name: str,
              arch: Mapping[str, Any], options: Mapping[str, Any], seed: int, threads: int,
              output: str | Path) -> None:
    """Query-qrm: per target, a Gaussian regressor of its score on the auxiliary pool A (known
    non-members); writes (mu, log sigma) on T and, as metadata, which signal was regressed."""
    from miaflow.data import read_dataset
    from miaflow.query_models import QRM_DEFAULTS, QRM_SIGNAL, options_with_defaults, quantile_regression
    from miaflow.seeding import derive_seed
    from miaflow.signals import SignalStore

    options = options_with_defaults(options, QRM_DEFAULTS)
    loaded, keep = read_dataset(data), read_splits(splits)
    pool, auxiliary, targets = keep.target_samples, keep.auxiliary_samples, keep.models("target")
    signal = QRM_SIGNAL[arch["kind"]]
    scores = SignalStore.read(list(signals)).matrix(targets, signal, auxiliary)
    frames = []
    with _compute_session(arch, threads):
        for target, score in zip(targets, scores):
            mu, log_sigma = quantile_regression(
                arch, loaded.features[auxiliary], score, loaded.features[pool], options,
                derive_seed(seed, "query-qrm", loaded.name, arch_name, target), threads)
            frames.append(pd.DataFrame({"model_id": target, "sample_id": pool,
                                        "mu": mu.astype(np.float64),
                                        "log_sigma": log_sigma.astype(np.float64)}))
    io.write_parquet(output, pd.concat(frames, ignore_index=True),
                     {"data_hash": loaded.content_hash(), "signal": signal})


def query_ref(data: str | Path, splits: str | Path, models: Paths, arch_name: str,
              options: Mapping[str, Any], seed: int, threads: int, output: str | Path) -> None:
    """Query-ref: canaries for the evaluated points of T, optimised on the reference models;
    writes phi of every canary under every reference and every target model."""
    from miaflow.data import read_dataset
    from miaflow.query_models import (REF_DEFAULTS, canary_anchors, canary_table, evaluated_points,
                                      optimise_canaries, options_with_defaults, torch_models)
    from miaflow.seeding import derive_seed, rng
    from miaflow.training import load_shard

    options = options_with_defaults(options, REF_DEFAULTS)
    loaded, keep = read_dataset(data), read_splits(splits)
    named_seed = derive_seed(seed, "query-ref", loaded.name, arch_name)
    points = evaluated_points(keep.target_samples, int(options["boundary_eva_num"]), named_seed)
    references, targets = keep.models("reference"), keep.models("target")
    weights, arch = {}, None
    for path in models:
        shard, metadata = load_shard(path)
        weights.update({m: w for m, w in shard.items() if m in references + targets})
        arch = metadata["arch"]
    with _compute_session(arch, threads):
        modules = torch_models(weights, arch, loaded.feature_shape, loaded.n_classes)
        reference_keep = np.stack([keep.members(m)[points] for m in references])
        anchors = canary_anchors(loaded.features[points], int(options["n_canaries"]),
                                 rng(named_seed, "augmentations"))
        canaries = optimise_canaries([modules[m] for m in references], reference_keep, anchors,
                                     loaded.labels[points], int(options["steps"]),
                                     rng(named_seed, "reference-draws"))
        ids = references + targets
        table = canary_table(ids, [modules[m] for m in ids], canaries, points, loaded.labels[points])
    log.info("query-ref: %d points x %d canaries", len(points), int(options["n_canaries"]))
    io.write_parquet(output, table, {"data_hash": loaded.content_hash()})


# --- query-based attacks -------------------------------------------------------------------------

def make_queries(data: str | Path, splits: str | Path, dataset: str,
                 neighbour: Mapping[str, Any], augment: Mapping[str, Any], seed: int,
                 output: str | Path) -> None:
    """Neighbour and augmentation queries of the target pool (Query-neighbor/-augment/-adv)."""
    from miaflow.data import read_dataset
    from miaflow.queries import info_metadata
    from miaflow.queries import make_queries as generate

    loaded = read_dataset(data)
    pool = read_splits(splits).target_samples
    queries = generate(loaded.features[pool], pool, loaded.modality, seed, dataset,
                       neighbour, augment)
    log.info("%s: %s queries over %d samples", dataset,
             {kind: len(v) for kind, v in queries.features.items()}, len(pool))
    io.write_parquet(output, queries.to_table(),
                     {"data_hash": loaded.content_hash(), **info_metadata(queries.info)})


def query_signals(data: str | Path, queries: str | Path, models: Paths, threads: int,
                  output: str | Path) -> None:
    """Outputs (logits and signals) of every target and the shadow model g_0 on every query."""
    from miaflow.data import read_dataset
    from miaflow.queries import query_outputs, read_queries
    from miaflow.splits import role_of
    from miaflow.training import load_shard, shard_logits

    loaded = read_dataset(data)
    meta = io.read_parquet_metadata(queries)
    if meta["data_hash"] != loaded.content_hash():
        raise ValueError(f"{queries} was generated from other data than {data}")
    blocks = read_queries(pq.read_table(queries), loaded.feature_shape)
    shards = [load_shard(path) for path in models]
    wanted = [(weights, {**metadata, "model_ids": [m for m in metadata["model_ids"]
                                                    if role_of(m) == "target" or m == "reference-0"]})
              for weights, metadata in shards]
    model_ids = [m for _, metadata in wanted for m in metadata["model_ids"]]

    def logits_of(features: np.ndarray) -> np.ndarray:
        return np.concatenate([shard_logits(w, m, features) for w, m in wanted if m["model_ids"]])

    with _compute_session(shards[0][1]["arch"], threads):
        table = query_outputs(blocks, loaded.labels, model_ids, logits_of)
    log.info("%d models x %d query blocks", len(model_ids), len(blocks))
    io.write_parquet(output, table, {"data_hash": meta["data_hash"], "queries": meta["queries"]})


def hsj_distances(data: str | Path, splits: str | Path, models: Paths, dataset: str, arch: str,
                  options: Mapping[str, Any], seed: int, threads: int, output: str | Path) -> None:
    """Query-adv (image): HopSkipJump boundary distances of every target on the evaluated subset.

    Other modalities need no distances (Query-adv is mean correctness under noise there): the
    table is written empty so that the rule's output exists for every experiment.
    """
    from miaflow.data import read_dataset
    from miaflow.hopskipjump import PAPER, Budget, boundary_distances
    from miaflow.queries import evaluated_subset
    from miaflow.seeding import derive_seed
    from miaflow.splits import role_of
    from miaflow.training import load_shard

    loaded = read_dataset(data)
    opts = {**PAPER, **options}
    frames = [pd.DataFrame({"model_id": pd.Series(dtype=str), "sample_id": pd.Series(dtype=np.int64),
                            "distance": pd.Series(dtype=np.float64),
                            "success": pd.Series(dtype=bool)})]
    if loaded.modality == "image":
        subset = np.sort(evaluated_subset(read_splits(splits).target_samples,
                                          int(opts["boundary_eva_num"]), seed, dataset))
        budget = Budget(*(int(opts[k]) for k in ("max_iter", "max_eval", "init_eval", "init_size")))
        for path in models:
            weights, metadata = load_shard(path)
            with _compute_session(metadata["arch"], threads):
                for model in (m for m in metadata["model_ids"] if role_of(m) == "target"):
                    logits_of = _torch_classifier(metadata, weights[model], loaded.feature_shape)
                    distance, success = boundary_distances(
                        logits_of, loaded.features[subset], loaded.labels[subset], budget,
                        int(opts["batch_size"]), derive_seed(seed, "queries", dataset, arch, "hsj", model))
                    log.info("%s: %d points, %d attacks succeeded, mean distance %.4f", model,
                             len(subset), success.sum(), distance.mean())
                    frames.append(pd.DataFrame({"model_id": model, "sample_id": subset,
                                                "distance": distance, "success": success}))
    io.write_parquet(output, pd.concat(frames, ignore_index=True),
                     {"data_hash": loaded.content_hash(), "hsj": json.dumps(opts, sort_keys=True)})


def _torch_classifier(metadata: Mapping[str, Any], weights: Mapping[str, np.ndarray],
                      feature_shape: tuple[int, ...]):
    """A function from a torch batch to logits, for any model kind (torch modules built once)."""
    import torch

    from miaflow.training import LEARNERS, torch_device
    from miaflow.workflow import TORCH_KINDS

    arch, n_classes = metadata["arch"], metadata["n_classes"]
    if arch["kind"] not in TORCH_KINDS:
        learner = LEARNERS[arch["kind"]]
        return lambda x: torch.from_numpy(learner.logits(arch, weights, x.numpy(), n_classes))
    from miaflow.models import build_torch_model

    device = torch_device()
    model = build_torch_model(arch, feature_shape, n_classes)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    model = model.to(device).eval()
    return lambda x: model(x.to(device)).float().cpu()
