"""Sections `experiments`, `architectures` and `attacks`: experiments that duplicate another in
effect (`miaflow.plan.experiments` names them), architectures that cannot train on their
dataset (`miaflow.models.kinds`), and attacks whose inputs the models cannot produce
(`Kind.builds` against each attack's `reads`) or whose models the splits do not train."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from miaflow.defenses import defense_kind
from miaflow.models.kinds import CANARIES, KINDS
from miaflow.plan import Experiment

# Why a kind's models cannot produce an artifact of the queries stage (see Kind.builds).
CANNOT_BUILD = {
    CANARIES: "canaries need the input gradients of a torch model",
}


def duplicate_problems(config: Mapping[str, Any]) -> list[str]:
    """Experiments that report under the name of an earlier one: each of their rows would be in
    metrics.parquet twice, halving the reported standard deviations."""
    from miaflow.plan import experiments

    entries, first, problems = config["experiments"], {}, []
    for i, experiment in enumerate(experiments(config)):
        j = first.setdefault(experiment.name, i)
        if j != i:
            same_arch = any(entries[k].get("ref_arch") == entries[k]["arch"] for k in (i, j))
            reason = "ref_arch equals arch" if same_arch else "only exclude_attacks differs"
            problems.append(
                f"experiments[{i}]: duplicates experiments[{j}] in effect ({reason}; "
                f"both report {experiment.name})"
            )
    return problems


def momentum_problems(config: Mapping[str, Any]) -> list[str]:
    """`momentum` is SGD's; with Adam it would be silently ignored."""
    return [
        f"architectures.{name}.momentum: only optimizer sgd has momentum, {name!r} uses "
        f"{arch.get('optimizer')!r}"
        for name, arch in config["architectures"].items()
        if "momentum" in arch and arch.get("optimizer") != "sgd"
    ]


def problems(config: Mapping[str, Any]) -> list[str]:
    """Per experiment: architectures that cannot train on its dataset, else attacks it cannot
    run."""
    from miaflow.plan import experiments

    problems = []
    for i, (entry, experiment) in enumerate(zip(config["experiments"], experiments(config))):
        where = f"experiments[{i}]"
        arch_problems = [
            p
            for key in ("arch", "ref_arch")
            if key in entry
            for p in _architecture_problems(where, key, entry[key], entry["dataset"], config)
        ]
        problems += arch_problems
        if not arch_problems:
            problems += _attack_problems(where, experiment, config)
    return problems


def _architecture_problems(
    where: str, key: str, arch: str, dataset: str, config: Mapping[str, Any]
) -> list[str]:
    """Why architecture `arch` (an experiment's `key`) cannot train on `dataset`, if it cannot."""
    from miaflow.data import DATASETS, dataset_options

    architectures = config["architectures"]
    if arch not in architectures:
        return [
            f"{where}.{key}: {arch!r} is not a key of architectures "
            f"(known: {', '.join(sorted(architectures))})"
        ]
    kind, modality = KINDS[architectures[arch]["kind"]], DATASETS[dataset].modality
    named = f"{where}: architecture {arch!r} ({kind.name})"
    if modality not in kind.modalities:
        return [
            f"{named} needs {' or '.join(sorted(kind.modalities))} data, but {dataset!r} is "
            f"{modality}"
        ]
    if modality == "text":
        options = dataset_options(dataset, config.get("datasets", {}).get(dataset, {}))
        wanted = "text" if kind.raw_text else "embedding"
        if options.get("representation", "text") != wanted:  # some corpora are only raw text
            return [
                f"{named} reads {dataset!r} as {wanted}: set "
                f"datasets.{dataset}.representation to {wanted!r}"
            ]
    return []


def _attack_problems(where: str, experiment: Experiment, config: Mapping[str, Any]) -> list[str]:
    """Attacks an experiment would run whose artifacts its architecture kind cannot produce, or
    that would query a MemGuard-defended model around its defense."""
    from miaflow.attacks.registry import ATTACKS
    from miaflow.plan import attacks_for

    arch = config["architectures"][experiment.arch]
    kind = KINDS[arch["kind"]]
    problems = []
    for attack in attacks_for(config, experiment):
        if defense_kind(arch) == "memguard" and ATTACKS[attack].reads:
            problems.append(
                f"{where}: attack {attack!r} queries the model itself, around the "
                f"MemGuard defense of {experiment.arch!r} (it perturbs the outputs "
                f"the signals cache). Remove it from attacks or add it to "
                f"{where}.exclude_attacks"
            )
        for artifact in sorted(set(ATTACKS[attack].reads) - kind.builds):
            problems.append(
                f"{where}: attack {attack!r} cannot run on architecture "
                f"{experiment.arch!r} (kind {kind.name}): {CANNOT_BUILD[artifact]}. "
                f"Remove it from attacks or add it to {where}.exclude_attacks"
            )
    return problems


def need_problems(config: Mapping[str, Any]) -> list[str]:
    """Attacks that need reference or population models the splits do not train."""
    from miaflow.attacks.registry import ATTACKS

    available = {
        "reference": config["splits"]["n_reference"],
        "population": config["splits"]["n_population"],
    }
    return [
        f"attacks[{i}]: {attack!r} needs {need} models, but splits.n_{need} is 0"
        for i, attack in enumerate(config["attacks"])
        for need in sorted(ATTACKS[attack].needs)
        if not available[need]
    ]
