"""The language-model attacks' inputs on one scored set of an experiment, read from the cached
artifacts of the llm stage (token statistics, neighbours, ReCaLL likelihoods, EM-MIA's pair
shards, sentence embeddings, and the recent attacks' tables: `recent_inputs`): what the scoring
jobs (`llm_scores`, `llm_setting_scores`, `llm_trap_scores`) share
(`scored_repeats`: each scored set of every repeat, `attack_frames`), EM-MIA's iterates and the
per-repeat row of the ReCaLL prefix-fit table."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.llm import corpus
from miaflow.llm.scored import Draw, draws
from miaflow.seeding import derive_seed

log = logging.getLogger(__name__)
# EM-MIA's iterates table: the AUROC of each iterate (a diagnostic).
ITERATE_COLUMNS = ["dataset", "target_model", "repeat", "attack", "iteration", "auroc"]

# The prefix-fit table (one row per repeat with ReCaLL's likelihoods): column -> type.
PREFIX_FIT_COLUMNS = {
    "dataset": "str",
    "target_model": "str",
    "repeat": "int64",
    "n_shots": "int64",
    "targets": "int64",
    "shortened": "int64",
    "emptied": "int64",
    "cut_share": "float64",
}


def _stats(path: str | Path, ids: np.ndarray) -> Any:
    from miaflow.llm.tokens import TokenStats

    return TokenStats.from_table(io.read_table(path)).select(ids)


def _neighbor_matrix(path: str | Path, ids: np.ndarray) -> np.ndarray:
    from miaflow.llm.scores import mean_log_likelihood

    frame = io.read_parquet(path, columns=["sample_id", "neighbor", "logprob"])
    frame["ll"] = mean_log_likelihood([np.asarray(v, np.float64) for v in frame["logprob"]])
    wide = frame.pivot(index="sample_id", columns="neighbor", values="ll")
    return wide.loc[ids].to_numpy()


def _pair_matrix(
    paths: Sequence[str | Path], ids: np.ndarray, draw: str = "eval"
) -> tuple[np.ndarray, np.ndarray]:
    """EM-MIA's LL(x ; p) matrix of one scored set (`draw`) and K per text x (the tokens the
    matrix covers)."""
    frame = pd.concat([io.read_parquet(p) for p in paths], ignore_index=True)
    frame = frame[frame["draw"] == draw]
    wide = frame.pivot(index="prefix_id", columns="sample_id", values="ll_conditional")
    lengths = frame.groupby("sample_id")["target_tokens"].first()
    return wide.loc[ids, ids].to_numpy(), lengths.loc[ids].to_numpy()


def _per_text(path: str | Path, ids: np.ndarray, column: str, kind: Any) -> list[np.ndarray]:
    """A per-text list column of `path` (one row per sample id), in the order of `ids`."""
    frame = io.read_parquet(path, columns=["sample_id", column]).set_index("sample_id")
    return [np.asarray(v, dtype=kind) for v in frame.loc[ids, column]]


def _grouped(path: str | Path, ids: np.ndarray, by: str, column: str) -> list[list[Any]]:
    """Several rows per text (PAC's copies, SaMIA's samples), grouped in the order of `ids`."""
    frame = io.read_parquet(path, columns=["sample_id", by, column]).sort_values(["sample_id", by])
    groups = dict(tuple(frame.groupby("sample_id", sort=False)[column]))
    return [list(groups[int(i)]) for i in ids]


def _repeated(path: str | Path, ids: np.ndarray, role: str) -> list[np.ndarray]:
    """CAMIA's repeated texts of one role, each its (copies, n) array."""
    frame = io.read_parquet(path)
    rows = frame[frame["role"] == role].set_index("sample_id").loc[ids]
    return [
        np.asarray(values, np.float64).reshape(int(copies), -1)
        for values, copies in zip(rows["logprob"], rows["copies"])
    ]


@functools.lru_cache(maxsize=4)
def _population(tokens: str, repeated: str | None) -> dict[str, Any]:
    """The known non-members' fields of `LLMInputs` (`population`, `vocab_size` and, with the
    repeated texts, `population_repeated` and CAMIA's `population_signals`), read once per
    repeat: every draw of a repeat (each setting, each trap group) shares them."""
    from miaflow.llm.camia import camia_signals
    from miaflow.llm.tokens import TokenStats

    table = io.read_table(tokens)
    population = TokenStats.from_table(table)
    fields = {"population": population, "vocab_size": int(table.schema.metadata[b"vocab_size"])}
    if repeated is not None:
        rows = _repeated(repeated, population.sample_ids, "population")
        fields["population_repeated"] = rows
        fields["population_signals"] = camia_signals(
            population.logprobs, population.token_ids, rows
        )
    return fields


