"""MIA-Grid data (docs/algorithms.md#mia-grid): the few-shot universe, its M+1 Bernoulli halves
D_0..D_M, and the external halves D_0^e..D_M^e that ED-HPO tunes on.

The universe V holds 2·S samples of each class (n = 2·S·C), so a half holds about S shots per
class; the external universe is drawn the same way from the samples outside V, so every D_i^e is
disjoint from every D_j. Each run draws both universes and all halves afresh from its own seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from miaflow.seeding import rng

FAMILIES = ("td", "ed")  # halves of V (targets, shadows, TD-HPO) and of V^e (ED-HPO)


@dataclass(frozen=True)
class GridSplits:
    """One run's universes and membership: `members[f][i, v]` says whether universe sample v is
    in split i of family f ("td": D_i over V, "ed": D_i^e over V^e)."""

    universe: dict[str, np.ndarray]  # family -> (n,) dataset indices
    members: dict[str, np.ndarray]  # family -> (M+1, n) bool

    @property
    def n_splits(self) -> int:
        return self.members["td"].shape[0]

    def train_set(self, family: str, split: int) -> np.ndarray:
        """Positions in the family's universe of split `split`'s samples."""
        return np.flatnonzero(self.members[family][split])

    def to_frame(self) -> pd.DataFrame:
        """Long format: family, split, position, sample_id (dataset index), member."""
        frames = []
        for family in FAMILIES:
            members = self.members[family]
            splits, positions = np.meshgrid(
                np.arange(members.shape[0]), np.arange(members.shape[1]), indexing="ij"
            )
            frames.append(
                pd.DataFrame(
                    {
                        "family": family,
                        "split": splits.ravel(),
                        "position": positions.ravel(),
                        "sample_id": self.universe[family][positions.ravel()],
                        "member": members.ravel(),
                    }
                )
            )
        return pd.concat(frames, ignore_index=True)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> GridSplits:
        universe, members = {}, {}
        for family in FAMILIES:
            part = frame[frame["family"] == family].sort_values(["split", "position"])
            n_splits, n = part["split"].nunique(), part["position"].nunique()
            members[family] = part["member"].to_numpy(bool).reshape(n_splits, n)
            universe[family] = part["sample_id"].to_numpy(np.int64)[:n]
        return cls(universe, members)


def drawn_per_class(shots: int) -> int:
    """Samples of every class that the two disjoint universes of 2·shots draw together: what
    `few_shot_universes` takes, for validation before any data is loaded."""
    return len(FAMILIES) * 2 * shots


def few_shot_universes(
    labels: np.ndarray, shots: int, n_classes: int, generator: np.random.Generator
) -> dict[str, np.ndarray]:
    """Disjoint universes V and V^e of 2·shots samples per class each (dataset indices, sorted)."""
    per_class, drawn = 2 * shots, drawn_per_class(shots)
    picked: dict[str, list[np.ndarray]] = {family: [] for family in FAMILIES}
    for label in range(n_classes):
        pool = np.flatnonzero(labels == label)
        if len(pool) < drawn:
            raise ValueError(
                f"class {label} has {len(pool)} samples; {shots} shots need "
                f"{drawn} (a universe and a disjoint external universe)"
            )
        chosen = generator.choice(pool, size=drawn, replace=False)
        picked["td"].append(chosen[:per_class])
        picked["ed"].append(chosen[per_class:])
    return {family: np.sort(np.concatenate(parts)) for family, parts in picked.items()}


def draw_splits(
    labels: np.ndarray, n_classes: int, shots: int, n_shadow: int, seed: int, setting: str, run: int
) -> GridSplits:
    """One run's universes and M+1 = n_shadow + 1 Bernoulli(0.5) halves of each (seeded by name)."""
    universe = few_shot_universes(
        labels, shots, n_classes, rng(seed, "hparams", setting, run, "universe")
    )
    members = {
        family: np.stack(
            [
                rng(seed, "hparams", setting, run, family, split).random(len(universe[family]))
                < 0.5
                for split in range(n_shadow + 1)
            ]
        )
        for family in FAMILIES
    }
    return GridSplits(universe, members)
