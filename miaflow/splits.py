"""Dataset partition and membership ("keep") matrix, following the TDDBench protocol.

* The dataset is split once into a target pool T (`target_ratio`) and an auxiliary pool A.
* `repeats` target models each train on an independent Bernoulli(`member_ratio`) subset of T.
* Reference models use the paired design over T: mask j and its complement, so every target sample
  is IN for exactly half of them (online attacks).
* Population models use the same paired design over A (RMIA's population side; offline attacks).

The matrix is stored sample-major as Parquet: one row per sample (`sample_id`, `pool`) and one
boolean column per model, named `<role>-<index>` (e.g. `target-0`, `reference-7`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from miaflow.seeding import rng

ROLES = ("target", "reference", "population")
TARGET_POOL, AUXILIARY_POOL = "target", "auxiliary"


def model_id(role: str, index: int) -> str:
    return f"{role}-{index}"


def planned_model_ids(repeats: int, n_reference: int, n_population: int) -> list[str]:
    """Every model of one experiment: targets, then references, then population models."""
    return ([model_id("target", t) for t in range(repeats)]
            + [model_id("reference", m) for m in range(n_reference)]
            + [model_id("population", m) for m in range(n_population)])


def role_of(model: str) -> str:
    return model.rsplit("-", 1)[0]


@dataclass(frozen=True)
class Splits:
    """Membership matrix of one dataset: `keep[m, i]` is True iff sample i trains model m."""

    model_ids: tuple[str, ...]
    keep: np.ndarray  # bool, (n_models, n_samples); column i is sample_id i
    in_target_pool: np.ndarray  # bool, (n_samples,)

    @property
    def n_samples(self) -> int:
        return int(self.in_target_pool.shape[0])

    @property
    def target_samples(self) -> np.ndarray:
        """Sample ids of the target pool T, ascending."""
        return np.flatnonzero(self.in_target_pool)

    @property
    def auxiliary_samples(self) -> np.ndarray:
        """Sample ids of the auxiliary pool A, ascending."""
        return np.flatnonzero(~self.in_target_pool)

    def models(self, role: str) -> list[str]:
        """Model ids of one role, in index order."""
        return [m for m in self.model_ids if role_of(m) == role]

    def members(self, model: str) -> np.ndarray:
        """Boolean mask over all samples: the training set of `model`."""
        return self.keep[self.model_ids.index(model)]

    def pool_of(self, model: str) -> np.ndarray:
        """Boolean mask over all samples: the pool the model's training set was drawn from.

        Its non-members in that pool are the model's held-out ("test") split.
        """
        return ~self.in_target_pool if role_of(model) == "population" else self.in_target_pool

    def to_table(self) -> pa.Table:
        columns = {
            "sample_id": pa.array(np.arange(self.n_samples, dtype=np.int64)),
            "pool": pa.array(np.where(self.in_target_pool, TARGET_POOL, AUXILIARY_POOL)),
        }
        columns.update({m: pa.array(self.keep[k]) for k, m in enumerate(self.model_ids)})
        return pa.table(columns)

    @classmethod
    def from_table(cls, table: pa.Table) -> Splits:
        sample_ids = table.column("sample_id").to_numpy()
        if not np.array_equal(sample_ids, np.arange(len(sample_ids))):
            raise ValueError("splits table must list sample ids 0..N-1 in order")
        model_ids = tuple(n for n in table.column_names if n not in ("sample_id", "pool"))
        keep = np.stack([table.column(m).to_numpy(zero_copy_only=False) for m in model_ids])
        pool = table.column("pool").to_numpy(zero_copy_only=False)
        return cls(model_ids, keep.astype(bool), pool == TARGET_POOL)


def _paired_masks(pool: np.ndarray, n_models: int, generator: np.random.Generator) -> np.ndarray:
    """`n_models` masks over all samples: pairs (mask, complement) of Bernoulli(0.5) draws on `pool`."""
    if n_models % 2:
        raise ValueError(f"the paired design needs an even number of models, got {n_models}")
    masks = np.zeros((n_models, pool.shape[0]), dtype=bool)
    for pair in range(n_models // 2):
        draw = generator.random(pool.shape[0]) < 0.5
        masks[2 * pair] = pool & draw
        masks[2 * pair + 1] = pool & ~draw
    return masks


def target_pool_size(n_samples: int, target_ratio: float) -> int:
    """|T|: how many of a dataset's samples the target pool takes (the rest form A)."""
    return int(target_ratio * n_samples)


def make_splits(n_samples: int, *, seed: int, dataset: str, target_ratio: float = 0.5,
                member_ratio: float = 0.5, repeats: int = 5, n_reference: int = 16,
                n_population: int = 16) -> Splits:
    """Draw the partition and every model's training set; each draw has its own named seed."""
    in_target = np.zeros(n_samples, dtype=bool)
    order = rng(seed, "splits", dataset, "target-pool").permutation(n_samples)
    in_target[order[: target_pool_size(n_samples, target_ratio)]] = True

    targets = np.stack([
        in_target & (rng(seed, "splits", dataset, "target", t).random(n_samples) < member_ratio)
        for t in range(repeats)
    ])
    references = _paired_masks(in_target, n_reference, rng(seed, "splits", dataset, "reference"))
    population = _paired_masks(~in_target, n_population, rng(seed, "splits", dataset, "population"))

    model_ids = tuple(planned_model_ids(repeats, n_reference, n_population))
    keep = np.concatenate([targets, references, population]).astype(bool)
    return Splits(model_ids, keep, in_target)
