"""Which texts each language model trains on and which texts the attacks score.

Two ways to know membership (docs/algorithms.md#language-model-attacks):

- **trained** (targets trained or fine-tuned in the workflow): a fixed `reference` share of the
  corpus trains the reference model; for every repeat the rest is split in two random halves,
  the target trains on one (`train`, the members) and the other holds the non-members. The
  scored set (`eval`) draws `n_eval / 2` texts from each half, and ReCaLL's prefix (`shot`) takes
  further non-members that are not scored.
- **labels** (a pretrained target and a corpus whose labels are membership, e.g. WikiMIA,
  label 1 = member): each repeat draws a balanced `eval` set and `shot` non-members outside it.

The table has one row per (repeat, text, set), repeat -1 for the reference rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from miaflow.seeding import rng

COLUMNS = ["repeat", "sample_id", "set", "is_member", "position"]


def _rows(repeat: int, ids: np.ndarray, name: str, member: np.ndarray | bool) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "repeat": repeat,
            "sample_id": ids.astype(np.int64),
            "set": name,
            "is_member": np.broadcast_to(member, ids.shape).astype(bool),
            "position": np.arange(ids.size, dtype=np.int64),
        }
    )


# Median words per text of the corpora whose lengths are known before any text is read, measured
# on them (synthetic_text: 12, range 11–14; Rotten Tomatoes: 20, range 1–59). WikiMIA's `length`
# option is its texts' length in words.
TYPICAL_WORDS = {"synthetic_text": 12, "rotten_tomatoes": 20}


def typical_words(dataset: str, options: Mapping[str, Any]) -> int | None:
    """Words of a typical (median) text of `dataset` under its options; None where unknown before
    the run. Each word is at least one token for tokenizers that split on spaces (byte-level BPE
    does), so this bounds a typical text's tokens from below."""
    if dataset == "wikimia":
        return int(options["length"])
    return TYPICAL_WORDS.get(dataset)


def trained_sizes(n_texts: int, reference_ratio: float) -> tuple[int, int, int]:
    """(texts of the reference model, members, non-members) of every repeat when the workflow
    trains the target on `n_texts` texts: the sizes `draw_splits` draws, for validation before
    any text is loaded."""
    n_reference = int(round(reference_ratio * n_texts))
    pool = n_texts - n_reference
    return n_reference, pool // 2, pool - pool // 2


def scored_needs(n_eval: int, n_shots: int) -> tuple[int, int]:
    """(members, non-members) one repeat draws: n_eval/2 of each are scored, and ReCaLL's prefix
    takes `n_shots` further non-members."""
    half = n_eval // 2
    return half, half + n_shots


def _eval_and_shots(
    repeat: int, members: np.ndarray, non_members: np.ndarray, n_eval: int, n_shots: int
) -> list[pd.DataFrame]:
    half, needed = scored_needs(n_eval, n_shots)
    if members.size < half or non_members.size < needed:
        raise ValueError(
            f"n_eval = {n_eval} and n_shots = {n_shots} need {half} members and "
            f"{needed} non-members, the corpus has {members.size} and "
            f"{non_members.size}"
        )
    scored = np.concatenate([members[:half], non_members[:half]])
    member = np.arange(scored.size) < half
    order = np.argsort(scored, kind="stable")  # scored texts in sample order, for readable files
    return [
        _rows(repeat, scored[order], "eval", member[order]),
        _rows(repeat, non_members[half : half + n_shots], "shot", False),
    ]


def texts_used(n_texts: int, subset: int | None, seed: int) -> np.ndarray:
    """Sample ids of the texts an experiment uses, sorted: all, or a seeded draw of `subset`."""
    if subset is not None and subset < n_texts:
        return np.sort(rng(seed, "llm", "subset").permutation(n_texts)[:subset])
    return np.arange(n_texts)


