"""Jobs of stage llm: attacks on language models (rules/llm.smk).

Per experiment (a corpus, a target and a reference recipe): the split table; the models (a
tokenizer and scratch models, or a packaged checkpoint converted once, fine-tuned); each model's
token statistics on the texts it is attacked on, their lower-cased copies and neighbours; ReCaLL's
conditional likelihoods and EM-MIA's pairwise matrix (in shards by prefix); sentence embeddings of
the scored texts and shots (blind baselines); then every attack's scores, metrics, ROC curves,
EM-MIA's iterates and the share of targets whose ReCaLL prefix was cut.

Over 400 lines because it holds one keyword-only function per rule of rules/llm.smk (stage = rule
file = jobs module), each adapting files to `miaflow.llm` and `miaflow.attacks.llm`, where the
logic is.
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
from miaflow.data import read_dataset
from miaflow.jobs.common import Paths, torch_session
from miaflow.llm import corpus
from miaflow.seeding import derive_seed

log = logging.getLogger(__name__)

ITERATE_COLUMNS = ["dataset", "target_model", "repeat", "attack", "iteration", "auroc"]
# The prefix-fit table (one row per repeat with ReCaLL's likelihoods): column -> type.
PREFIX_FIT_COLUMNS = {
    "dataset": "str",
    "target_model": "str",
    "repeat": "int64",
    "n_shots": "int64",
    "targets": "int64",
    "shortened": "int64",
    "emptied": "int64",
    "cut_share": "float64",
}


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


def llm_tokens(
    *,
    data: str | Path,
    splits: str | Path,
    tokens: str | Path,
    model: Paths,
    pretrained: str | None,
    model_id: str,
    text_set: str,
    neighbors: Paths,
    max_length: int,
    stride: int | None,
    dtype: str,
    max_tokens: int,
    threads: int,
) -> None:
    """Token statistics of one model (its checkpoint `model` made by the workflow, else the
    `pretrained` directory or hub name) on one text set: the texts it is attacked on (`eval`),
    their lower-cased copies, or their neighbours (log-likelihoods only)."""
    from miaflow.llm import models
    from miaflow.llm.tokens import statistics_table, token_statistics

    table, texts = io.read_parquet(splits), _texts(data)
    ids = _scored_ids(table, model_id)
    extra = {}
    if text_set == "neighbors":
        frame = io.read_parquet(neighbors[0])
        frame = frame[frame["sample_id"].isin(ids)].sort_values(["sample_id", "neighbor"])
        ids, inputs, extra = (
            frame["sample_id"].to_numpy(),
            list(frame["text"]),
            {"neighbor": frame["neighbor"].to_numpy()},
        )
    else:
        inputs = [t.lower() if text_set == "lowercase" else t for t in texts[ids]]
    source = str(model[0]) if model else pretrained
    key = {
        "model": source,
        "model_id": model_id,
        "text_set": text_set,
        "dtype": dtype,
        "max_length": max_length,
        "stride": stride,
    }
    with torch_session(threads):
        lm, tokenizer = models.load(source, dtype)
        key["tokenizer"] = type(tokenizer).__name__ + f"/{len(tokenizer)}"
        statistics = token_statistics(
            lm,
            tokenizer,
            inputs,
            max_length=max_length,
            stride=stride,
            vocab_stats=text_set == "eval",
            max_tokens=max_tokens,
        )
    result = statistics_table(ids, statistics, key)
    for name, values in extra.items():
        result = result.append_column(name, pa.array(values))
    io.write_parquet(tokens, result)


def llm_recall(
    *,
    data: str | Path,
    splits: str | Path,
    recall: str | Path,
    model: Paths,
    pretrained: str | None,
    repeat: int,
    separator: str,
    max_length: int,
    dtype: str,
    max_tokens: int,
    threads: int,
) -> None:
    """LL(x ; P) of each scored text of a repeat, P its known non-member shots (ReCaLL), in
    miaflow's form and in the ReCaLL code's (`compat`; both, so the option needs no rerun), and
    K, the text's tokens that both cover."""
    from miaflow.llm import models
    from miaflow.llm.tokens import prefix_shots, recall_conditional, target_lengths

    table, texts = io.read_parquet(splits), _texts(data)
    ids = corpus.select(table, repeat, "eval")["sample_id"].to_numpy()
    scored, shots = list(texts[ids]), list(texts[corpus.select(table, repeat, "shot")["sample_id"]])
    with torch_session(threads):
        lm, tokenizer = models.load(str(model[0]) if model else pretrained, dtype)
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
        lengths = target_lengths(tokenizer, scored, max_length)
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
    io.write_parquet(
        recall,
        pd.DataFrame(
            {
                "sample_id": ids,
                "ll_conditional": values[False],
                "ll_conditional_compat": values[True],
                "target_tokens": lengths,
                "prefix_shots": kept[False],
                "prefix_shots_compat": kept[True],
            }
        ),
        metadata={"separator": separator, "n_shots": str(len(shots))},
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
) -> None:
    """One shard of EM-MIA's matrix LL(x ; p): prefix rows p of this shard, every text x."""
    import time

    from miaflow.llm import models
    from miaflow.llm.tokens import pair_rows, target_lengths

    table, texts = io.read_parquet(splits), _texts(data)
    ids = corpus.select(table, repeat, "eval")["sample_id"].to_numpy()
    rows = np.array_split(np.arange(ids.size), n_shards)[shard]
    started = time.perf_counter()
    with torch_session(threads):
        lm, tokenizer = models.load(str(model[0]) if model else pretrained, dtype)
        values = pair_rows(
            lm,
            tokenizer,
            list(texts[ids]),
            rows,
            separator=separator,
            context=max_length,
            max_tokens=max_tokens,
        )
        lengths = target_lengths(tokenizer, list(texts[ids]), max_length)
    spent = time.perf_counter() - started
    log.info("%d pairs in %.1f s: %.1f pairs per second", values.size, spent, values.size / spent)
    io.write_parquet(
        pairs,
        pd.DataFrame(
            {
                "prefix_id": np.repeat(ids[rows], ids.size),
                "sample_id": np.tile(ids, rows.size),
                "ll_conditional": values.ravel(),
                "target_tokens": np.tile(lengths, rows.size),
            }
        ),
        metadata={"separator": separator},
    )


