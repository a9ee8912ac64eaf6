"""Jobs of stage llm (rules/llm.smk), adapting files to `miaflow.llm` and
`miaflow.attacks.llm_inputs`: per experiment the split table (and any traps), the models, each
model's cached tables on the texts it is attacked on (`miaflow.llm.statistics`), the sentence
embeddings and neighbours of those texts, every attack's scores and metrics, dataset inference.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.data import read_dataset
from miaflow.jobs.common import Paths, torch_session
from miaflow.llm import corpus, scored
from miaflow.seeding import derive_seed

log = logging.getLogger(__name__)


def _texts(data: str | Path) -> np.ndarray:
    return read_dataset(data).features


def _settings(settings: Paths) -> pd.DataFrame | None:
    """A table given as one file or none: the settings, traps or neighbours, if the rule has it."""
    return io.read_parquet(settings[0]) if settings else None


def llm_splits(
    *,
    data: str | Path,
    splits: str | Path,
    membership: str,
    repeats: int,
    n_eval: int,
    n_shots: int,
    reference_ratio: float,
    n_texts: int | None,
    seed: int,
) -> None:
    """The split table (miaflow.llm.corpus); `membership` "labels" reads it from the corpus."""
    labels = read_dataset(data).labels
    table = corpus.draw_splits(
        len(labels),
        repeats=repeats,
        n_eval=n_eval,
        n_shots=n_shots,
        reference_ratio=reference_ratio,
        seed=seed,
        membership_labels=labels if membership == "labels" else None,
        subset=n_texts,
    )
    log.info("%s", table.groupby(["repeat", "set"]).size().to_dict())
    io.write_parquet(splits, table)


def llm_traps(
    *, data: str | Path, traps: str | Path, options: Mapping[str, Any], label: str, seed: int
) -> None:
    """A trap experiment's traps and twins (`miaflow.llm.traps.trap_table`), seeded by label."""
    from miaflow.llm.traps import trap_table

    table = trap_table(list(_texts(data)), seed=derive_seed(seed, "llm", "traps", label), **options)
    io.write_parquet(traps, table)


def llm_settings(
    *,
    data: str | Path,
    splits: str | Path,
    settings: str | Path,
    neighbors: str | Path,
    embeddings: str | Path,
    options: Mapping[str, Any],
    n_texts: int | None,
    neighbor_options: Mapping[str, Any],
    seed: int,
    threads: int,
) -> None:
    """EM-MIA's benchmark settings of every repeat (`miaflow.llm.settings`, MiniLM embeddings of
    the texts as scored), the neighbours of their texts (Neighbor attack) and the texts' MiniLM
    embeddings as scored (blind baselines)."""
    from miaflow.llm.settings import settings_artifacts
    from miaflow.llm.tables import embedding_table
    from miaflow.pretrained import MINILM_PACKAGE, embedder

    table, texts = io.read_parquet(splits), _texts(data)
    embed = embedder(MINILM_PACKAGE)  # whole texts are scored as they were clustered
    used = corpus.texts_used(len(texts), n_texts, seed)
    with torch_session(threads):
        drawn, ids, vectors, frame = settings_artifacts(
            table, texts, used, options, neighbor_options, seed, embed
        )
    io.write_parquet(settings, drawn)
    io.write_parquet(embeddings, embedding_table(ids, vectors), metadata={"model": MINILM_PACKAGE})
    io.write_parquet(neighbors, frame)


def llm_tokenizer(*, data: str | Path, tokenizer: str | Path, vocab_size: int) -> None:
    """A byte-level BPE tokenizer trained on the whole corpus (members and non-members alike)."""
    from miaflow.llm.models import train_tokenizer

    io.write_text(tokenizer, train_tokenizer(list(_texts(data)), vocab_size))


def llm_convert(*, checkpoint: str | Path, name: str, threads: int) -> None:
    """A packaged (GGUF) model as a plain safetensors checkpoint directory."""
    from miaflow.llm.models import convert_packaged

    with torch_session(threads):
        convert_packaged(name, checkpoint)


def llm_train(
    *,
    data: str | Path,
    splits: str | Path,
    checkpoint: str | Path,
    history: str | Path,
    recipe: Mapping[str, Any],
    model_id: str,
    seed: int,
    threads: int,
    traps: Paths = (),
    tokenizer: str | None = None,
    base_checkpoint: str | None = None,
    base: str | None = None,
) -> None:
    """Train a scratch model (from `tokenizer`) or fine-tune a pretrained one (`base_checkpoint`
    converted by the workflow, or `base`, a directory or hub name) on the model's texts: a target
    on its repeat's members and any traps, the reference on the reference share."""
    from miaflow.llm import models

    trained_on, held_out = scored.training_texts(
        io.read_parquet(splits), _texts(data), model_id, _settings(traps), seed
    )
    model_seed = derive_seed(seed, "llm", model_id)
    with torch_session(threads):
        model, lm_tokenizer = models.initial(recipe, tokenizer, base_checkpoint or base, model_seed)
        epochs = models.train(
            model, lm_tokenizer, trained_on, recipe, model_seed, held_out=held_out
        )
        models.save(model.cpu(), lm_tokenizer, checkpoint)
    io.write_json(history, epochs)


def llm_neighbors(
    *,
    data: str | Path,
    splits: str | Path,
    neighbors: str | Path,
    options: Mapping[str, Any],
    seed: int,
    threads: int,
    traps: Paths = (),
) -> None:
    """Neighbour texts of every scored text, or of a trap experiment's traps and twins
    (miaflow.llm.neighbors), with their seed's name."""
    from miaflow.llm.neighbors import scored_neighbors

    table, texts = io.read_parquet(splits), _texts(data)
    with torch_session(threads):  # the masked LM's
        frame = scored_neighbors(table, texts, dict(options), seed, _settings(traps))
    io.write_parquet(neighbors, frame)


