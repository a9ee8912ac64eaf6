"""What the workflow builds, derived from params.yaml once at parse time (no checkpoints).

The Snakefile and the DVC stages ask this module which experiments, model shards and attacks
exist, so the DAG is known before any job runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from miaflow.splits import planned_model_ids

TORCH_KINDS = frozenset({"mlp", "cnn"})


def experiments(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(dataset, arch) pairs, in params.yaml order."""
    return [(e["dataset"], e["arch"]) for e in config["experiments"]]


def datasets(config: Mapping[str, Any]) -> list[str]:
    return list(dict.fromkeys(dataset for dataset, _ in experiments(config)))


def model_ids(config: Mapping[str, Any]) -> list[str]:
    """Every model trained per experiment, in keep-matrix order."""
    splits = config["splits"]
    return planned_model_ids(splits["repeats"], splits["n_reference"], splits["n_population"])


def shards(config: Mapping[str, Any]) -> list[list[str]]:
    """Model ids grouped into training jobs of `training.models_per_job` models."""
    ids, size = model_ids(config), config["training"]["models_per_job"]
    return [ids[start:start + size] for start in range(0, len(ids), size)]


def dataset_options(config: Mapping[str, Any], dataset: str) -> dict[str, Any]:
    return dict(config.get("datasets", {}).get(dataset, {}))


def local_inputs(config: Mapping[str, Any], dataset: str) -> list[str]:
    """Files a dataset is read from (none for the embedded, offline datasets)."""
    from miaflow.data import DATASETS

    path = dataset_options(config, dataset).get("path", DATASETS[dataset].defaults.get("path"))
    return [path] if path else []


def uses_torch(config: Mapping[str, Any], arch: str) -> bool:
    return config["architectures"][arch]["kind"] in TORCH_KINDS


def attack_options(config: Mapping[str, Any], attack: str) -> dict[str, Any]:
    return dict(config.get("attack_options", {}).get(attack, {}))


def modality(dataset: str) -> str:
    """'image' or 'tabular', from the dataset registry (known before any data is loaded)."""
    from miaflow.data import DATASETS

    return DATASETS[dataset].modality
