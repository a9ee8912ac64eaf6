"""Query inputs of the query-based attacks (docs/algorithms.md#query-budgets, #query-based-attacks,
#artifacts) and model outputs on them.

Every attack query is generated here, once per dataset, from a named seed, so the same query set
serves every target model and the shadow model (reference-0):

* neighbours (Query-neighbor, and the noisy queries of Query-adv on tabular/text data): Gaussian
  noise with a global scale for images, per-feature scales for continuous tabular features (and
  text embeddings), ⌊λF⌋ distinct bit flips for binary tabular features, masked-LM token
  substitutions for raw text (`miaflow.llm.neighbors`, TDDBench's BERT neighbours);
* augmentations (Query-augment): 10 rotations drawn once per pool for images, sequential in-place
  cutmix for tabular data (text uses its neighbours).

The queries table has one row per (query_kind, query_index, sample_id) with flattened float32
`features`, or for raw text a string column `text`; query index 0 is the original sample (kind
`orig`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from miaflow.progress import tracked
from miaflow.seeding import derive_seed, rng

ORIG, NEIGHBOUR, AUGMENT, AUGMENT_SHADOW = "orig", "neighbour", "augment", "augment-shadow"
ANGLE_CANDIDATES = np.concatenate([-np.arange(10, 151), np.arange(10, 151)]) / 10.0  # ±1.0..±15.0
CUTMIX_FRACTION = 0.01  # ⌊0.01·F⌋ features per sample and variant


class NeighbourOptions(Protocol):
    """How neighbours are made: Query-neighbor's options (`miaflow.attacks.options`)."""

    n_queries: int
    magnitude: float  # λ
    masked_lm: str | None  # raw text's masked LM (None: one trained on `public_texts`)


class AugmentOptions(Protocol):
    """How augmentations are made: Query-augment's options (`miaflow.attacks.options`)."""

    n_queries: int
    compat: bool  # a separate draw for the shadow model, as TDDBench


@dataclass(frozen=True)
class QuerySet:
    """Query features per kind, each (K, n, *feature_shape), and how they were made."""

    sample_ids: np.ndarray  # (n,) the pool the queries perturb, in order
    features: Mapping[str, np.ndarray]  # kind -> (K, n, ...) float32 or (K, n) str; `orig`: K = 1
    info: Mapping[str, Any]  # JSON-able description: methods, scales, angles, compat flag

    def to_table(self) -> pa.Table:
        blocks = []
        n = len(self.sample_ids)
        for kind, values in self.features.items():
            first = 0 if kind == ORIG else 1
            if values.dtype == object:  # raw text
                column = {"text": pa.array(values.reshape(-1).tolist(), pa.string())}
            else:
                width = int(np.prod(values.shape[2:]))
                flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
                column = {"features": pa.FixedSizeListArray.from_arrays(pa.array(flat), width)}
            blocks.append(
                pa.table(
                    {
                        "query_kind": pa.array([kind] * values.shape[0] * n, pa.string()),
                        "query_index": pa.array(
                            np.repeat(np.arange(first, first + values.shape[0], dtype=np.int32), n)
                        ),
                        "sample_id": pa.array(
                            np.tile(self.sample_ids.astype(np.int64), values.shape[0])
                        ),
                        **column,
                    }
                )
            )
        return pa.concat_tables(blocks)


Blocks = dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]  # (kind, index) -> (ids, features)


def read_queries(table: pa.Table, feature_shape: Sequence[int]) -> Blocks:
    """(kind, index) -> (sample ids, features (n, *feature_shape)) from a queries table; raw
    text (feature shape ()) comes back as (n,) object arrays of str."""
    kinds = table.column("query_kind").to_numpy(zero_copy_only=False)
    index = table.column("query_index").to_numpy()
    samples = table.column("sample_id").to_numpy()
    if "text" in table.column_names:
        features = np.empty(table.num_rows, dtype=object)
        features[:] = table.column("text").to_pylist()
    else:
        width = int(np.prod(feature_shape))
        flat = table.column("features").combine_chunks().flatten().to_numpy()
        features = flat.reshape(-1, width)
    blocks = {}
    for kind, k in dict.fromkeys(zip(kinds.tolist(), index.tolist())):
        rows = np.flatnonzero((kinds == kind) & (index == k))
        blocks[(kind, k)] = (samples[rows], features[rows].reshape(len(rows), *feature_shape))
    return blocks


# --- neighbours (Query-neighbor; Query-adv tabular/text) ------------------------------------------


def is_binary(features: np.ndarray) -> bool:
    """True when every value is exactly 0 or 1 (then neighbours flip bits,
    docs/algorithms.md#query-based-attacks)."""
    return bool(np.isin(features, (0.0, 1.0)).all())


def image_noise_scale(first_image: np.ndarray) -> float:
    """Global s = (max − min) / 2 of the first target-pool image."""
    return float(first_image.max() - first_image.min()) / 2.0


def feature_noise_scales(features: np.ndarray) -> np.ndarray:
    """Per-feature s_j = (max_j − min_j) / 2 over the evaluated points."""
    return (features.max(axis=0) - features.min(axis=0)).astype(np.float64) / 2.0


