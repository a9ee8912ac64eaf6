"""Defenses against membership inference that a target can be trained or released with.

Song & Mittal (USENIX Security 2021) re-evaluate them with metric attacks: early stopping (the
fair baseline), adversarial regularization (Nasr et al. 2018), MemGuard (Jia et al. 2019) and
DP-SGD (Abadi et al. 2016, through Opacus). The first, second and fourth change training; MemGuard
changes the released confidence vectors, so it acts between a model's outputs and the attacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRAINING = ("adversarial_regularization", "dp_sgd")  # change how a model is trained


def defense_kind(arch: Mapping[str, Any]) -> str | None:
    """The kind of an architecture's `defense`, None without one."""
    return (arch.get("defense") or {}).get("kind")
