"""The language-model attacks' inputs on one scored set of an experiment, read from the cached
artifacts of the llm stage (token statistics, neighbours, ReCaLL likelihoods, EM-MIA's pair
shards, sentence embeddings): what both scoring jobs (`llm_scores`, `llm_setting_scores`) share,
and the per-repeat row of the ReCaLL prefix-fit table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow import io

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


def _stats(path: str | Path, ids: np.ndarray) -> Any:
    from miaflow.llm.tokens import TokenStats

    return TokenStats.from_table(io.read_table(path)).select(ids)


def _neighbor_matrix(path: str | Path, ids: np.ndarray) -> np.ndarray:
    from miaflow.llm.scores import mean_log_likelihood

    frame = io.read_parquet(path, columns=["sample_id", "neighbor", "logprob"])
    frame["ll"] = mean_log_likelihood([np.asarray(v, np.float64) for v in frame["logprob"]])
    wide = frame.pivot(index="sample_id", columns="neighbor", values="ll")
    return wide.loc[ids].to_numpy()


def _pair_matrix(
    paths: Sequence[str | Path], ids: np.ndarray, draw: str = "eval"
) -> tuple[np.ndarray, np.ndarray]:
    """EM-MIA's LL(x ; p) matrix of one scored set (`draw`) and K per text x (the tokens the
    matrix covers)."""
    frame = pd.concat([io.read_parquet(p) for p in paths], ignore_index=True)
    frame = frame[frame["draw"] == draw]
    wide = frame.pivot(index="prefix_id", columns="sample_id", values="ll_conditional")
    lengths = frame.groupby("sample_id")["target_tokens"].first()
    return wide.loc[ids, ids].to_numpy(), lengths.loc[ids].to_numpy()


def embedding_rows(paths: Sequence[str | Path]) -> pd.Series | None:
    """The sentence embeddings by sample id (a (D,) array per row), if the blind baseline needs
    them."""
    if not paths:
        return None
    return io.read_parquet(paths[0]).set_index("sample_id")["embedding"]


def embedded_rows(rows: pd.Series | None, ids: np.ndarray) -> np.ndarray | None:
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


def scored_inputs(
    draw: tuple[str, np.ndarray, np.ndarray, list[str]],
    files: Mapping[str, Any],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
    shots: list[str],
    embeddings: tuple[np.ndarray, np.ndarray] | None,
) -> Any:
    """The attacks' inputs on one scored set `draw` (`_draws`) of one target model, from its
    files: `target`, `reference`, `lowercase`, `neighbors`, `recall` (a path or None) and `pairs`
    (the repeat's shards, possibly none); the repeat's `shots` and, for the blind baselines, the
    sentence embeddings of the draw's texts and of the shots. `options`: llm.attack_options (each
    attack's overrides, `LLMInputs.attack_options`)."""
    from miaflow.attacks.llm import LLMInputs

    name, ids, is_member, texts = draw
    conditional = (
        io.read_parquet(files["recall"]).set_index("sample_id").loc[ids]
        if files["recall"]
        else None
    )
    pair_matrix, pair_lengths = (
        _pair_matrix(files["pairs"], ids, name) if files["pairs"] else (None, None)
    )
    return LLMInputs(
        texts=texts,
        target=_stats(files["target"], ids),
        is_member=is_member,
        reference=_stats(files["reference"], ids) if files["reference"] else None,
        lowercase=_stats(files["lowercase"], ids) if files["lowercase"] else None,
        neighbors=_neighbor_matrix(files["neighbors"], ids) if files["neighbors"] else None,
        recall=None if conditional is None else conditional["ll_conditional"].to_numpy(),
        recall_compat=None
        if conditional is None
        else conditional["ll_conditional_compat"].to_numpy(),
        pairs=pair_matrix,
        conditioned_tokens=pair_lengths
        if conditional is None
        else conditional["target_tokens"].to_numpy(),
        attack_options=options,
        seed=seed,
        shots=shots,
        embeddings=None if embeddings is None else embeddings[0],
        shot_embeddings=None if embeddings is None else embeddings[1],
    )


def repeat_files(
    repeat: int,
    target_tokens: Sequence[str | Path],
    reference_tokens: Sequence[str | Path],
    lowercase_tokens: Sequence[str | Path],
    neighbor_tokens: Sequence[str | Path],
    recall: Sequence[str | Path],
    pairs: Sequence[str | Path],
    pair_shards: int,
) -> dict[str, Any]:
    """The files `_inputs` reads for one repeat, from a scores job's per-repeat inputs."""
    return {
        "target": target_tokens[repeat],
        "reference": reference_tokens[0] if reference_tokens else None,
        "lowercase": lowercase_tokens[repeat] if lowercase_tokens else None,
        "neighbors": neighbor_tokens[repeat] if neighbor_tokens else None,
        "recall": recall[repeat] if recall else None,
        "pairs": pairs[repeat * pair_shards : (repeat + 1) * pair_shards],
    }


def score_frame(
    inputs: Any, attack: str, dataset: str, label: str, repeat: int, ids: np.ndarray
) -> pd.DataFrame:
    """One attack's scores on one scored set, in the scores table's columns."""
    from miaflow.attacks.llm import run_llm_attack

    return pd.DataFrame(
        {
            "dataset": dataset,
            "target_model": label,
            "attack": attack,
            "repeat": repeat,
            "sample_id": ids,
            "score": run_llm_attack(attack, inputs),
            "is_member": inputs.is_member,
        }
    )
