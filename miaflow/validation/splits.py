"""Section `splits`: partitions that leave some model too few samples, measured with the pool
sizes that `miaflow.splits.make_splits` draws (`miaflow.splits.pool_sizes`), and shadow models
that cannot exist."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from miaflow.validation.datasets import counted, size

if TYPE_CHECKING:
    from miaflow.data import DatasetSize

# Fewest samples that any model's training set, and its held-out set, may expect. Below it the
# Bernoulli draws can leave a set empty (training then crashes) or too small for its metrics to
# mean anything; at 20 the chance of an empty set is below e^-20.
MIN_EXPECTED_SAMPLES = 20
# Fewest samples of the rarest class that those sets may expect: with fewer, some model of an
# experiment is likely never to see the class (e^-5, under 1%, per model and class at 5) and
# gives it meaningless outputs (log-probability -inf for logistic regression).
MIN_EXPECTED_PER_CLASS = 5


def _split_key(config: Mapping[str, Any], dataset: str, key: str) -> str:
    """Where a partition key of `dataset` is set: its splits.datasets entry, or splits."""
    own = config["splits"].get("datasets", {}).get(dataset, {})
    return f"splits.datasets.{dataset}.{key}" if key in own else f"splits.{key}"


def problems(config: Mapping[str, Any]) -> list[str]:
    """Partitions that leave some model too few samples to train on or to be evaluated on, for
    every dataset whose models train and whose size the registry knows (an empty pool used to
    crash training), and shadow models that cannot exist."""
    from miaflow.plan import experiments, split_settings
    from miaflow.splits import pool_sizes

    trained = list(dict.fromkeys(e.dataset for e in experiments(config)))
    found = [
        f"splits.datasets.{dataset}: no experiment trains models on {dataset!r}"
        for dataset in config["splits"].get("datasets", {})
        if dataset not in trained
    ]
    for dataset in trained:
        settings = split_settings(config, dataset)
        key = partial(_split_key, config, dataset)
        found += _shadow_problems(config, dataset, settings, key)
        dataset_size = size(config, dataset)
        if dataset_size is None:
            continue
        n_samples = dataset_size.n_samples
        n_target, members, n_auxiliary = pool_sizes(
            n_samples,
            target_ratio=settings["target_ratio"],
            target_size=settings.get("target_size"),
            member_ratio=settings["member_ratio"],
            members=settings.get("members"),
            auxiliary_size=settings.get("auxiliary_size"),
        )
        pool = "target_size" if settings.get("target_size") else "target_ratio"
        member = "members" if settings.get("members") else "member_ratio"
        if n_target >= n_samples:
            found.append(
                f"{key(pool)}: {settings[pool]} asks for a target pool of {n_target}, "
                f"which leaves no auxiliary pool among {counted(dataset, n_samples)}"
            )
        elif n_target + n_auxiliary > n_samples:
            sized = (
                f" and {key('auxiliary_size')}: {n_auxiliary}"
                if settings.get("auxiliary_size")
                else ""
            )
            found.append(
                f"{key(pool)}: {settings[pool]}{sized} ask for a target pool of "
                f"{n_target} and an auxiliary pool of {n_auxiliary}, more than "
                f"{counted(dataset, n_samples)}"
            )
        elif min(n_target, n_auxiliary) < 2 * MIN_EXPECTED_SAMPLES:
            found.append(
                f"{key(pool)}: {settings[pool]} splits "
                f"{counted(dataset, n_samples)} into a target pool of {n_target} "
                f"and an auxiliary pool of {n_auxiliary}; each needs at least "
                f"{2 * MIN_EXPECTED_SAMPLES}, as reference and population models "
                f"train on halves of them"
            )
        elif min(members, n_target - members) < MIN_EXPECTED_SAMPLES:
            found.append(
                f"{key(member)}: {settings[member]} gives each target model about "
                f"{members:.0f} members and {n_target - members:.0f} held-out samples "
                f"of the {n_target} in the target pool of {dataset!r}; each needs at "
                f"least {MIN_EXPECTED_SAMPLES}"
            )
        else:
            found += _class_problems(
                dataset,
                dataset_size,
                (n_target, members, n_auxiliary),
                {key(name): settings[name] for name in (pool, member)},
            )
    return found


def _shadow_problems(
    config: Mapping[str, Any], dataset: str, settings: Mapping[str, Any], key: Callable[[str], str]
) -> list[str]:
    """A shadow on the auxiliary pool needs population models, and query-augment, which trains
    on reference-0's query outputs, cannot follow it there."""
    from miaflow.plan import attacks_for, experiments

    if settings.get("shadow", "target") != "auxiliary":
        return []
    if config["splits"]["n_population"] < 2:
        return [
            f"{key('shadow')}: auxiliary makes population-0 the shadow model of {dataset!r}, "
            f"but splits.n_population is {config['splits']['n_population']}"
        ]
    if not any(
        "query-augment" in attacks_for(config, e)
        for e in experiments(config)
        if e.dataset == dataset
    ):
        return []
    return [
        f"{key('shadow')}: 'query-augment' trains on the query outputs of reference-0 on the "
        f"target pool and cannot use the auxiliary shadow of {dataset!r}; leave it out "
        f"(exclude_attacks) or keep shadow: target"
    ]


def _class_problems(
    dataset: str,
    dataset_size: DatasetSize,
    sizes: tuple[int, float, int],
    partition: Mapping[str, Any],
) -> list[str]:
    """Partitions under which some model's training or held-out set would expect fewer than
    MIN_EXPECTED_PER_CLASS samples of the dataset's rarest class (where the registry knows it).
    `partition`: the pool's and the members' settings in effect, by key path."""
    smallest, n_samples = dataset_size.smallest_class, dataset_size.n_samples
    if smallest is None:
        return []
    n_target, members, n_auxiliary = sizes
    target_share = min(members, n_target - members) / n_samples  # targets (and references)
    auxiliary_share = n_auxiliary / 2 / n_samples  # population models
    share = min(target_share, auxiliary_share)
    if smallest * share >= MIN_EXPECTED_PER_CLASS:
        return []
    (pool_key, pool_value), (member_key, member_value) = partition.items()
    on_targets = target_share <= auxiliary_share and members != n_target / 2
    key, value = (member_key, member_value) if on_targets else (pool_key, pool_value)
    setting = " and ".join(f"{k} {v}" for k, v in partition.items())
    return [
        f"{key}: {value} gives some model's training or held-out set about "
        f"{smallest * share:.1f} samples of the rarest class of {dataset!r} "
        f"({smallest} in all, with {setting}); each needs at least "
        f"{MIN_EXPECTED_PER_CLASS}, or models miss that class"
    ]
