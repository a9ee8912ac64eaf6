"""Section `hparam_study`: search ranges, budgets and privacy budgets, and settings that
duplicate another in effect or whose dataset or backbones cannot serve them, measured with the
samples per class the study's universes draw (`miaflow.hparams.grid.drawn_per_class`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from miaflow.validation.datasets import counted, size

# Finite privacy budgets ε the hyperparameter study accepts.
EPSILON_RANGE = (0.001, 1000.0)


def problems(config: Mapping[str, Any]) -> list[str]:
    """The hyperparameter study's ranges are [low, high], its budgets fit in the grid, its
    privacy budgets are in range, and its settings are distinct and fit their datasets."""
    study, problems = config["hparam_study"], []
    for key in ("batch_size", "lr", "clip_norm"):
        low, high = study["search"][key]
        if low > high:
            problems.append(f"hparam_study.search.{key}: low {low} is above high {high}")
    for i, (candidates, models) in enumerate(study["budgets"]):
        if max(candidates, models) > study["shadow_models"]:
            problems.append(
                f"hparam_study.budgets[{i}]: [{candidates}, {models}] exceeds the "
                f"{study['shadow_models']} shadow models of hparam_study.shadow_models "
                "(C and N are at most M)"
            )
    return problems + _epsilon_problems(study) + _setting_problems(config)


def _epsilon_problems(study: Mapping[str, Any]) -> list[str]:
    """Finite privacy budgets outside the range the study is made for: paths name ε in plain
    decimals (`plan.epsilon_tag`), and DP accounting far outside it is not what the study tests."""
    low, high = EPSILON_RANGE
    return [
        f"hparam_study.epsilons[{i}]: {epsilon} is outside [{low}, {high}]; use .inf for "
        f"non-private training"
        for i, epsilon in enumerate(study["epsilons"])
        if not math.isinf(epsilon) and not low <= epsilon <= high
    ]


def _setting_problems(config: Mapping[str, Any]) -> list[str]:
    """Study settings that duplicate another in effect (the same name in paths and tables) or
    that their dataset cannot serve: features the linear heads can read, and 2·shots samples of
    every class for each of the two disjoint universes."""
    from miaflow.data import DATASETS, dataset_options
    from miaflow.plan import hparam_settings

    problems, first = [], {}
    for i, setting in enumerate(hparam_settings(config)):
        where, dataset = f"hparam_study.settings[{i}]", setting["dataset"]
        j = first.setdefault(setting["name"], i)
        if j != i:
            problems.append(
                f"{where}: duplicates hparam_study.settings[{j}] in effect (both are "
                f"setting {setting['name']})"
            )
        modality = DATASETS[dataset].modality
        options = dataset_options(dataset, config.get("datasets", {}).get(dataset, {}))
        if setting.get("backbone") and modality != "image":
            problems.append(
                f"{where}.backbone: {setting['backbone']!r} embeds images, but "
                f"{dataset!r} is {modality}"
            )
        elif modality == "text" and options.get("representation", "text") == "text":
            problems.append(
                f"{where}.dataset: the study's linear heads need features, but "
                f"{dataset!r} is raw text: set datasets.{dataset}.representation to "
                f"'embedding'"
            )
        problems += _shadow_problems(where, setting, modality)
        problems += _cnn_problems(where, setting, modality)
        problems += _shot_problems(where, setting["shots"], dataset, config)
    return problems


def _shadow_problems(where: str, setting: Mapping[str, Any], modality: str) -> list[str]:
    """The black-box setting attacks targets on `backbone` features with shadows on other
    features of the same images: it needs a backbone, an image dataset and a different shadow."""
    shadow = setting.get("shadow_backbone")
    if not shadow:
        return []
    if not setting.get("backbone"):
        return [f"{where}.shadow_backbone: {shadow!r} needs the targets' backbone too"]
    if modality != "image":
        return [f"{where}.shadow_backbone: {shadow!r} embeds images, but the dataset is {modality}"]
    if shadow == setting["backbone"]:
        return [
            f"{where}.shadow_backbone: {shadow!r} is the targets' backbone; leave it out for "
            "the white-box setting"
        ]
    return []


def _cnn_problems(where: str, setting: Mapping[str, Any], modality: str) -> list[str]:
    """The CNN trains from scratch on the images themselves: an image dataset, and no backbone,
    principal components or shadow backbone."""
    if setting.get("model") != "cnn":
        return []
    if modality != "image":
        return [f"{where}.model: 'cnn' trains on images, but the dataset is {modality}"]
    return [
        f"{where}.{key}: the CNN trains from scratch on the images; leave {key} out"
        for key in ("backbone", "components", "shadow_backbone")
        if setting.get(key)
    ]


def _shot_problems(where: str, shots: int, dataset: str, config: Mapping[str, Any]) -> list[str]:
    """Whether every class of `dataset` holds the samples that a study setting's universe and its
    disjoint external universe draw (`miaflow.hparams.grid.few_shot_universes`)."""
    from miaflow.hparams.grid import drawn_per_class

    dataset_size, per_class = size(config, dataset), drawn_per_class(shots)
    if dataset_size is None:
        return []
    smallest, n_classes = dataset_size.smallest_class, dataset_size.n_classes
    if smallest is not None and smallest < per_class:
        return [
            f"{where}.shots: {shots} needs {per_class} samples of every class of {dataset!r} "
            f"(two disjoint universes of 2·shots), but its smallest class has {smallest}"
        ]
    if per_class * n_classes > dataset_size.n_samples:
        return [
            f"{where}.shots: {shots} needs {per_class} samples of each of the "
            f"{n_classes} classes of {dataset!r} (two disjoint universes of 2·shots), "
            f"more than {counted(dataset, dataset_size.n_samples)}"
        ]
    return []