def draw_splits(
    n_texts: int,
    *,
    repeats: int,
    n_eval: int,
    n_shots: int,
    reference_ratio: float,
    seed: int,
    membership_labels: np.ndarray | None = None,
    subset: int | None = None,
) -> pd.DataFrame:
    """The split table of one language-model experiment (see the module docstring).

    `membership_labels` (1 = member) switches to the labels mode; otherwise membership is drawn.
    `subset` uses only that many texts of the corpus (a seeded draw), to bound training cost.
    """
    frames: list[pd.DataFrame] = []
    corpus = texts_used(n_texts, subset, seed)
    if membership_labels is not None:
        labels = np.asarray(membership_labels)[corpus]
        for repeat in range(repeats):
            generator = rng(seed, "llm", "eval", repeat)
            members = generator.permutation(corpus[labels == 1])
            non_members = generator.permutation(corpus[labels == 0])
            frames += _eval_and_shots(repeat, members, non_members, n_eval, n_shots)
        return pd.concat(frames, ignore_index=True)[COLUMNS]

    order = rng(seed, "llm", "reference").permutation(corpus)
    n_reference, n_members, _ = trained_sizes(corpus.size, reference_ratio)
    frames.append(_rows(-1, np.sort(order[:n_reference]), "reference", False))
    pool = np.sort(order[n_reference:])
    for repeat in range(repeats):
        shuffled = rng(seed, "llm", "members", repeat).permutation(pool)
        members, non_members = np.split(shuffled, [n_members])
        frames.append(_rows(repeat, np.sort(members), "train", True))
        frames += _eval_and_shots(repeat, members, non_members, n_eval, n_shots)
    return pd.concat(frames, ignore_index=True)[COLUMNS]


def select(splits: pd.DataFrame, repeat: int, name: str) -> pd.DataFrame:
    """Rows of one set of one repeat, in their stored order (shots oldest first)."""
    rows = splits[(splits["repeat"] == repeat) & (splits["set"] == name)]
    return rows.sort_values("position").reset_index(drop=True)


def scored_texts(splits: pd.DataFrame) -> np.ndarray:
    """Sample ids scored in any repeat, sorted: the texts models shared across repeats score."""
    return np.unique(splits.loc[splits["set"] == "eval", "sample_id"].to_numpy())


def known_non_members(splits: pd.DataFrame, repeat: int | None) -> np.ndarray:
    """Sample ids, sorted, of the texts an attacker knows to be non-members of a repeat's target
    and that no repeat scores: the reference model's share (trained mode; members of no target)
    and the repeat's shots (every repeat's for the shared reference, `repeat` None). CAMIA's
    population and DC-PDD's reference corpus."""
    shots = splits["set"] == "shot"
    if repeat is not None:
        shots &= splits["repeat"] == repeat
    rows = splits[(splits["set"] == "reference") | shots]
    return np.unique(rows["sample_id"].to_numpy())


def known_members(
    splits: pd.DataFrame, repeat: int, membership_labels: np.ndarray | None
) -> np.ndarray:
    """Sample ids, sorted, of a repeat's target's members: its `train` rows when the workflow
    trained it, else (a pretrained target) the corpus texts labelled 1 (`membership_labels`)."""
    trained = select(splits, repeat, "train")
    if len(trained) or membership_labels is None:
        return np.sort(trained["sample_id"].to_numpy())
    return np.flatnonzero(np.asarray(membership_labels) == 1)


def non_member_pool(splits: pd.DataFrame, repeat: int, used: np.ndarray) -> np.ndarray:
    """Sample ids, sorted, of every non-member of a trained repeat's target outside the
    reference share: the texts `used` that are neither reference texts nor its members (its
    scored non-members and shots included)."""
    reference = splits.loc[splits["set"] == "reference", "sample_id"].to_numpy()
    members = select(splits, repeat, "train")["sample_id"].to_numpy()
    return np.setdiff1d(np.asarray(used, dtype=np.int64), np.union1d(reference, members))
