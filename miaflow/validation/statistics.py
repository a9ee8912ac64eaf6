"""Sections `metrics` and `stats`, and the repeat counts the statistical tests run over: FPR
levels named as metrics by `miaflow.evaluation.metrics`, and exact permutation tests that
`miaflow.evaluation.stats.sign_flips` would have to enumerate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Most repeats a paired permutation test may enumerate exactly: it takes all 2^R sign flips for
# every pair of attacks (miaflow.evaluation.stats.sign_flips), "fine up to R = 16 or so".
MAX_EXACT_TEST_REPEATS = 16


def exact_test_problems(config: Mapping[str, Any]) -> list[str]:
    """Repeat counts whose exact paired permutation tests would not finish: the tests between
    attacks (over splits.repeats or llm.repeats) and the study's TD-vs-ED tests over its runs
    unless it samples sign flips (permutation_resamples)."""
    counts = [("splits.repeats", config["splits"]["repeats"], ""),
              ("llm.repeats", config["llm"]["repeats"], "")]
    if config["hparam_study"]["permutation_resamples"] is None:
        counts.append(("hparam_study.runs", config["hparam_study"]["runs"],
                       " (or set hparam_study.permutation_resamples to sample them)"))
    return [f"{key}: {count} is more than {MAX_EXACT_TEST_REPEATS}: the exact paired permutation "
            f"tests would enumerate all 2^{count} sign flips{alternative}"
            for key, count, alternative in counts if count > MAX_EXACT_TEST_REPEATS]


def fpr_level_problems(config: Mapping[str, Any]) -> list[str]:
    """FPR levels that are distinct numbers but one metric name (e.g. 0.01 and 0.0100000001):
    their rows would report as the same metric."""
    from miaflow.evaluation.metrics import tpr_metric_name

    levels = [*((f"metrics.fpr_levels[{i}]", level)
                for i, level in enumerate(config["metrics"]["fpr_levels"])),
              *((f"llm.fpr_levels[{i}]", level)
                for i, level in enumerate(config["llm"]["fpr_levels"]))]
    first: dict[str, tuple[str, float]] = {}
    problems = []
    for key, level in levels:
        other, value = first.setdefault(tpr_metric_name(level), (key, level))
        if value != level:
            problems.append(f"{key}: {level} duplicates {other} ({value}) in effect (both report "
                            f"{tpr_metric_name(level)})")
    return problems


def metric_problems(config: Mapping[str, Any]) -> list[str]:
    """Metrics the statistical tests compare that this run does not compute."""
    from miaflow.evaluation.metrics import metric_names

    known = metric_names(config["metrics"]["fpr_levels"])
    return [f"stats.metrics[{i}]: {metric!r} is not a metric of this run "
            f"(known with metrics.fpr_levels: {', '.join(known)})"
            for i, metric in enumerate(config["stats"]["metrics"]) if metric not in known]
