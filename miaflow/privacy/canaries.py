"""Canaries for a privacy audit, as data: which samples, of which kind, with which label, and
whether each goes into the training set.

Every canary is included independently with probability 1/2 (Poisson inclusion), the setting of
the one-run audit (Steinke, Nasr & Jagielski 2023), whose analysis needs independent fair coins.
Kinds, all offline and cheap:

- `natural`: held-aside samples, unmodified: what an ordinary record leaks;
- `mislabelled`: held-aside samples with the label changed to another class, uniformly at
  random: the model must memorise them to fit them, the classic strong black-box canary;
- `ood`: inputs drawn uniformly within the pool's per-feature range, with a random label: far
  from the data's manifold but inside its value range, so no preprocessing clips them;
- `dirac` (`dirac_canaries`, linear models on fixed features): an input on a feature axis of its
  own, zero in every real sample, so its gradient moves weights no other sample moves.

The pool given must be held aside from the training set (a natural canary already in it would be
"in" whatever its bit says). No file I/O: the caller stores the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

KINDS = ("natural", "mislabelled", "ood")
COLUMNS = ["sample_id", "kind", "label", "included", "source"]
DIRAC_SCALE = 10.0  # the Dirac canary's value on its own axis; bigger leaves the bias less


@dataclass(frozen=True)
class CanarySet:
    """`table` (COLUMNS: sample id, kind, label, included, `source`, the pool index a natural or
    mislabelled canary was taken from, −1 otherwise) and `inputs`, one per row in table order."""

    table: pd.DataFrame
    inputs: np.ndarray

    def training_set(self, inputs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The training set with the included canaries appended (inputs, labels)."""
        chosen = self.table["included"].to_numpy(dtype=bool)
        return (
            np.concatenate([inputs, self.inputs[chosen].astype(inputs.dtype)]),
            np.concatenate([labels, self.table["label"].to_numpy()[chosen].astype(labels.dtype)]),
        )


def make_canaries(
    inputs: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    counts: Mapping[str, int],
    seed: int,
    first_id: int = 0,
) -> CanarySet:
    """Canaries of the kinds in `counts` (kind -> how many, in that order) from a held-aside pool
    (`inputs` (n, ...), `labels` (n,)). Natural and mislabelled canaries are distinct pool
    samples; ids run from `first_id` (choose them past the dataset's own ids)."""
    unknown = set(counts) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown canary kinds {sorted(unknown)}; known: {KINDS}")
    if n_classes < 2 and counts.get("mislabelled", 0):
        raise ValueError("mislabelled canaries need at least 2 classes")
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    drawn = sum(n for kind, n in counts.items() if kind != "ood")
    if drawn > len(inputs):
        raise ValueError(f"{drawn} natural and mislabelled canaries from a pool of {len(inputs)}")
    rng = np.random.default_rng(seed)
    sources = iter(rng.choice(len(inputs), size=drawn, replace=False))
    low, high = inputs.min(axis=0), inputs.max(axis=0)
    kinds, rows_labels, rows_inputs, rows_sources = [], [], [], []
    for kind, n in counts.items():
        if kind == "ood":
            rows_inputs.append(rng.uniform(low, high, size=(n, *inputs.shape[1:])))
            rows_labels.append(rng.integers(0, n_classes, size=n))
            rows_sources.append(np.full(n, -1))
        else:
            taken = np.array([next(sources) for _ in range(n)], dtype=np.int64)
            label = labels[taken].astype(np.int64)
            if kind == "mislabelled":  # another class, uniformly: add 1..C-1 modulo C
                label = (label + rng.integers(1, n_classes, size=n)) % n_classes
            rows_inputs.append(inputs[taken].astype(np.float64))
            rows_labels.append(label)
            rows_sources.append(taken)
        kinds += [kind] * n
    total = len(kinds)
    table = pd.DataFrame(
        {
            "sample_id": np.arange(first_id, first_id + total, dtype=np.int64),
            "kind": kinds,
            "label": np.concatenate(rows_labels).astype(np.int64) if total else [],
            "included": rng.random(total) < 0.5,
            "source": np.concatenate(rows_sources).astype(np.int64) if total else [],
        },
        columns=COLUMNS,
    )
    shape = (0, *inputs.shape[1:])
    return CanarySet(table, np.concatenate(rows_inputs) if total else np.zeros(shape))


def dirac_canaries(
    features: np.ndarray,
    n_classes: int,
    count: int,
    seed: int,
    scale: float = DIRAC_SCALE,
    first_id: int = 0,
) -> tuple[np.ndarray, CanarySet]:
    """`count` Dirac canaries for a linear model on fixed `features` (n, d): the features padded
    with `count` zero columns, and canaries each `scale` on its own new axis and 0 elsewhere,
    with a random label. A linear head's weight gradient of a sample is (p − y)·xᵀ, so a
    canary's moves only its own axis' weights, which no other sample touches: the Dirac
    gradient canary of Nasr et al. (USENIX Security 2023), realised as a data point, which needs
    no change to training (it still goes through per-sample clipping and noise)."""
    features = np.asarray(features)
    n, d = features.shape
    rng = np.random.default_rng(seed)
    padded = np.concatenate([features, np.zeros((n, count), dtype=features.dtype)], axis=1)
    inputs = np.zeros((count, d + count))
    inputs[np.arange(count), d + np.arange(count)] = scale
    table = pd.DataFrame(
        {
            "sample_id": np.arange(first_id, first_id + count, dtype=np.int64),
            "kind": ["dirac"] * count,
            "label": rng.integers(0, n_classes, size=count).astype(np.int64),
            "included": rng.random(count) < 0.5,
            "source": np.full(count, -1, dtype=np.int64),
        },
        columns=COLUMNS,
    )
    return padded, CanarySet(table, inputs)
