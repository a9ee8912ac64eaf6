"""EM-MIA's benchmark settings (OLMoMIA, Kim et al.): evaluation sets of one target drawn by how
far its members and non-members lie apart in meaning.

Members and non-members are embedded (sentence embeddings, L2-normalised) and clustered apart
with k-means into `clusters` clusters each. Clusters with fewer than half an evaluation set are
left out; every remaining (member cluster, non-member cluster) pair is ranked by the mean cosine
distance between their texts. A difficulty picks one pair and, inside it, half an evaluation set
from each side, as the authors' OLMoMIA builder does:

- easy: the farthest pair, and in it the texts farthest on average from the other side;
- medium: the pair at the middle of the ranking, texts drawn at random inside it;
- hard: the closest pair, and in it the texts closest on average to the other side.

The six settings combine a source of members with one of non-members: random (a uniform draw from
every member / non-member), easy, medium, hard, mix-1 (random members, hard non-members) and
mix-2 (hard members, random non-members). Membership is exact in every setting: the target was
trained on every member; only the selection changes.

Text lengths: a setting of length L scores texts cut to their first L words, drawn from the texts
of at least L words and fewer than the next configured length (so every text has one scored
form); length None scores whole texts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from miaflow.llm import corpus
from miaflow.seeding import derive_seed, rng

log = logging.getLogger(__name__)

SETTINGS = ("random", "easy", "medium", "hard", "mix-1", "mix-2")
DIFFICULTIES = ("easy", "medium", "hard")
# The source of each setting's members and of its non-members.
SOURCES = {
    "random": ("random", "random"),
    "easy": ("easy", "easy"),
    "medium": ("medium", "medium"),
    "hard": ("hard", "hard"),
    "mix-1": ("random", "hard"),
    "mix-2": ("hard", "random"),
}
WORDS_SUFFIX = "w"
WHOLE = 0  # the `length` column's value for whole texts
COLUMNS = ["repeat", "setting", "length", "sample_id", "is_member", "position", "text", "distance"]


def label(name: str, length: int | None) -> str:
    """A setting's name in experiment labels and paths: "easy", or "easy/24w" at 24 words."""
    return name if length is None else f"{name}/{length}{WORDS_SUFFIX}"


def parse_label(target_model: str) -> tuple[str, str, int | None] | None:
    """(target label, setting, length) of a metrics row's target_model "gpt2_tiny/easy" or
    "gpt2_tiny/easy/24w"; None for a plain experiment's label ("gpt2_tiny")."""
    parts = target_model.split("/")
    if len(parts) not in (2, 3) or parts[1] not in SETTINGS:
        return None
    length = int(parts[2].removesuffix(WORDS_SUFFIX)) if len(parts) == 3 else None
    return parts[0], parts[1], length


def cut(text: str, length: int | None) -> str:
    """The first `length` words of `text` (all of it for None), joined by single spaces."""
    return text if length is None else " ".join(text.split()[:length])


def length_pools(word_counts: np.ndarray, lengths: Sequence[int | None]) -> list[np.ndarray]:
    """Per configured length, a mask of the texts it draws from: at least that many words and
    fewer than the next longer length (all texts for a single None)."""
    if list(lengths) == [None]:
        return [np.ones(word_counts.shape, bool)]
    bounds = sorted(lengths)
    pools = []
    for length in lengths:
        longer = [b for b in bounds if b > length]
        upper = longer[0] if longer else np.inf
        pools.append((word_counts >= length) & (word_counts < upper))
    return pools


def clusters_of(vectors: np.ndarray, k: int, seed: int) -> np.ndarray:
    """k-means cluster of each row of `vectors` (scikit-learn, seeded, 10 initialisations)."""
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=k, n_init=10, random_state=seed % 2**32).fit_predict(vectors)


def ranked_pairs(
    members: np.ndarray,
    member_clusters: np.ndarray,
    non_members: np.ndarray,
    non_member_clusters: np.ndarray,
    half: int,
) -> list[tuple[int, int, float]]:
    """(member cluster, non-member cluster, mean cosine distance) of every pair of clusters that
    hold `half` texts or more each, closest first (ties by cluster numbers)."""
    valid_m = [c for c in np.unique(member_clusters) if (member_clusters == c).sum() >= half]
    valid_n = [
        c for c in np.unique(non_member_clusters) if (non_member_clusters == c).sum() >= half
    ]
    pairs = [
        (
            int(i),
            int(j),
            float(
                1.0
                - (members[member_clusters == i] @ non_members[non_member_clusters == j].T).mean()
            ),
        )
        for i in valid_m
        for j in valid_n
    ]
    return sorted(pairs, key=lambda pair: (pair[2], pair[0], pair[1]))


