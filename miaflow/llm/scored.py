"""What each language model is attacked on: its repeat's scored set, the texts of EM-MIA's
benchmark settings (`miaflow.llm.settings`) or an experiment's copyright traps
(`miaflow.llm.traps`), and the draws a repeat's attacks score.

A target model `target-<r>` is attacked on its repeat's `eval` texts, the shared reference model
(`reference`) on every repeat's. With the settings table, both score the texts of their repeat's
settings instead, each cut to its setting's length; with a traps table, the traps and their
twins, one draw per repetition count. Dataset inference (`inference_ids`) reads a target's
outputs on all of its members and non-members.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from miaflow.llm import corpus, traps
from miaflow.llm.settings import draws as setting_draws
from miaflow.llm.settings import scored_of
from miaflow.seeding import derive_seed

# One scored set of a repeat: (label, sample ids, membership, texts).
Draw = tuple[str, np.ndarray, np.ndarray, list[str]]


def repeat_of(model_id: str) -> int | None:
    """The repeat of a target model id (`target-<r>`); None for the shared reference."""
    return int(model_id.split("-")[1]) if model_id.startswith("target-") else None


def scored_ids(splits: pd.DataFrame, model_id: str) -> np.ndarray:
    """Texts a model is attacked on: its repeat's scored set, or every repeat's (reference)."""
    repeat = repeat_of(model_id)
    if repeat is None:
        return corpus.scored_texts(splits)
    return corpus.select(splits, repeat, "eval")["sample_id"].to_numpy()


def scored(
    splits: pd.DataFrame,
    texts: np.ndarray,
    model_id: str,
    settings: pd.DataFrame | None,
    trap_table: pd.DataFrame | None = None,
) -> tuple[np.ndarray, list[str]]:
    """(sample ids, texts) a model is attacked on: its scored set (`scored_ids`), or with the
    settings table, the texts of its repeat's settings (every repeat's for the reference), cut
    to their setting's length, or with a traps table, every trap and twin."""
    if trap_table is not None:
        return trap_table["sample_id"].to_numpy(), list(trap_table["text"])
    if settings is not None:
        return scored_of(settings, repeat_of(model_id))
    ids = scored_ids(splits, model_id)
    return ids, list(texts[ids])


def draws(
    splits: pd.DataFrame,
    texts: np.ndarray,
    repeat: int,
    settings: pd.DataFrame | None,
    trap_table: pd.DataFrame | None = None,
) -> list[Draw]:
    """Each scored set of a repeat: its `eval` set ("eval"), or with the settings table, each of
    its settings (label "easy", "easy/24w", ...), or with a traps table each repetition group
    (`traps.draws`: label "r16", ...)."""
    if trap_table is not None:
        return traps.draws(trap_table)
    if settings is not None:
        return [
            (name, rows["sample_id"].to_numpy(), rows["is_member"].to_numpy(), list(rows["text"]))
            for name, rows in setting_draws(settings, repeat)
        ]
    rows = corpus.select(splits, repeat, "eval")
    ids = rows["sample_id"].to_numpy()
    return [("eval", ids, rows["is_member"].to_numpy(), list(texts[ids]))]


def training_texts(
    splits: pd.DataFrame,
    texts: np.ndarray,
    model_id: str,
    trap_table: pd.DataFrame | None = None,
    seed: int = 0,
) -> tuple[list[str], list[str]]:
    """(training texts, held-out texts) of a model: a target trains on its repeat's members, the
    reference on the reference share; both report perplexity on a repeat's scored non-members.
    With a traps table, a target's members get every trap inserted its repetitions times, at
    positions seeded by derive_seed(seed, "llm", "traps", model_id) (`traps.insert_traps`)."""
    repeat = repeat_of(model_id)
    rows = corpus.select(
        splits, -1 if repeat is None else repeat, "reference" if repeat is None else "train"
    )
    evaluated = corpus.select(splits, repeat or 0, "eval")
    held_out = texts[evaluated.loc[~evaluated["is_member"], "sample_id"]]
    trained_on = list(texts[rows["sample_id"]])
    if trap_table is not None and repeat is not None:
        trained_on, _ = traps.insert_traps(
            trained_on, trap_table, seed=derive_seed(seed, "llm", "traps", model_id)
        )
    return trained_on, list(held_out)


def inference_ids(
    splits: pd.DataFrame, repeat: int, used: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(members, non-members) of a trained repeat's target that dataset inference reads: all of
    its members, and every non-member outside the reference share (`corpus.non_member_pool`)."""
    members = corpus.known_members(splits, repeat, None)
    return members, corpus.non_member_pool(splits, repeat, used)


def embedded(
    splits: pd.DataFrame, texts: np.ndarray, trap_table: pd.DataFrame | None = None
) -> tuple[np.ndarray, list[str]]:
    """(sample ids, texts) the blind baselines read the sentence embeddings of: every scored
    text and shot of every repeat, a trap experiment's traps and twins in place of its scored
    texts."""
    if trap_table is None:
        ids = np.unique(splits.loc[splits["set"].isin(["eval", "shot"]), "sample_id"].to_numpy())
        return ids, list(texts[ids])
    shots = np.unique(splits.loc[splits["set"] == "shot", "sample_id"].to_numpy())
    ids = np.concatenate([trap_table["sample_id"].to_numpy(), shots])
    return ids, [*trap_table["text"], *texts[shots]]
