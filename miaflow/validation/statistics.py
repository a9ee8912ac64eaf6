"""Sections `metrics` and `stats`, and the repeat counts the statistical tests run over: FPR
levels named as metrics by `miaflow.evaluation.metrics`, exact permutation tests that
`miaflow.evaluation.stats.sign_flips` would have to enumerate, and (as warnings) families of
comparisons whose permutation test cannot reject."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Most runs the study's exact paired permutation test may enumerate: it takes all 2^R sign flips
# for every cell (miaflow.evaluation.stats.sign_flips), "fine up to R = 16 or so". The tests
# between attacks permute samples instead, so splits.repeats and llm.repeats have no such bound.
MAX_EXACT_TEST_REPEATS = 16


def exact_test_problems(config: Mapping[str, Any]) -> list[str]:
    """Run counts whose exact paired permutation tests would not finish: the study's TD-vs-ED
    tests over its runs unless it samples sign flips (permutation_resamples)."""
    runs = config["hparam_study"]["runs"]
    sampled = config["hparam_study"]["permutation_resamples"] is not None
    if sampled or runs <= MAX_EXACT_TEST_REPEATS:
        return []
    return [
        f"hparam_study.runs: {runs} is more than {MAX_EXACT_TEST_REPEATS}: the exact paired "
        f"permutation tests would enumerate all 2^{runs} sign flips (or set "
        "hparam_study.permutation_resamples to sample them)"
    ]


def fpr_level_problems(config: Mapping[str, Any]) -> list[str]:
    """FPR levels that are distinct numbers but one metric name (e.g. 0.01 and 0.0100000001):
    their rows would report as the same metric."""
    from miaflow.evaluation.metrics import tpr_metric_name

    levels = [
        *(
            (f"metrics.fpr_levels[{i}]", level)
            for i, level in enumerate(config["metrics"]["fpr_levels"])
        ),
        *((f"llm.fpr_levels[{i}]", level) for i, level in enumerate(config["llm"]["fpr_levels"])),
    ]
    first: dict[str, tuple[str, float]] = {}
    problems = []
    for key, level in levels:
        other, value = first.setdefault(tpr_metric_name(level), (key, level))
        if value != level:
            problems.append(
                f"{key}: {level} duplicates {other} ({value}) in effect (both report "
                f"{tpr_metric_name(level)})"
            )
    return problems


def metric_problems(config: Mapping[str, Any]) -> list[str]:
    """Metrics the statistical tests compare that this run does not compute."""
    from miaflow.evaluation.metrics import metric_names

    known = metric_names(config["metrics"]["fpr_levels"])
    return [
        f"stats.metrics[{i}]: {metric!r} is not a metric of this run "
        f"(known with metrics.fpr_levels: {', '.join(known)})"
        for i, metric in enumerate(config["stats"]["metrics"])
        if metric not in known
    ]


def reach_warnings(config: Mapping[str, Any]) -> list[str]:
    """Families of attack comparisons (miaflow.evaluation.stats.comparisons) whose sample
    permutation test cannot reject at stats.alpha: with B = stats.n_resamples its p-value is at
    least 1/(B + 1), and Benjamini–Yekutieli multiplies that by c(m) >= 1 for a family of m.
    A warning, not an error: the t-test and DeLong's test of the same rows still can reject."""
    import math

    from miaflow.attacks.registry import ATTACKS
    from miaflow.evaluation.multiplicity import by_factor, min_permutation_p
    from miaflow.plan import attacks_for, experiments, llm_scored_experiments

    alpha, resamples = config["stats"]["alpha"], config["stats"]["n_resamples"]
    attacks = {f"{e.dataset}/{e.label}": attacks_for(config, e) for e in experiments(config)}
    attacks.update(
        {
            f"{e['dataset']}/{e['label']}": config["llm"]["attacks"]
            for e in llm_scored_experiments(config)
        }
    )
    messages = []
    for name, chosen in attacks.items():
        families = len({ATTACKS[a].family for a in chosen})
        for question, size in (
            ("vs-best", len(chosen) - 1),
            ("family-best", math.comb(families, 2)),
        ):
            reach = min_permutation_p(resamples, size)
            if size and reach > alpha:
                needed = math.ceil(by_factor(size) / alpha - 1)
                messages.append(
                    f"stats.n_resamples: {resamples} resamples cannot reject at stats.alpha = "
                    f"{alpha:g} in the {question} family of {name} ({size} comparisons): its "
                    f"permutation p-values are at least {reach:.3g} after Benjamini–Yekutieli; "
                    f"{needed} or more can"
                )
    return messages
