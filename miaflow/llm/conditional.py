"""Likelihoods of a text after a prefix: ReCaLL's conditional likelihood after known non-member
shots, and the rows of EM-MIA's pairwise matrix LL(x ; p) (docs/algorithms.md#em-mia).

A prefix and its target form one segment (`miaflow.llm.tokens`), whose scored tokens are the
target's 2..K (1..K in ReCaLL's `compat` form), K = min(T, context); which shots fit before a
target is counted here (`prefix_ids`, `prefix_shots`). Pairs that share a prefix run it once and
reuse its cache (`miaflow.llm.prefix_cache`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from miaflow.llm.prefix_cache import score_after_prefixes
from miaflow.llm.tokens import HEAD_CHUNK, LOGITS_BUDGET, encode, score_segments

log = logging.getLogger(__name__)


def _separator_ids(tokenizer: Any, separator: str, compat: bool) -> list[int]:
    """The separator's tokens after every shot of a ReCaLL prefix (none in the `compat` form)."""
    if not separator or compat:
        return []
    return list(tokenizer(separator, add_special_tokens=False)["input_ids"])


def prefix_ids(
    tokenizer: Any,
    shots: Sequence[str],
    separator: str,
    target_length: int,
    context: int,
    *,
    compat: bool = False,
) -> list[int]:
    """ReCaLL's prefix: the most recent shots that fit before a target of `target_length` tokens
    in `context` (oldest dropped first), each followed by the separator; empty if none fits.
    With `compat` (the ReCaLL code's prefix), the kept shots are joined with nothing between them
    and tokenised as one text; the fit is counted on the shots tokenised one by one."""
    from miaflow.llm.scores import recall_prefix

    shot_ids = encode(tokenizer, shots)
    separator_ids = _separator_ids(tokenizer, separator, compat)
    kept = recall_prefix([len(ids) for ids in shot_ids], len(separator_ids), target_length, context)
    if kept == 0 and shots:
        log.warning(
            "ReCaLL: no shot fits before a %d-token target in a %d-token context; "
            "that target gets an empty prefix",
            target_length,
            context,
        )
    if compat:
        return encode(tokenizer, ["".join(shots[len(shots) - kept :])])[0] if kept else []
    return [t for ids in shot_ids[len(shot_ids) - kept :] for t in (*ids, *separator_ids)]


def prefix_shots(
    tokenizer: Any,
    texts: Sequence[str],
    shots: Sequence[str],
    separator: str,
    context: int,
    *,
    compat: bool = False,
) -> np.ndarray:
    """How many shots each text's ReCaLL prefix keeps (`prefix_ids`' rule, texts cut to the
    context): fewer than len(shots) is a shortened prefix, 0 an empty one. Recorded per scored
    text so that the report shows which share of targets lost part of their prefix."""
    from miaflow.llm.scores import recall_prefix

    shot_lengths = [len(ids) for ids in encode(tokenizer, shots)]
    separator_length = len(_separator_ids(tokenizer, separator, compat))
    return np.array(
        [
            recall_prefix(shot_lengths, separator_length, min(len(ids), context), context)
            for ids in encode(tokenizer, texts)
        ],
        dtype=np.int64,
    )


def target_lengths(tokenizer: Any, texts: Sequence[str], context: int) -> np.ndarray:
    """K per text: a conditional likelihood covers the text's tokens x_1..x_K, K = min(T, context)
    (see `conditional_log_likelihood`)."""
    return np.array([min(len(ids), context) for ids in encode(tokenizer, texts)], dtype=np.int64)


