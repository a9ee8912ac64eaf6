"""Dataset partition and membership ("keep") matrix, following the TDDBench protocol.

* The dataset is split once into a target pool T (`target_ratio`, or `target_size` samples) and an
  auxiliary pool A (the rest, or `auxiliary_size` samples of it; what neither pool takes is held
  in reserve: no model trains on it, defended models draw their reference sets from outside
  their own pool).
* `repeats` target models each train on an independent Bernoulli(`member_ratio`) subset of T, or
  on exactly `members` samples of it.
* Reference models use the paired design over T: mask j and its complement, so every target sample
  is IN for exactly half of them (online attacks).
* Population models use the same paired design over A (RMIA's population side; offline attacks).
* The shadow model that learning-based and Song & Mittal attacks learn from is reference model 0
  on T (`shadow: target`, TDDBench), or population model 0 on A (`shadow: auxiliary`: its data is
  disjoint from the targets', as in Song & Mittal's and MemGuard's evaluations).

The defaults give TDDBench's protocol; `target_size: 2000, members: 1000, auxiliary_size: 1000,
shadow: auxiliary` on Location30 gives MemGuard's (1,000 members and 1,000 evaluated non-members
per target, a shadow of 500 members and 500 non-members).

The matrix is stored sample-major as Parquet: one row per sample (`sample_id`, `pool`: target,
auxiliary or reserve) and one boolean column per model, named `<role>-<index>` (e.g. `target-0`,
`reference-7`); the shadow's pool is in the file's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from miaflow.seeding import rng

ROLES = ("target", "reference", "population")
TARGET_POOL, AUXILIARY_POOL, RESERVE = "target", "auxiliary", "reserve"
SHADOW_POOLS = (TARGET_POOL, AUXILIARY_POOL)


def model_id(role: str, index: int) -> str:
    return f"{role}-{index}"


def planned_model_ids(repeats: int, n_reference: int, n_population: int) -> list[str]:
    """Every model of one experiment: targets, then references, then population models."""
    return (
        [model_id("target", t) for t in range(repeats)]
        + [model_id("reference", m) for m in range(n_reference)]
        + [model_id("population", m) for m in range(n_population)]
    )


def role_of(model: str) -> str:
    return model.rsplit("-", 1)[0]


@dataclass(frozen=True)
class Splits:
    """Membership matrix of one dataset: `keep[m, i]` is True iff sample i trains model m."""

    model_ids: tuple[str, ...]
    keep: np.ndarray  # bool, (n_models, n_samples); column i is sample_id i
    in_target_pool: np.ndarray  # bool, (n_samples,)
    reserved: np.ndarray | None = None  # bool, (n_samples,): in neither pool (None: no reserve)
    shadow_pool: str = TARGET_POOL  # where the shadow model trained (SHADOW_POOLS)

    def __post_init__(self) -> None:
        if self.shadow_pool not in SHADOW_POOLS:
            raise ValueError(f"shadow pool must be one of {SHADOW_POOLS}, got {self.shadow_pool!r}")

    @property
    def n_samples(self) -> int:
        return int(self.in_target_pool.shape[0])

    @property
    def in_auxiliary_pool(self) -> np.ndarray:
        """Boolean mask of the auxiliary pool A: neither in T nor held in reserve."""
        outside = ~self.in_target_pool
        return outside if self.reserved is None else outside & ~self.reserved

    @property
    def target_samples(self) -> np.ndarray:
        """Sample ids of the target pool T, ascending."""
        return np.flatnonzero(self.in_target_pool)

    @property
    def auxiliary_samples(self) -> np.ndarray:
        """Sample ids of the auxiliary pool A, ascending."""
        return np.flatnonzero(self.in_auxiliary_pool)

    @property
    def shadow_model(self) -> str:
        """The model learning-based and Song & Mittal attacks learn from: the first model of
        the shadow's pool (reference-0 on T, or population-0 on A)."""
        return model_id("reference" if self.shadow_pool == TARGET_POOL else "population", 0)

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
        return self.in_auxiliary_pool if role_of(model) == "population" else self.in_target_pool

    def with_models(self, model_ids: tuple[str, ...], keep: np.ndarray) -> Splits:
        """Other models on the same pools (e.g. an audited target beside these references)."""
        return Splits(model_ids, keep, self.in_target_pool, self.reserved, self.shadow_pool)

    def to_table(self) -> pa.Table:
        pools = np.where(
            self.in_target_pool,
            TARGET_POOL,
            np.where(self.in_auxiliary_pool, AUXILIARY_POOL, RESERVE),
        )
        columns = {
            "sample_id": pa.array(np.arange(self.n_samples, dtype=np.int64)),
            "pool": pa.array(pools),
        }
        columns.update({m: pa.array(self.keep[k]) for k, m in enumerate(self.model_ids)})
        return pa.table(columns).replace_schema_metadata({"shadow_pool": self.shadow_pool})

    @classmethod
    def from_table(cls, table: pa.Table) -> Splits:
        sample_ids = table.column("sample_id").to_numpy()
        if not np.array_equal(sample_ids, np.arange(len(sample_ids))):
            raise ValueError("splits table must list sample ids 0..N-1 in order")
        model_ids = tuple(n for n in table.column_names if n not in ("sample_id", "pool"))
        keep = np.stack([table.column(m).to_numpy(zero_copy_only=False) for m in model_ids])
        pool = table.column("pool").to_numpy(zero_copy_only=False)
        shadow = (table.schema.metadata or {}).get(b"shadow_pool", TARGET_POOL.encode()).decode()
        reserved = pool == RESERVE
        return cls(
            model_ids,
            keep.astype(bool),
            pool == TARGET_POOL,
            reserved if reserved.any() else None,
            shadow,
        )


