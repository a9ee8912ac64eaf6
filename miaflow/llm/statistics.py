"""What one model's job of the llm stage computes from one load of the model (rule
llm_statistics and the rules that reuse it): every cached table the rule asks for, in one pass
over the names it asks for (`TABLES`).

The existing attacks' tables (token statistics of the scored texts and of their lower-cased
copies and neighbours, ReCaLL's conditional likelihoods, EM-MIA's pair shards) and the recent
attacks' (docs/algorithms.md#recent-language-model-attacks): EZ-MIA's top-1 flags, taken from
the same forward pass as the scored texts' statistics; PAC's word-swapped copies; the token
statistics of the known non-members (CAMIA's population, DC-PDD's token frequencies);
Con-ReCall's likelihoods after known member texts; SaMIA's sampled continuations; CAMIA's
repeated texts. Each new table is an artifact of its own, so the tables the existing attacks read
keep their bytes whatever else a rule asks for.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from miaflow.llm import corpus, recent_inputs
from miaflow.llm.scored import Draw, repeat_of
from miaflow.llm.tables import ModelScorer
from miaflow.seeding import derive_seed

# Output names of a statistics job, in the order they are computed (tokens and top1: one pass).
TABLES = (
    "tokens",
    "top1",
    "lowercase_tokens",
    "neighbor_tokens",
    "augmented_tokens",
    "population_tokens",
    "recall",
    "member_recall",
    "samples",
    "repeated",
    "pairs",
)
SAMPLE_BATCH = 32  # prompts per SaMIA generation batch (recent_inputs.sample_continuations)


@dataclass(frozen=True)
class Scored:
    """The texts one job scores, and what the recent attacks' inputs are drawn from.

    `splits` (the experiment's split table), `corpus` (every text of the dataset) and
    `labels` (its labels: membership for a pretrained target's corpus) give the known members
    and non-members; `ids`/`texts` are the scored texts as scored; `draws` the scored sets of
    the repeat (EM-MIA's matrices); `inputs`: the input options of the configured attacks
    (`miaflow.attacks.registry.llm_input_options`)."""

    splits: pd.DataFrame
    corpus: np.ndarray
    labels: np.ndarray | None
    model_id: str
    scored_set: str
    ids: np.ndarray
    texts: list[str]
    draws: list[Draw]
    neighbors: pd.DataFrame | None
    inputs: Mapping[str, Mapping[str, Any]]
    seed: int

    @property
    def repeat(self) -> int | None:
        return repeat_of(self.model_id)

    def shots(self) -> list[str]:
        """ReCaLL's known non-member prefix texts of the repeat, oldest first."""
        return list(self.corpus[corpus.select(self.splits, self.repeat, "shot")["sample_id"]])

    def population(self) -> np.ndarray:
        """The known non-members that no repeat scores (`corpus.known_non_members`)."""
        return corpus.known_non_members(self.splits, self.repeat)

    def member_shots(self) -> list[str]:
        """Con-ReCall's member prefix: as many known members outside the scored texts as ReCaLL
        has shots (`recent_inputs.member_shots`, seeded per model)."""
        n_shots = len(corpus.select(self.splits, self.repeat, "shot"))
        members = corpus.known_members(self.splits, self.repeat, self.labels)
        seed = derive_seed(self.seed, "llm", "member-shots", self.model_id)
        return list(self.corpus[recent_inputs.member_shots(members, self.ids, n_shots, seed)])


def tables(
    scorer: ModelScorer, scored: Scored, wanted: Collection[str], shard: int, n_shards: int
) -> Iterator[tuple[str, Any, dict[str, str] | None]]:
    """(output name, table, Parquet metadata) of each table in `wanted` (names of `TABLES`),
    computed with the loaded model."""
    unknown = set(wanted) - set(TABLES)
    if unknown:
        raise TypeError(f"no statistics table is named {sorted(unknown)}; known: {TABLES}")
    ids, texts, name = scored.ids, scored.texts, scored.scored_set
    separator = scorer.scoring["separator"]
    if "tokens" in wanted:
        if "top1" in wanted:
            table, flags = scorer.tokens_and_top1(ids, texts, name)
            yield "tokens", table, None
            yield "top1", flags, None
        else:
            yield "tokens", scorer.tokens(ids, texts, name, vocab=True), None
    if "lowercase_tokens" in wanted:
        lowered = [text.lower() for text in texts]
        yield "lowercase_tokens", scorer.tokens(ids, lowered, f"{name}-lowercase", False), None
    if "neighbor_tokens" in wanted:
        table = scorer.neighbor_tokens(scored.neighbors, ids, f"{name}-neighbors")
        yield "neighbor_tokens", table, None
    if "augmented_tokens" in wanted:
        options = scored.inputs["llm-pac"]
        table = scorer.augmented_tokens(
            ids, texts, f"{name}-augmented", derive_seed(scored.seed, "llm", "pac"), **options
        )
        yield "augmented_tokens", table, None
    if "population_tokens" in wanted:
        population = scored.population()
        table = scorer.tokens(
            population, list(scored.corpus[population]), f"{name}-population", False
        )
        yield "population_tokens", table, {"vocab_size": str(len(scorer.tokenizer))}
    if "recall" in wanted:
        shots = scored.shots()
        metadata = {"separator": separator, "n_shots": str(len(shots))}
        yield "recall", scorer.recall(ids, texts, shots), metadata
    if "member_recall" in wanted:
        shots = scored.member_shots()
        metadata = {"separator": separator, "n_shots": str(len(shots))}
        yield "member_recall", scorer.member_recall(ids, texts, shots), metadata
    if "samples" in wanted:
        options = scored.inputs["llm-samia"]
        seed = derive_seed(scored.seed, "llm", "samia")
        yield "samples", scorer.samples(ids, texts, seed, SAMPLE_BATCH, **options), None
    if "repeated" in wanted:
        population = scored.population()
        copies = scored.inputs["llm-camia"]["copies"]
        frame = pd.concat(
            [
                scorer.repeated(ids, texts, "scored", copies),
                scorer.repeated(population, list(scored.corpus[population]), "population", copies),
            ],
            ignore_index=True,
        )
        yield "repeated", frame, None
    if "pairs" in wanted:
        yield "pairs", scorer.pairs(scored.draws, shard, n_shards), {"separator": separator}


def scored(
    splits: pd.DataFrame,
    dataset: Any,
    model_id: str,
    scored_set: str,
    settings: pd.DataFrame | None,
    trap_table: pd.DataFrame | None,
    neighbors: pd.DataFrame | None,
    inputs: Mapping[str, Mapping[str, Any]],
    n_texts: int | None,
    seed: int,
) -> Scored:
    """What a statistics job scores of `dataset` (a `miaflow.data.Dataset`: the corpus and its
    labels): `scored.scored`'s texts of the model (eval, the settings table's or the traps
    table's), or for scored set "inference" all of a trained target's members and non-members
    outside the reference share (`scored.inference_ids`, of the experiment's `n_texts` texts);
    with the repeat's draws (EM-MIA's matrices)."""
    from miaflow.llm import scored as scored_texts

    texts, repeat = dataset.features, repeat_of(model_id)
    if scored_set == "inference":
        used = corpus.texts_used(len(texts), n_texts, seed)
        ids = np.union1d(*scored_texts.inference_ids(splits, repeat, used))
        attacked, draws = list(texts[ids]), []
    else:
        ids, attacked = scored_texts.scored(splits, texts, model_id, settings, trap_table)
        draws = (
            []
            if repeat is None
            else scored_texts.draws(splits, texts, repeat, settings, trap_table)
        )
    return Scored(
        splits,
        texts,
        dataset.labels,
        model_id,
        scored_set,
        ids,
        attacked,
        draws,
        neighbors,
        inputs,
        seed,
    )
