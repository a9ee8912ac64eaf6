"""Section `privacy`: the privacy audit's experiments fit their datasets, keep DP's sample rate
whatever the canaries' bits (`miaflow.privacy.rates.batch_count_kept`), score with attacks
that need the target alone, and name each target once; audits that claim an (ε, δ) give the
claim and its canaries together."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from miaflow.validation.datasets import counted, size

# What a privacy audit's attack may not need: the canaries have the target's outputs only.
ATTACK_LIMITS = ("needs", "reads")
CLAIM_KEYS = ("epsilon", "delta", "canaries")  # an audit's claim, all of them or none


def problems(config: Mapping[str, Any]) -> list[str]:
    """Every problem of the privacy section and of the audits' claims."""
    section = config.get("privacy")
    found = _claim_problems(config)
    if section is None:
        return found
    found += _attack_problems(section["attacks"])
    found += _head_problems(config, section)
    found += _model_problems(config, section)
    return found + _name_problems(config)


def _attack_problems(attacks: list[str]) -> list[str]:
    """Attacks that read more than the target's outputs on the canaries."""
    from miaflow.attacks.registry import ATTACKS

    found = []
    for i, name in enumerate(attacks):
        attack = ATTACKS[name]
        lacking = sorted(attack.needs) + sorted(attack.reads)
        if lacking or attack.subset:
            what = ", ".join(lacking) if lacking else "scores only some samples"
            found.append(
                f"privacy.attacks[{i}]: {name!r} needs {what}; a canary is scored on the target "
                "alone: choose an attack without reference or population models or query "
                "artifacts (e.g. metric-loss)"
            )
    return found


def _pool_problem(
    where: str, config: Mapping[str, Any], entry: Mapping[str, Any], drawn: int
) -> str | None:
    """The base set and the canaries drawn from the dataset's other samples (and, with `drawn`
    held-out samples more) must fit the dataset."""
    known = size(config, entry["dataset"])
    needed = entry["train_size"] + drawn
    if known is not None and needed > known.n_samples:
        return (
            f"{where}: train_size {entry['train_size']} and {drawn} samples for canaries (and "
            f"held-out samples) need {needed} samples, more than "
            f"{counted(entry['dataset'], known.n_samples)}"
        )
    return None


def _modality_problem(where: str, config: Mapping[str, Any], dataset: str) -> str | None:
    from miaflow.data import DATASETS, dataset_options

    options = dataset_options(dataset, config.get("datasets", {}).get(dataset, {}))
    if DATASETS[dataset].modality == "text" and options.get("representation", "text") == "text":
        return (
            f"{where}.dataset: canaries are inputs of fixed features, but {dataset!r} is raw text: "
            f"set datasets.{dataset}.representation to 'embedding'"
        )
    return None


def _head_problems(config: Mapping[str, Any], section: Mapping[str, Any]) -> list[str]:
    """A head audit per dataset, its canaries within the dataset, its DP batch count the same
    with and without every canary, claims that make sense."""
    from miaflow.privacy.rates import batch_count_kept

    found, seen = [], {}
    for i, entry in enumerate(section["heads"]):
        where = f"privacy.heads[{i}]"
        j = seen.setdefault(entry["dataset"], i)
        if j != i:
            found.append(f"{where}.dataset: privacy.heads[{j}] audits {entry['dataset']!r} already")
        counts = entry["canaries"]
        one_run = sum(counts.values())
        if one_run < 2:
            found.append(f"{where}.canaries: one run needs 2 canaries or more, got {one_run}")
        drawn = counts.get("natural", 0) + counts.get("mislabelled", 0)
        drawn = max(drawn, *(int(k in ("natural", "mislabelled")) for k in entry["run_kinds"]), 0)
        found += [p for p in [_pool_problem(where, config, entry, drawn)] if p]
        found += [p for p in [_modality_problem(where, config, entry["dataset"])] if p]
        private = [t for t in entry["targets"] if not math.isinf(t["epsilon"])]
        batch = entry["batch_size"]
        for extra, what in (
            (one_run, f"the canaries of one run ({one_run}, {where}.canaries)"),
            (1, "a run's canary (1)"),
        ):
            if private and extra and not batch_count_kept(entry["train_size"], extra, batch):
                found.append(
                    f"{where}.batch_size: {batch} cuts {where}.train_size "
                    f"{entry['train_size']} and {what} into different numbers of batches, so a "
                    "canary would change DP-Adam's sample rate; choose a batch size (or "
                    "train_size) that both fill the same number of batches"
                )
        for k, target in enumerate(entry["targets"]):
            if "noise_scale" in target and math.isinf(target["epsilon"]):
                found.append(
                    f"{where}.targets[{k}].noise_scale: a non-private target (epsilon .inf) "
                    "trains without noise; remove noise_scale"
                )
    return found


