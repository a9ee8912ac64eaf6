"""Jobs of stage llm: attacks on language models (rules/llm.smk), adapting files to
`miaflow.llm` and `miaflow.attacks.llm_inputs`: per experiment the split table, the models, each
model's cached tables on the texts it is attacked on (`miaflow.llm.tables`), the sentence
embeddings and neighbours of those texts, then every attack's scores and metrics.
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
    """The settings table (one file or none): with it, models score the benchmark settings."""
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
    dataset = read_dataset(data)
    labels = dataset.labels if membership == "labels" else None
    table = corpus.draw_splits(
        len(dataset.labels),
        repeats=repeats,
        n_eval=n_eval,
        n_shots=n_shots,
        reference_ratio=reference_ratio,
        seed=seed,
        membership_labels=labels,
        subset=n_texts,
    )
    log.info("%s", table.groupby(["repeat", "set"]).size().to_dict())
    io.write_parquet(splits, table)


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
    tokenizer: str | None = None,
    base_checkpoint: str | None = None,
    base: str | None = None,
) -> None:
    """Train a scratch model (from `tokenizer`) or fine-tune a pretrained one (`base_checkpoint`
    converted by the workflow, or `base`, a directory or hub name) on the model's texts: a target
    on its repeat's members, the reference on the reference share."""
    from miaflow.llm import models

    trained_on, held_out = scored.training_texts(io.read_parquet(splits), _texts(data), model_id)
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
) -> None:
    """Neighbour texts of every scored text (miaflow.llm.neighbors), with their seed's name."""
    from miaflow.llm.neighbors import scored_neighbors

    table, texts = io.read_parquet(splits), _texts(data)
    with torch_session(threads):  # the masked LM's
        frame = scored_neighbors(table, texts, dict(options), seed)
    io.write_parquet(neighbors, frame)


def llm_embeddings(
    *, data: str | Path, splits: str | Path, embeddings: str | Path, threads: int
) -> None:
    """MiniLM sentence embeddings of every scored text and shot of every repeat, for the blind
    baselines: no target or reference model is loaded."""
    from miaflow.llm.blind import EMBEDDING_MODEL
    from miaflow.llm.tables import embedding_table
    from miaflow.pretrained import embed

    table, texts = io.read_parquet(splits), _texts(data)
    ids = np.unique(table.loc[table["set"].isin(["eval", "shot"]), "sample_id"].to_numpy())
    with torch_session(threads):
        vectors = embed(list(texts[ids]), EMBEDDING_MODEL)
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
    tokens: str | Path | None = None,
    lowercase_tokens: str | Path | None = None,
    neighbor_tokens: str | Path | None = None,
    recall: str | Path | None = None,
    pairs: str | Path | None = None,
    shard: int,
    n_shards: int,
    dtype: str,
    scoring: Mapping[str, Any],
    threads: int,
) -> None:
    """What one model (its checkpoint `model` made by the workflow, else the `pretrained`
    directory or hub name) gives on one scored set (`eval`: the texts it is attacked on;
    `settings`: the texts of EM-MIA's benchmark settings, `settings` their table), each table
    the rule asks for (miaflow.llm.tables): the token statistics of the texts, of their
    lower-cased copies, of their neighbours (log-likelihoods only), ReCaLL's conditional
    likelihoods, and shard `shard` of `n_shards` of EM-MIA's pair matrix. One job loads the
    model once for all of them."""
    from miaflow.llm.tables import ModelScorer

    table, texts, drawn = io.read_parquet(splits), _texts(data), _settings(settings)
    ids, attacked = scored.scored(table, texts, model_id, drawn)
    repeat, separator = scored.repeat_of(model_id), scoring["separator"]
    with torch_session(threads):
        scorer = ModelScorer.load(str(model[0]) if model else pretrained, model_id, dtype, scoring)
        if tokens is not None:
            io.write_parquet(tokens, scorer.tokens(ids, attacked, scored_set, vocab=True))
        if lowercase_tokens is not None:
            lowered = [text.lower() for text in attacked]
            result = scorer.tokens(ids, lowered, f"{scored_set}-lowercase", vocab=False)
            io.write_parquet(lowercase_tokens, result)
        if neighbor_tokens is not None:
            result = scorer.neighbor_tokens(
                io.read_parquet(neighbors[0]), ids, f"{scored_set}-neighbors"
            )
            io.write_parquet(neighbor_tokens, result)
        if recall is not None:
            shots = list(texts[corpus.select(table, repeat, "shot")["sample_id"]])
            metadata = {"separator": separator, "n_shots": str(len(shots))}
            io.write_parquet(recall, scorer.recall(ids, attacked, shots), metadata=metadata)
        if pairs is not None:
            frame = scorer.pairs(scored.draws(table, texts, repeat, drawn), shard, n_shards)
            io.write_parquet(pairs, frame, metadata={"separator": separator})


