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
    privacy,
    queries,
    splits,
    statistics,
)

# Every check, in report order.
CHECKS = (
    experiments.duplicate_problems,
    audits.problems,
    defenses.problems,
    experiments.momentum_problems,
    experiments.problems,
    splits.problems,
    queries.problems,
    statistics.exact_test_problems,
    experiments.need_problems,
    hparam_study.problems,
    llm.problems,
    privacy.problems,
    statistics.fpr_level_problems,
    statistics.metric_problems,
    datasets.problems,
)
# The checks that read files beside the config (the audits' files and folder, the datasets' local
# copies). The others read the config alone: `miaflow.config` runs them once per config and
# package code (tests/unit/test_parse_time.py checks that they open and stat no file).
READING_FILES = (audits.problems, datasets.problems)


def problems(config: Mapping[str, Any]) -> list[str]:
    """Every cross-key problem of a config that already matches the schema, in report order."""
    return [problem for check in CHECKS for problem in check(config)]


def file_problems(config: Mapping[str, Any]) -> list[str]:
    """The problems of the checks that read files (READING_FILES), in report order."""
    return [problem for check in READING_FILES for problem in check(config)]


def warnings(config: Mapping[str, Any]) -> list[str]:
    """What a valid config runs but cannot show, e.g. tests that cannot reject at stats.alpha."""
    return statistics.reach_warnings(config)