def _model_problems(config: Mapping[str, Any], section: Mapping[str, Any]) -> list[str]:
    """A trained model's recipe exists and takes canaries: its pool holds them and held-out
    samples; under DP-SGD its batch count is the same with and without every canary."""
    from miaflow.defenses import defense_kind
    from miaflow.models.kinds import KINDS
    from miaflow.privacy.rates import batch_count_kept

    found = []
    for i, entry in enumerate(section["models"]):
        where = f"privacy.models[{i}]"
        arch = config["architectures"].get(entry["arch"])
        if arch is None:
            found.append(f"{where}.arch: {entry['arch']!r} is not a key of architectures")
            continue
        if KINDS[arch["kind"]].raw_text:
            found.append(f"{where}.arch: {entry['arch']!r} reads raw text; canaries are features")
        counts = entry["canaries"]
        total = sum(counts.values())
        if total < 2:
            found.append(f"{where}.canaries: one run needs 2 canaries or more, got {total}")
        drawn = counts.get("natural", 0) + counts.get("mislabelled", 0) + 1  # 1 held out
        found += [p for p in [_pool_problem(where, config, entry, drawn)] if p]
        found += [p for p in [_modality_problem(where, config, entry["dataset"])] if p]
        if defense_kind(arch) == "dp_sgd" and not batch_count_kept(
            entry["train_size"], total, arch["batch_size"]
        ):
            found.append(
                f"{where}.train_size: architectures.{entry['arch']}.batch_size "
                f"{arch['batch_size']} cuts {where}.train_size {entry['train_size']} and its "
                f"{total} canaries ({where}.canaries) into different numbers of batches, so a "
                "canary would change DP-SGD's sample rate; choose train_size (or the batch "
                "size) so that both fill the same number of batches"
            )
    return found


def _name_problems(config: Mapping[str, Any]) -> list[str]:
    """Every audited target has one name per dataset in the table (target_model), and every
    audit experiment one label per dataset in results/privacy/."""
    from miaflow.plan import privacy_audits, privacy_heads, privacy_models

    found, labels, names = [], {}, {}
    experiments = [
        *((f"privacy.heads[{i}]", e) for i, e in enumerate(privacy_heads(config))),
        *((f"privacy.models[{i}]", e) for i, e in enumerate(privacy_models(config))),
        *((f"audits ({a['name']})", a) for a in privacy_audits(config)),
    ]
    kinds = {}  # a label names one kind of audit experiment, whatever the dataset (its rule)
    for where, entry in experiments:
        other = labels.setdefault((entry["dataset"], entry["label"]), where)
        if other != where:
            found.append(f"{where}: {other} audits {entry['dataset']}/{entry['label']} already")
        kind = where.split("[")[0].split(" ")[0]
        first = kinds.setdefault(entry["label"], (kind, where))
        if first[0] != kind:
            found.append(
                f"{where}: {entry['label']!r} names an experiment of {first[1]} too; rename "
                "the audit (or the architecture)"
            )
        targets = [t["name"] for t in entry.get("targets", [])] or [entry["label"]]
        for target in targets:
            other = names.get((entry["dataset"], target))
            names[entry["dataset"], target] = where
            if other is not None:
                found.append(
                    f"{where}: the target {target!r} of {entry['dataset']!r} is named by "
                    f"{other} too; give it another name"
                )
    return found


def _claim_problems(config: Mapping[str, Any]) -> list[str]:
    """An audit that claims an (ε, δ) gives epsilon, delta and its canaries together."""
    found = []
    for i, audit in enumerate(config.get("audits", [])):
        given = [key for key in CLAIM_KEYS if key in audit]
        if given and len(given) != len(CLAIM_KEYS):
            missing = [key for key in CLAIM_KEYS if key not in audit]
            found.append(
                f"audits[{i}]: {', '.join(given)} without {', '.join(missing)}: a privacy "
                "audit of the model's claim needs epsilon, delta and canaries"
            )
        elif given and "privacy" not in config:
            found.append(
                f"audits[{i}].canaries: the privacy audit scores them with privacy.attacks at "
                "privacy.confidence: add the section privacy (params.yaml has one)"
            )
    return found
