"""EM-MIA's benchmark settings (miaflow.llm.settings): on embeddings whose cluster geometry is
known, easy's members and non-members lie farther apart than medium's and hard's; selections are
deterministic, of the configured size, with exact membership; lengths cut texts and split them
into disjoint pools; labels round-trip; the settings report reads them back."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from miaflow.llm import corpus
from miaflow.llm import settings as benchmark

DIM = 8


def blobs(centres: list[int], per_blob: int, seed: int, spread: float = 0.05) -> np.ndarray:
    """Points around unit vectors e_c (one blob per centre index), a little noise each."""
    generator = np.random.default_rng(seed)
    points = [np.eye(DIM)[c] + spread * generator.standard_normal((per_blob, DIM)) for c in centres]
    return np.concatenate(points)


# Members around axes 0, 1, 2; non-members around 0 (same as a member blob), 3 and -1·axis 0
# (opposite a member blob): the hard pair shares axis 0, the easy pair is axis 0 against -axis 0.
MEMBERS = blobs([0, 1, 2], 20, seed=1)
NON_MEMBERS = np.concatenate([blobs([0, 3], 20, seed=2), -blobs([0], 20, seed=3)])
MEMBER_IDS = np.arange(60)
NON_MEMBER_IDS = np.arange(100, 160)


def draw(names=benchmark.SETTINGS, n_eval=20, seed=7):
    return benchmark.draw_settings(
        MEMBER_IDS,
        MEMBERS,
        NON_MEMBER_IDS,
        NON_MEMBERS,
        names=names,
        n_eval=n_eval,
        clusters=3,
        seed=seed,
    )


def test_easy_is_farther_than_medium_and_hard():
    drawn = draw()
    distance = {name: drawn[name][2] for name in benchmark.SETTINGS}
    assert distance["easy"] > distance["medium"] > distance["hard"]
    # the geometry: hard pairs the two blobs on axis 0, easy axis 0 against its opposite
    members, non_members, _ = drawn["hard"]
    assert set(members) <= set(range(20)) and set(non_members) <= set(range(100, 120))
    members, non_members, _ = drawn["easy"]
    assert set(non_members) <= set(range(140, 160))
    assert distance["easy"] > 1.5 and distance["hard"] < 0.1


def test_mixes_take_their_sides_from_random_and_hard():
    drawn = draw()
    assert np.array_equal(drawn["mix-1"][0], drawn["random"][0])
    assert np.array_equal(drawn["mix-1"][1], drawn["hard"][1])
    assert np.array_equal(drawn["mix-2"][0], drawn["hard"][0])
    assert np.array_equal(drawn["mix-2"][1], drawn["random"][1])


def test_sizes_and_exact_membership():
    for members, non_members, _ in draw(n_eval=16).values():
        assert members.size == non_members.size == 8
        assert np.isin(members, MEMBER_IDS).all() and np.isin(non_members, NON_MEMBER_IDS).all()
        assert len(set(members)) == 8 and len(set(non_members)) == 8


def test_selection_is_deterministic_and_seeded():
    first, second = draw(), draw()
    for name in benchmark.SETTINGS:
        assert np.array_equal(first[name][0], second[name][0])
        assert np.array_equal(first[name][1], second[name][1])
    other = draw(seed=8)
    assert not np.array_equal(first["random"][0], other["random"][0])


def test_random_alone_needs_no_clusters():
    drawn = draw(names=["random"])
    assert list(drawn) == ["random"]


def test_clusters_too_small_for_half_a_set_name_the_keys():
    with pytest.raises(ValueError, match="llm.settings.clusters"):
        draw(n_eval=50)  # 25 per side: no blob of 20 holds it


def test_labels_round_trip():
    assert benchmark.label("easy", None) == "easy"
    assert benchmark.label("mix-1", 24) == "mix-1/24w"
    assert benchmark.parse_label("gpt2_tiny/easy") == ("gpt2_tiny", "easy", None)
    assert benchmark.parse_label("gpt2_small/mix-2/24w") == ("gpt2_small", "mix-2", 24)
    assert benchmark.parse_label("gpt2_tiny") is None
    assert benchmark.parse_label("a/b") is None


def test_lengths_cut_texts_into_disjoint_pools():
    counts = np.array([3, 8, 12, 15, 24, 40])
    short, long = benchmark.length_pools(counts, [12, 24])
    assert list(np.flatnonzero(short)) == [2, 3] and list(np.flatnonzero(long)) == [4, 5]
    assert not (short & long).any()
    assert benchmark.length_pools(counts, [None])[0].all()
    assert benchmark.cut("a  b c d", 2) == "a b" and benchmark.cut("a  b", None) == "a  b"


def fake_embed(texts: list[str]) -> np.ndarray:
    """Texts starting with "north" near axis 0, "south" near its opposite, others near axis 1."""
    lead = {"north": np.eye(DIM)[0], "south": -np.eye(DIM)[0]}
    return np.array([lead.get(t.split()[0], np.eye(DIM)[1]) + 0.01 * (len(t) % 7) for t in texts])


def test_settings_table_of_a_split_table():
    words = ["north", "south", "east"]
    texts = np.array(
        [f"{words[i % 3]} text number {i} with some words" for i in range(300)], dtype=object
    )
    splits = corpus.draw_splits(300, repeats=2, n_eval=20, n_shots=2, reference_ratio=0.2, seed=0)
    options = dict(names=benchmark.SETTINGS, n_eval=12, clusters=3, seed=0, embed=fake_embed)
    table = benchmark.settings_table(splits, texts, np.arange(300), lengths=[None], **options)
    assert list(table.columns) == benchmark.COLUMNS
    assert table.equals(
        benchmark.settings_table(splits, texts, np.arange(300), lengths=[None], **options)
    )
    reference = set(corpus.select(splits, -1, "reference")["sample_id"])
    for repeat in (0, 1):
        trained = set(corpus.select(splits, repeat, "train")["sample_id"])
        shots = set(corpus.select(splits, repeat, "shot")["sample_id"])
        rows = table[table["repeat"] == repeat]
        assert rows.groupby("setting").size().eq(12).all()
        assert rows.groupby("setting")["is_member"].sum().eq(6).all()
        assert (rows["sample_id"].isin(trained) == rows["is_member"]).all()  # exact membership
        assert not rows["sample_id"].isin(reference | shots).any()
        assert (rows["text"] == texts[rows["sample_id"]]).all()
        distance = rows.groupby("setting")["distance"].first()
        assert distance["easy"] > distance["medium"] >= distance["hard"]
    assert [name for name, _ in benchmark.draws(table, 0)] == list(benchmark.SETTINGS)
    ids, scored = benchmark.scored_of(table, 0)
    assert np.array_equal(ids, np.unique(table.loc[table["repeat"] == 0, "sample_id"]))
    assert scored == list(texts[ids])


def test_settings_table_cuts_texts_to_each_length():
    texts = np.array(
        [" ".join(["north" if i % 2 else "south"] + ["w"] * (i % 20)) for i in range(400)],
        dtype=object,
    )
    splits = corpus.draw_splits(400, repeats=2, n_eval=10, n_shots=2, reference_ratio=0.1, seed=1)
    table = benchmark.settings_table(
        splits,
        texts,
        np.arange(400),
        names=["random", "easy"],
        lengths=[4, 10],
        n_eval=8,
        clusters=2,
        seed=0,
        embed=fake_embed,
    )
    assert set(table["length"]) == {4, 10}
    for length, rows in table.groupby("length"):
        assert (rows["text"].str.split().str.len() == length).all()
        whole = texts[rows["sample_id"]]
        assert all(w.startswith(t) for w, t in zip(whole, rows["text"]))
    assert table.groupby("sample_id")["text"].nunique().eq(1).all()  # one form per text
    labels = [name for name, _ in benchmark.draws(table, 1)]
    assert labels == ["random/4w", "easy/4w", "random/10w", "easy/10w"]


def settings_metrics() -> pd.DataFrame:
    """Metrics rows of three settings at two lengths (two repeats, two attacks) and one row of
    a plain experiment, which the settings report leaves out."""
    rows = []
    for length in ("", "/12w"):
        for setting, auroc in [("random", 0.5), ("easy", 0.9), ("hard", 0.55)]:
            for repeat, shift in enumerate((0.0, 0.02)):
                for attack, value in [("llm-loss", auroc + shift), ("em-mia", auroc - shift)]:
                    for metric in ("auroc", "tpr_at_1pct_fpr"):
                        label = f"gpt2_tiny/{setting}{length}"
                        rows.append(("synthetic_text", label, attack, repeat, metric, value))
    rows.append(("synthetic_text", "gpt2_tiny", "llm-loss", 0, "auroc", 0.7))
    return pd.DataFrame(
        rows, columns=["dataset", "target_model", "attack", "repeat", "metric", "value"]
    )


def test_report_table_and_figure(tmp_path, reproducible_png):
    from miaflow.evaluation import llm_settings_report as report

    metrics = settings_metrics()
    knowledge = {"llm-loss": "none", "em-mia": "none"}
    table = report.settings_table(metrics, knowledge)
    assert len(table) == 12 and set(table["setting"]) == {"random", "easy", "hard"}
    assert set(table["length"]) == {"whole texts", "12 words"}
    assert {"auroc_mean", "auroc_std", "tpr_at_1pct_fpr_mean", "tpr_at_1pct_fpr_std"} <= set(
        table.columns
    )
    easy = table[(table["setting"] == "easy") & (table["attack"] == "llm-loss")].iloc[0]
    assert easy["auroc_mean"] == pytest.approx(0.91) and easy["repeats"] == 2
    assert easy["auroc_std"] == pytest.approx(np.std([0.9, 0.92], ddof=1))
    assert table["setting"].tolist()[:4] == ["random", "random", "easy", "easy"]  # paper's order
    assert table["length"].iloc[0] == "whole texts"
    markdown = report.settings_markdown(table)
    assert "easy (12 words)" in markdown and "0.910 ± 0.014 (0.91)" in markdown
    reproducible_png(lambda path: report.plot_settings(table, path))
    empty = report.settings_table(metrics[metrics["target_model"] == "gpt2_tiny"], knowledge)
    assert empty.empty and "no" in empty.attrs["caption"]
    reproducible_png(lambda path: report.plot_settings(empty, path))
