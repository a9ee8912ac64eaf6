"""What the workflow builds, derived from params.yaml once at parse time (no checkpoints).

The Snakefile and the DVC stages ask this module which experiments, model shards and attacks
exist, so the DAG is known before any job runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from miaflow.splits import planned_model_ids

TORCH_KINDS = frozenset({"mlp", "cnn", "torch_lr", "wrn28_2", "resnet18", "vgg11", "mobilenetv2",
                         "transformer"})
# `training.models_per_job: auto` puts every model of an experiment in one job, split into balanced
# shards of at most this many: one Python job costs >= 3.5 s of imports, while a batched shard of
# the default's small models trains in seconds (README, "Speed and benchmarks").
AUTO_MODELS_PER_JOB = 32


REFERENCE_SEPARATOR = "_ref_"


def experiment_label(arch: str, ref_arch: str | None = None) -> str:
    """How results name an experiment: its target architecture, plus `_ref_<arch>` when the
    reference, population and shadow models have another one (TDDBench Table 6)."""
    return arch if ref_arch in (None, arch) else f"{arch}{REFERENCE_SEPARATOR}{ref_arch}"


def target_arch(label: str) -> str:
    """The target models' architecture of an experiment label."""
    return label.split(REFERENCE_SEPARATOR)[0]


def reference_arch(label: str) -> str:
    """The reference models' architecture of an experiment label."""
    return label.split(REFERENCE_SEPARATOR)[-1]


def experiments(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(dataset, experiment label) pairs, in params.yaml order: what is attacked and reported."""
    return [(e["dataset"], experiment_label(e["arch"], e.get("ref_arch")))
            for e in config["experiments"]]


def trained(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(dataset, arch) pairs whose models are trained: every target and reference architecture."""
    pairs = [(d, arch) for d, label in experiments(config)
             for arch in (target_arch(label), reference_arch(label))]
    return list(dict.fromkeys(pairs))


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
    """Files a dataset is read from (none for the embedded, offline datasets): below its `path`
    option, else below data/raw/<dataset>/, where rule download_dataset fetches them."""
    from miaflow.data import source_paths

    return [str(path) for path in source_paths(dataset, dataset_options(config, dataset))]


def uses_torch(config: Mapping[str, Any], arch: str) -> bool:
    return config["architectures"][arch]["kind"] in TORCH_KINDS


def attack_options(config: Mapping[str, Any], attack: str) -> dict[str, Any]:
    return dict(config.get("attack_options", {}).get(attack, {}))


def reference_counts(config: Mapping[str, Any]) -> list[int]:
    """Numbers of reference models for the scaling study: whole pairs, doubling up to all."""
    total, counts, count = config["splits"]["n_reference"], [], 2
    while count < total:
        counts.append(count)
        count *= 2
    return counts + [total] if total else []


def swept_attacks(config: Mapping[str, Any]) -> list[str]:
    """The configured attacks whose scores depend on how many reference models calibrate them."""
    from miaflow.attacks import ATTACKS

    return [a for a in config["attacks"] if ATTACKS[a].family in ("model", "lira")
            and "reference" in ATTACKS[a].needs]


def attacks_for(config: Mapping[str, Any], dataset: str, label: str | None = None) -> list[str]:
    """The configured attacks that apply to an experiment: those for `dataset`'s modality (e.g.
    Query-ref: images only) and, when the references have another architecture than the target
    (`label`), not the query family, whose artifacts are built per architecture."""
    from miaflow.attacks import ATTACKS
    from miaflow.data import DATASETS

    modality = DATASETS[dataset].modality
    mixed = label is not None and target_arch(label) != reference_arch(label)
    return [a for a in config["attacks"] if modality in ATTACKS[a].modalities
            and not (mixed and ATTACKS[a].family == "query")]


def modality(dataset: str) -> str:
    """'image' or 'tabular', from the dataset registry (known before any data is loaded)."""
    from miaflow.data import DATASETS

    return DATASETS[dataset].modality


# Query attacks whose score uses a number of extra queries that a sweep can cut down (Query-adv
# only off images: on images it is a HopSkipJump distance).
QUERY_COUNT_ATTACKS = ("query-neighbor", "query-augment", "query-adv")


def swept_query_attacks(config: Mapping[str, Any], dataset: str, label: str) -> dict[str, list[int]]:
    """Query attacks of an experiment for the scaling study, each with its query counts: 1, 2, 5,
    10, … up to the number generated (option `n_queries`, else that of query-neighbor)."""
    from miaflow.data import DATASETS

    options = config.get("attack_options", {})
    generated = options.get("query-neighbor", {}).get("n_queries", 10)
    swept = {}
    for attack in attacks_for(config, dataset, label):
        if attack not in QUERY_COUNT_ATTACKS or (attack == "query-adv"
                                                 and DATASETS[dataset].modality == "image"):
            continue
        total = options.get(attack, {}).get("n_queries", generated)
        swept[attack] = sorted({k for k in (1, 2, 5) if k < total} | {total})
    return swept
