"""Running the attacks on a model's signals by id: every family but "llm", whose modules this
module imports, so that the code closure of a job that scores attacks (`miaflow.plan.code`) holds
exactly the families it can run. The language-model attacks run from `miaflow.attacks.llm`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from miaflow.attacks import learning, metric, query, reference, song_mittal
from miaflow.attacks.inputs import AttackInputs
from miaflow.attacks.registry import ATTACKS, attack_options
from miaflow.attacks.running import run

# The family modules whose functions this runner calls, by module name (`Attack.module`).
MODULES = {module.__name__: module for module in (learning, metric, query, reference, song_mittal)}


def score_function(name: str) -> Callable[[AttackInputs], np.ndarray]:
    """The function that scores attack `name` (its catalogue entry's `score`)."""
    attack = ATTACKS[name]
    if attack.module not in MODULES:
        raise ValueError(
            f"attack {name!r} ({attack.score}) is not an attack on a model's signals: "
            "language-model attacks run from miaflow.attacks.llm"
        )
    return getattr(MODULES[attack.module], attack.function)


def run_attack(name: str, inputs: AttackInputs) -> np.ndarray:
    """Scores of attack `name` on `inputs` (`miaflow.attacks.running.run`: needs checked, ±inf
    and NaN replaced); inputs without options get the attack's defaults."""
    if inputs.options is None:
        inputs = dataclasses.replace(inputs, options=attack_options(name, {}))
    return run(ATTACKS[name], score_function(name), inputs)