def conditional_log_likelihood(
    model: Any,
    tokenizer: Any,
    prefixes: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    *,
    context: int,
    first_token: bool = False,
    max_tokens: int = 4096,
    reuse_prefix: bool = True,
) -> np.ndarray:
    """LL(x ; P): mean ℓ of target tokens 2..K when each target follows its prefix's tokens, K =
    min(T, context): a target longer than the context is cut to its first `context` tokens, and
    a prefix too long for what is left loses its oldest tokens. Without a stride, K tokens are
    the unconditional LL's; with one, LL(x) scores all T, so the ratios of ReCaLL and EM-MIA
    divide by LL(x) over tokens 2..K (`target_lengths`, `LLMInputs.conditioned_ll`): the prefix
    only reaches the first window anyway. `first_token` also scores x_1 after a non-empty prefix
    (tokens 1..K, the ReCaLL code's choice). `reuse_prefix` runs each distinct (prefix, target)
    pair once and each prefix of several pairs once, its key/value cache shared by its targets
    (`score_after_prefixes`); False runs every pair as one sequence (the benchmark's baseline)."""
    pairs = []
    for prefix, target in zip(prefixes, targets):
        target = list(target[:context])
        pairs.append((tuple(prefix[max(0, len(prefix) + len(target) - context) :]), tuple(target)))
    distinct = list(dict.fromkeys(pairs)) if reuse_prefix else pairs
    shared = Counter(prefix for prefix, _ in distinct)  # a prefix of one pair runs joined with it
    cached = [
        i
        for i, (prefix, target) in enumerate(distinct)
        if reuse_prefix and prefix and target and shared[prefix] > 1
    ]
    plain = sorted(set(range(len(distinct))) - set(cached))
    logprobs: list[Any] = [None] * len(distinct)
    if plain:
        segments = [
            ([*prefix, *target], len(prefix) + (0 if first_token and prefix else 1))
            for prefix, target in (distinct[i] for i in plain)
        ]
        scored = score_segments(
            model,
            segments,
            vocab_stats=False,
            max_tokens=max_tokens,
            pad_id=tokenizer.pad_token_id or 0,
        )
        for i, values in zip(plain, scored):
            logprobs[i] = values[0]
    if cached:
        scored = score_after_prefixes(
            model,
            [distinct[i][0] for i in cached],
            [distinct[i][1] for i in cached],
            first_token=first_token,
            max_tokens=max_tokens,
            max_scored=max(1, LOGITS_BUDGET // model.get_output_embeddings().weight.shape[0]),
            head_chunk=HEAD_CHUNK,
        )
        for i, values in zip(cached, scored):
            logprobs[i] = values
    means = np.array([values.mean() if values.size else np.nan for values in logprobs])
    if not reuse_prefix:
        return means
    index = {pair: i for i, pair in enumerate(distinct)}
    return means[np.array([index[pair] for pair in pairs], dtype=np.int64)]


def recall_conditional(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    shots: Sequence[str],
    *,
    separator: str,
    context: int,
    compat: bool = False,
    max_tokens: int = 4096,
) -> np.ndarray:
    """LL(x ; P) of every text given the non-member shots' prefix (overflow rule per text);
    `compat`: the ReCaLL code's LL(x ; P), shots joined with no separator, tokens 1..K."""
    targets = encode(tokenizer, texts)
    prefixes = [
        prefix_ids(tokenizer, shots, separator, min(len(t), context), context, compat=compat)
        for t in targets
    ]
    return conditional_log_likelihood(
        model,
        tokenizer,
        prefixes,
        targets,
        context=context,
        first_token=compat,
        max_tokens=max_tokens,
    )


def pair_rows(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    prefix_rows: Sequence[int],
    *,
    separator: str,
    context: int,
    max_tokens: int = 4096,
    reuse_prefix: bool = True,
) -> np.ndarray:
    """Rows `prefix_rows` of the N × N matrix of LL(x ; p): text p as a one-shot prefix
    (followed by the separator) of every text x, the diagonal included; with `reuse_prefix`,
    each row's prefix runs once for all of its targets (`conditional_log_likelihood`)."""
    encoded = encode(tokenizer, texts)
    separator_ids = tokenizer(separator, add_special_tokens=False)["input_ids"] if separator else []
    prefixes = [encoded[p] + separator_ids for p in prefix_rows for _ in encoded]
    targets = [x for _ in prefix_rows for x in encoded]
    values = conditional_log_likelihood(
        model,
        tokenizer,
        prefixes,
        targets,
        context=context,
        max_tokens=max_tokens,
        reuse_prefix=reuse_prefix,
    )
    return values.reshape(len(prefix_rows), len(encoded))
