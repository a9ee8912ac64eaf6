"""Membership-inference attacks, one module per family, all behind one registry.

Importing this package registers every attack: `ATTACKS` maps each id
(docs/algorithms.md#attack-index) to its score function; `run_attack` runs one on `AttackInputs`
(signals only, higher = member).
"""

from miaflow.attacks import (  # noqa: F401  (importing registers the attacks)
    learning,
    llm,
    metric,
    query,
    reference,
    song_mittal,
)
from miaflow.attacks.registry import (
    ATTACKS,
    FAMILIES,
    Attack,
    AttackInputs,
    attack_inputs,
    register,
    run_attack,
)

# The 21 algorithms of the TDDBench benchmark (docs/algorithms.md#attack-index), in the paper's
# order.
TDDBENCH_ALGORITHMS = (
    "metric-loss",
    "metric-conf",
    "metric-corr",
    "metric-ent",
    "metric-ment",
    "learn-original",
    "learn-top3",
    "learn-sorted",
    "learn-label",
    "learn-merge",
    "model-loss",
    "model-calibration",
    "model-lira",
    "model-fpr",
    "model-robust",
    "query-augment",
    "query-transfer",
    "query-adv",
    "query-neighbor",
    "query-qrm",
    "query-ref",
)

__all__ = [
    "TDDBENCH_ALGORITHMS",
    "ATTACKS",
    "FAMILIES",
    "Attack",
    "AttackInputs",
    "attack_inputs",
    "register",
    "run_attack",
]
