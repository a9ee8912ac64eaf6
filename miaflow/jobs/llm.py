"""Jobs of stage llm: attacks on language models (rules/llm.smk).

Per experiment (a corpus, a target and a reference recipe): the split table; the models (a
tokenizer and scratch models, or a packaged checkpoint converted once, fine-tuned); each model's
token statistics on the texts it is attacked on, their lower-cased copies and neighbours; ReCaLL's
conditional likelihoods and EM-MIA's pairwise matrix (in shards by prefix); sentence embeddings of
the scored texts and shots (blind baselines); then every attack's scores, metrics, ROC curves,
EM-MIA's iterates and the share of targets whose ReCaLL prefix was cut.

Over 400 lines because it holds one keyword-only function per rule of rules/llm.smk (stage = rule
file = jobs module), each adapting files to `miaflow.llm` and `miaflow.attacks.llm`, where the
logic is (the two scoring jobs read their inputs through `miaflow.attacks.llm_inputs`), and
the three table writers (token statistics, ReCaLL, a pair-matrix shard) that `llm_statistics`
shares with the reference's job and with `llm_pairs` from one loaded model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from miaflow import io
from miaflow.attacks import llm_inputs
from miaflow.data import read_dataset
from miaflow.jobs.common import Paths, torch_session
from miaflow.llm import corpus
from miaflow.seeding import derive_seed

log = logging.getLogger(__name__)

ITERATE_COLUMNS = ["dataset", "target_model", "repeat", "attack", "iteration", "auroc"]


def _texts(data: str | Path) -> np.ndarray:
    return read_dataset(data).features


def _repeat(model_id: str) -> int | None:
    """The repeat of a target model id (`target-<r>`); None for the shared reference."""
    return int(model_id.split("-")[1]) if model_id.startswith("target-") else None


def _scored_ids(splits: pd.DataFrame, model_id: str) -> np.ndarray:
    """Texts a model is attacked on: its repeat's scored set, or every repeat's (reference)."""
    repeat = _repeat(model_id)
    if repeat is None:
        return corpus.scored_texts(splits)
    return corpus.select(splits, repeat, "eval")["sample_id"].to_numpy()


def _scored(
    splits: pd.DataFrame, texts: np.ndarray, model_id: str, settings: Paths
) -> tuple[np.ndarray, list[str]]:
    """(sample ids, texts) a model is attacked on: its scored set (`_scored_ids`), or with the
    settings table (`settings`, one file or none), the texts of its repeat's settings (every
    repeat's for the reference), cut to their setting's length."""
    from miaflow.llm.settings import scored_of

    if settings:
        return scored_of(io.read_parquet(settings[0]), _repeat(model_id))
    ids = _scored_ids(splits, model_id)
    return ids, list(texts[ids])


def _draws(
    splits: pd.DataFrame, texts: np.ndarray, repeat: int, settings: Paths
) -> list[tuple[str, np.ndarray, np.ndarray, list[str]]]:
    """(label, sample ids, membership, texts) of each scored set of a repeat: its `eval` set
    ("eval"), or with the settings table, each of its settings (label "easy", "easy/24w", ...)."""
    from miaflow.llm.settings import draws

    if settings:
        return [
            (name, rows["sample_id"].to_numpy(), rows["is_member"].to_numpy(), list(rows["text"]))
            for name, rows in draws(io.read_parquet(settings[0]), repeat)
        ]
    rows = corpus.select(splits, repeat, "eval")
    ids = rows["sample_id"].to_numpy()
    return [("eval", ids, rows["is_member"].to_numpy(), list(texts[ids]))]


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
    names: Sequence[str],
    lengths: Sequence[int | None],
    n_eval: int,
    clusters: int,
    n_texts: int | None,
    neighbor_options: Mapping[str, Any],
    seed: int,
    threads: int,
) -> None:
    """EM-MIA's benchmark settings of every repeat (`miaflow.llm.settings`, MiniLM embeddings of
    the texts as scored), the neighbours of their texts (Neighbor attack) and the texts' MiniLM
    embeddings as scored (blind baselines; the scoring job then loads no model)."""
    from miaflow.llm import settings as benchmark
    from miaflow.llm.neighbors import generate
    from miaflow.pretrained import MINILM_PACKAGE, embedder

    table, texts = io.read_parquet(splits), _texts(data)
    embed = embedder(MINILM_PACKAGE)  # whole texts are scored as they were clustered
    with torch_session(threads):
        drawn = benchmark.settings_table(
            table,
            texts,
            corpus.texts_used(len(texts), n_texts, seed),
            names=names,
            lengths=lengths,
            n_eval=n_eval,
            clusters=clusters,
            seed=seed,
            embed=embed,
        )
    for (length, name), rows in drawn.groupby(["length", "setting"], sort=True):
        log.info(
            "length %s, %s: mean cosine distance members/non-members %.3f over %d repeats",
            length or "whole",
            name,
            rows["distance"].mean(),
            rows["repeat"].nunique(),
        )
    io.write_parquet(settings, drawn)
    ids, scored = benchmark.scored_of(drawn, None)
    with torch_session(threads):
        vectors = embed(scored)
    io.write_parquet(
        embeddings,
        pd.DataFrame({"sample_id": ids, "embedding": list(vectors.astype(np.float32))}),
        metadata={"model": MINILM_PACKAGE},
    )
    unscored = np.setdiff1d(np.arange(len(texts)), np.union1d(ids, corpus.scored_texts(table)))
    with torch_session(threads):  # the masked LM's, if it makes the neighbours
        generated = generate(
            scored,
            ids,
            list(texts[unscored]),
            dict(neighbor_options),
            derive_seed(seed, "llm", "neighbors"),
        )
    count = neighbor_options["n_neighbors"]
    io.write_parquet(
        neighbors,
        pd.DataFrame(
            {
                "sample_id": np.repeat(ids, count),
                "neighbor": np.tile(np.arange(count), ids.size),
                "text": [text for own in generated for text in own],
            }
        ),
    )


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

    table, texts = io.read_parquet(splits), _texts(data)
    repeat = _repeat(model_id)
    rows = corpus.select(
        table, -1 if repeat is None else repeat, "reference" if repeat is None else "train"
    )
    scored = corpus.select(table, repeat or 0, "eval")  # its non-members: held-out perplexity
    held_out = texts[scored.loc[~scored["is_member"], "sample_id"]]
    model_seed = derive_seed(seed, "llm", model_id)
    with torch_session(threads):
        if recipe["kind"] == "scratch":
            lm_tokenizer = models.load_tokenizer(tokenizer)
            model = models.build_scratch(recipe, lm_tokenizer, model_seed)
        else:
            model, lm_tokenizer = models.load(base_checkpoint or base)
        log.info(
            "%s: %d training texts, %d parameters",
            model_id,
            len(rows),
            sum(p.numel() for p in model.parameters()),
        )
        epochs = models.train(
            model,
            lm_tokenizer,
            list(texts[rows["sample_id"]]),
            recipe,
            model_seed,
            held_out=list(held_out),
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
    from miaflow.llm.neighbors import generate

    table, texts = io.read_parquet(splits), _texts(data)
    scored = corpus.scored_texts(table)
    unscored = np.setdiff1d(np.arange(len(texts)), scored)
    with torch_session(threads):  # the masked LM's
        generated = generate(
            list(texts[scored]),
            scored,
            list(texts[unscored]),
            dict(options),
            derive_seed(seed, "llm", "neighbors"),
        )
    io.write_parquet(
        neighbors,
        pd.DataFrame(
            {
                "sample_id": np.repeat(scored, options["n_neighbors"]),
                "neighbor": np.tile(np.arange(options["n_neighbors"]), scored.size),
                "text": [text for own in generated for text in own],
            }
        ),
    )


def llm_embeddings(
    *, data: str | Path, splits: str | Path, embeddings: str | Path, threads: int
) -> None:
    """MiniLM sentence embeddings of every scored text and shot of every repeat, for the blind
    baselines: no target or reference model is loaded."""
    from miaflow.llm.blind import EMBEDDING_MODEL
    from miaflow.pretrained import embed

    table, texts = io.read_parquet(splits), _texts(data)
    ids = np.unique(table.loc[table["set"].isin(["eval", "shot"]), "sample_id"].to_numpy())
    with torch_session(threads):
        vectors = embed(list(texts[ids]), EMBEDDING_MODEL)
    io.write_parquet(
        embeddings,
        pd.DataFrame({"sample_id": ids, "embedding": list(vectors.astype(np.float32))}),
        metadata={"model": EMBEDDING_MODEL},
    )


def llm_statistics(
    *,
    data: str | Path,
    splits: str | Path,
    model: Paths,
    pretrained: str | None,
    model_id: str,
    scored_set: str,
    neighbors: Paths,
    tokens: str | Path,
    lowercase_tokens: str | Path | None = None,
    neighbor_tokens: str | Path | None = None,
    recall: str | Path | None = None,
    pairs: str | Path | None = None,
    n_shards: int,
    separator: str,
    max_length: int,
    stride: int | None,
    dtype: str,
    max_tokens: int,
    threads: int,
    settings: Paths = (),
) -> None:
    """What one model (its checkpoint `model` made by the workflow, else the `pretrained`
    directory or hub name) gives on one scored set (`eval`: the texts it is attacked on;
    `settings`: the texts of EM-MIA's benchmark settings, `settings` their table): the token
    statistics of the texts, and where asked, of their lower-cased copies, of their neighbours
    (log-likelihoods only), ReCaLL's conditional likelihoods and the first of `n_shards` shards
    of EM-MIA's pair matrix (`_write_pairs`; target models). One job loads the model once for all
    of them: loading torch and transformers costs more than scoring the default's texts."""
    from miaflow.llm import models

    table, texts = io.read_parquet(splits), _texts(data)
    ids, scored = _scored(table, texts, model_id, settings)
    source = str(model[0]) if model else pretrained
    with torch_session(threads):
        lm, tokenizer = models.load(source, dtype)
        scoring = dict(
            lm=lm,
            tokenizer=tokenizer,
            key={"model": source, "model_id": model_id, "dtype": dtype, "max_length": max_length},
            stride=stride,
            max_tokens=max_tokens,
        )
        io.write_parquet(tokens, _token_table(ids, scored, scored_set, vocab=True, **scoring))
        if lowercase_tokens is not None:
            lowered = [text.lower() for text in scored]
            result = _token_table(ids, lowered, f"{scored_set}-lowercase", vocab=False, **scoring)
            io.write_parquet(lowercase_tokens, result)
        if neighbor_tokens is not None:
            frame = io.read_parquet(neighbors[0])
            frame = frame[frame["sample_id"].isin(ids)].sort_values(["sample_id", "neighbor"])
            result = _token_table(
                frame["sample_id"].to_numpy(),
                list(frame["text"]),
                f"{scored_set}-neighbors",
                vocab=False,
                **scoring,
            )
            result = result.append_column("neighbor", pa.array(frame["neighbor"].to_numpy()))
            io.write_parquet(neighbor_tokens, result)
        if recall is not None:
            shots = list(texts[corpus.select(table, _repeat(model_id), "shot")["sample_id"]])
            io.write_parquet(
                recall,
                _recall_table(lm, tokenizer, ids, scored, shots, separator, max_length, max_tokens),
                metadata={"separator": separator, "n_shots": str(len(shots))},
            )
        if pairs is not None:
            scored_sets = _draws(table, texts, _repeat(model_id), settings)
            budget = {"max_length": max_length, "max_tokens": max_tokens}
            _write_pairs(pairs, lm, tokenizer, scored_sets, 0, n_shards, separator, **budget)


def _token_table(
    ids: np.ndarray,
    inputs: list[str],
    text_set: str,
    *,
    vocab: bool,
    lm: Any,
    tokenizer: Any,
    key: dict[str, Any],
    stride: int | None,
    max_tokens: int,
) -> pa.Table:
    """Token statistics of `inputs` as a table keyed by what they depend on (`key`, the text
    set and the tokenizer); `vocab`: also the statistics over the vocabulary (Min-K%++), which
    only the scored texts need."""
    from miaflow.llm.tokens import statistics_table, token_statistics

    statistics = token_statistics(
        lm,
        tokenizer,
        inputs,
        max_length=key["max_length"],
        stride=stride,
        vocab_stats=vocab,
        max_tokens=max_tokens,
    )
    tokenizer_name = type(tokenizer).__name__ + f"/{len(tokenizer)}"
    return statistics_table(
        ids,
        statistics,
        {**key, "text_set": text_set, "stride": stride, "tokenizer": tokenizer_name},
    )


def _recall_table(
    lm: Any,
    tokenizer: Any,
    ids: np.ndarray,
    scored: list[str],
    shots: list[str],
    separator: str,
    max_length: int,
    max_tokens: int,
) -> pd.DataFrame:
    """LL(x ; P) of each scored text, P its repeat's known non-member shots (ReCaLL), in
    miaflow's form and in the ReCaLL code's (`compat`; both, so the option needs no rerun), and
    K, the text's tokens that both cover."""
    from miaflow.llm.tokens import prefix_shots, recall_conditional, target_lengths

    values = {
        compat: recall_conditional(
            lm,
            tokenizer,
            scored,
            shots,
            separator=separator,
            context=max_length,
            compat=compat,
            max_tokens=max_tokens,
        )
        for compat in (False, True)
    }
    kept = {
        compat: prefix_shots(tokenizer, scored, shots, separator, max_length, compat=compat)
        for compat in (False, True)
    }
    if (kept[False] < len(shots)).any():
        log.warning(
            "ReCaLL: %d of %d targets get fewer than their %d shots in %d tokens",
            (kept[False] < len(shots)).sum(),
            len(scored),
            len(shots),
            max_length,
        )
    return pd.DataFrame(
        {
            "sample_id": ids,
            "ll_conditional": values[False],
            "ll_conditional_compat": values[True],
            "target_tokens": target_lengths(tokenizer, scored, max_length),
            "prefix_shots": kept[False],
            "prefix_shots_compat": kept[True],
        }
    )


def llm_pairs(
    *,
    data: str | Path,
    splits: str | Path,
    pairs: str | Path,
    model: Paths,
    pretrained: str | None,
    repeat: int,
    shard: int,
    n_shards: int,
    separator: str,
    max_length: int,
    dtype: str,
    max_tokens: int,
    threads: int,
    settings: Paths = (),
) -> None:
    """One further shard of EM-MIA's matrix of a repeat's scored set (shard 0 comes with the
    target's statistics, `llm_statistics`): see `_write_pairs`."""
    from miaflow.llm import models

    table, texts = io.read_parquet(splits), _texts(data)
    with torch_session(threads):
        lm, tokenizer = models.load(str(model[0]) if model else pretrained, dtype)
        scored_sets = _draws(table, texts, repeat, settings)
        budget = {"max_length": max_length, "max_tokens": max_tokens}
        _write_pairs(pairs, lm, tokenizer, scored_sets, shard, n_shards, separator, **budget)


def _write_pairs(
    pairs: str | Path,
    lm: Any,
    tokenizer: Any,
    scored_sets: list[tuple[str, np.ndarray, np.ndarray, list[str]]],
    shard: int,
    n_shards: int,
    separator: str,
    *,
    max_length: int,
    max_tokens: int,
) -> None:
    """One shard of EM-MIA's matrix LL(x ; p) of each scored set of a repeat (`_draws`: its eval
    set, or each of its settings), written to `pairs`: prefix rows p of this shard (of all sets'
    rows in turn), every text x of the prefix's set."""
    import time

    from miaflow.llm.tokens import pair_rows, target_lengths

    starts = np.cumsum([0] + [ids.size for _, ids, _, _ in scored_sets])
    mine = np.array_split(np.arange(starts[-1]), n_shards)[shard]
    frames, started = [], time.perf_counter()
    for (name, ids, _, scored), start in zip(scored_sets, starts):
        rows = mine[(mine >= start) & (mine < start + ids.size)] - start
        if not rows.size:
            continue
        values = pair_rows(
            lm,
            tokenizer,
            scored,
            rows,
            separator=separator,
            context=max_length,
            max_tokens=max_tokens,
        )
        lengths = target_lengths(tokenizer, scored, max_length)
        frames.append(
            pd.DataFrame(
                {
                    "draw": name,
                    "prefix_id": np.repeat(ids[rows], ids.size),
                    "sample_id": np.tile(ids, rows.size),
                    "ll_conditional": values.ravel(),
                    "target_tokens": np.tile(lengths, rows.size),
                }
            )
        )
    spent, count = time.perf_counter() - started, sum(len(f) for f in frames)
    log.info("%d pairs in %.1f s: %.1f pairs per second", count, spent, count / spent)
    frame = pd.concat(frames, ignore_index=True)
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
    scores: str | Path,
    iterates: str | Path,
    metrics: str | Path,
    roc: str | Path,
    prefix_fit: str | Path,
    dataset: str,
    label: str,
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    pair_shards: int,
    fpr_levels: Sequence[float],
    confidence: float,
    seed: int,
) -> None:
    """Every configured attack on every target model (repeat): scores, metrics, ROC curves, the
    EM-MIA iterates' AUROC (a diagnostic that uses the labels) and, with ReCaLL's likelihoods,
    the share of targets whose prefix lost shots (in the form `llm-recall` scores)."""
    from sklearn.metrics import roc_auc_score

    from miaflow.attacks.llm import em_mia_run
    from miaflow.attacks.registry import attack_options
    from miaflow.evaluation.metrics import roc_table, score_metrics

    table, texts = io.read_parquet(splits), _texts(data)
    embedded = llm_inputs.embedding_rows(embeddings)
    compat = bool(options.get("llm-recall", {}).get("compat", False))
    frames, per_iteration, fits = [], [], []
    for repeat in range(len(target_tokens)):
        [draw] = _draws(table, texts, repeat, ())
        _, ids, is_member, _ = draw
        shot_ids = corpus.select(table, repeat, "shot")["sample_id"].to_numpy()
        files = llm_inputs.repeat_files(
            repeat,
            target_tokens,
            reference_tokens,
            lowercase_tokens,
            neighbor_tokens,
            recall,
            pairs,
            pair_shards,
        )
        vectors = (
            None
            if embedded is None
            else (
                llm_inputs.embedded_rows(embedded, ids),
                llm_inputs.embedded_rows(embedded, shot_ids),
            )
        )
        attack_inputs = llm_inputs.scored_inputs(
            draw,
            files,
            options,
            derive_seed(seed, "llm", dataset, label, repeat),
            list(texts[shot_ids]),
            vectors,
        )
        if recall:
            conditional = io.read_parquet(recall[repeat]).set_index("sample_id").loc[ids]
            kept = conditional["prefix_shots_compat" if compat else "prefix_shots"].to_numpy()
            fits.append(llm_inputs.prefix_fit_row(dataset, label, repeat, kept, shot_ids.size))
        for attack in attacks:
            frames.append(
                llm_inputs.score_frame(attack_inputs, attack, dataset, label, repeat, ids)
            )
            if attack.startswith("em-mia"):
                _, steps = em_mia_run(attack_inputs, attack_options(attack, options))
                per_iteration += [
                    (dataset, label, repeat, attack, step, roc_auc_score(is_member, f))
                    for step, f in enumerate(steps)
                ]
        log.info("repeat %d: %d attacks on %d texts", repeat, len(attacks), ids.size)
    scored = pd.concat(frames, ignore_index=True)
    io.write_parquet(scores, scored)
    io.write_parquet(iterates, pd.DataFrame(per_iteration, columns=ITERATE_COLUMNS))
    io.write_parquet(metrics, score_metrics(scored, tuple(fpr_levels), confidence))
    io.write_parquet(roc, roc_table(scored))
    io.write_parquet(
        prefix_fit,
        pd.DataFrame(fits, columns=list(llm_inputs.PREFIX_FIT_COLUMNS)).astype(
            llm_inputs.PREFIX_FIT_COLUMNS
        ),
    )


