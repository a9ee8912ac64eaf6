"""The cross-key rules of params.yaml that JSON Schema cannot express, one module per config
section (see `miaflow.config` for why they live here and not beside the library code).

Each check computes its numbers with the library functions that draw them (e.g.
`miaflow.splits.pool_sizes`, `miaflow.llm.corpus.trained_sizes`), so a check and the job it
protects cannot disagree. Only `miaflow.config` imports this package; library code never does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from miaflow.validation import (
    audits,
    datasets,
    defenses,
    experiments,
    hparam_study,
    llm,
    queries,
    splits,
    statistics,
)


def problems(config: Mapping[str, Any]) -> list[str]:
    """Every cross-key problem of a config that already matches the schema, in report order."""
    return [
        *experiments.duplicate_problems(config),
        *audits.problems(config),
        *defenses.problems(config),
        *experiments.momentum_problems(config),
        *experiments.problems(config),
        *splits.problems(config),
        *queries.problems(config),
        *statistics.exact_test_problems(config),
        *experiments.need_problems(config),
        *hparam_study.problems(config),
        *llm.problems(config),
        *statistics.fpr_level_problems(config),
        *statistics.metric_problems(config),
        *datasets.problems(config),
    ]


def warnings(config: Mapping[str, Any]) -> list[str]:
    """What a valid config runs but cannot show, e.g. tests that cannot reject at stats.alpha."""
    return statistics.reach_warnings(config)
