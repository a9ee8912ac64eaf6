"""What the workflow builds, derived from params.yaml once at parse time (no checkpoints).

The Snakefile and the DVC stages ask this module which experiments, model shards and attacks
exist, so the DAG is known before any job runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from miaflow.splits import planned_model_ids

TORCH_KINDS = frozenset({"mlp", "cnn", "torch_lr"})
# `training.models_per_job: auto` puts every model of an experiment in one job, split into balanced
# shards of at most this many: one Python job costs >= 3.5 s of imports, while a batched shard of
# the default's small models trains in seconds (README, "Speed and benchmarks").
AUTO_MODELS_PER_JOB = 32


def experiments(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(dataset, arch) pairs, in params.yaml order."""
    return [(e["dataset"], e["arch"]) for e in config["experiments"]]


def datasets(config: Mapping[str, Any]) -> list[str]:
    return list(dict.fromkeys(dataset for dataset, _ in experiments(config)))


def model_ids(config: Mapping[str, Any]) -> list[str]:
    """Every model trained per experiment, in keep-matrix order."""
    splits = config["splits"]
    return planned_model_ids(splits["repeats"], splits["n_reference"], splits["n_population"])


def models_per_job(config: Mapping[str, Any]) -> int:
    """`training.models_per_job`, with `auto` resolved to balanced shards of <= AUTO_MODELS_PER_JOB."""
    size, total = config["training"]["models_per_job"], len(model_ids(config))
    if size == "auto":
        return math.ceil(total / math.ceil(total / AUTO_MODELS_PER_JOB))
    return size


def shards(config: Mapping[str, Any]) -> list[list[str]]:
    """Model ids grouped into training jobs of `models_per_job(config)` models."""
    ids, size = model_ids(config), models_per_job(config)
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