def _stats(path: str | Path, ids: np.ndarray) -> Any:
    from miaflow.llm.tokens import TokenStats

    return TokenStats.from_table(io.read_table(path)).select(ids)


def _neighbor_matrix(path: str | Path, ids: np.ndarray) -> np.ndarray:
    from miaflow.llm.scores import mean_log_likelihood

    frame = io.read_parquet(path, columns=["sample_id", "neighbor", "logprob"])
    frame["ll"] = mean_log_likelihood([np.asarray(v, np.float64) for v in frame["logprob"]])
    wide = frame.pivot(index="sample_id", columns="neighbor", values="ll")
    return wide.loc[ids].to_numpy()


def _pair_matrix(paths: Paths, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """EM-MIA's LL(x ; p) matrix and K per text x (the tokens the matrix covers)."""
    frame = pd.concat([io.read_parquet(p) for p in paths], ignore_index=True)
    wide = frame.pivot(index="prefix_id", columns="sample_id", values="ll_conditional")
    lengths = frame.groupby("sample_id")["target_tokens"].first()
    return wide.loc[ids, ids].to_numpy(), lengths.loc[ids].to_numpy()


def _embedding_rows(paths: Paths) -> pd.Series | None:
    """The sentence embeddings by sample id (a (D,) array per row), if the blind baseline needs
    them."""
    if not paths:
        return None
    return io.read_parquet(paths[0]).set_index("sample_id")["embedding"]


def _embedded(rows: pd.Series | None, ids: np.ndarray) -> np.ndarray | None:
    return None if rows is None else np.stack([np.asarray(v) for v in rows.loc[ids]])


def prefix_fit_row(
    dataset: str, label: str, repeat: int, kept: np.ndarray, n_shots: int
) -> tuple[Any, ...]:
    """One row of the prefix-fit table: of a repeat's scored targets, how many had their ReCaLL
    prefix shortened (some shots dropped) or emptied (none fits), and the share of both."""
    kept = np.asarray(kept)
    shortened, emptied = int(((kept > 0) & (kept < n_shots)).sum()), int((kept == 0).sum())
    cut = float(np.mean(kept < n_shots)) if kept.size else float("nan")
    return dataset, label, repeat, n_shots, int(kept.size), shortened, emptied, cut


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

    from miaflow.attacks import run_attack
    from miaflow.attacks.llm import LLMInputs, em_mia_run, em_settings
    from miaflow.evaluation.metrics import roc_table, score_metrics

    table, texts = io.read_parquet(splits), _texts(data)
    embedded = _embedding_rows(embeddings)
    compat = bool(options.get("llm-recall", {}).get("compat", False))
    frames, per_iteration, fits = [], [], []
    for repeat, target_path in enumerate(target_tokens):
        rows = corpus.select(table, repeat, "eval")
        ids, is_member = rows["sample_id"].to_numpy(), rows["is_member"].to_numpy()
        shot_ids = corpus.select(table, repeat, "shot")["sample_id"].to_numpy()
        conditional = (
            io.read_parquet(recall[repeat]).set_index("sample_id").loc[ids] if recall else None
        )
        pair_matrix, pair_lengths = (
            _pair_matrix(pairs[repeat * pair_shards : (repeat + 1) * pair_shards], ids)
            if pairs
            else (None, None)
        )
        inputs = LLMInputs(
            texts=list(texts[ids]),
            target=_stats(target_path, ids),
            is_member=is_member,
            reference=_stats(reference_tokens[0], ids) if reference_tokens else None,
            lowercase=_stats(lowercase_tokens[repeat], ids) if lowercase_tokens else None,
            neighbors=_neighbor_matrix(neighbor_tokens[repeat], ids) if neighbor_tokens else None,
            recall=None if conditional is None else conditional["ll_conditional"].to_numpy(),
            recall_compat=None
            if conditional is None
            else conditional["ll_conditional_compat"].to_numpy(),
            pairs=pair_matrix,
            conditioned_tokens=pair_lengths
            if conditional is None
            else conditional["target_tokens"].to_numpy(),
            options=options,
            seed=derive_seed(seed, "llm", dataset, label, repeat),
            shots=list(texts[shot_ids]),
            embeddings=_embedded(embedded, ids),
            shot_embeddings=_embedded(embedded, shot_ids),
        )
        if conditional is not None:
            kept = conditional["prefix_shots_compat" if compat else "prefix_shots"].to_numpy()
            fits.append(prefix_fit_row(dataset, label, repeat, kept, shot_ids.size))
        for attack in attacks:
            frames.append(
                pd.DataFrame(
                    {
                        "dataset": dataset,
                        "target_model": label,
                        "attack": attack,
                        "repeat": repeat,
                        "sample_id": ids,
                        "score": run_attack(attack, inputs),
                        "is_member": is_member,
                    }
                )
            )
            if attack.startswith("em-mia"):
                settings = em_settings(attack, options)
                _, steps = em_mia_run(
                    inputs, settings["init"], settings["scoring"], settings["iterations"]
                )
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
        prefix_fit, pd.DataFrame(fits, columns=list(PREFIX_FIT_COLUMNS)).astype(PREFIX_FIT_COLUMNS)
    )
