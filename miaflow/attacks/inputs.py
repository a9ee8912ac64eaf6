"""What an attack on a model's signals reads (`AttackInputs`): signals of the target and of the
reference and population models, never the models themselves, read lazily from the signal store
(`attack_inputs`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from miaflow.signals import SignalStore
from miaflow.splits import AUXILIARY_POOL, TARGET_POOL, Splits


@dataclass(frozen=True)
class AttackInputs:
    """Everything an attack may read for one target model: signals, never models.

    Signal mappings are keyed by signal name (`miaflow.signals.SIGNALS`, plus `logits` and
    `label`). The shadow model of learning-based and Song & Mittal attacks is reference 0 on T, or
    population model 0 on A under `shadow_pool` "auxiliary" (`shadow()`;
    docs/algorithms.md#reference-population-and-shadow-models).
    """

    target: Mapping[str, np.ndarray]  # signal -> (n,) target model on evaluated samples (pool T)
    reference: Mapping[str, np.ndarray]  # signal -> (M, n) reference models on the same samples
    reference_keep: np.ndarray  # bool (M, n): reference m trained on sample i
    target_on_population: Mapping[str, np.ndarray]  # signal -> (n_aux,) target on auxiliary pool A
    population: Mapping[str, np.ndarray]  # signal -> (Mp, n_aux) population models on A
    population_keep: np.ndarray  # bool (Mp, n_aux)
    # the attack's options (its `miaflow.attacks.options` class, from
    # `miaflow.attacks.registry.attack_options`); None: its defaults, or it has none
    options: Any = None
    seed: int = 0  # named seed of this (experiment, attack, target model), for attacks that draw
    target_model: str = "target-0"  # model id of the target, to pick its rows in `extra` artifacts
    extra: Mapping[str, Any] = field(default_factory=dict)  # artifact name -> path (`Attack.reads`)
    # sample ids of pool T in the order of every (n,) array, to align rows of `extra` artifacts
    sample_ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    shadow_pool: str = TARGET_POOL  # the shadow model's pool (miaflow.splits.SHADOW_POOLS)

    def shadow(self) -> tuple[Mapping[str, np.ndarray], np.ndarray]:
        """The shadow model's signals on its pool (one model: arrays of shape (n_pool,)) and its
        membership there (its shadow-train set; the rest of the pool is its shadow-test set)."""
        if self.shadow_pool == AUXILIARY_POOL:
            return ModelRow(self.population, 0), np.asarray(self.population_keep[0], dtype=bool)
        return ModelRow(self.reference, 0), np.asarray(self.reference_keep[0], dtype=bool)


class ModelRow(Mapping[str, np.ndarray]):
    """Row `index` of (M, n, ...) signal arrays, read on access (so only needed signals load)."""

    def __init__(self, signals: Mapping[str, np.ndarray], index: int) -> None:
        self._signals, self._index = signals, index

    def __getitem__(self, name: str) -> np.ndarray:
        return self._signals[name][self._index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._signals)

    def __len__(self) -> int:
        return len(self._signals)


class StoredSignals(Mapping[str, np.ndarray]):
    """Signals of some models on some samples, read from the store when first asked for.

    Attacks read a few signals each; loading lazily keeps e.g. full logits of every reference
    model out of memory for the attacks that never look at them. With `single=True` (one model)
    values have the model axis removed.
    """

    def __init__(
        self, store: SignalStore, models: Sequence[str], samples: np.ndarray, single: bool = False
    ) -> None:
        self._store, self._models, self._samples, self._single = (
            store,
            list(models),
            samples,
            single,
        )
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, signal: str) -> np.ndarray:
        if signal not in self._cache:
            values = self._store.matrix(self._models, signal, self._samples)
            if signal == "label":
                values = values.astype(np.int64)
            self._cache[signal] = values[0] if self._single else values
        return self._cache[signal]

    def __iter__(self) -> Iterator[str]:
        return iter(self._store.signals)

    def __len__(self) -> int:
        return len(self._store.signals)


def attack_inputs(
    store: SignalStore,
    splits: Splits,
    repeat: int,
    options: Any = None,
    seed: int = 0,
    extra: Mapping[str, Any] | None = None,
    n_reference: int | None = None,
    reference_store: SignalStore | None = None,
) -> tuple[AttackInputs, np.ndarray]:
    """Inputs for target model `target-<repeat>` and the ground truth `is_member` over pool T.

    References are evaluated on the target pool T, population models (and the target, for RMIA's
    population side) on the auxiliary pool A. Missing model sets give (0, n) arrays.
    `options`: the attack's options (`AttackInputs.options`). `n_reference` keeps only the first
    references (whole complementary pairs when even), for studies of how attacks scale with the
    number of reference models. `reference_store` holds the reference and population models when
    their architecture differs from the target's.
    """
    target = f"target-{repeat}"
    evaluated, auxiliary = splits.target_samples, splits.auxiliary_samples
    references, population = splits.models("reference")[:n_reference], splits.models("population")

    def keep(models: list[str], samples: np.ndarray) -> np.ndarray:
        rows = np.array([splits.model_ids.index(m) for m in models], dtype=np.intp)
        return splits.keep[rows][:, samples]

    inputs = AttackInputs(
        target=StoredSignals(store, [target], evaluated, single=True),
        reference=StoredSignals(reference_store or store, references, evaluated),
        reference_keep=keep(references, evaluated),
        target_on_population=StoredSignals(store, [target], auxiliary, single=True),
        population=StoredSignals(reference_store or store, population, auxiliary),
        population_keep=keep(population, auxiliary),
        options=options,
        seed=seed,
        target_model=target,
        extra=dict(extra or {}),
        sample_ids=evaluated,
        shadow_pool=splits.shadow_pool,
    )
    return inputs, splits.members(target)[evaluated]
