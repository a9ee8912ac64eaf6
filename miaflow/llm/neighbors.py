"""Neighbour texts: small edits of a text that keep it plausible. The Neighbor attack (Mattern et
al., `llm-neighbor`) compares a text's likelihood with its neighbours'; TDDBench's raw-text
Query-neighbor, -augment and -adv query a classifier on them (`miaflow.queries.sets`).

Two generators, both deterministic given the seed and the text's sample id:

- `masked_lm` (Mattern et al.; TDDBench's BERT substitutions): a seeded share of a text's
  tokens is masked and each is refilled with a token sampled from a masked LM, never one that
  spells the original. The edits are spliced into the original string at the tokens' character
  offsets, so the rest of the text (case, spacing) is untouched. The masked LM is a checkpoint
  directory or hub name with a masked-LM head, or, with no name, a small BERT trained in the job
  from a config, with a WordPiece tokenizer trained by `tokenizers` on texts that are never
  scored (`train_masked_lm`);
- `word_swap`: each of a text's chosen words is replaced by a word drawn from the unigram
  distribution of the corpus' texts that are never scored. It keeps length and most of the
  wording; its neighbours are less fluent than a masked LM's.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from miaflow.progress import Progress, tracked
from miaflow.seeding import derive_seed, rng

log = logging.getLogger(__name__)

# The masked LM trained in the job when no model is named: a 2-layer BERT, small enough to train
# in seconds on a CPU; it only proposes replacements, so fluency matters more than size.
SCRATCH_MLM = {
    "vocab_size": 2000,
    "hidden": 64,
    "layers": 2,
    "heads": 2,
    "window": 128,
    "epochs": 10,
    "batch_size": 32,
    "lr": 3e-3,
    "mask_ratio": 0.15,
}
SPECIAL_TOKENS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}


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


# --- masked-LM substitutions ----------------------------------------------------------------------


@dataclass(frozen=True)
class MaskedLM:
    """A masked LM in eval mode, its fast tokenizer, and each vocabulary entry's spelling."""

    model: Any
    tokenizer: Any
    spelling: tuple[str, ...]  # per token id: the text it splices in ("" for special tokens)
    by_spelling: dict[str, tuple[int, ...]]  # lower-cased spelling -> ids (never proposed for it)

    @classmethod
    def of(cls, model: Any, tokenizer: Any) -> MaskedLM:
        """Ready for `substitutions`: in eval mode on the job's device."""
        from miaflow.compute import torch_device

        special = set(tokenizer.all_special_ids)
        spelling = tuple(
            "" if i in special else _spelling(tokenizer, i) for i in range(len(tokenizer))
        )
        by_spelling: dict[str, list[int]] = {}
        for i, text in enumerate(spelling):
            by_spelling.setdefault(text.lower(), []).append(i)
        return cls(
            model.to(torch_device()).eval(),
            tokenizer,
            spelling,
            {k: tuple(v) for k, v in by_spelling.items()},
        )

    @property
    def start(self) -> list[int]:
        """The token a window starts with ([CLS], <s>), if the model has one."""
        first = self.tokenizer.cls_token_id
        first = first if first is not None else self.tokenizer.bos_token_id
        return [] if first is None else [first]

    @property
    def end(self) -> list[int]:
        """The token a window ends with ([SEP], </s>), if the model has one."""
        last = self.tokenizer.sep_token_id
        last = last if last is not None else self.tokenizer.eos_token_id
        return [] if last is None else [last]


def _spelling(tokenizer: Any, token_id: int) -> str:
    """The characters a token stands for: decoded alone (byte-level and sentence-piece markers
    become spaces, stripped), without a word-piece continuation's `##`."""
    token = tokenizer.convert_ids_to_tokens(token_id)
    return tokenizer.convert_tokens_to_string([token]).strip().removeprefix("##")


def _word_pieces(words: Sequence[str], size: int) -> dict[str, int]:
    """A WordPiece vocabulary built in a fixed order: the special tokens, every character seen
    (alone and as a `##` continuation, so no word is unknown), then the most frequent words (ties
    by spelling) up to `size`. The `tokenizers` WordPiece trainer numbers tokens of equal count
    in a per-process hash order, so the same texts gave different vocabularies."""
    counts = Counter(words)
    characters = sorted({character for word in counts for character in word})
    pieces = [*SPECIAL_TOKENS.values(), *characters, *(f"##{c}" for c in characters)]
    known = set(pieces)
    frequent = sorted((word for word in counts if word not in known), key=lambda w: (-counts[w], w))
    pieces += frequent[: max(0, size - len(pieces))]
    return {piece: index for index, piece in enumerate(pieces)}


