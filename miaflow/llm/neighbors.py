"""Neighbour texts of the Neighbor attack (Mattern et al.): small edits of a text that keep it
plausible, so that a member's likelihood stands out against its neighbours' more than a
non-member's does.

Two generators, both deterministic given the seed and the text's sample id:

- `masked_lm` (Mattern et al.): a masked LM (a checkpoint directory or hub name with a
  masked-LM head) proposes replacements for randomly chosen words, one by one, taking the most
  likely token that differs from the original;
- `word_swap` (the offline default; no masked LM ships with the workflow's packages): each of a
  text's chosen words is replaced by a word drawn from the unigram distribution of the corpus'
  texts that are never scored. It keeps length and most of the wording; its neighbours are less
  fluent than a masked LM's, which weakens the attack but not its direction.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from miaflow.progress import tracked
from miaflow.seeding import rng


def _chosen_positions(generator: np.random.Generator, n_words: int, fraction: float) -> np.ndarray:
    count = min(n_words, max(1, math.ceil(fraction * n_words)))
    return np.sort(generator.choice(n_words, size=count, replace=False))


def word_swap(
    texts: Sequence[str],
    sample_ids: Sequence[int],
    vocabulary_texts: Sequence[str],
    *,
    n_neighbors: int,
    fraction: float,
    seed: int,
) -> list[list[str]]:
    """`n_neighbors` neighbours per text, each with ⌈fraction · words⌉ words replaced by draws from
    the unigram distribution of `vocabulary_texts` (never the word itself)."""
    counts = Counter(word for text in vocabulary_texts for word in text.split())
    words = sorted(counts)
    weights = np.array([counts[w] for w in words], dtype=np.float64)
    weights /= weights.sum()
    neighbours = []
    for text, sample_id in tracked(
        zip(texts, sample_ids), "word-swap neighbours", "texts", len(texts)
    ):
        generator = rng(seed, "neighbors", int(sample_id))
        original = text.split()
        own = []
        for _ in range(n_neighbors):
            edited = list(original)
            for position in (
                _chosen_positions(generator, len(original), fraction) if original else []
            ):
                while True:
                    replacement = words[generator.choice(len(words), p=weights)]
                    if replacement != original[position] or len(words) == 1:
                        break
                edited[position] = replacement
            own.append(" ".join(edited))
        neighbours.append(own)
    return neighbours


def masked_lm(
    texts: Sequence[str],
    sample_ids: Sequence[int],
    model_name: str,
    *,
    n_neighbors: int,
    fraction: float,
    seed: int,
) -> list[list[str]]:
    """Neighbours from a masked LM: chosen word positions (first sub-token) are masked one at a
    time and filled with the most likely different token."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_name)
    model = AutoModelForMaskedLM.from_pretrained(model_name, use_safetensors=True).eval()
    neighbours = []
    for text, sample_id in tracked(
        zip(texts, sample_ids), "masked-LM neighbours", "texts", len(texts)
    ):
        generator = rng(seed, "neighbors", int(sample_id))
        encoded = tokenizer(text, truncation=True)
        word_ids = encoded.word_ids()
        first_token = {w: i for i, w in reversed(list(enumerate(word_ids))) if w is not None}
        own = []
        for _ in range(n_neighbors):
            ids = list(encoded["input_ids"])
            if first_token:
                for word in _chosen_positions(generator, len(first_token), fraction):
                    position = first_token[sorted(first_token)[word]]
                    masked = torch.tensor(
                        [ids[:position] + [tokenizer.mask_token_id] + ids[position + 1 :]]
                    )
                    with torch.no_grad():
                        logits = model(input_ids=masked).logits[0, position]
                    logits[ids[position]] = -torch.inf
                    logits[tokenizer.all_special_ids] = -torch.inf
                    ids[position] = int(logits.argmax())
            own.append(tokenizer.decode(ids, skip_special_tokens=True))
        neighbours.append(own)
    return neighbours


def generate(
    texts: Sequence[str],
    sample_ids: Sequence[int],
    vocabulary_texts: Sequence[str],
    options: dict[str, Any],
    seed: int,
) -> list[list[str]]:
    """Neighbours by the configured generator (`options`: generator, n_neighbors, fraction,
    model for masked_lm)."""
    common = {"n_neighbors": options["n_neighbors"], "fraction": options["fraction"], "seed": seed}
    if options["generator"] == "masked_lm":
        return masked_lm(texts, sample_ids, options["model"], **common)
    return word_swap(texts, sample_ids, vocabulary_texts, **common)