def recent_inputs(files: Mapping[str, Any], ids: np.ndarray) -> dict[str, Any]:
    """The recent attacks' fields of `LLMInputs` on the texts `ids`, from the files a configured
    attack reads (each a path or None)."""
    fields: dict[str, Any] = {}
    if files.get("top1"):
        fields["top1"] = _per_text(files["top1"], ids, "top1", bool)
    if files.get("augmented"):
        logprobs = _grouped(files["augmented"], ids, "augment", "logprob")
        fields["augmented"] = [[np.asarray(v, np.float64) for v in own] for own in logprobs]
    if files.get("member_recall"):
        frame = io.read_parquet(files["member_recall"]).set_index("sample_id").loc[ids]
        fields["member_recall"] = frame["ll_conditional"].to_numpy()
    if files.get("samples"):
        samples = _grouped(files["samples"], ids, "sample", "text")
        fields["samples"] = [[str(text) for text in own] for own in samples]
    if files.get("repeated"):
        fields["repeated"] = _repeated(files["repeated"], ids, "scored")
    if files.get("repeated") and files.get("target"):
        from miaflow.llm.camia import camia_signals

        target = _stats(files["target"], ids)
        fields["signals"] = camia_signals(target.logprobs, target.token_ids, fields["repeated"])
    if files.get("population"):
        repeated = str(files["repeated"]) if files.get("repeated") else None
        fields.update(_population(str(files["population"]), repeated))
    return fields


def embedded_rows(rows: pd.Series | None, ids: np.ndarray) -> np.ndarray | None:
    return None if rows is None else np.stack([np.asarray(v) for v in rows.loc[ids]])


def prefix_fit_row(
    dataset: str, label: str, repeat: int, kept: np.ndarray, n_shots: int
) -> tuple[Any, ...]:
    """One row of the prefix-fit table: of a repeat's scored targets, how many had their ReCaLL
    prefix shortened (some shots dropped) or emptied (none fits), and the share of both."""
    kept = np.asarray(kept)
    shortened, emptied = int(((kept > 0) & (kept < n_shots)).sum()), int((kept == 0).sum())
    cut = float(np.mean(kept < n_shots)) if kept.size else float("nan")
    return dataset, label, repeat, n_shots, int(kept.size), shortened, emptied, cut


def scored_inputs(
    draw: Draw,
    files: Mapping[str, Any],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
    shots: list[str],
    embeddings: tuple[np.ndarray, np.ndarray] | None,
) -> Any:
    """The attacks' inputs on one scored set `draw` (`scored.draws`) of one target model, from its
    files: `target`, `reference`, `lowercase`, `neighbors`, `recall` (a path or None) and `pairs`
    (the repeat's shards, possibly none); the repeat's `shots` and, for the blind baselines, the
    sentence embeddings of the draw's texts and of the shots. `options`: llm.attack_options (each
    attack's overrides, `LLMInputs.attack_options`)."""
    from miaflow.attacks.llm import LLMInputs

    name, ids, is_member, texts = draw
    conditional = (
        io.read_parquet(files["recall"]).set_index("sample_id").loc[ids]
        if files["recall"]
        else None
    )
    pair_matrix, pair_lengths = (
        _pair_matrix(files["pairs"], ids, name) if files["pairs"] else (None, None)
    )
    return LLMInputs(
        texts=texts,
        target=_stats(files["target"], ids),
        is_member=is_member,
        reference=_stats(files["reference"], ids) if files["reference"] else None,
        lowercase=_stats(files["lowercase"], ids) if files["lowercase"] else None,
        neighbors=_neighbor_matrix(files["neighbors"], ids) if files["neighbors"] else None,
        recall=None if conditional is None else conditional["ll_conditional"].to_numpy(),
        recall_compat=None
        if conditional is None
        else conditional["ll_conditional_compat"].to_numpy(),
        pairs=pair_matrix,
        conditioned_tokens=pair_lengths
        if conditional is None
        else conditional["target_tokens"].to_numpy(),
        attack_options=options,
        seed=seed,
        shots=shots,
        embeddings=None if embeddings is None else embeddings[0],
        shot_embeddings=None if embeddings is None else embeddings[1],
        **recent_inputs(files, ids),
    )