def llm_scores(
    *,
    data: str | Path,
    splits: str | Path,
    target_tokens: Paths,
    reference_tokens: Paths,
    lowercase_tokens: Paths,
    neighbor_tokens: Paths,
    recall: Paths,
    pairs: Paths,
    embeddings: Paths,
    settings: Paths = (),
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
) -> None:
    """Every configured attack on every scored set of every target model (repeat): scores and
    metrics. The scored sets are the repeats' eval sets, or with the settings table (rule
    llm_setting_scores) each of EM-MIA's benchmark settings, an experiment of its own labelled
    "<target>/<setting>" (e.g. "gpt2_tiny/easy", "gpt2_small/hard/24w"), whose blind baselines
    read the embeddings of the texts as scored (`setting_embeddings`, cut to a setting's length)
    and of the shots (`embeddings`). Where the rule asks: ROC curves, the EM-MIA iterates' AUROC
    (a diagnostic that uses the labels) and the share of targets whose ReCaLL prefix lost shots
    (in the form `llm-recall` scores)."""
    from miaflow.attacks import llm_inputs
    from miaflow.evaluation.metrics import roc_table, score_metrics

    table, texts, drawn = io.read_parquet(splits), _texts(data), _settings(settings)
    cached = llm_inputs.CachedFiles(
        target_tokens,
        reference_tokens,
        lowercase_tokens,
        neighbor_tokens,
        recall,
        pairs,
        pair_shards,
    )
    shots_embedded = llm_inputs.embedding_rows(embeddings)
    texts_embedded = (
        shots_embedded if drawn is None else llm_inputs.embedding_rows(setting_embeddings)
    )
    scored_table, per_iteration, fits = llm_inputs.score_experiment(
        table,
        texts,
        drawn,
        cached,
        attacks,
        options,
        seed,
        dataset,
        label,
        (texts_embedded, shots_embedded),
        diagnostics=iterates is not None,
    )
    io.write_parquet(scores, scored_table)
    io.write_parquet(metrics, score_metrics(scored_table, tuple(fpr_levels), confidence))
    if iterates is not None:  # the eval sets' rule writes the diagnostics and the ROC curves
        io.write_parquet(iterates, per_iteration)
        io.write_parquet(roc, roc_table(scored_table))
        io.write_parquet(prefix_fit, fits)


def llm_separability(
    *,
    data: str | Path,
    splits: str | Path,
    settings: Paths = (),
    embeddings: Paths = (),
    setting_embeddings: Paths = (),
    separability: str | Path,
    dataset: str,
    label: str,
    repeats: int,
    seed: int,
) -> None:
    """What the selection alone gives: a labelled model-free classifier's cross-fitted scores
    of the texts of every scored set, on words and, where the blind baselines embedded the
    texts, on their sentence embeddings (miaflow.llm.separability; not an attack)."""
    from miaflow.attacks.llm_inputs import embedding_rows
    from miaflow.llm.separability import labelled_draws, selection_scores

    table, texts = io.read_parquet(splits), _texts(data)
    frames = [
        selection_scores(
            labelled_draws(table, texts, drawn, label, repeats), dataset, vectors, seed=seed
        )
        for drawn, vectors in [(None, embedding_rows(embeddings))]
        + ([(_settings(settings), embedding_rows(setting_embeddings))] if settings else [])
    ]
    io.write_parquet(separability, pd.concat(frames, ignore_index=True))
