"""Metric-based attacks: the target model's own per-sample signals
(docs/algorithms.md#metric-based-attacks).

No thresholds are learned and no other model is used; the ROC sweeps every threshold.
"""

from __future__ import annotations

import numpy as np

from miaflow.attacks.inputs import AttackInputs


def metric_loss(inputs: AttackInputs) -> np.ndarray:
    """Negative cross-entropy loss of the target model."""
    return -inputs.target["loss"]


def metric_conf(inputs: AttackInputs) -> np.ndarray:
    """Target model's true-label probability p_y."""
    return inputs.target["confidence"]


def metric_corr(inputs: AttackInputs) -> np.ndarray:
    """1 if the target model classifies the sample correctly, else 0."""
    return inputs.target["correct"]


def metric_ent(inputs: AttackInputs) -> np.ndarray:
    """Negative prediction entropy (base 2) of the target model."""
    return -inputs.target["entropy"]


def metric_ment(inputs: AttackInputs) -> np.ndarray:
    """Negative modified entropy (Song & Mittal) of the target model."""
    return -inputs.target["mentr"]
