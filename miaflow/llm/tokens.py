"""Token statistics of a causal LM, computed once per (model, text set) and cached as Parquet.

For a text tokenised as x_1..x_T (the tokenizer's default special tokens), ℓ_t = log p(x_t | x_<t)
for t = 2..T, and from the full-vocabulary log-softmax in fp32 the mean μ_t and variance σ_t² of
log p_t(v) under p_t (docs/algorithms.md#token-statistics). Every score of the language-model
attacks is a cheap function of these arrays, so no attack reruns the model.

Texts longer than the context are truncated, or with a `stride` scored by sliding windows in
which each token is scored once, with as much context as the window allows (MIMIR's scheme).
A *segment* is token ids plus the index of the first scored token: one text, one window, or a
prefix followed by a target (ReCaLL, the pairwise matrix of EM-MIA: `miaflow.llm.conditional`),
where only target tokens 2..K are scored (1..K in ReCaLL's `compat` form), K = min(T, context).
Segments are scored in batches bounded by a token budget (`score_segments`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from miaflow.progress import Progress

log = logging.getLogger(__name__)

Segment = tuple[Sequence[int], int]  # token ids, index of the first scored token (>= 1)
HEAD_CHUNK = 1024  # logit rows per float32 log-softmax: bounds the (positions, vocabulary) block
LOGITS_BUDGET = 2**28  # logit entries one forward pass keeps (1 GiB in fp32)


@dataclass(frozen=True)
class TokenStats:
    """Per-text arrays of one model on one text set (the `tokens` Parquet files)."""

    sample_ids: np.ndarray
    logprobs: list[np.ndarray]
    means: list[np.ndarray]
    variances: list[np.ndarray]
    token_ids: list[np.ndarray] | None = None  # x_1..x_T as scored (the `token_ids` column)

    @classmethod
    def from_table(cls, table: pa.Table) -> TokenStats:
        columns = table.to_pydict()
        arrays = {
            name: [np.asarray(v, dtype=np.float64) for v in columns[name]]
            for name in ("logprob", "mean", "variance")
        }
        ids = columns.get("token_ids")
        return cls(
            np.asarray(columns["sample_id"], dtype=np.int64),
            arrays["logprob"],
            arrays["mean"],
            arrays["variance"],
            None if ids is None else [np.asarray(v, dtype=np.int64) for v in ids],
        )

    def select(self, sample_ids: np.ndarray) -> TokenStats:
        """The rows of `sample_ids`, in that order."""
        index = {int(s): i for i, s in enumerate(self.sample_ids)}
        rows = [index[int(s)] for s in sample_ids]
        return TokenStats(
            np.asarray(sample_ids, dtype=np.int64),
            [self.logprobs[i] for i in rows],
            [self.means[i] for i in rows],
            [self.variances[i] for i in rows],
            None if self.token_ids is None else [self.token_ids[i] for i in rows],
        )


def text_segments(ids: Sequence[int], max_length: int, stride: int | None) -> list[Segment]:
    """A text's segments: its first `max_length` tokens, or sliding windows whose new tokens are
    scored (each token once; the first never). A window starts `stride` tokens after the previous
    one, at most `max_length` - 1: its first token must stay context for its first scored one."""
    if len(ids) <= max_length or not stride:
        return [(list(ids[:max_length]), 1)]
    if stride > max_length:
        raise ValueError(
            f"stride {stride} is more than max_length {max_length}: windows that "
            "far apart would skip tokens"
        )
    step = min(stride, max_length - 1)
    segments, scored_up_to, start = [], 1, 0
    while scored_up_to < len(ids):
        end = min(start + max_length, len(ids))
        segments.append((list(ids[start:end]), scored_up_to - start))
        scored_up_to, start = end, start + step
    return segments


def _batches(
    lengths: Sequence[int], scored: Sequence[int], max_tokens: int, max_scored: int
) -> Iterator[np.ndarray]:
    """Segment indices grouped longest first so a batch's padded size stays within max_tokens
    and its scored positions (rows of the logits) within max_scored."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batch: list[int] = []
    positions = 0
    for index in order:
        if batch and (
            (len(batch) + 1) * lengths[batch[0]] > max_tokens
            or positions + scored[index] > max_scored
        ):
            yield np.asarray(batch)
            batch, positions = [], 0
        batch.append(int(index))
        positions += scored[index]
    if batch:
        yield np.asarray(batch)


