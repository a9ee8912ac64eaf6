"""The llm stage's cached tables, computed from one loaded model: the token statistics of a set
of texts, ReCaLL's conditional likelihoods, one shard of EM-MIA's pair matrix, and the sentence
embeddings of texts (the blind baselines').

Each table is keyed by what it was computed from (model, tokenizer, text set, context), so that
the scoring jobs read them without loading a model (`miaflow.attacks.llm_inputs`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from miaflow.llm.scored import Draw

log = logging.getLogger(__name__)


def token_table(
    ids: np.ndarray,
    inputs: list[str],
    text_set: str,
    *,
    vocab: bool,
    lm: Any,
    tokenizer: Any,
    key: Mapping[str, Any],
    stride: int | None,
    max_tokens: int,
    top1: bool = False,
) -> pa.Table | tuple[pa.Table, pd.DataFrame]:
    """Token statistics of `inputs` as a table keyed by what they depend on (`key`, the text
    set and the tokenizer); `vocab`: also the statistics over the vocabulary (Min-K%++), which
    only the scored texts need. With `top1`, also EZ-MIA's top-1 flags of the same forward pass
    (`top1_table`): the statistics table is the one without them, byte for byte."""
    from miaflow.llm.tokens import statistics_table, token_statistics

    statistics = token_statistics(
        lm,
        tokenizer,
        inputs,
        max_length=key["max_length"],
        stride=stride,
        vocab_stats=vocab,
        max_tokens=max_tokens,
        top1=top1,
    )
    tokenizer_name = type(tokenizer).__name__ + f"/{len(tokenizer)}"
    table = statistics_table(
        ids,
        statistics,
        {**key, "text_set": text_set, "stride": stride, "tokenizer": tokenizer_name},
    )
    return (table, top1_table(ids, [s[4] for s in statistics])) if top1 else table


def top1_table(ids: np.ndarray, flags: list[np.ndarray]) -> pd.DataFrame:
    """EZ-MIA's error zone by sample id: per scored token x_2..x_K whether it is the argmax."""
    return pd.DataFrame(
        {"sample_id": np.asarray(ids, np.int64), "top1": [f.astype(bool) for f in flags]}
    )


