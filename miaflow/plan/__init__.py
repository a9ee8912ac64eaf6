"""The plan: what the workflow builds, derived from the validated params once at parse time.

The rule files ask this module which experiments, model shards and attacks exist, so the DAG is
known before any job runs (no checkpoints). What each rule reads is derived here too: the
library files its job runs (`miaflow.plan.code`, its rule's `code` input) and, per DVC stage,
the code and params sections it depends on (`miaflow.plan.stages`, written to dvc.yaml).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from miaflow.splits import planned_model_ids

# `training.models_per_job: auto` puts every model of an experiment in one job, split into balanced
# shards of at most this many: one Python job costs >= 3.5 s of imports, while a batched shard of
# the default's small models trains in seconds (docs/speed.md#shard-sizing).
AUTO_MODELS_PER_JOB = 32
REFERENCE_SEPARATOR = "_ref_"
PACKAGE_FILES = "miaflow/"  # where the jobs' code inputs are: the workflow makes none of them


class Experiment(NamedTuple):
    """One attacked setting: target models of architecture `arch` on `dataset`, calibrated by
    reference, population and shadow models of architecture `ref_arch` (the same one unless the
    experiment studies limited knowledge, TDDBench Table 6).

    A named tuple, so that Snakemake can record it as a rule parameter (its repr is stable) and
    pass it to a job whole.
    """

    dataset: str
    arch: str
    ref_arch: str
    exclude_attacks: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How results name it (`target_model` in every table): the target architecture, plus
        `_ref_<ref_arch>` when the references have another one."""
        return self.arch if not self.mixed else f"{self.arch}{REFERENCE_SEPARATOR}{self.ref_arch}"

    @property
    def mixed(self) -> bool:
        """The references have another architecture than the target."""
        return self.arch != self.ref_arch

    @property
    def name(self) -> str:
        """`<dataset>/<label>`: its wildcards in artifact paths."""
        return f"{self.dataset}/{self.label}"

    def file_name(self, prefix: str, suffix: str) -> str:
        """Name of its file among a report's per-experiment figures or tables, e.g.
        `roc-digits-cnn.png`: rules declare it, jobs find their output by it."""
        return f"{prefix}-{self.dataset}-{self.label}{suffix}"


def experiments(config: Mapping[str, Any]) -> list[Experiment]:
    """Every experiment of params.yaml, in its order."""
    return [
        Experiment(
            e["dataset"],
            e["arch"],
            e.get("ref_arch", e["arch"]),
            tuple(e.get("exclude_attacks", ())),
        )
        for e in config["experiments"]
    ]


