"""Copyright traps (Meeus et al. 2024): the counts per repetition group, exact repetitions in
the augmented corpus, twins never in it, the corpus kept in order, and the seeding."""

from __future__ import annotations

from collections import Counter

import pytest

from miaflow.data import load_dataset
from miaflow.llm.traps import TABLE_COLUMNS, draw_traps, insert_traps


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return [str(text) for text in load_dataset("synthetic_text", {"n_samples": 300}, 7).features]


def test_each_repetition_group_holds_its_traps_and_as_many_twins(corpus):
    table = draw_traps(corpus, seed=0)
    assert list(table.columns) == TABLE_COLUMNS and len(table) == 4 * 2 * 20
    counts = table.groupby(["group", "is_member"]).size()
    assert counts.to_dict() == {(g, m): 20 for g in (1, 4, 16, 64) for m in (False, True)}
    assert (table.repetitions == table.group.where(table.is_member, 0)).all()
    assert table.trap_id.tolist() == list(range(160)) and table.text.is_unique
    assert not set(table.text) & set(corpus)


def test_traps_are_inserted_exactly_their_repetitions_and_twins_never(corpus):
    table = draw_traps(corpus, repetitions=(1, 3), per_group=5, seed=1)
    augmented, membership = insert_traps(corpus, table, seed=2)
    assert membership.equals(table)
    occurrences = Counter(augmented)
    for text, repetitions in zip(table.text, table.repetitions):
        assert occurrences[text] == repetitions  # 0 for every twin
    assert len(augmented) == len(corpus) + 5 * (1 + 3)
    inserted = set(table.text)
    assert [text for text in augmented if text not in inserted] == corpus  # order kept


def test_traps_and_positions_are_seeded(corpus):
    table = draw_traps(corpus, per_group=3, seed=4)
    assert table.equals(draw_traps(corpus, per_group=3, seed=4))
    assert not set(table.text) & set(draw_traps(corpus, per_group=3, seed=5).text)
    augmented = insert_traps(corpus, table, seed=1)[0]
    assert augmented == insert_traps(corpus, table, seed=1)[0]
    assert augmented != insert_traps(corpus, table, seed=2)[0]


def test_traps_look_like_the_corpus_they_join(corpus):
    synthetic = draw_traps(corpus, per_group=5, seed=0)
    assert all(text[0].isupper() and text.endswith(".") for text in synthetic.text)
    long = draw_traps(corpus, per_group=5, seed=0, sentences=3)
    assert all(text.count(". ") == 2 for text in long.text)  # three sentences each
    words = draw_traps(corpus, per_group=5, seed=0, source="words")
    vocabulary = {word for text in corpus for word in text.split()}
    lengths = {len(text.split()) for text in corpus}
    for text in words.text:
        assert set(text.split()) <= vocabulary and len(text.split()) in lengths


def test_draw_traps_checks_its_options(corpus):
    with pytest.raises(ValueError, match="unknown trap source"):
        draw_traps(corpus, seed=0, source="llm")
    with pytest.raises(ValueError, match="at least 1"):
        draw_traps(corpus, seed=0, repetitions=(0, 4))


def test_no_sentence_of_a_trap_or_twin_is_in_the_corpus_or_in_another_one(corpus):
    long = draw_traps(corpus, per_group=10, seed=3, sentences=2)
    sentences = [part + "." for text in long.text for part in text[:-1].split(". ")]
    assert len(sentences) == 2 * len(long) == len(set(sentences))
    assert not set(sentences) & set(corpus)