def score_segments(
    model: Any,
    segments: Sequence[Segment],
    *,
    vocab_stats: bool,
    max_tokens: int = 4096,
    pad_id: int = 0,
    top1: bool = False,
) -> list[tuple[np.ndarray, ...]]:
    """(ℓ, μ, σ²) of the scored tokens of each segment (μ, σ² empty without `vocab_stats`);
    with `top1`, a fourth array says per scored token whether it is the model's argmax (EZ-MIA's
    error zone), from the same logits, so the other three are unchanged.

    The logits are the model's own forward output (whatever it does after the output head, such
    as Gemma-2's soft-capping or Cohere's logit scale, applies), kept only at the positions that
    predict a scored token (`logits_to_keep`); padded batches of similar length whose kept
    logits stay within LOGITS_BUDGET entries; log-softmax in float32, HEAD_CHUNK rows at a time.
    """
    import torch

    device = next(model.parameters()).device
    lengths = [len(ids) for ids, _ in segments]
    scored = [len(ids) - first for ids, first in segments]
    max_scored = max(1, LOGITS_BUDGET // model.get_output_embeddings().weight.shape[0])
    results: list[Any] = [None] * len(segments)
    with torch.no_grad(), Progress(len(segments), "token statistics", "segments") as progress:
        for batch in _batches(lengths, scored, max_tokens, max_scored):
            width = max(lengths[i] for i in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            predicts = torch.zeros((len(batch), width), dtype=torch.bool)  # position → next token
            for row, index in enumerate(batch):
                tokens, first = segments[index]
                ids[row, : len(tokens)] = torch.as_tensor(tokens)
                attention[row, : len(tokens)] = 1
                predicts[row, first - 1 : len(tokens) - 1] = True
            kept = model(
                input_ids=ids.to(device),
                attention_mask=attention.to(device),
                logits_to_keep=predicts.to(device),
                use_cache=False,
            ).logits
            targets = ids[:, 1:][predicts[:, :-1]].to(device)
            logprob, mean, variance, argmax = [], [], [], []
            for start in range(0, kept.shape[0], HEAD_CHUNK):
                logp = torch.log_softmax(kept[start : start + HEAD_CHUNK].float(), dim=-1)
                chunk_targets = targets[start : start + HEAD_CHUNK, None]
                logprob.append(logp.gather(1, chunk_targets)[:, 0])
                if top1:
                    argmax.append(logp.argmax(-1) == chunk_targets[:, 0])
                if vocab_stats:
                    p = logp.exp()
                    mu = (p * logp).sum(-1)
                    mean.append(mu)
                    variance.append((p * (logp - mu[:, None]).square()).sum(-1))  # no cancellation
            del kept
            counts = predicts.sum(1).tolist()
            splits = np.cumsum(counts)[:-1]
            as_numpy = [
                np.split(torch.cat(part).double().cpu().numpy(), splits)
                if part
                else [np.empty(0)] * len(batch)
                for part in (logprob, mean, variance)
            ]
            if top1:
                as_numpy.append(np.split(torch.cat(argmax).cpu().numpy(), splits))
            for row, index in enumerate(batch):
                results[index] = tuple(values[row] for values in as_numpy)
            progress.advance(len(batch))
    return results


def encode(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    if not texts:  # a tokenizer cannot take an empty batch
        return []
    return [list(ids) for ids in tokenizer(list(texts))["input_ids"]]


def token_statistics(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    max_length: int,
    stride: int | None = None,
    vocab_stats: bool = True,
    max_tokens: int = 4096,
    top1: bool = False,
) -> list[tuple[Any, ...]]:
    """Per text: its token ids and ℓ, μ, σ² of tokens 2..T (windows joined back in order); with
    `top1`, also whether each of those tokens is the model's argmax (`score_segments`)."""
    encoded = encode(tokenizer, texts)
    segments, owner = [], []
    for text_index, ids in enumerate(encoded):
        for segment in text_segments(ids, max_length, stride):
            segments.append(segment)
            owner.append(text_index)
    scored = score_segments(
        model,
        segments,
        vocab_stats=vocab_stats,
        max_tokens=max_tokens,
        pad_id=tokenizer.pad_token_id or 0,
        top1=top1,
    )
    parts: list[list[tuple[np.ndarray, ...]]] = [[] for _ in texts]
    for text_index, values in zip(owner, scored):
        parts[text_index].append(values)
    return [
        (
            ids[:max_length] if not stride else ids,
            *(np.concatenate([p[k] for p in part]) for k in range(4 if top1 else 3)),
        )
        for ids, part in zip(encoded, parts)
    ]


def statistics_table(
    sample_ids: Sequence[int], statistics: Sequence[tuple], key: dict[str, Any]
) -> pa.Table:
    """The `tokens` Parquet table; `key` (model, tokenizer, dtype, truncation, stride) goes into
    every row and the schema metadata, so a cached file says what produced it."""
    columns = {
        "sample_id": pa.array(np.asarray(sample_ids, dtype=np.int64)),
        "token_ids": pa.array([list(map(int, s[0])) for s in statistics], pa.list_(pa.int32())),
        "logprob": pa.array([s[1] for s in statistics], pa.list_(pa.float32())),
        "mean": pa.array([s[2] for s in statistics], pa.list_(pa.float32())),
        "variance": pa.array([s[3] for s in statistics], pa.list_(pa.float32())),
    }
    table = pa.table(columns)
    for name, value in key.items():
        table = table.append_column(name, pa.array([str(value)] * len(table), pa.string()))
    return table.replace_schema_metadata({f"miaflow.{k}": str(v) for k, v in key.items()})