# A scoring job's input keys of the cached tables (rules/llm.smk), in CachedFiles' order, and
# those of the recent attacks' tables with the name `recent_inputs` reads them by.
CACHED_INPUTS = (
    "target_tokens",
    "reference_tokens",
    "lowercase_tokens",
    "neighbor_tokens",
    "recall",
    "pairs",
)
RECENT_INPUTS = {
    "top1": "top1",
    "augmented_tokens": "augmented",
    "population_tokens": "population",
    "member_recall": "member_recall",
    "samples": "samples",
    "repeated": "repeated",
}


@dataclass(frozen=True)
class CachedFiles:
    """A scoring job's cached inputs, per repeat (the reference's: one file for all)."""

    target_tokens: Sequence[str | Path]
    reference_tokens: Sequence[str | Path]
    lowercase_tokens: Sequence[str | Path]
    neighbor_tokens: Sequence[str | Path]
    recall: Sequence[str | Path]
    pairs: Sequence[str | Path]
    pair_shards: int
    # The recent attacks' tables, per repeat (`recent_inputs`), by their field name there.
    recent: Mapping[str, Sequence[str | Path]] = field(default_factory=dict)

    @classmethod
    def named(cls, files: Mapping[str, Sequence[str | Path]], pair_shards: int) -> CachedFiles:
        """From a scoring job's inputs by name: the rule's keys of the existing tables
        (`target_tokens`, `reference_tokens`, `lowercase_tokens`, `neighbor_tokens`, `recall`,
        `pairs`) and of the recent attacks' (RECENT_INPUTS), each possibly empty."""
        unknown = set(files) - set(CACHED_INPUTS) - set(RECENT_INPUTS)
        if unknown:
            raise TypeError(f"unknown cached inputs {sorted(unknown)}")
        existing = [files.get(name, ()) for name in CACHED_INPUTS]
        recent = {field: files.get(name, ()) for name, field in RECENT_INPUTS.items()}
        return cls(*existing, pair_shards, recent)

    @property
    def repeats(self) -> int:
        return len(self.target_tokens)

    def of(self, repeat: int) -> dict[str, Any]:
        """The files `scored_inputs` reads for one repeat."""
        return {
            "target": self.target_tokens[repeat],
            "reference": self.reference_tokens[0] if self.reference_tokens else None,
            "lowercase": self.lowercase_tokens[repeat] if self.lowercase_tokens else None,
            "neighbors": self.neighbor_tokens[repeat] if self.neighbor_tokens else None,
            "recall": self.recall[repeat] if self.recall else None,
            "pairs": self.pairs[repeat * self.pair_shards : (repeat + 1) * self.pair_shards],
            **{name: paths[repeat] for name, paths in self.recent.items() if paths},
        }


def score_frame(
    inputs: Any, attack: str, dataset: str, label: str, repeat: int, ids: np.ndarray
) -> pd.DataFrame:
    """One attack's scores on one scored set, in the scores table's columns."""
    from miaflow.attacks.llm import run_llm_attack

    return pd.DataFrame(
        {
            "dataset": dataset,
            "target_model": label,
            "attack": attack,
            "repeat": repeat,
            "sample_id": ids,
            "score": run_llm_attack(attack, inputs),
            "is_member": inputs.is_member,
        }
    )


def scored_repeats(
    splits: pd.DataFrame,
    texts: np.ndarray,
    settings: pd.DataFrame | None,
    cached: CachedFiles,
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
    dataset: str,
    label: str,
    text_embeddings: pd.Series | None,
    shot_embeddings: pd.Series | None,
    traps: pd.DataFrame | None = None,
) -> Iterator[tuple[int, str, Draw, Any]]:
    """(repeat, experiment label, draw, attack inputs) of each scored set of every repeat: its
    eval set, labelled `label`, or with the settings table each setting, labelled
    "<label>/<setting>", or with a traps table each repetition group, "<label>/r<count>". The
    inputs' seed is named after the dataset, the label and the repeat;
    the blind baselines get the sentence embeddings of the draw's texts and of the repeat's shots
    (`miaflow.llm.blind.embedding_rows`)."""
    for repeat in range(cached.repeats):
        shot_ids = corpus.select(splits, repeat, "shot")["sample_id"].to_numpy()
        shots = list(texts[shot_ids])
        shot_vectors = embedded_rows(shot_embeddings, shot_ids)
        for draw in draws(splits, texts, repeat, settings, traps):
            name, ids = draw[0], draw[1]
            draw_label = label if settings is None and traps is None else f"{label}/{name}"
            vectors = (
                None
                if text_embeddings is None
                else (embedded_rows(text_embeddings, ids), shot_vectors)
            )
            seed_of = derive_seed(seed, "llm", dataset, draw_label, repeat)
            inputs = scored_inputs(draw, cached.of(repeat), options, seed_of, shots, vectors)
            yield repeat, draw_label, draw, inputs