def llm_embeddings(
    *,
    data: str | Path,
    splits: str | Path,
    embeddings: str | Path,
    threads: int,
    traps: Paths = (),
) -> None:
    """MiniLM sentence embeddings of every scored text (or trap and twin) and shot of every
    repeat, for the blind baselines: no target or reference model is loaded."""
    from miaflow.llm.blind import EMBEDDING_MODEL
    from miaflow.llm.tables import embedding_table
    from miaflow.pretrained import embed

    ids, embedded = scored.embedded(io.read_parquet(splits), _texts(data), _settings(traps))
    with torch_session(threads):
        vectors = embed(embedded, EMBEDDING_MODEL)
    io.write_parquet(embeddings, embedding_table(ids, vectors), metadata={"model": EMBEDDING_MODEL})


def llm_statistics(
    *,
    data: str | Path,
    splits: str | Path,
    model: Paths,
    pretrained: str | None,
    model_id: str,
    scored_set: str,
    neighbors: Paths = (),
    settings: Paths = (),
    traps: Paths = (),
    shard: int,
    n_shards: int,
    dtype: str,
    scoring: Mapping[str, Any],
    inputs: Mapping[str, Mapping[str, Any]],
    n_texts: int | None,
    seed: int,
    threads: int,
    **outputs: str | Path,
) -> None:
    """What one model (its checkpoint `model` made by the workflow, else the `pretrained` one)
    gives on one scored set (eval, settings, traps, or inference: a trained target's members and
    non-members), from one load: each `miaflow.llm.statistics.TABLES` the rule names as an
    output (`inputs`: the recent attacks' input options; `shard` of EM-MIA's matrix)."""
    from miaflow.llm import statistics
    from miaflow.llm.tables import ModelScorer

    dataset, table, drawn = read_dataset(data), io.read_parquet(splits), _settings(settings)
    tables = _settings(traps), _settings(neighbors)
    asked = statistics.scored(
        table, dataset, model_id, scored_set, drawn, *tables, inputs, n_texts, seed
    )
    with torch_session(threads):
        scorer = ModelScorer.load(str(model[0]) if model else pretrained, model_id, dtype, scoring)
        for name, result, metadata in statistics.tables(scorer, asked, outputs, shard, n_shards):
            io.write_parquet(outputs[name], result, metadata=metadata)


def llm_scores(
    *,
    data: str | Path,
    splits: str | Path,
    embeddings: Paths,
    settings: Paths = (),
    traps: Paths = (),
    setting_embeddings: Paths = (),
    scores: str | Path,
    metrics: str | Path,
    iterates: str | Path | None = None,
    roc: str | Path | None = None,
    prefix_fit: str | Path | None = None,
    dataset: str,
    label: str,
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    pair_shards: int,
    fpr_levels: Sequence[float],
    confidence: float,
    seed: int,
    **cached: Paths,
) -> None:
    """Every configured attack on every scored set of every target model (repeat), from the
    cached tables (`cached`: `miaflow.attacks.llm_inputs.CachedFiles.named`): scores, metrics.
    The scored sets: the repeats' eval sets, each of EM-MIA's benchmark settings (the settings
    table, "<target>/<setting>", e.g. "gpt2_tiny/easy") or each trap group (the traps table,
    "gpt2_traps/r16"). Blind baselines: the embeddings of the texts as scored (`setting_embeddings`,
    else `embeddings`) and of the shots. Where the rule asks: ROC curves, EM-MIA's iterates' AUROC
    (uses labels), the share of targets whose ReCaLL prefix lost shots (`llm-recall`'s form)."""
    from miaflow.attacks import llm_inputs
    from miaflow.evaluation.metrics import roc_table, score_metrics
    from miaflow.llm.blind import embedding_rows

    drawn, trap_table = _settings(settings), _settings(traps)
    shots = embedding_rows(embeddings)
    vectors = (shots if drawn is None else embedding_rows(setting_embeddings), shots)
    files, diagnostics = llm_inputs.CachedFiles.named(cached, pair_shards), iterates is not None
    run = llm_inputs.Scoring(dataset, label, attacks, options, seed)
    scored_table, per_iteration, fits = llm_inputs.score_experiment(
        io.read_parquet(splits), _texts(data), drawn, files, run, vectors, diagnostics, trap_table
    )
    io.write_parquet(scores, scored_table)
    io.write_parquet(metrics, score_metrics(scored_table, tuple(fpr_levels), confidence))
    if iterates is not None:  # the eval sets' rule writes the diagnostics and the ROC curves
        io.write_parquet(iterates, per_iteration)
        io.write_parquet(roc, roc_table(scored_table))
        io.write_parquet(prefix_fit, fits)


def llm_dataset_inference(**files_and_settings: Any) -> None:
    """Dataset inference on every target of a trained experiment, a row per test
    (`miaflow.llm.dataset_inference.write_tests`)."""
    from miaflow.llm.dataset_inference import write_tests

    write_tests(**files_and_settings)


def llm_separability(**files_and_settings: Any) -> None:
    """What the selection alone gives: a labelled model-free classifier's cross-fitted scores of
    every scored set's texts (`miaflow.llm.separability.write_separability`)."""
    from miaflow.llm.separability import write_separability

    write_separability(**files_and_settings)
