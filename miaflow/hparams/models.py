"""The study's two kinds of model behind one interface: linear heads on frozen features (the
paper's transfer-learning setting, `miaflow.models.heads`) or its small CNN trained from scratch
on the images (Figure A2, `miaflow.hparams.cnn`). HPO and the grid train and score both
through `fit_models`, so a setting's `model` changes nothing else in the study."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

MODELS = ("head", "cnn")


class TrainedModels(Protocol):
    """K trained models of one kind."""

    def logits(self, samples: np.ndarray, members: Sequence[int] | None = None) -> np.ndarray:
        """Logits (K', n, C) in float64 of the `members` (None: all) on `samples`."""
        ...


@dataclass(frozen=True)
class _Heads:
    weight: np.ndarray  # (K, d, C)
    bias: np.ndarray  # (K, C)

    def logits(self, samples: np.ndarray, members: Sequence[int] | None = None) -> np.ndarray:
        from miaflow.models.heads import head_logits

        if members is None:
            return head_logits(samples, self.weight, self.bias)
        return head_logits(samples, self.weight[list(members)], self.bias[list(members)])


@dataclass(frozen=True)
class _Cnns:
    stack: object  # miaflow.hparams.cnn.CnnStack
    device: str

    def logits(self, samples: np.ndarray, members: Sequence[int] | None = None) -> np.ndarray:
        from miaflow.hparams.cnn import CnnStack

        stack = self.stack
        if members is not None:
            chosen = list(members)
            stack = CnnStack(stack.image_shape, {k: v[chosen] for k, v in stack.params.items()})
        return stack.logits(samples, self.device)


def fit_models(
    model: str,
    samples: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    train_sets: Sequence[np.ndarray],
    recipes: Sequence,
    epochs: int,
    seeds: Sequence[int],
    device: str = "cpu",
) -> TrainedModels:
    """Train one model per (train set, recipe, seed): `samples` are features (n, d) for heads,
    images (n, c, h, w) for the CNN; the recipes are `HeadRecipe`s either way."""
    if model == "head":
        from miaflow.models.heads import fit_heads

        return _Heads(
            *fit_heads(samples, labels, n_classes, train_sets, recipes, epochs, seeds, device)
        )
    if model == "cnn":
        from miaflow.hparams.cnn import fit_cnns

        stack = fit_cnns(samples, labels, n_classes, train_sets, recipes, epochs, seeds, device)
        return _Cnns(stack, device)
    raise ValueError(f"unknown model {model!r} (known: {', '.join(MODELS)})")