def attack_frames(
    inputs: Any, attacks: Sequence[str], dataset: str, label: str, repeat: int, ids: np.ndarray
) -> list[pd.DataFrame]:
    """Every attack's scores on one scored set (`score_frame`)."""
    frames = [score_frame(inputs, attack, dataset, label, repeat, ids) for attack in attacks]
    log.info("%s repeat %d: %d attacks on %d texts", label, repeat, len(attacks), ids.size)
    return frames


def em_iterate_rows(
    inputs: Any,
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    dataset: str,
    label: str,
    repeat: int,
) -> list[tuple[Any, ...]]:
    """The AUROC of every iterate of each EM-MIA attack (ITERATE_COLUMNS): a diagnostic that
    uses the labels, never a score."""
    from sklearn.metrics import roc_auc_score

    from miaflow.attacks.llm import em_mia_run
    from miaflow.attacks.registry import attack_options

    rows = []
    for attack in (name for name in attacks if name.startswith("em-mia")):
        _, steps = em_mia_run(inputs, attack_options(attack, options))
        rows += [
            (dataset, label, repeat, attack, step, roc_auc_score(inputs.is_member, f))
            for step, f in enumerate(steps)
        ]
    return rows


def prefix_fit(
    recall: str | Path,
    ids: np.ndarray,
    compat: bool,
    dataset: str,
    label: str,
    repeat: int,
    n_shots: int,
) -> tuple[Any, ...]:
    """The prefix-fit row of one repeat from its ReCaLL table, counting the shots of the form
    `llm-recall` scores (`compat`: the ReCaLL code's)."""
    conditional = io.read_parquet(recall).set_index("sample_id").loc[ids]
    kept = conditional["prefix_shots_compat" if compat else "prefix_shots"].to_numpy()
    return prefix_fit_row(dataset, label, repeat, kept, n_shots)


def prefix_fit_table(rows: Sequence[tuple[Any, ...]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(PREFIX_FIT_COLUMNS)).astype(PREFIX_FIT_COLUMNS)


@dataclass(frozen=True)
class Scoring:
    """What a scoring job runs: on experiment `label` of `dataset`, the configured `attacks`
    with `options` (llm.attack_options, overrides only), the inputs seeded from `seed`."""

    dataset: str
    label: str
    attacks: Sequence[str]
    options: Mapping[str, Mapping[str, Any]]
    seed: int


def score_experiment(
    splits: pd.DataFrame,
    texts: np.ndarray,
    settings: pd.DataFrame | None,
    cached: CachedFiles,
    scoring: Scoring,
    embeddings: tuple[pd.Series | None, pd.Series | None],
    diagnostics: bool,
    traps: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Every attack on every scored set of every repeat (`scored_repeats`; `embeddings`: those
    of the texts as scored and of the shots): (scores table, EM-MIA iterates, prefix fit). With
    `diagnostics` (the eval sets) the iterates' AUROC and the share of targets whose ReCaLL
    prefix lost shots, counted in the form `llm-recall` scores; else both tables are empty."""
    from miaflow.attacks.registry import attack_options

    attacks, options, dataset, label = (
        scoring.attacks,
        scoring.options,
        scoring.dataset,
        scoring.label,
    )
    compat = attack_options("llm-recall", options).compat
    frames, iterates, fits = [], [], []
    for repeat, experiment, draw, inputs in scored_repeats(
        splits, texts, settings, cached, options, scoring.seed, dataset, label, *embeddings, traps
    ):
        ids = draw[1]
        frames += attack_frames(inputs, attacks, dataset, experiment, repeat, ids)
        if diagnostics:
            iterates += em_iterate_rows(inputs, attacks, options, dataset, label, repeat)
            if cached.recall:
                n_shots = len(inputs.shots)
                recall = cached.recall[repeat]
                fits.append(prefix_fit(recall, ids, compat, dataset, label, repeat, n_shots))
    return (
        pd.concat(frames, ignore_index=True),
        pd.DataFrame(iterates, columns=ITERATE_COLUMNS),
        prefix_fit_table(fits),
    )
