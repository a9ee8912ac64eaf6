"""Membership-inference attacks, one module per family, all behind one registry.

Importing this package registers every attack: `ATTACKS` maps each id (ALGORITHMS.md names) to
its score function; `run_attack` runs one on `AttackInputs` (signals only, higher = member).
"""

from miaflow.attacks import metric, query, reference  # noqa: F401  (importing registers the attacks)
from miaflow.attacks.registry import (
    ATTACKS,
    FAMILIES,
    Attack,
    AttackInputs,
    attack_inputs,
    register,
    run_attack,
)

__all__ = ["ATTACKS", "FAMILIES", "Attack", "AttackInputs", "attack_inputs", "register",
           "run_attack"]