def llm_setting_scores(
    *,
    data: str | Path,
    splits: str | Path,
    settings: str | Path,
    target_tokens: Paths,
    reference_tokens: Paths,
    lowercase_tokens: Paths,
    neighbor_tokens: Paths,
    recall: Paths,
    pairs: Paths,
    embeddings: Paths,
    setting_embeddings: Paths,
    scores: str | Path,
    metrics: str | Path,
    dataset: str,
    label: str,
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    pair_shards: int,
    fpr_levels: Sequence[float],
    confidence: float,
    seed: int,
) -> None:
    """Every configured attack on every setting of every target model (EM-MIA's benchmark
    settings, `miaflow.llm.settings`): scores and metrics, each setting an experiment of its own
    labelled "<target>/<setting>" (e.g. "gpt2_tiny/easy", "gpt2_small/hard/24w"). The blind
    baselines' sentence embeddings are of the texts as scored (cut to a setting's length:
    `setting_embeddings`, from llm_settings) and of the shots (`embeddings`, llm_embeddings')."""
    from miaflow.evaluation.metrics import score_metrics

    table, texts = io.read_parquet(splits), _texts(data)
    shots_embedded = llm_inputs.embedding_rows(embeddings)
    texts_embedded = llm_inputs.embedding_rows(setting_embeddings)
    frames = []
    for repeat in range(len(target_tokens)):
        shot_ids = corpus.select(table, repeat, "shot")["sample_id"].to_numpy()
        shots = list(texts[shot_ids])
        shot_vectors = llm_inputs.embedded_rows(shots_embedded, shot_ids)
        files = llm_inputs.repeat_files(
            repeat,
            target_tokens,
            reference_tokens,
            lowercase_tokens,
            neighbor_tokens,
            recall,
            pairs,
            pair_shards,
        )
        for draw in _draws(table, texts, repeat, [settings]):
            name, ids = draw[0], draw[1]
            setting_label = f"{label}/{name}"
            vectors = (
                None
                if texts_embedded is None
                else (llm_inputs.embedded_rows(texts_embedded, ids), shot_vectors)
            )
            attack_inputs = llm_inputs.scored_inputs(
                draw,
                files,
                options,
                derive_seed(seed, "llm", dataset, setting_label, repeat),
                shots,
                vectors,
            )
            frames += [
                llm_inputs.score_frame(attack_inputs, attack, dataset, setting_label, repeat, ids)
                for attack in attacks
            ]
        log.info("repeat %d: %d attacks on its settings", repeat, len(attacks))
    scored = pd.concat(frames, ignore_index=True)
    io.write_parquet(scores, scored)
    io.write_parquet(metrics, score_metrics(scored, tuple(fpr_levels), confidence))