def train_masked_lm(texts: Sequence[str], seed: int) -> tuple[Any, Any]:
    """A small BERT masked LM (`SCRATCH_MLM`) and its WordPiece tokenizer, both trained on `texts`
    from `seed` (deterministic on one device)."""
    import torch
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    shape = SCRATCH_MLM
    normalizer, splitter = (
        normalizers.BertNormalizer(lowercase=True),
        pre_tokenizers.BertPreTokenizer(),
    )
    vocabulary = _word_pieces(
        [
            word
            for text in texts
            for word, _ in splitter.pre_tokenize_str(normalizer.normalize_str(text))
        ],
        shape["vocab_size"],
    )
    words = Tokenizer(models.WordPiece(vocab=vocabulary, unk_token=SPECIAL_TOKENS["unk_token"]))
    words.normalizer, words.pre_tokenizer = normalizer, splitter
    words.decoder = decoders.WordPiece()
    cls_id, sep_id = (words.token_to_id(SPECIAL_TOKENS[k]) for k in ("cls_token", "sep_token"))
    words.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, model_max_length=shape["window"], **SPECIAL_TOKENS
    )
    torch.manual_seed(derive_seed(seed, "masked-lm", "init"))
    model = BertForMaskedLM(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=shape["hidden"],
            num_hidden_layers=shape["layers"],
            num_attention_heads=shape["heads"],
            intermediate_size=4 * shape["hidden"],
            max_position_embeddings=shape["window"],
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    batch = tokenizer([str(t) for t in texts], padding=True, truncation=True, return_tensors="pt")
    ids, attention = batch["input_ids"], batch["attention_mask"]
    maskable = attention.bool() & ~torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
    optimizer = torch.optim.AdamW(model.parameters(), lr=shape["lr"], weight_decay=0.0)
    draws = torch.Generator().manual_seed(derive_seed(seed, "masked-lm", "masks"))
    model.train()
    with Progress(shape["epochs"], "masked LM training", "epochs") as progress:
        for _ in range(shape["epochs"]):
            total = 0.0
            for rows in torch.randperm(len(ids), generator=draws).split(shape["batch_size"]):
                masked = maskable[rows] & (
                    torch.rand(maskable[rows].shape, generator=draws) < shape["mask_ratio"]
                )
                inputs = ids[rows].masked_fill(masked, tokenizer.mask_token_id)
                labels = ids[rows].masked_fill(~masked, -100)
                loss = model(input_ids=inputs, attention_mask=attention[rows], labels=labels).loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += loss.item() * len(rows)
            progress.advance(1)
        log.info("masked LM: %d texts, last epoch's loss %.4f", len(ids), total / len(ids))
    return model.eval(), tokenizer


def load_masked_lm(name: str | None, public_texts: Sequence[str], seed: int) -> MaskedLM:
    """The named masked LM (a checkpoint directory or hub name, read from the local Hugging Face
    cache), or with `name` None one trained on `public_texts` (`train_masked_lm`)."""
    import torch
    from transformers import AutoModelForMaskedLM

    from miaflow.pretrained import load_tokenizer, quiet_transformers, resolve_model

    if name is None:
        return MaskedLM.of(*train_masked_lm(public_texts, seed))
    quiet_transformers()
    path = resolve_model(name)
    model = AutoModelForMaskedLM.from_pretrained(path, dtype=torch.float32)
    return MaskedLM.of(model, load_tokenizer(path))


def _windows(length: int, width: int) -> list[range]:
    return [range(start, min(start + width, length)) for start in range(0, length, width)]


def substitutions(
    masked_lm: MaskedLM, text: str, n_neighbors: int, fraction: float, seed: int, sample_id: int
) -> list[list[tuple[int, int, str]]]:
    """Per neighbour, its edits (start, end, replacement) in character offsets of `text`:
    ⌈fraction · tokens⌉ distinct token positions (at least one), each refilled with a token
    sampled from the masked LM's distribution at that position, masked together with the
    neighbour's other positions. Special tokens, and tokens that spell the original (ignoring
    case), are never drawn. A text longer than the model's window is filled window by window."""
    import torch

    from miaflow.compute import torch_device

    tokenizer, model = masked_lm.tokenizer, masked_lm.model
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    if not ids:
        return [[] for _ in range(n_neighbors)]
    positions = rng(seed, "neighbors", sample_id)
    draws = torch.Generator().manual_seed(derive_seed(seed, "neighbors", sample_id, "fill"))
    chosen = [_chosen_positions(positions, len(ids), fraction).tolist() for _ in range(n_neighbors)]
    start_ids, end_ids = masked_lm.start, masked_lm.end
    width = min(tokenizer.model_max_length, model.config.max_position_embeddings)
    width -= len(start_ids) + len(end_ids)
    rows, where = [], []  # one row per (neighbour, window holding a chosen position)
    for k, picked in enumerate(chosen):
        for window in _windows(len(ids), width):
            inside = [p for p in picked if p in window]
            if inside:
                row = list(ids[window.start : window.stop])
                for p in inside:
                    row[p - window.start] = tokenizer.mask_token_id
                rows.append([*start_ids, *row, *end_ids])
                where.append((k, window.start, inside))
    device = torch_device()
    longest = max(map(len, rows))
    batch = torch.full((len(rows), longest), tokenizer.pad_token_id)
    attention = torch.zeros((len(rows), longest), dtype=torch.long)
    for r, row in enumerate(rows):
        batch[r, : len(row)], attention[r, : len(row)] = torch.tensor(row), 1
    with torch.no_grad():
        logits = model(input_ids=batch.to(device), attention_mask=attention.to(device))
    logits = logits.logits[..., : len(masked_lm.spelling)].float().cpu()
    never = list(masked_lm.by_spelling.get("", ()))
    edits: list[list[tuple[int, int, str]]] = [[] for _ in range(n_neighbors)]
    for r, (k, start, inside) in enumerate(where):
        for p in inside:
            start_char, end_char = offsets[p]
            original = text[start_char:end_char].strip().lower()
            scores = logits[r, p - start + len(start_ids)].clone()
            scores[never + list(masked_lm.by_spelling.get(original, ()))] = -torch.inf
            token = int(torch.multinomial(torch.softmax(scores, dim=0), 1, generator=draws))
            edits[k].append((start_char, end_char, masked_lm.spelling[token]))
    return edits


def spliced(text: str, edits: Sequence[tuple[int, int, str]]) -> str:
    """`text` with each (start, end) span replaced, right to left so offsets stay valid."""
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def masked_lm_neighbours(
    texts: Sequence[str],
    sample_ids: Sequence[int],
    masked_lm: MaskedLM,
    *,
    n_neighbors: int,
    fraction: float,
    seed: int,
) -> list[list[str]]:
    """`n_neighbors` masked-LM neighbours per text (see `substitutions`)."""
    return [
        [
            spliced(text, edits)
            for edits in substitutions(masked_lm, text, n_neighbors, fraction, seed, int(sample_id))
        ]
        for text, sample_id in tracked(
            zip(texts, sample_ids), "masked-LM neighbours", "texts", len(texts)
        )
    ]


def generate(
    texts: Sequence[str],
    sample_ids: Sequence[int],
    vocabulary_texts: Sequence[str],
    options: dict[str, Any],
    seed: int,
) -> list[list[str]]:
    """Neighbours by the configured generator (`options`: generator, n_neighbors, fraction,
    model for masked_lm: null trains one on `vocabulary_texts`)."""
    common = {"n_neighbors": options["n_neighbors"], "fraction": options["fraction"], "seed": seed}
    if options["generator"] == "masked_lm":
        masked_lm = load_masked_lm(options["model"], vocabulary_texts, seed)
        return masked_lm_neighbours(texts, sample_ids, masked_lm, **common)
    return word_swap(texts, sample_ids, vocabulary_texts, **common)


def neighbor_table(
    texts: Sequence[str],
    sample_ids: np.ndarray,
    vocabulary_texts: Sequence[str],
    options: dict[str, Any],
    seed: int,
) -> pd.DataFrame:
    """The neighbours of each text (`generate`) as the llm stage stores them: one row per
    (sample_id, neighbor) with its text."""
    generated = generate(texts, sample_ids, vocabulary_texts, options, seed)
    count = options["n_neighbors"]
    return pd.DataFrame(
        {
            "sample_id": np.repeat(sample_ids, count),
            "neighbor": np.tile(np.arange(count), len(sample_ids)),
            "text": [text for own in generated for text in own],
        }
    )


def scored_neighbors(
    splits: pd.DataFrame,
    texts: np.ndarray,
    options: dict[str, Any],
    seed: int,
    trap_table: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """`neighbor_table` of every text some repeat scores (miaflow.llm.corpus), its vocabulary
    the texts none scores, with their seed's name; with a trap experiment's traps table, of its
    traps and twins (the texts it scores), its vocabulary the whole corpus."""
    from miaflow.llm.corpus import scored_texts

    if trap_table is not None:
        attacked, scored = trap_table["sample_id"].to_numpy(), list(trap_table["text"])
        unscored = np.arange(len(texts))
    else:
        attacked = scored_texts(splits)
        scored = list(texts[attacked])
        unscored = np.setdiff1d(np.arange(len(texts)), attacked)
    return neighbor_table(
        scored,
        attacked,
        list(texts[unscored]),
        options,
        derive_seed(seed, "llm", "neighbors"),
    )
