"""Canaries scored by attacks on the target alone: a model's logits on its canaries become its
signals (`miaflow.signals`), the target's inputs of each attack (`miaflow.attacks.scoring`); no
reference or population model exists for a canary, so validation admits only attacks that need
none (`miaflow.validation.privacy`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from miaflow.privacy.estimators import ONE_RUN_TRIALS
from miaflow.privacy.experiments import trial_rows
from miaflow.seeding import derive_seed


def canary_scores(
    logits: np.ndarray,
    labels: np.ndarray,
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
) -> dict[str, np.ndarray]:
    """Each target-only attack's scores of the canaries from the target's logits on them (m, C):
    its signals (`miaflow.signals`) as the target's inputs, no reference or population model."""
    from miaflow.attacks.inputs import AttackInputs
    from miaflow.attacks.registry import attack_options
    from miaflow.attacks.scoring import run_attack
    from miaflow.signals import signals_from_logits

    target = {**signals_from_logits(logits, labels), "logits": logits, "label": labels}
    m = len(labels)
    scores = {}
    for attack in attacks:
        inputs = AttackInputs(
            target=target,
            reference={},
            reference_keep=np.zeros((0, m), bool),
            target_on_population={},
            population={},
            population_keep=np.zeros((0, 0), bool),
            options=attack_options(attack, options.get(attack, {})),
            seed=derive_seed(seed, attack),
            sample_ids=np.arange(m),
        )
        scores[attack] = run_attack(attack, inputs)
    return scores


def scored_trials(
    identity: Mapping[str, Any], table: pd.DataFrame, scores: Mapping[str, np.ndarray]
) -> pd.DataFrame:
    """One-run trial rows of every attack's scores of the canaries of `table`."""
    return pd.concat(
        [
            trial_rows(
                table.assign(score=score),
                {**identity, "attack": attack},
                ONE_RUN_TRIALS,
                table["kind"],
            )
            for attack, score in scores.items()
        ],
        ignore_index=True,
    )