def _by_difficulty(
    members: np.ndarray,
    member_clusters: np.ndarray,
    non_members: np.ndarray,
    non_member_clusters: np.ndarray,
    half: int,
    generator: np.random.Generator,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per difficulty, the positions (into `members`, `non_members`) of its two halves."""
    pairs = ranked_pairs(members, member_clusters, non_members, non_member_clusters, half)
    if not pairs:
        raise ValueError(
            f"no member cluster and non-member cluster hold {half} texts each (half of "
            "llm.settings.n_eval): lower llm.settings.clusters or llm.settings.n_eval"
        )
    picks = {"easy": len(pairs) - 1, "medium": len(pairs) // 2, "hard": 0}
    chosen = {}
    for difficulty, index in picks.items():
        i, j, _ = pairs[index]
        in_m, in_n = np.flatnonzero(member_clusters == i), np.flatnonzero(non_member_clusters == j)
        distance = 1.0 - members[in_m] @ non_members[in_n].T
        if difficulty == "medium":
            take_m = generator.choice(in_m.size, size=half, replace=False)
            take_n = generator.choice(in_n.size, size=half, replace=False)
        else:
            far_first = difficulty == "easy"
            take_m = _extreme(distance.mean(axis=1), half, far_first)
            take_n = _extreme(distance.mean(axis=0), half, far_first)
        chosen[difficulty] = (in_m[take_m], in_n[take_n])
    return chosen


def _extreme(values: np.ndarray, count: int, largest: bool) -> np.ndarray:
    """Positions of the `count` largest (or smallest) values, ties by position."""
    order = np.argsort(-values if largest else values, kind="stable")
    return order[:count]


def draw_settings(
    member_ids: np.ndarray,
    member_vectors: np.ndarray,
    non_member_ids: np.ndarray,
    non_member_vectors: np.ndarray,
    *,
    names: Sequence[str],
    n_eval: int,
    clusters: int,
    seed: int,
) -> Mapping[str, tuple[np.ndarray, np.ndarray, float]]:
    """Per setting of `names`: (member ids, non-member ids, mean cosine distance between them),
    n_eval / 2 of each side, from the embedded members and non-members (rows of the vectors)."""
    half = n_eval // 2
    if member_ids.size < half or non_member_ids.size < half:
        raise ValueError(
            f"llm.settings.n_eval = {n_eval} needs {half} members and {half} non-members, "
            f"the length's texts hold {member_ids.size} and {non_member_ids.size}"
        )
    members, non_members = _normalised(member_vectors), _normalised(non_member_vectors)
    positions = {
        "random": (
            rng(seed, "random", "members").choice(member_ids.size, size=half, replace=False),
            rng(seed, "random", "non-members").choice(
                non_member_ids.size, size=half, replace=False
            ),
        )
    }
    if any(source != "random" for name in names for source in SOURCES[name]):
        positions |= _by_difficulty(
            members,
            clusters_of(members, min(clusters, member_ids.size), derive_seed(seed, "members")),
            non_members,
            clusters_of(
                non_members, min(clusters, non_member_ids.size), derive_seed(seed, "non-members")
            ),
            half,
            rng(seed, "medium"),
        )
    drawn = {}
    for name in names:
        m_source, n_source = SOURCES[name]
        take_m, take_n = positions[m_source][0], positions[n_source][1]
        distance = float(1.0 - (members[take_m] @ non_members[take_n].T).mean())
        drawn[name] = (member_ids[take_m], non_member_ids[take_n], distance)
    return drawn


def _normalised(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, np.float64)
    return vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)


def settings_table(
    splits: pd.DataFrame,
    texts: np.ndarray,
    used: np.ndarray,
    *,
    names: Sequence[str],
    lengths: Sequence[int | None],
    n_eval: int,
    clusters: int,
    seed: int,
    embed: Callable[[list[str]], np.ndarray],
) -> pd.DataFrame:
    """Every setting of every repeat of a trained experiment (split table `splits`, the corpus'
    `texts`, the sample ids it `used`): one row per scored text, with its repeat, setting, length
    (`WHOLE` for whole texts), membership, position, the text scored (cut to the length) and the
    setting's mean cosine distance between its members and non-members. Members are the repeat's
    training texts; non-members every other text outside the reference share and ReCaLL's shots.
    `embed` maps texts to sentence embeddings (rows)."""
    pool = np.setdiff1d(used, splits.loc[splits["set"] == "reference", "sample_id"])
    word_counts = np.array([len(texts[i].split()) for i in pool])
    repeats = sorted(set(splits["repeat"]) - {-1})
    frames = []
    for length, in_length in zip(lengths, length_pools(word_counts, lengths)):
        ids = pool[in_length]
        scored = np.array([cut(texts[i], length) for i in ids], dtype=object)
        vectors = embed(list(scored))
        for repeat in repeats:
            trained = corpus.select(splits, repeat, "train")["sample_id"]
            shots = corpus.select(splits, repeat, "shot")["sample_id"]
            member = np.isin(ids, trained)
            non_member = ~member & ~np.isin(ids, shots)
            drawn = draw_settings(
                ids[member],
                vectors[member],
                ids[non_member],
                vectors[non_member],
                names=names,
                n_eval=n_eval,
                clusters=clusters,
                seed=derive_seed(seed, "llm", "settings", repeat, length),
            )
            for name in names:
                members, non_members, distance = drawn[name]
                chosen = np.concatenate([members, non_members])
                order = np.argsort(chosen, kind="stable")
                frames.append(
                    pd.DataFrame(
                        {
                            "repeat": repeat,
                            "setting": name,
                            "length": WHOLE if length is None else length,
                            "sample_id": chosen[order].astype(np.int64),
                            "is_member": (np.arange(chosen.size) < members.size)[order],
                            "position": np.arange(chosen.size, dtype=np.int64),
                            "text": scored[np.searchsorted(ids, chosen[order])],
                            "distance": distance,
                        }
                    )
                )
    drawn = pd.concat(frames, ignore_index=True)[COLUMNS]
    for (length, name), rows in drawn.groupby(["length", "setting"], sort=True):
        log.info(
            "length %s, %s: mean cosine distance members/non-members %.3f over %d repeats",
            length or "whole",
            name,
            rows["distance"].mean(),
            rows["repeat"].nunique(),
        )
    return drawn


def scored_of(table: pd.DataFrame, repeat: int | None) -> tuple[np.ndarray, list[str]]:
    """(sample ids, texts) that a model scores across the settings: its repeat's, or every
    repeat's (None, the shared reference model); each text once, by sample id."""
    rows = table if repeat is None else table[table["repeat"] == repeat]
    unique = rows.drop_duplicates("sample_id").sort_values("sample_id")
    return unique["sample_id"].to_numpy(), list(unique["text"])


def draws(table: pd.DataFrame, repeat: int) -> list[tuple[str, pd.DataFrame]]:
    """(setting label, its rows in position order) of one repeat: settings in `SETTINGS` order
    within each length, lengths ascending (whole texts first)."""
    rows = table[table["repeat"] == repeat]
    keys = sorted(
        {(int(length), name) for length, name in zip(rows["length"], rows["setting"])},
        key=lambda key: (key[0], SETTINGS.index(key[1])),
    )
    return [
        (
            label(name, None if length == WHOLE else length),
            rows[(rows["length"] == length) & (rows["setting"] == name)]
            .sort_values("position")
            .reset_index(drop=True),
        )
        for length, name in keys
    ]


def settings_artifacts(
    splits: pd.DataFrame,
    texts: np.ndarray,
    used: np.ndarray,
    options: Mapping[str, Any],
    neighbor_options: Mapping[str, Any],
    seed: int,
    embed: Callable[[Sequence[str]], np.ndarray],
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, pd.DataFrame]:
    """Every repeat's settings (`settings_table`; `options`: names, lengths, n_eval, clusters),
    the sample ids and `embed` vectors of the texts as scored (the blind baselines'; the
    scoring job then loads no model), and those texts' neighbours (Neighbor attack), drawn
    from a vocabulary of the texts no repeat scores."""
    from miaflow.llm.neighbors import neighbor_table

    drawn = settings_table(splits, texts, used, **options, seed=seed, embed=embed)
    ids, attacked = scored_of(drawn, None)
    vectors = embed(attacked)
    unscored = np.setdiff1d(np.arange(len(texts)), np.union1d(ids, corpus.scored_texts(splits)))
    neighbors = neighbor_table(
        attacked,
        ids,
        list(texts[unscored]),
        dict(neighbor_options),
        derive_seed(seed, "llm", "neighbors"),
    )
    return drawn, ids, vectors, neighbors