def audits(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Audits of models trained elsewhere (miaflow.audit), each with its `kind` ("outputs" or
    "checkpoint") and its `experiment`: how results name it (dataset, then the audit's name)."""
    return [
        {
            **entry,
            "kind": "checkpoint" if "checkpoint" in entry else "outputs",
            "experiment": Experiment(
                entry.get("dataset", entry["name"]), entry["name"], entry["name"]
            ),
        }
        for entry in config.get("audits", [])
    ]


def checkpoint_audits(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Audits of checkpoints: their reference and population models are miaflow's own, trained
    on the dataset they name."""
    return [
        audit
        for audit in audits(config)
        if audit["kind"] == "checkpoint" and {"dataset", "arch"} <= audit.keys()
    ]  # else validation names what is missing


def trained(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(dataset, arch) pairs whose models are trained: every target and reference architecture,
    and the architecture of every audited checkpoint."""
    pairs = [(e.dataset, arch) for e in experiments(config) for arch in (e.arch, e.ref_arch)]
    pairs += [(audit["dataset"], audit["arch"]) for audit in checkpoint_audits(config)]
    return list(dict.fromkeys(pairs))


def datasets(config: Mapping[str, Any]) -> list[str]:
    """Every dataset prepared: those of the experiments, of the hyperparameter study, of the
    language-model experiments, of audited checkpoints and of the privacy audit's experiments."""
    study = [setting["dataset"] for setting in hparam_settings(config)]
    corpora = [e["dataset"] for e in llm_experiments(config)]
    audited = [audit["dataset"] for audit in checkpoint_audits(config)]
    private = [e["dataset"] for e in [*privacy_heads(config), *privacy_models(config)]]
    return list(
        dict.fromkeys(
            [*(e.dataset for e in experiments(config)), *study, *corpora, *audited, *private]
        )
    )


# The privacy audit (docs/algorithms.md#privacy-audit): its audit experiments, each named
# {dataset}/{label} in results/privacy/ (miaflow.privacy.experiments).
HEADS_LABEL = "heads"  # the label of a dataset's head audit


def privacy_heads(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The privacy audit's experiments on the study's linear heads, one per dataset, each with
    its `label` (HEADS_LABEL)."""
    return [{**entry, "label": HEADS_LABEL} for entry in config.get("privacy", {}).get("heads", [])]


def privacy_models(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The privacy audit's trained models, each with its `label` (its architecture's key) and
    its recipe (`recipe`, an entry of `architectures`)."""
    return [
        {**entry, "label": entry["arch"], "recipe": config["architectures"].get(entry["arch"])}
        for entry in config.get("privacy", {}).get("models", [])
    ]


def privacy_audits(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The audits of models trained elsewhere that claim an (ε, δ) with canaries (`epsilon`,
    `delta`, `canaries`; docs/audit.md), each with its `label` (its name) and `dataset` (how
    results name its data)."""
    return [
        {**audit, "label": audit["name"], "dataset": audit["experiment"].dataset}
        for audit in audits(config)
        if "canaries" in audit
    ]


def privacy_audited(config: Mapping[str, Any]) -> bool:
    """Whether the privacy audit has anything to audit (its table and figure)."""
    return bool(privacy_heads(config) or privacy_models(config) or privacy_audits(config))


# Corpora whose labels are membership in a pretrained model's training data (1 = member).
MEMBERSHIP_CORPORA = ("wikimia",)


def llm_experiments(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Language-model experiments, each with its `label` (the target recipe: paths, tables), its
    target and reference recipes, `repeats` (default llm.repeats), `n_eval` (default llm.n_eval),
    `n_texts` (default all) and `traps` (None, or the trap options with their defaults:
    `llm_trap_options`)."""
    llm = config.get("llm", {})
    recipes = llm.get("models", {})
    return [
        {
            "repeats": llm.get("repeats"),
            "n_eval": llm.get("n_eval"),
            "n_texts": None,
            **entry,
            "traps": llm_trap_options(entry),
            "label": entry["target"],
            "target_recipe": recipes.get(entry["target"]),
            "reference_recipe": recipes.get(entry["reference"]),
        }
        for entry in llm.get("experiments", [])
    ]


def llm_trap_options(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """A language-model experiment's copyright traps (`miaflow.llm.traps.draw_traps`' options):
    None without `traps`; else its repetition counts and traps per count, each trap `sentences`
    sentences (default 1) of `source` (default: the synthetic_text generator on synthetic_text,
    else the corpus' own words)."""
    traps = entry.get("traps")
    if traps is None:
        return None
    source = "synthetic_text" if entry["dataset"] == "synthetic_text" else "words"
    return {"source": source, "sentences": 1, **traps}


def llm_scored_experiments(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The language-model experiments whose targets are attacked on their scored texts (eval):
    every one without traps."""
    return [e for e in llm_experiments(config) if e["traps"] is None]


def llm_trap_experiments(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The experiments whose targets train with copyright traps inserted and are attacked on the
    traps and their twins only (docs/language-models.md#traps)."""
    return [e for e in llm_experiments(config) if e["traps"] is not None]


def llm_inference_experiments(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The experiments that dataset inference tests (`miaflow.llm.dataset_inference`): those
    attacked on their scored texts whose members the workflow draws, when
    llm.dataset_inference.sizes names any."""
    if not config.get("llm", {}).get("dataset_inference", {}).get("sizes"):
        return []
    return [
        e
        for e in llm_scored_experiments(config)
        if e["target_recipe"] and llm_membership(e) == "trained"
    ]


def llm_input_options(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The options of the recent attacks that the statistics jobs make inputs with
    (`miaflow.attacks.registry.llm_input_options`)."""
    from miaflow.attacks.registry import llm_input_options as input_options

    return input_options(config["llm"]["attacks"], config["llm"]["attack_options"])


def llm_membership(experiment: Mapping[str, Any]) -> str:
    """Who the members of a language-model experiment are: the corpus' "labels" when its target
    is pretrained (its training data is not ours to split), else "trained" (each repeat's half)."""
    return "labels" if experiment["target_recipe"]["kind"] == "pretrained" else "trained"


def llm_settings_experiments(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The language-model experiments scored on EM-MIA's benchmark settings as well: every one
    attacked on its scored texts whose members the workflow draws (`llm_membership` "trained"),
    when llm.settings names any."""
    if not config.get("llm", {}).get("settings", {}).get("names"):
        return []
    return [
        e
        for e in llm_scored_experiments(config)
        if e["target_recipe"] and llm_membership(e) == "trained"
    ]


def llm_needs(config: Mapping[str, Any]) -> set[str]:
    """What the configured language-model attacks read beside the targets' token statistics
    (`miaflow.attacks.registry.LLM_READS`, and what EM-MIA's start reads)."""
    from miaflow.attacks.registry import llm_reads

    return llm_reads(config["llm"]["attacks"], config["llm"]["attack_options"])


def llm_fpr_levels(config: Mapping[str, Any]) -> list[float]:
    """FPR levels of the language-model metrics: the run's and EM-MIA's tables' (1 %, 5 %)."""
    return sorted({*config["metrics"]["fpr_levels"], *config["llm"]["fpr_levels"]})


def epsilon_tag(epsilon: float) -> str:
    """How a privacy budget ε appears in paths: "inf" when not private, else its shortest exact
    decimal, e.g. "8" or "0.5": distinct budgets get distinct paths, float(tag) gives ε back, and
    there is no exponent, which the {epsilon} wildcard would not match."""
    return "inf" if math.isinf(epsilon) else np.format_float_positional(float(epsilon), trim="-")


def setting_name(setting: Mapping[str, Any]) -> str:
    """A study setting's name in paths and tables:
    <dataset>_s<shots>[_<backbone>][_pc<components>][_cnn][_shadow_<shadow_backbone>]."""
    shadow = setting.get("shadow_backbone")
    suffix = f"_shadow_{shadow}".replace("-", "_") if shadow else ""
    return target_setting_name(setting) + suffix


def target_setting_name(setting: Mapping[str, Any]) -> str:
    """The setting's name without its shadow backbone: it seeds the splits and the targets, so a
    black-box setting attacks the very targets of its white-box twin (the same seeds)."""
    backbone = f"_{setting['backbone']}".replace("-", "_") if setting.get("backbone") else ""
    components = f"_pc{setting['components']}" if setting.get("components") else ""
    model = "_cnn" if setting.get("model") == "cnn" else ""
    return f"{setting['dataset']}_s{setting['shots']}{backbone}{components}{model}"


def hparam_settings(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The hyperparameter study's settings (dataset, shots), each with its `name`."""
    settings = config.get("hparam_study", {}).get("settings", [])
    return [{**setting, "name": setting_name(setting)} for setting in settings]


def epsilon_tags(config: Mapping[str, Any]) -> list[str]:
    """The study's privacy budgets as paths name them (`epsilon_tag`); none without a setting."""
    if not hparam_settings(config):
        return []
    return [epsilon_tag(epsilon) for epsilon in config["hparam_study"]["epsilons"]]


def backbone_model(config: Mapping[str, Any], dataset: str, backbone: str) -> str | None:
    """The pretrained model extracting `backbone` features of `dataset`: the `backbone_model` of
    the first setting naming both, else None (the backbone's own default)."""
    return next(
        (
            setting.get("backbone_model")
            for setting in hparam_settings(config)
            if setting["dataset"] == dataset and setting.get("backbone") == backbone
        ),
        None,
    )


def model_ids(config: Mapping[str, Any]) -> list[str]:
    """Every model trained per experiment, in keep-matrix order."""
    splits = config["splits"]
    return planned_model_ids(splits["repeats"], splits["n_reference"], splits["n_population"])


def models_per_job(config: Mapping[str, Any]) -> int:
    """`training.models_per_job`, with `auto` resolved to balanced shards of <=
    AUTO_MODELS_PER_JOB."""
    size, total = config["training"]["models_per_job"], len(model_ids(config))
    if size == "auto":
        return math.ceil(total / math.ceil(total / AUTO_MODELS_PER_JOB))
    return size


def shards(config: Mapping[str, Any]) -> list[list[str]]:
    """Model ids grouped into training jobs of `models_per_job(config)` models."""
    ids, size = model_ids(config), models_per_job(config)
    return [ids[start : start + size] for start in range(0, len(ids), size)]


def split_settings(config: Mapping[str, Any], dataset: str) -> dict[str, Any]:
    """How `dataset` is partitioned (`miaflow.splits.make_splits`' keywords): `splits`, with the
    partition keys of `splits.datasets.<dataset>` in place of the global ones."""
    settings = {key: value for key, value in config["splits"].items() if key != "datasets"}
    return {**settings, **config["splits"].get("datasets", {}).get(dataset, {})}


def dataset_options(config: Mapping[str, Any], dataset: str) -> dict[str, Any]:
    return dict(config.get("datasets", {}).get(dataset, {}))


def local_inputs(config: Mapping[str, Any], dataset: str) -> list[str]:
    """Files a dataset is read from (none for the embedded, offline datasets): below its `path`
    option, else below data/raw/<dataset>/, where rule download_dataset fetches them."""
    from miaflow.data import source_paths

    return [str(path) for path in source_paths(dataset, dataset_options(config, dataset))]


def uses_torch(config: Mapping[str, Any], arch: str) -> bool:
    from miaflow.models.kinds import KINDS

    return KINDS[config["architectures"][arch]["kind"]].torch


def attack_options(config: Mapping[str, Any], attack: str) -> dict[str, Any]:
    """What params.yaml's `attack_options` sets for `attack`: overrides of the defaults of its
    options class (`miaflow.attacks.options`), which the jobs fill it from."""
    return dict(config.get("attack_options", {}).get(attack, {}))


def modality(dataset: str) -> str:
    """'image', 'tabular' or 'text', from the dataset registry (known before any data is loaded)."""
    from miaflow.data import DATASETS

    return DATASETS[dataset].modality


def attacks_for(config: Mapping[str, Any], experiment: Experiment) -> list[str]:
    """The configured attacks that apply to an experiment, in params.yaml order: those for its
    dataset's modality (e.g. Query-ref: images only), not excluded by it, and, when the
    references have another architecture than the target, not the query family, whose artifacts
    are built per architecture."""
    from miaflow.attacks.registry import ATTACKS

    return [
        a
        for a in config["attacks"]
        if modality(experiment.dataset) in ATTACKS[a].modalities
        and a not in experiment.exclude_attacks
        and not (experiment.mixed and ATTACKS[a].family == "query")
    ]


def artifacts_for(
    config: Mapping[str, Any], experiment: Experiment, attacks: list[str] | None = None
) -> list[str]:
    """Names of the queries stage's artifacts that the experiment's attacks (or `attacks`) read."""
    from miaflow.attacks.registry import ATTACKS

    chosen = attacks_for(config, experiment) if attacks is None else attacks
    return sorted({name for attack in chosen for name in ATTACKS[attack].reads})


def queried(config: Mapping[str, Any]) -> set[tuple[Experiment, str]]:
    """(experiment, artifact name) for every artifact of the queries stage that the configured
    attacks of an experiment read."""
    return {(e, name) for e in experiments(config) for name in artifacts_for(config, e)}


def reference_counts(config: Mapping[str, Any]) -> list[int]:
    """Numbers of reference models for the scaling study: whole pairs, doubling up to all."""
    total, counts, count = config["splits"]["n_reference"], [], 2
    while count < total:
        counts.append(count)
        count *= 2
    return counts + [total] if total else []


def swept_attacks(config: Mapping[str, Any]) -> list[str]:
    """The configured attacks whose scores depend on how many reference models calibrate them."""
    from miaflow.attacks.registry import ATTACKS

    return [
        a
        for a in config["attacks"]
        if ATTACKS[a].family in ("model", "lira") and "reference" in ATTACKS[a].needs
    ]


# Song & Mittal's privacy risk score: a probability, reported by its own tables and figures, not
# at a learned threshold like the rest of its family.
RISK_SCORE = "sm-risk"


def song_mittal_thresholds(config: Mapping[str, Any]) -> list[str]:
    """The configured attacks of the Song & Mittal family that decide at learned thresholds
    (their class-dependent vs global table): all but the privacy risk score."""
    from miaflow.attacks.registry import ATTACKS

    return [a for a in config["attacks"] if ATTACKS[a].family == "song-mittal" and a != RISK_SCORE]


def risk_scored(config: Mapping[str, Any]) -> bool:
    """Whether the privacy risk score runs (its precision table and CDF figures)."""
    return RISK_SCORE in config["attacks"]


def defended(config: Mapping[str, Any]) -> bool:
    """Whether a target model of an experiment is trained with a defense (the defense report)."""
    return any(config["architectures"][e.arch].get("defense") for e in experiments(config))


# Query attacks whose score uses a number of extra queries that a sweep can cut down (Query-adv
# only off images: on images it is a HopSkipJump distance).
QUERY_COUNT_ATTACKS = ("query-neighbor", "query-augment", "query-adv")


def query_count_option(attack: str, data: str) -> str:
    """The entry of `attack_options` whose `n_queries` sets how many extra queries a query attack
    reads on data of modality `data`: Query-augment's own for image and tabular augmentations;
    otherwise Query-neighbor's, as the others read neighbours (Query-augment on text too, whose
    augmentations are neighbours)."""
    return attack if attack == "query-augment" and data != "text" else "query-neighbor"


def generated_queries(config: Mapping[str, Any], attack: str, data: str) -> int:
    """Extra queries per sample that the query set holds for a query attack on `data`."""
    from miaflow.attacks import registry

    source = query_count_option(attack, data)
    return registry.attack_options(source, config.get("attack_options", {})).n_queries


def swept_query_attacks(config: Mapping[str, Any], experiment: Experiment) -> dict[str, list[int]]:
    """Query attacks of an experiment for the scaling study, each with its query counts: 1, 2, 5,
    10, … up to the number generated (`generated_queries`)."""
    data = modality(experiment.dataset)
    swept = {}
    for attack in attacks_for(config, experiment):
        if attack not in QUERY_COUNT_ATTACKS or (attack == "query-adv" and data == "image"):
            continue
        total = generated_queries(config, attack, data)
        swept[attack] = sorted({k for k in (1, 2, 5) if k < total} | {total})
    return swept


def benchmarks_of(rules: Iterable[Any], targets: Iterable[str], skip: str) -> list[str]:
    """Benchmark files of every job the `targets` need among Snakemake's `rules`: each target's
    producer, then the producers of that job's inputs, recursively (the cost table counts
    intermediate jobs too), but not of the package's files (the jobs' `code` inputs), which no
    rule makes. `skip`: the rule that asks, whose own inputs are these files."""
    found, seen, todo = set(), set(), [str(t) for t in targets]
    while todo:
        if (target := todo.pop()) in seen:
            continue
        seen.add(target)
        for producer in (rule for rule in rules if rule.name != skip and rule.is_producer(target)):
            wildcards = producer.get_wildcards(target)
            if producer.benchmark:
                found.add(str(producer.benchmark.apply_wildcards(wildcards)))
            inputs = map(str, producer.expand_input(wildcards)[0])
            todo.extend(path for path in inputs if not path.startswith(PACKAGE_FILES))
    return sorted(found)
