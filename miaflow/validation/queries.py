"""Section `attack_options` of the query attacks: query counts the query set cannot serve, from
the counts the queries stage generates (`miaflow.plan.generated_queries`) and the
rotation angles it draws from (`miaflow.queries.sets.ANGLE_CANDIDATES`), each option as it runs
(the defaults of `miaflow.attacks.options` with the config's overrides)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def problems(config: Mapping[str, Any]) -> list[str]:
    """Query counts the query set cannot serve: more queries used than generated (the attack would
    silently use fewer), more image augmentations than distinct rotation angles, and more initial
    HopSkipJump gradient samples than its maximum (which would silently cap them)."""
    from miaflow.attacks.registry import attack_options
    from miaflow.plan import (
        QUERY_COUNT_ATTACKS,
        attacks_for,
        experiments,
        generated_queries,
        modality,
        query_count_option,
    )
    from miaflow.queries.sets import ANGLE_CANDIDATES

    options, problems = config.get("attack_options", {}), []
    for experiment in experiments(config):
        data = modality(experiment.dataset)
        for attack in attacks_for(config, experiment):
            if attack not in QUERY_COUNT_ATTACKS:
                continue
            generated = generated_queries(config, attack, data)
            used = attack_options(attack, options).queries_used
            source = f"attack_options.{query_count_option(attack, data)}.n_queries"
            if (
                used is not None
                and used > generated
                and not (attack == "query-adv" and data == "image")
            ):
                problems.append(
                    f"attack_options.{attack}.queries_used: {used} is more than the "
                    f"{generated} queries generated for {data} data ({source})"
                )
            if attack == "query-augment" and data == "image" and generated > len(ANGLE_CANDIDATES):
                problems.append(
                    f"{source}: {generated} is more than the {len(ANGLE_CANDIDATES)} "
                    f"distinct rotation angles of image augmentations"
                )
    budget = attack_options("query-adv", options)
    if budget.init_eval > budget.max_eval:
        problems.append(
            f"attack_options.query-adv.init_eval: {budget.init_eval} is more than "
            f"attack_options.query-adv.max_eval {budget.max_eval}, which would cap it"
        )
    return list(dict.fromkeys(problems))