def _paired_masks(pool: np.ndarray, n_models: int, generator: np.random.Generator) -> np.ndarray:
    """`n_models` masks over all samples: pairs (mask, complement) of Bernoulli(0.5) draws on
    `pool`."""
    if n_models % 2:
        raise ValueError(f"the paired design needs an even number of models, got {n_models}")
    masks = np.zeros((n_models, pool.shape[0]), dtype=bool)
    for pair in range(n_models // 2):
        draw = generator.random(pool.shape[0]) < 0.5
        masks[2 * pair] = pool & draw
        masks[2 * pair + 1] = pool & ~draw
    return masks


def pool_sizes(
    n_samples: int,
    *,
    target_ratio: float = 0.5,
    target_size: int | None = None,
    member_ratio: float = 0.5,
    members: int | None = None,
    auxiliary_size: int | None = None,
) -> tuple[int, float, int]:
    """(|T|, members per target model (expected, under `member_ratio`), |A|) of a dataset:
    the sizes `make_splits` draws, for planning and validation before any data is loaded."""
    n_target = int(target_ratio * n_samples) if target_size is None else target_size
    n_members = member_ratio * n_target if members is None else float(members)
    n_auxiliary = n_samples - n_target if auxiliary_size is None else auxiliary_size
    return n_target, n_members, n_auxiliary


def make_splits(
    n_samples: int,
    *,
    seed: int,
    dataset: str,
    target_ratio: float = 0.5,
    target_size: int | None = None,
    member_ratio: float = 0.5,
    members: int | None = None,
    auxiliary_size: int | None = None,
    shadow: str = TARGET_POOL,
    repeats: int = 5,
    n_reference: int = 16,
    n_population: int = 16,
) -> Splits:
    """Draw the partition and every model's training set; each draw has its own named seed."""
    n_target, _, n_auxiliary = pool_sizes(
        n_samples, target_ratio=target_ratio, target_size=target_size, auxiliary_size=auxiliary_size
    )
    if n_target + n_auxiliary > n_samples or members is not None and members >= n_target:
        raise ValueError(
            f"{dataset}: {n_samples} samples cannot hold a target pool of {n_target} "
            f"(members {members}) and an auxiliary pool of {n_auxiliary}"
        )
    order = rng(seed, "splits", dataset, "target-pool").permutation(n_samples)
    in_target = np.zeros(n_samples, dtype=bool)
    in_target[order[:n_target]] = True
    reserved = None
    if auxiliary_size is not None:
        rest = np.sort(order[n_target:])
        chosen = rng(seed, "splits", dataset, "auxiliary-pool").choice(
            rest, n_auxiliary, replace=False
        )
        reserved = ~in_target
        reserved[chosen] = False
    in_auxiliary = ~in_target if reserved is None else ~in_target & ~reserved

    targets = np.zeros((repeats, n_samples), dtype=bool)
    for t in range(repeats):
        draw = rng(seed, "splits", dataset, "target", t)
        if members is None:
            targets[t] = in_target & (draw.random(n_samples) < member_ratio)
        else:
            targets[t, draw.choice(np.flatnonzero(in_target), members, replace=False)] = True
    references = _paired_masks(in_target, n_reference, rng(seed, "splits", dataset, "reference"))
    population = _paired_masks(
        in_auxiliary, n_population, rng(seed, "splits", dataset, "population")
    )

    model_ids = tuple(planned_model_ids(repeats, n_reference, n_population))
    keep = np.concatenate([targets, references, population]).astype(bool)
    return Splits(model_ids, keep, in_target, reserved, shadow)
