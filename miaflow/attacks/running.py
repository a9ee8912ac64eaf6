"""Running one attack, whatever its family: its needs and the type of its options checked, its
scores cast to float64 with ±inf and NaN replaced (docs/algorithms.md#numerical-stability).

The runners find the score function and call `run`: `miaflow.attacks.scoring.run_attack` for the
attacks on a model's signals, `miaflow.attacks.llm.run_llm_attack` for the language-model ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from miaflow.attacks.registry import Attack

log = logging.getLogger("miaflow.attacks")


def run(attack: Attack, score: Callable[[Any], np.ndarray], inputs: Any) -> np.ndarray:
    """Scores of `attack`, computed by `score` on `inputs` (`AttackInputs` or `LLMInputs`, their
    `options` those of the attack): float64, ±inf put just beyond the finite extremes and NaN
    turned into 0, except that a `subset` attack's NaN means "not evaluated" and stays NaN.

    An attack that needs reference or population models refuses inputs without them.
    """
    missing = sorted(need for need in attack.needs if getattr(inputs, f"{need}_keep").shape[0] == 0)
    if missing:
        lacking = ", ".join(f"no {need} models" for need in missing)
        raise ValueError(f"attack {attack.name!r} cannot run: its inputs have {lacking}")
    expected = attack.options
    if not (isinstance(inputs.options, expected) if expected else inputs.options is None):
        wanted = expected.__name__ if expected else "none"
        raise TypeError(
            f"attack {attack.name!r} reads options {wanted}, not {type(inputs.options).__name__}"
        )
    scores = np.array(score(inputs), dtype=np.float64)
    bad = np.isinf(scores) if attack.subset else ~np.isfinite(scores)
    if bad.any():
        finite = scores[np.isfinite(scores)]
        high, low = (finite.max(), finite.min()) if finite.size else (0.0, 0.0)
        scores[np.isposinf(scores)] = high + 1e-6
        scores[np.isneginf(scores)] = low - 1e-6
        if not attack.subset:
            scores[np.isnan(scores)] = 0.0
        log.warning(
            "attack %s: replaced %d non-finite scores of %d", attack.name, bad.sum(), scores.size
        )
    return scores
