"""Copyright traps (Meeus, Shilov, Faysse and de Montjoye, ICML 2024, "Copyright Traps for Large
Language Models"): generated sequences inserted into a training corpus a known number of times,
with twins from the same generator that are never inserted. Their membership is exact by
construction, whatever the corpus, so an attack can be evaluated on traps and twins even when
the rest of the corpus has no known non-members; detectability grows with the repetitions
(the paper repeats traps 1 to 1,000 times; here 1, 4, 16, 64 by default).

The paper generates traps with a language model at chosen perplexities. Here they come from
the generator of the corpus they join, so that they look like it: the embedded default's
`synthetic_text` generator (`miaflow.data.embedded.load_synthetic_text`, with a seed of its own),
or, for any other corpus, words drawn from the corpus' own unigram distribution, each trap as
long as a corpus text drawn at random (`source="words"`; less fluent, like the paper's
high-perplexity traps).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pandas as pd

from miaflow.seeding import derive_seed, rng

TABLE_COLUMNS = ["trap_id", "group", "is_member", "repetitions", "text"]
SOURCES = ("synthetic_text", "words")


def _synthetic_sentences(n: int, seed: int) -> list[str]:
    from miaflow.data.embedded import load_synthetic_text

    dataset = load_synthetic_text({"n_samples": n}, seed, lambda: [])
    return [str(text) for text in dataset.features]


def _word_sentences(corpus: Sequence[str], n: int, seed: int) -> list[str]:
    counts = Counter(word for text in corpus for word in text.split())
    if not counts:
        raise ValueError("the corpus has no words to draw traps from")
    words = sorted(counts)
    weights = np.array([counts[w] for w in words], dtype=np.float64)
    weights /= weights.sum()
    lengths = [len(text.split()) for text in corpus if text.split()]
    generator = np.random.default_rng(seed)
    return [
        " ".join(
            words[i] for i in generator.choice(len(words), lengths[k], p=weights / weights.sum())
        )
        for k in generator.choice(len(lengths), n)
    ]


def draw_traps(
    corpus: Sequence[str],
    *,
    repetitions: Sequence[int] = (1, 4, 16, 64),
    per_group: int = 20,
    seed: int,
    source: str = "synthetic_text",
    sentences: int = 1,
) -> pd.DataFrame:
    """Traps and twins: for each repetition count, `per_group` traps (is_member, inserted
    `repetitions` times) and `per_group` twins (never inserted, repetitions 0) of the same
    generator, each `sentences` generated sentences joined by a space (longer traps are more
    detectable, as in the paper's 25 to 100 tokens).

    No sentence of a trap or twin is a corpus text or part of another trap or twin, so an
    inserted copy is the only way the training data holds any of it. One row each: trap_id
    (traps first, by group, then twins), group (the repetition count of its group),
    is_member, repetitions, text. Seeded by `seed` alone (derive_seed(seed, "traps", ...)), so
    the traps do not depend on the corpus unless `source="words"` draws from its vocabulary."""
    if source not in SOURCES:
        raise ValueError(f"unknown trap source {source!r}; expected one of {SOURCES}")
    if per_group < 1 or sentences < 1 or any(count < 1 for count in repetitions):
        raise ValueError("per_group, sentences and every repetition count must be at least 1")
    needed = 2 * per_group * len(repetitions)
    taken = set(corpus)
    for attempt in range(8):  # redraw bigger on the rare collisions; the same for a given seed
        draw_seed = derive_seed(seed, "traps", source, attempt)
        n_sentences = sentences * needed * 2**attempt + sentences
        drawn = (
            _synthetic_sentences(n_sentences, draw_seed)
            if source == "synthetic_text"
            else _word_sentences(corpus, n_sentences, draw_seed)
        )
        kept, used = [], set(taken)
        for start in range(0, len(drawn) - sentences + 1, sentences):
            parts = drawn[start : start + sentences]
            text = " ".join(parts)
            if text not in used and used.isdisjoint(parts) and len(set(parts)) == sentences:
                kept.append(text)
                used.update([text, *parts])
        if len(kept) >= needed:
            break
    else:
        raise ValueError(f"could not draw {needed} distinct traps and twins from {source!r}")
    texts = iter(kept[:needed])
    rows = [
        (count, member, count if member else 0, next(texts))
        for member in (True, False)
        for count in repetitions
        for _ in range(per_group)
    ]
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS[1:])
    table.insert(0, "trap_id", np.arange(len(table), dtype=np.int64))
    return table


def insert_traps(
    corpus: Sequence[str], traps: pd.DataFrame, *, seed: int
) -> tuple[list[str], pd.DataFrame]:
    """The training corpus with every trap inserted `repetitions` times, each copy a text of its
    own at a seeded position (rng(seed, "traps", "positions")), the corpus' own texts in their
    order; and the membership table of the traps and twins (`draw_traps`' rows), the ground
    truth for scoring them."""
    copies = [
        text for text, count in zip(traps["text"], traps["repetitions"]) for _ in range(int(count))
    ]
    generator = rng(seed, "traps", "positions")
    total = len(corpus) + len(copies)
    is_trap = np.zeros(total, dtype=bool)
    is_trap[generator.choice(total, len(copies), replace=False)] = True
    shuffled = iter([copies[i] for i in generator.permutation(len(copies))])
    own = iter(corpus)
    augmented = [next(shuffled) if trap else next(own) for trap in is_trap]
    return augmented, traps.reset_index(drop=True)


# --- traps in the llm stage -----------------------------------------------------------------------

GROUP_PREFIX = "r"  # a repetition group's label: "r16", the traps inserted 16 times and their twins


def group_label(repetitions: int) -> str:
    """A repetition group's name in experiment labels ("gpt2_traps/r16")."""
    return f"{GROUP_PREFIX}{int(repetitions)}"


def parse_group(target_model: str) -> tuple[str, int] | None:
    """(experiment label, repetitions) of a trap metrics row's target_model "gpt2_traps/r16";
    None for any other label."""
    label, _, group = target_model.partition("/")
    if not group.startswith(GROUP_PREFIX) or not group[len(GROUP_PREFIX) :].isdigit():
        return None
    return label, int(group[len(GROUP_PREFIX) :])


def trap_table(corpus: Sequence[str], *, seed: int, **options: object) -> pd.DataFrame:
    """`draw_traps` with a `sample_id` per trap and twin after the corpus' own ids
    (len(corpus) + trap_id), so that every cached table keys a trap apart from any corpus text."""
    table = draw_traps(corpus, seed=seed, **options)
    table.insert(1, "sample_id", len(corpus) + table["trap_id"].to_numpy())
    return table


def draws(table: pd.DataFrame) -> list[tuple[str, np.ndarray, np.ndarray, list[str]]]:
    """One scored draw per repetition group, in increasing repetitions: (label "r<count>",
    sample ids, is_member, texts), the group's traps then its twins."""
    return [
        (
            group_label(count),
            rows["sample_id"].to_numpy(),
            rows["is_member"].to_numpy(),
            list(rows["text"]),
        )
        for count, rows in table.sort_values("trap_id").groupby("group", sort=True)
    ]
