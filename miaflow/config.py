"""Load and validate params.yaml: one source of truth for Snakemake (config) and DVC (params).

Validation runs when the Snakefile is parsed, so a bad value stops the run before any job starts,
with a message that names the offending key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from miaflow.models.kinds import CANARIES, KINDS, QUERY_OUTPUTS, REGRESSORS
from miaflow.workflow.plan import Experiment


DEFAULT_PROFILE = "default"


class ConfigError(ValueError):
    """params.yaml is invalid; the message names every offending key."""


def schema() -> dict[str, Any]:
    return json.loads(resources.files("miaflow").joinpath("schemas/params.schema.json").read_text())


def _key_path(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _schema_problems(config: Mapping[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema())
    problems = []
    for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        if error.validator in ("if", "allOf"):
            continue  # the failing `then` branch reports the precise key itself
        key = _key_path(error.absolute_path)
        if error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            key = ", ".join(_key_path([*error.absolute_path, name]) for name in extra)
            problems.append(f"{key}: unknown key")
        else:
            problems.append(f"{key}: {error.message}")
    return problems


def _architecture_problems(where: str, key: str, arch: str, dataset: str,
                           config: Mapping[str, Any]) -> list[str]:
    """Why architecture `arch` (an experiment's `key`) cannot train on `dataset`, if it cannot."""
    from miaflow.data import DATASETS, dataset_options

    architectures = config["architectures"]
    if arch not in architectures:
        return [f"{where}.{key}: {arch!r} is not a key of architectures "
                f"(known: {', '.join(sorted(architectures))})"]
    kind, modality = KINDS[architectures[arch]["kind"]], DATASETS[dataset].modality
    named = f"{where}: architecture {arch!r} ({kind.name})"
    if modality not in kind.modalities:
        return [f"{named} needs {' or '.join(sorted(kind.modalities))} data, but {dataset!r} is "
                f"{modality}"]
    if modality == "text":
        options = dataset_options(dataset, config.get("datasets", {}).get(dataset, {}))
        wanted = "text" if kind.raw_text else "embedding"
        if options["representation"] != wanted:
            return [f"{named} reads {dataset!r} as {wanted}: set "
                    f"datasets.{dataset}.representation to {wanted!r}"]
    return []


# Why a kind's models cannot produce an artifact of the queries stage (see Kind.builds).
CANNOT_BUILD = {
    QUERY_OUTPUTS: "query sets perturb numeric features, and this kind reads raw text",
    REGRESSORS: "there is no Query-qrm regressor for this kind",
    CANARIES: "canaries need the input gradients of a torch model",
}


def _attack_problems(where: str, experiment: Experiment, config: Mapping[str, Any]) -> list[str]:
    """Attacks an experiment would run whose artifacts its architecture kind cannot produce."""
    from miaflow.attacks import ATTACKS
    from miaflow.workflow.plan import attacks_for

    kind = KINDS[config["architectures"][experiment.arch]["kind"]]
    problems = []
    for attack in attacks_for(config, experiment):
        for artifact in sorted(set(ATTACKS[attack].reads) - kind.builds):
            problems.append(f"{where}: attack {attack!r} cannot run on architecture "
                            f"{experiment.arch!r} (kind {kind.name}): {CANNOT_BUILD[artifact]}. "
                            f"Remove it from attacks or add it to {where}.exclude_attacks")
    return problems


def _semantic_problems(config: Mapping[str, Any]) -> list[str]:
    """Cross-key rules JSON Schema cannot express (the config already matches the schema)."""
    from miaflow.attacks import ATTACKS
    from miaflow.evaluation.metrics import metric_names
    from miaflow.workflow.plan import experiments

    problems = []
    for i, (entry, experiment) in enumerate(zip(config["experiments"], experiments(config))):
        where = f"experiments[{i}]"
        arch_problems = [p for key in ("arch", "ref_arch") if key in entry
                         for p in _architecture_problems(where, key, entry[key], entry["dataset"],
                                                         config)]
        problems += arch_problems
        if not arch_problems:
            problems += _attack_problems(where, experiment, config)
    available = {"reference": config["splits"]["n_reference"],
                 "population": config["splits"]["n_population"]}
    for i, attack in enumerate(config["attacks"]):
        for need in sorted(ATTACKS[attack].needs):
            if not available[need]:
                problems.append(f"attacks[{i}]: {attack!r} needs {need} models, "
                                f"but splits.n_{need} is 0")
    problems += _study_problems(config["hparam_study"])
    problems += _llm_problems(config)
    known = metric_names(config["metrics"]["fpr_levels"])
    for i, metric in enumerate(config["stats"]["metrics"]):
        if metric not in known:
            problems.append(f"stats.metrics[{i}]: {metric!r} is not a metric of this run "
                            f"(known with metrics.fpr_levels: {', '.join(known)})")
    return problems


def _llm_problems(config: Mapping[str, Any]) -> list[str]:
    """Language-model experiments name known recipes, raw-text corpora, and a pretrained target
    only on a corpus whose labels are membership."""
    from miaflow.data import DATASETS, dataset_options
    from miaflow.workflow.plan import MEMBERSHIP_CORPORA, llm_experiments

    llm, problems = config["llm"], []
    for name, recipe in llm["models"].items():
        if recipe["kind"] == "scratch" and recipe["width"] % recipe["heads"]:
            problems.append(f"llm.models.{name}: width {recipe['width']} is not a multiple of "
                            f"heads {recipe['heads']}")
    seen = set()
    for i, experiment in enumerate(llm_experiments(config)):
        where, dataset = f"llm.experiments[{i}]", experiment["dataset"]
        for role in ("target", "reference"):
            if experiment[f"{role}_recipe"] is None:
                problems.append(f"{where}.{role}: {experiment[role]!r} is not in llm.models "
                                f"(known: {', '.join(sorted(llm['models'])) or 'none'})")
        if (dataset, experiment["label"]) in seen:
            problems.append(f"{where}: target {experiment['target']!r} appears twice on {dataset}")
        seen.add((dataset, experiment["label"]))
        if dataset not in DATASETS:
            continue
        options = dataset_options(dataset, config.get("datasets", {}).get(dataset, {}))
        if DATASETS[dataset].modality != "text" or options.get("representation", "text") != "text":
            problems.append(f"{where}.dataset: {dataset!r} is not raw text; language models need "
                            f"a text dataset with datasets.{dataset}.representation: text")
        target = experiment["target_recipe"]
        if target and target["kind"] == "pretrained" and dataset not in MEMBERSHIP_CORPORA:
            problems.append(f"{where}.target: a pretrained target's members are unknown on "
                            f"{dataset!r}; use a corpus whose labels are membership "
                            f"({', '.join(MEMBERSHIP_CORPORA)}) or a scratch/finetune recipe")
        if llm["pair_shards"] > experiment["n_eval"]:
            problems.append(f"llm.pair_shards: {llm['pair_shards']} is more than {where}'s n_eval "
                            f"{experiment['n_eval']} (one prefix row at least per shard)")
    return problems


def _study_problems(study: Mapping[str, Any]) -> list[str]:
    """The hyperparameter study's ranges are [low, high] and its budgets fit in the grid."""
    problems = []
    for key in ("batch_size", "lr", "clip_norm"):
        low, high = study["search"][key]
        if low > high:
            problems.append(f"hparam_study.search.{key}: low {low} is above high {high}")
    for i, (candidates, models) in enumerate(study["budgets"]):
        if max(candidates, models) > study["shadow_models"]:
            problems.append(f"hparam_study.budgets[{i}]: [{candidates}, {models}] exceeds the "
                            f"{study['shadow_models']} shadow models (C and N are at most M)")
    return problems


def _merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied: mappings merge key by key, anything else is replaced,
    and None removes the key (e.g. a local `path`, so that a profile downloads instead)."""
    merged = dict(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def resolve(params: Mapping[str, Any]) -> dict[str, Any]:
    """The effective config: the top-level settings with the selected profile's overrides.

    `profile` names an entry of `profiles` (or `default`: the top-level settings as they are);
    the effective config keeps `profile` and drops the `profiles` catalogue.
    """
    name = params.get("profile", DEFAULT_PROFILE)
    catalogue = params.get("profiles") or {}
    if name != DEFAULT_PROFILE and name not in catalogue:
        known = ", ".join([DEFAULT_PROFILE, *sorted(catalogue)])
        raise ConfigError(f"invalid params.yaml:\n  - profile: {name!r} is not a profile (known: {known})")
    base = {key: value for key, value in params.items() if key != "profiles"}
    return _merged(base, catalogue.get(name, {}))


def validate(params: Mapping[str, Any]) -> dict[str, Any]:
    """The effective config (`resolve`) if valid; ConfigError naming every bad key otherwise.

    With a profile other than `default`, the problems are those of the effective config, and the
    message says which profile was applied.
    """
    problems = _schema_problems(params)  # the top-level settings and the catalogue's shape
    config = dict(params)
    if not problems:
        config = resolve(params)
        problems = _schema_problems(config) or _semantic_problems(config)
    if problems:
        profile = config.get("profile", DEFAULT_PROFILE)
        where = "params.yaml" if profile == DEFAULT_PROFILE else f"params.yaml (profile {profile!r})"
        raise ConfigError(f"invalid {where}:\n" + "\n".join(f"  - {p}" for p in problems))
    return config


def load(path: str | Path = "params.yaml") -> dict[str, Any]:
    with open(path) as handle:
        return validate(yaml.safe_load(handle))
