"""Named, independent seeds: every random choice derives its seed from params.yaml's `seed` and a
name.

Deriving by name (not by drawing from one global stream) means adding an artifact never changes
the random draws of another one.
"""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(base_seed: int, *names: object) -> int:
    """A 63-bit seed determined by `base_seed` and the names (e.g. "train", dataset, model id)."""
    text = "/".join([str(base_seed), *map(str, names)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def rng(base_seed: int, *names: object) -> np.random.Generator:
    """A numpy generator seeded by `derive_seed`."""
    return np.random.default_rng(derive_seed(base_seed, *names))