def flip_neighbours(
    features: np.ndarray, n_queries: int, magnitude: float, generator: np.random.Generator
) -> np.ndarray:
    """(K, n, F): each neighbour flips ⌊λF⌋ distinct, uniformly chosen features of each sample."""
    n, n_features = features.shape
    n_flips = int(np.floor(magnitude * n_features))
    out = np.repeat(features[None], n_queries, axis=0)
    for k in range(n_queries):
        chosen = np.argsort(generator.random((n, n_features)), axis=1)[:, :n_flips]
        rows = np.repeat(np.arange(n), n_flips)
        out[k, rows, chosen.reshape(-1)] = 1.0 - out[k, rows, chosen.reshape(-1)]
    return out


def gaussian_neighbours(
    features: np.ndarray,
    scale: float | np.ndarray,
    n_queries: int,
    magnitude: float,
    generator: np.random.Generator,
) -> np.ndarray:
    """(K, n, ...): x + N(0, (λ·s)²) per element; `s` global (images) or per feature (tabular)."""
    noise = generator.standard_normal((n_queries, *features.shape))
    return (features[None] + magnitude * np.asarray(scale) * noise).astype(np.float32)


def neighbours(
    features: np.ndarray,
    modality: str,
    n_queries: int,
    magnitude: float,
    generator: np.random.Generator,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Noisy neighbours of the evaluated pool (in order; the first row is the first T point)."""
    if modality == "image":
        scale = image_noise_scale(features[0])
        return (
            gaussian_neighbours(features, scale, n_queries, magnitude, generator),
            {"method": "gaussian-global", "scale": scale},
        )
    if is_binary(features):
        return (
            flip_neighbours(features, n_queries, magnitude, generator),
            {"method": "flip", "flips": int(np.floor(magnitude * features.shape[1]))},
        )
    scales = feature_noise_scales(features)
    return (
        gaussian_neighbours(features, scales, n_queries, magnitude, generator),
        {"method": "gaussian-per-feature", "scale": scales.tolist()},
    )


def text_neighbours(
    texts: np.ndarray,
    sample_ids: np.ndarray,
    public_texts: Sequence[str],
    options: NeighbourOptions,
    seed: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """(K, n) masked-LM neighbours of raw texts: each substitutes ⌈λ·tokens⌉ tokens (at least
    one), λ = `magnitude`; the masked LM is `masked_lm`, or one trained on `public_texts`."""
    from miaflow.llm.neighbors import load_masked_lm, masked_lm_neighbours

    masked_lm = load_masked_lm(options.masked_lm, public_texts, derive_seed(seed, "masked-lm"))
    made = masked_lm_neighbours(
        [str(t) for t in texts],
        sample_ids,
        masked_lm,
        n_neighbors=options.n_queries,
        fraction=options.magnitude,
        seed=seed,
    )
    near = np.empty((options.n_queries, len(texts)), dtype=object)
    for i, own in enumerate(made):
        near[:, i] = own
    return near, {"method": "masked-lm", "model": options.masked_lm or "trained"}


# --- augmentations (Query-augment) ---------------------------------------------------------------


def draw_angles(n_queries: int, generator: np.random.Generator) -> np.ndarray:
    """`n_queries` distinct angles from {±1.0, ±1.1, …, ±15.0} degrees."""
    return generator.choice(ANGLE_CANDIDATES, size=n_queries, replace=False)


def rotate(images: np.ndarray, angle: float) -> np.ndarray:
    """Counter-clockwise rotation by `angle` degrees about the centre, nearest, fill 0.

    What torchvision's `RandomAffine((angle, angle))` does, written with affine_grid and
    grid_sample because torchvision cannot be imported here.
    """
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))
    height, width = x.shape[-2:]
    a = np.deg2rad(angle)
    # Output pixel -> input pixel (inverse rotation), in normalised coordinates of each axis.
    theta = torch.tensor(
        [
            [np.cos(a), -np.sin(a) * height / width, 0.0],
            [np.sin(a) * width / height, np.cos(a), 0.0],
        ],
        dtype=torch.float32,
    )
    grid = F.affine_grid(theta.expand(len(x), 2, 3), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False).numpy()


def cutmix(features: np.ndarray, fraction: float, generator: Any) -> np.ndarray:
    """One cutmix variant of a tabular pool, exactly as TDDBench
    (docs/algorithms.md#query-based-attacks).

    Samples are processed in order; each gets ⌊fraction·F⌋ distinct features overwritten by a
    random donor's *current* values (the donor may be itself or an already modified row). With
    F < 1/fraction nothing changes.
    """
    out = np.array(features, dtype=np.float32, copy=True)
    n, n_features = out.shape
    n_mixed = int(np.floor(fraction * n_features))
    if n_mixed == 0:
        return out
    for i in range(n):
        columns = generator.choice(n_features, size=n_mixed, replace=False)
        donor = int(generator.integers(n))
        out[i, columns] = out[donor, columns]
    return out


def augmentations(
    features: np.ndarray,
    modality: str,
    n_queries: int,
    fraction: float,
    generator: np.random.Generator,
) -> tuple[np.ndarray, dict[str, Any]]:
    """(K, n, ...) augmented copies of the pool: rotations (image) or cutmix (tabular)."""
    what = f"augmentations of {len(features)} samples"
    if modality == "image":
        angles = draw_angles(n_queries, generator)
        return (
            np.stack([rotate(features, float(a)) for a in tracked(angles, what, "queries")]),
            {"method": "rotate", "angles": angles.tolist()},
        )
    return (
        np.stack(
            [
                cutmix(features, fraction, generator)
                for _ in tracked(range(n_queries), what, "queries")
            ]
        ),
        {"method": "cutmix", "mixed_features": int(np.floor(fraction * features.shape[1]))},
    )


# --- the query set of one dataset ----------------------------------------------------------------


def make_query_set(
    features: np.ndarray,
    sample_ids: np.ndarray,
    modality: str,
    seed: int,
    dataset: str,
    neighbour: NeighbourOptions,
    augment: AugmentOptions,
    public_texts: Sequence[str] = (),
) -> QuerySet:
    """Original, neighbour and augmented queries of the target pool T (sample ids ascending).

    `neighbour`: n_queries, magnitude (λ), masked_lm (raw text); `augment`: n_queries, compat
    (both recorded in the set's `info`). Under the default `target_ref` pool the shadow model's
    pool is T as well, so one augmented set serves target and shadow (miaflow's corrected default,
    docs/algorithms.md#query-augment). With `compat: true` the shadow gets its own draw (kind
    `augment-shadow`), as TDDBench calls the augmentation once per pool. Raw text (an object
    array of str) gets masked-LM neighbours; with no masked LM named, one is trained on
    `public_texts` (texts no target is evaluated on).
    """
    near_opts = {
        "n_queries": neighbour.n_queries,
        "magnitude": neighbour.magnitude,
        "masked_lm": neighbour.masked_lm,
    }
    aug_opts = {"n_queries": augment.n_queries, "compat": augment.compat}
    if modality == "text" and np.asarray(features).dtype == object:
        pool = np.asarray(features)
        near, near_info = text_neighbours(
            pool,
            np.asarray(sample_ids),
            public_texts,
            neighbour,
            derive_seed(seed, "queries", dataset, "neighbour"),
        )
    else:
        pool = np.asarray(features, dtype=np.float32)
        near, near_info = neighbours(
            pool,
            modality,
            neighbour.n_queries,
            neighbour.magnitude,
            rng(seed, "queries", dataset, "neighbour"),
        )
    kinds = {ORIG: pool[None], NEIGHBOUR: near}
    info: dict[str, Any] = {
        "modality": modality,
        "feature_shape": list(pool.shape[1:]),
        NEIGHBOUR: {**near_opts, **near_info},
    }
    if (
        modality != "text"
    ):  # text augmentations are its neighbours (docs/algorithms.md#query-based-attacks)
        for kind in [AUGMENT, AUGMENT_SHADOW] if augment.compat else [AUGMENT]:
            kinds[kind], made = augmentations(
                pool,
                modality,
                augment.n_queries,
                CUTMIX_FRACTION,
                rng(seed, "queries", dataset, kind),
            )
            info[kind] = {**aug_opts, **made}
    return QuerySet(np.asarray(sample_ids, dtype=np.int64), kinds, info)


def info_metadata(info: Mapping[str, Any]) -> dict[str, str]:
    return {"queries": json.dumps(info, sort_keys=True)}


# --- model outputs on the queries ----------------------------------------------------------------


def query_outputs(
    blocks: Blocks,
    labels: np.ndarray,
    model_ids: Sequence[str],
    logits_of: Callable[[np.ndarray], np.ndarray],
) -> pa.Table:
    """Logits and signals of every model on every query block, long format
    (docs/algorithms.md#artifacts).

    `logits_of(features)` returns (len(model_ids), n, C) logits; it is called once on all queries.
    Rows: (model_id, sample_id, label, logits, signals..., query_kind, query_index).
    """
    from miaflow.signals import outputs_table

    order = list(blocks)
    logits = logits_of(np.concatenate([blocks[key][1] for key in order]))
    tables, start = [], 0
    for kind, k in order:
        ids = blocks[(kind, k)][0]
        part = outputs_table(list(model_ids), ids, labels[ids], logits[:, start : start + len(ids)])
        start += len(ids)
        part = part.append_column("query_kind", pa.array([kind] * part.num_rows, pa.string()))
        tables.append(
            part.append_column("query_index", pa.array(np.full(part.num_rows, k, np.int32)))
        )
    return pa.concat_tables(tables)


def evaluated_subset(target_samples: np.ndarray, limit: int, seed: int, dataset: str) -> np.ndarray:
    """The first min(|T|, limit) points of T after a seeded shuffle (Query-adv image, Query-ref):
    `boundary_eva_num` is a budget, at most `limit` points (see `evaluated_points`)."""
    order = rng(seed, "queries", dataset, "evaluated-subset").permutation(len(target_samples))
    return np.asarray(target_samples)[order[:limit]]