def recall_table(
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
    from miaflow.llm.conditional import prefix_shots, recall_conditional, target_lengths

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


def pair_shard(
    lm: Any,
    tokenizer: Any,
    scored_sets: list[Draw],
    shard: int,
    n_shards: int,
    separator: str,
    *,
    max_length: int,
    max_tokens: int,
) -> pd.DataFrame:
    """One shard of EM-MIA's matrix LL(x ; p) of each scored set of a repeat (its eval set, or
    each of its settings): prefix rows p of this shard (of all sets' rows in turn), every text
    x of the prefix's set."""
    from miaflow.llm.conditional import pair_rows, target_lengths

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
    return pd.concat(frames, ignore_index=True)


def samples_table(ids: np.ndarray, samples: list[list[str]]) -> pd.DataFrame:
    """SaMIA's sampled continuations, one row per (text, sample)."""
    counts = [len(s) for s in samples]
    return pd.DataFrame(
        {
            "sample_id": np.repeat(np.asarray(ids, np.int64), counts),
            "sample": np.concatenate([np.arange(n) for n in counts]).astype(np.int64),
            "text": [text for own in samples for text in own],
        }
    )


def repeated_table(ids: np.ndarray, rows: list[np.ndarray], role: str) -> pd.DataFrame:
    """CAMIA's repeated texts: per text its (copies, n) l_t array, flattened row by row, with its
    number of copies; `role` "scored" or "population"."""
    return pd.DataFrame(
        {
            "sample_id": np.asarray(ids, np.int64),
            "role": role,
            "copies": np.array([r.shape[0] for r in rows], np.int64),
            "logprob": [r.astype(np.float32).ravel() for r in rows],
        }
    )


def embedding_table(ids: np.ndarray, vectors: np.ndarray) -> pd.DataFrame:
    """Sentence embeddings by sample id (float32 rows), as `miaflow.llm.blind.embedding_rows`
    reads them."""
    return pd.DataFrame({"sample_id": ids, "embedding": list(vectors.astype(np.float32))})


@dataclass(frozen=True)
class ModelScorer:
    """One loaded model and how its texts are scored (`scoring`: max_length, stride, max_tokens,
    separator), keyed by where the model came from: every table above for one model, loaded once
    (loading torch and transformers costs more than scoring the default's texts)."""

    lm: Any
    tokenizer: Any
    source: str
    model_id: str
    dtype: str
    scoring: Mapping[str, Any]

    @classmethod
    def load(
        cls, source: str, model_id: str, dtype: str, scoring: Mapping[str, Any]
    ) -> ModelScorer:
        from miaflow.llm import models

        lm, tokenizer = models.load(source, dtype)
        return cls(lm, tokenizer, source, model_id, dtype, scoring)

    def tokens(self, ids: np.ndarray, texts: list[str], text_set: str, vocab: bool) -> pa.Table:
        return token_table(
            ids,
            texts,
            text_set,
            vocab=vocab,
            lm=self.lm,
            tokenizer=self.tokenizer,
            key=self._key(),
            stride=self.scoring["stride"],
            max_tokens=self.scoring["max_tokens"],
        )

    def _key(self) -> dict[str, Any]:
        return {
            "model": self.source,
            "model_id": self.model_id,
            "dtype": self.dtype,
            "max_length": self.scoring["max_length"],
        }

    def tokens_and_top1(
        self, ids: np.ndarray, texts: list[str], text_set: str
    ) -> tuple[pa.Table, pd.DataFrame]:
        """`tokens(..., vocab=True)` and EZ-MIA's top-1 flags from the same forward pass."""
        return token_table(
            ids,
            texts,
            text_set,
            vocab=True,
            lm=self.lm,
            tokenizer=self.tokenizer,
            key=self._key(),
            stride=self.scoring["stride"],
            max_tokens=self.scoring["max_tokens"],
            top1=True,
        )

    def augmented_tokens(
        self, ids: np.ndarray, texts: list[str], text_set: str, seed: int, **options: Any
    ) -> pa.Table:
        """Token statistics (log-likelihoods only) of PAC's word-swapped copies of each text
        (`recent_inputs.swap_augment`, options n_augment and alpha), column `augment` their
        index."""
        from miaflow.llm.recent_inputs import swap_augment

        copies = swap_augment(texts, ids, seed=seed, **options)
        counts = [len(c) for c in copies]
        flat = [text for own in copies for text in own]
        table = self.tokens(np.repeat(np.asarray(ids, np.int64), counts), flat, text_set, False)
        index = np.concatenate([np.arange(n) for n in counts]).astype(np.int64)
        return table.append_column("augment", pa.array(index))

    def member_recall(self, ids: np.ndarray, texts: list[str], shots: list[str]) -> pd.DataFrame:
        """LL(x ; P_m) of each text after Con-ReCall's member shots, in ReCaLL's form (llm.separator
        after every shot, target tokens 2..K) and its prefix's kept shots."""
        from miaflow.llm.conditional import prefix_shots, recall_conditional, target_lengths

        max_length, separator = self.scoring["max_length"], self.scoring["separator"]
        values = recall_conditional(
            self.lm,
            self.tokenizer,
            texts,
            shots,
            separator=separator,
            context=max_length,
            compat=False,
            max_tokens=self.scoring["max_tokens"],
        )
        return pd.DataFrame(
            {
                "sample_id": np.asarray(ids, np.int64),
                "ll_conditional": values,
                "target_tokens": target_lengths(self.tokenizer, texts, max_length),
                "prefix_shots": prefix_shots(
                    self.tokenizer, texts, shots, separator, max_length, compat=False
                ),
            }
        )

    def samples(
        self,
        ids: np.ndarray,
        texts: list[str],
        seed: int,
        batch_size: int,
        *,
        prefix_ratio: float,
        **sampling: Any,
    ) -> pd.DataFrame:
        """SaMIA's continuations of each text's first `prefix_ratio` words (`samples_table`)."""
        from miaflow.llm.recent import split_prefix
        from miaflow.llm.recent_inputs import sample_continuations

        prompts = [split_prefix(text, prefix_ratio)[0] for text in texts]
        drawn = sample_continuations(
            self.lm,
            self.tokenizer,
            prompts,
            ids,
            max_length=self.scoring["max_length"],
            seed=seed,
            batch_size=batch_size,
            **sampling,
        )
        return samples_table(ids, drawn)

    def repeated(self, ids: np.ndarray, texts: list[str], role: str, copies: int) -> pd.DataFrame:
        """CAMIA's repeated texts (`recent_inputs.repeated_logprobs`, `repeated_table`)."""
        from miaflow.llm.recent_inputs import repeated_logprobs

        rows = repeated_logprobs(
            self.lm,
            self.tokenizer,
            texts,
            copies=copies,
            max_length=self.scoring["max_length"],
            max_tokens=self.scoring["max_tokens"],
        )
        return repeated_table(ids, rows, role)

    def neighbor_tokens(self, neighbors: pd.DataFrame, ids: np.ndarray, text_set: str) -> pa.Table:
        """Token statistics of the neighbours of the texts `ids` (log-likelihoods only)."""
        frame = neighbors[neighbors["sample_id"].isin(ids)].sort_values(["sample_id", "neighbor"])
        table = self.tokens(frame["sample_id"].to_numpy(), list(frame["text"]), text_set, False)
        return table.append_column("neighbor", pa.array(frame["neighbor"].to_numpy()))

    def recall(self, ids: np.ndarray, texts: list[str], shots: list[str]) -> pd.DataFrame:
        return recall_table(
            self.lm,
            self.tokenizer,
            ids,
            texts,
            shots,
            self.scoring["separator"],
            self.scoring["max_length"],
            self.scoring["max_tokens"],
        )

    def pairs(self, scored_sets: list[Draw], shard: int, n_shards: int) -> pd.DataFrame:
        return pair_shard(
            self.lm,
            self.tokenizer,
            scored_sets,
            shard,
            n_shards,
            self.scoring["separator"],
            max_length=self.scoring["max_length"],
            max_tokens=self.scoring["max_tokens"],
        )
