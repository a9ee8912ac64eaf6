"""The privacy stage's audit experiments: targets trained with canaries drawn as data, and every
canary trial scored (higher = member). Canaries live here only: the experiments of
`experiments:`, their data and their metrics never see them.

Each experiment returns the trials, one row per canary trial (TRIALS: which target and attack,
`setting` "runs" for one canary per independent training run or "one-run" for one run's many
canaries, the canary's kind, the target's claim ε and δ, the run, the canary's sample id, whether
it was included and its score), which `miaflow.privacy.results` turns into ε lower bounds, and
the canaries as data (CANARIES). Three kinds, each in a module of its own, so that a job's code
closure holds only what it runs:

- `miaflow.privacy.head_experiments`: the study's linear heads on a dataset's features (DP-Adam,
  `miaflow.privacy.trials`), independent runs with one canary each and one run with many;
- `miaflow.privacy.model_experiments`: one model of an architecture recipe trained with
  canaries (its `dp_sgd` defense, if any, through Opacus);
- `miaflow.privacy.claims`: a user's model, from its outputs on its canaries (docs/audit.md).

The last two score their canaries by attacks on the target alone (`miaflow.privacy.scoring`).

Every experiment draws its base training set (`train_size` samples of the dataset) and its
canaries' pool (the rest) by seed (`split`); natural and mislabelled canaries come from that
pool, so they are not in the base set, whatever their bit. The trials cover every planned canary:
one with `included` false was drawn but left out of training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from miaflow.privacy.estimators import ONE_RUN_TRIALS

if TYPE_CHECKING:
    from miaflow.privacy.canaries import CanarySet

TRIALS = [
    "dataset",
    "target_model",
    "attack",
    "setting",
    "canary_kind",
    "epsilon",
    "delta",
    "noise_multiplier",
    "run",
    "sample_id",
    "included",
    "score",
]
CANARIES = ["setting", "sample_id", "kind", "label", "included", "source", "features"]


def split(n_samples: int, train_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The base training set (`train_size` sample ids, sorted) and the canaries' pool (the other
    ids, in a seeded order), drawn by `seed`."""
    order = np.random.default_rng(seed).permutation(n_samples)
    return np.sort(order[:train_size]), order[train_size:]


def drawn_canaries(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    pool: np.ndarray,
    counts: Mapping[str, int],
    seed: int,
    first_id: int,
) -> CanarySet:
    """`make_canaries` on the pool's samples, with `source` the dataset's sample id of a natural
    or mislabelled canary (−1 for the others)."""
    from miaflow.privacy.canaries import CanarySet, make_canaries

    drawn = make_canaries(features[pool], labels[pool], n_classes, counts, seed, first_id)
    table = drawn.table.copy()
    source = table["source"].to_numpy(np.int64)
    table["source"] = np.where(source >= 0, pool[np.maximum(source, 0)], -1).astype(np.int64)
    return CanarySet(table, drawn.inputs)


def canary_table(canaries: CanarySet, setting: str) -> pd.DataFrame:
    """The canaries as data (CANARIES): their table, their flattened inputs, and `included` only
    for one run's canaries (null for the canary of independent runs, whose bits are the runs')."""
    table = canaries.table.copy()
    flat = np.asarray(canaries.inputs, np.float32).reshape(len(table), -1) if len(table) else []
    included = table["included"].astype("boolean")
    table["included"] = (
        included if setting == ONE_RUN_TRIALS else pd.array([pd.NA] * len(table), "boolean")
    )
    table["setting"] = setting
    table["features"] = list(flat)
    return table[CANARIES]


def trial_rows(
    frame: pd.DataFrame, identity: Mapping[str, Any], setting: str, kinds: Sequence[str] | str
) -> pd.DataFrame:
    """Trial rows (TRIALS) from scored trials (sample_id, included, score[, run])."""
    rows = pd.DataFrame(
        {
            **identity,
            "setting": setting,
            "canary_kind": kinds if isinstance(kinds, str) else np.asarray(kinds),
            "run": frame["run"].to_numpy() if "run" in frame else 0,
            "sample_id": frame["sample_id"].to_numpy(),
            "included": frame["included"].to_numpy(dtype=bool),
            "score": frame["score"].to_numpy(dtype=np.float64),
        },
        index=range(len(frame)),
    )
    return rows[TRIALS]
