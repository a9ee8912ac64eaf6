"""Load and validate params.yaml: one source of truth for Snakemake (config) and DVC (params).

Validation runs when the Snakefile is parsed, so a bad value stops the run before any job starts,
with a message that names the offending key (or, for YAML that does not parse, the line). Beyond
the schema it rejects what would run but mislead: experiments that duplicate another in effect,
counts the data cannot support (pools, classes, texts, queries) or that would be silently capped,
and local dataset files that are missing or differ from the published ones.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from functools import partial
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import yaml

from miaflow.defenses import TRAINING, defense_kind
from miaflow.models.kinds import CANARIES, KINDS, QUERY_OUTPUTS, REGRESSORS
from miaflow.workflow.plan import Experiment

if TYPE_CHECKING:
    from miaflow.data import DatasetSize


DEFAULT_PROFILE = "default"
# Fewest samples that any model's training set, and its held-out set, may expect. Below it the
# Bernoulli draws can leave a set empty (training then crashes) or too small for its metrics to
# mean anything; at 20 the chance of an empty set is below e^-20.
MIN_EXPECTED_SAMPLES = 20
# Fewest samples of the rarest class that those sets may expect: with fewer, some model of an
# experiment is likely never to see the class (e^-5, under 1%, per model and class at 5) and
# gives it meaningless outputs (log-probability -inf for logistic regression).
MIN_EXPECTED_PER_CLASS = 5
# Most repeats a paired permutation test may enumerate exactly: it takes all 2^R sign flips for
# every pair of attacks (miaflow.evaluation.stats.sign_flips), "fine up to R = 16 or so".
MAX_EXACT_TEST_REPEATS = 16
# Finite privacy budgets ε the hyperparameter study accepts.
EPSILON_RANGE = (0.001, 1000.0)


class ConfigError(ValueError):
    """params.yaml is invalid; the message names every offending key."""


def schema() -> dict[str, Any]:
    return json.loads(resources.files("miaflow").joinpath("schemas/params.schema.json").read_text())


def _key_path(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _schema_problems(config: Any) -> list[str]:
    """Every schema violation as `<key path>: <reason>`; an upper bound also gives the bounded
    key's description, which says why the bound is there."""
    validator = jsonschema.Draft202012Validator(schema())
    problems = []
    for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        if error.validator in ("if", "allOf"):
            continue  # the failing `then` branch reports the precise key itself
        key = _key_path(error.absolute_path)
        if error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})), key=str)
            key = ", ".join(_key_path([*error.absolute_path, name]) for name in extra)
            problems.append(f"{key}: unknown key")
        elif error.validator == "maximum" and "description" in error.schema:
            problems.append(f"{key}: {error.message}; {error.schema['description']}")
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
        if options.get("representation", "text") != wanted:  # some corpora are only raw text
            return [f"{named} reads {dataset!r} as {wanted}: set "
                    f"datasets.{dataset}.representation to {wanted!r}"]
    return []


def _momentum_problems(config: Mapping[str, Any]) -> list[str]:
    """`momentum` is SGD's; with Adam it would be silently ignored."""
    return [f"architectures.{name}.momentum: only optimizer sgd has momentum, {name!r} uses "
            f"{arch.get('optimizer')!r}" for name, arch in config["architectures"].items()
            if "momentum" in arch and arch.get("optimizer") != "sgd"]


# Kinds with batch norm: it mixes a batch's samples, so per-sample clipping bounds nothing.
BATCH_NORM_KINDS = ("wrn28_2", "resnet18", "vgg11", "mobilenetv2")


def _defense_problems(config: Mapping[str, Any]) -> list[str]:
    """Training defenses train one model at a time in fp32 (miaflow.defenses), and DP-SGD cannot
    clip per sample through batch norm."""
    problems = []
    for name, arch in config["architectures"].items():
        if defense_kind(arch) not in TRAINING:
            continue
        defense, where = arch["defense"], f"architectures.{name}.defense"
        fast = [key for key, off in (("precision", "fp32"), ("compile", False),
                                     ("channels_last", False)) if arch.get(key, off) != off]
        if fast:
            problems.append(f"{where}: a defended model trains in plain fp32 eager mode; remove "
                            f"{', '.join(fast)}")
        if defense["kind"] == "dp_sgd" and arch["kind"] in BATCH_NORM_KINDS:
            problems.append(f"{where}: DP-SGD cannot bound one sample's influence through the "
                            f"batch norm of {arch['kind']}; use mlp, cnn or torch_lr")
    return problems


# Why a kind's models cannot produce an artifact of the queries stage (see Kind.builds).
CANNOT_BUILD = {
    QUERY_OUTPUTS: "query sets perturb numeric features, and this kind reads raw text",
    REGRESSORS: "there is no Query-qrm regressor for this kind",
    CANARIES: "canaries need the input gradients of a torch model",
}


def _attack_problems(where: str, experiment: Experiment, config: Mapping[str, Any]) -> list[str]:
    """Attacks an experiment would run whose artifacts its architecture kind cannot produce, or
    that would query a MemGuard-defended model around its defense."""
    from miaflow.attacks import ATTACKS
    from miaflow.workflow.plan import attacks_for

    arch = config["architectures"][experiment.arch]
    kind = KINDS[arch["kind"]]
    problems = []
    for attack in attacks_for(config, experiment):
        if defense_kind(arch) == "memguard" and ATTACKS[attack].reads:
            problems.append(f"{where}: attack {attack!r} queries the model itself, around the "
                            f"MemGuard defense of {experiment.arch!r} (it perturbs the outputs "
                            f"the signals cache). Remove it from attacks or add it to "
                            f"{where}.exclude_attacks")
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

    problems = (_duplicate_experiments(config) + _audit_problems(config)
                + _defense_problems(config) + _momentum_problems(config))
    for i, (entry, experiment) in enumerate(zip(config["experiments"], experiments(config))):
        where = f"experiments[{i}]"
        arch_problems = [p for key in ("arch", "ref_arch") if key in entry
                         for p in _architecture_problems(where, key, entry[key], entry["dataset"],
                                                         config)]
        problems += arch_problems
        if not arch_problems:
            problems += _attack_problems(where, experiment, config)
    problems += _pool_problems(config) + _query_problems(config) + _exact_test_problems(config)
    available = {"reference": config["splits"]["n_reference"],
                 "population": config["splits"]["n_population"]}
    for i, attack in enumerate(config["attacks"]):
        for need in sorted(ATTACKS[attack].needs):
            if not available[need]:
                problems.append(f"attacks[{i}]: {attack!r} needs {need} models, "
                                f"but splits.n_{need} is 0")
    problems += _study_problems(config)
    problems += _llm_problems(config)
    problems += _fpr_level_problems(config)
    known = metric_names(config["metrics"]["fpr_levels"])
    for i, metric in enumerate(config["stats"]["metrics"]):
        if metric not in known:
            problems.append(f"stats.metrics[{i}]: {metric!r} is not a metric of this run "
                            f"(known with metrics.fpr_levels: {', '.join(known)})")
    problems += _dataset_problems(config)
    return problems


def _llm_problems(config: Mapping[str, Any]) -> list[str]:
    """Language-model experiments name known recipes, raw-text corpora that hold what they draw,
    and a pretrained target only on a corpus whose labels are membership; no attack computes what
    another configured one does."""
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
        if experiment["target_recipe"] and experiment["reference_recipe"]:
            problems += _corpus_problems(where, i, experiment, config)
    return problems + _llm_attack_duplicates(llm)


def _study_problems(config: Mapping[str, Any]) -> list[str]:
    """The hyperparameter study's ranges are [low, high], its budgets fit in the grid, its
    privacy budgets are in range, and its settings are distinct and fit their datasets."""
    study, problems = config["hparam_study"], []
    for key in ("batch_size", "lr", "clip_norm"):
        low, high = study["search"][key]
        if low > high:
            problems.append(f"hparam_study.search.{key}: low {low} is above high {high}")
    for i, (candidates, models) in enumerate(study["budgets"]):
        if max(candidates, models) > study["shadow_models"]:
            problems.append(f"hparam_study.budgets[{i}]: [{candidates}, {models}] exceeds the "
                            f"{study['shadow_models']} shadow models of hparam_study.shadow_models "
                            "(C and N are at most M)")
    return problems + _epsilon_problems(study) + _setting_problems(config)


def _exact_test_problems(config: Mapping[str, Any]) -> list[str]:
    """Repeat counts whose exact paired permutation tests would not finish: the tests between
    attacks (over splits.repeats or llm.repeats) and the study's TD-vs-ED tests over its runs
    unless it samples sign flips (permutation_resamples)."""
    counts = [("splits.repeats", config["splits"]["repeats"], ""),
              ("llm.repeats", config["llm"]["repeats"], "")]
    if config["hparam_study"]["permutation_resamples"] is None:
        counts.append(("hparam_study.runs", config["hparam_study"]["runs"],
                       " (or set hparam_study.permutation_resamples to sample them)"))
    return [f"{key}: {count} is more than {MAX_EXACT_TEST_REPEATS}: the exact paired permutation "
            f"tests would enumerate all 2^{count} sign flips{alternative}"
            for key, count, alternative in counts if count > MAX_EXACT_TEST_REPEATS]


def _epsilon_problems(study: Mapping[str, Any]) -> list[str]:
    """Finite privacy budgets outside the range the study is made for: paths name ε in plain
    decimals (`plan.epsilon_tag`), and DP accounting far outside it is not what the study tests."""
    low, high = EPSILON_RANGE
    return [f"hparam_study.epsilons[{i}]: {epsilon} is outside [{low}, {high}]; use .inf for "
            f"non-private training" for i, epsilon in enumerate(study["epsilons"])
            if not math.isinf(epsilon) and not low <= epsilon <= high]


def _setting_problems(config: Mapping[str, Any]) -> list[str]:
    """Study settings that duplicate another in effect (the same name in paths and tables) or
    that their dataset cannot serve: features the linear heads can read, and 2·shots samples of
    every class for each of the two disjoint universes."""
    from miaflow.data import DATASETS, dataset_options
    from miaflow.workflow.plan import hparam_settings

    problems, first = [], {}
    for i, setting in enumerate(hparam_settings(config)):
        where, dataset = f"hparam_study.settings[{i}]", setting["dataset"]
        j = first.setdefault(setting["name"], i)
        if j != i:
            problems.append(f"{where}: duplicates hparam_study.settings[{j}] in effect (both are "
                            f"setting {setting['name']})")
        modality = DATASETS[dataset].modality
        options = dataset_options(dataset, config.get("datasets", {}).get(dataset, {}))
        if setting.get("backbone") and modality != "image":
            problems.append(f"{where}.backbone: {setting['backbone']!r} embeds images, but "
                            f"{dataset!r} is {modality}")
        elif modality == "text" and options.get("representation", "text") == "text":
            problems.append(f"{where}.dataset: the study's linear heads need features, but "
                            f"{dataset!r} is raw text: set datasets.{dataset}.representation to "
                            f"'embedding'")
        problems += _shot_problems(where, setting["shots"], dataset, config)
    return problems


def _shot_problems(where: str, shots: int, dataset: str, config: Mapping[str, Any]) -> list[str]:
    """Whether every class of `dataset` holds the 4·shots samples that a study setting's universe
    and its disjoint external universe draw (`miaflow.hparams.grid.few_shot_universes`)."""
    size, per_class = _size(config, dataset), 4 * shots
    if size is None:
        return []
    if size.smallest_class is not None and size.smallest_class < per_class:
        return [f"{where}.shots: {shots} needs {per_class} samples of every class of {dataset!r} "
                f"(two disjoint universes of 2·shots), but its smallest class has "
                f"{size.smallest_class}"]
    if per_class * size.n_classes > size.n_samples:
        return [f"{where}.shots: {shots} needs {per_class} samples of each of the "
                f"{size.n_classes} classes of {dataset!r} (two disjoint universes of 2·shots), "
                f"more than {_counted(dataset, size.n_samples)}"]
    return []


def _corpus_problems(where: str, index: int, experiment: Mapping[str, Any],
                     config: Mapping[str, Any]) -> list[str]:
    """Whether a language-model experiment's corpus holds what it draws: `n_texts` texts (else the
    subset would silently be the whole corpus), the reference model's share, and per repeat
    n_eval/2 members plus n_eval/2 + n_shots non-members (`miaflow.llm.corpus.draw_splits`)."""
    from miaflow.workflow.plan import MEMBERSHIP_CORPORA

    llm, dataset = config["llm"], experiment["dataset"]
    size = _size(config, dataset)
    if size is None:
        return []
    corpus, texts = size.n_samples, _counted(dataset, size.n_samples, "texts")
    if experiment["n_texts"] is not None:
        if experiment["n_texts"] > corpus:
            return [f"{where}.n_texts: {experiment['n_texts']} is more than {texts}"]
        corpus = experiment["n_texts"]
        texts = f"the {corpus} texts of {where}.n_texts"
    key = f"{where}.n_eval" if "n_eval" in llm["experiments"][index] else "llm.n_eval"
    n_eval, shots = experiment["n_eval"], llm["n_shots"]
    if experiment["target_recipe"]["kind"] == "pretrained" and dataset in MEMBERSHIP_CORPORA:
        if n_eval + shots > corpus:
            return [f"{key}: {n_eval} scored texts and llm.n_shots {shots} need {n_eval + shots} "
                    f"texts, more than {texts}"]
        return []
    n_reference = round(llm["reference_ratio"] * corpus)
    if n_reference < 1 and experiment["reference_recipe"]["kind"] != "pretrained":
        return [f"llm.reference_ratio: {llm['reference_ratio']} leaves none of {texts} to train "
                f"the reference model of {where}"]
    pool = corpus - n_reference
    members, non_members = pool // 2, pool - pool // 2
    if members < n_eval // 2 or non_members < n_eval // 2 + shots:
        return [f"{key}: {n_eval} scored texts (half members) and llm.n_shots {shots} need "
                f"{n_eval // 2} members and {n_eval // 2 + shots} non-members per repeat, but "
                f"{texts} leave {members} and {non_members} besides llm.reference_ratio's share"]
    return []


def _llm_attack_duplicates(llm: Mapping[str, Any]) -> list[str]:
    """Language-model attacks that compute the same scores as another configured one: EM-MIA with
    its options against the variant of the same start and prefix score, and Min-K% (Min-K%++) at
    its option k against the sweep's attack at that k."""
    from miaflow.attacks.llm import MINK_SWEEP, em_settings, em_variant

    attacks, options = llm["attacks"], llm["attack_options"]
    same = {}
    if "em-mia" in attacks:
        settings = em_settings("em-mia", options)
        same[em_variant(settings["init"], settings["scoring"])] = (
            "em-mia", f"llm.attack_options.em-mia starts from {settings['init']} and scores "
                      f"prefixes by {settings['scoring']}")
    for base in ("llm-mink", "llm-minkpp"):
        k = options.get(base, {}).get("k", 0.2)
        if base in attacks and k in MINK_SWEEP:
            same[f"{base}-k{round(k * 100)}"] = (base, f"llm.attack_options.{base}.k is {k}")
    return [f"llm.attacks[{i}]: {attack!r} duplicates {same[attack][0]!r} in effect "
            f"({same[attack][1]})" for i, attack in enumerate(attacks)
            if attack in same and same[attack][0] in attacks]


def _fpr_level_problems(config: Mapping[str, Any]) -> list[str]:
    """FPR levels that are distinct numbers but one metric name (e.g. 0.01 and 0.0100000001):
    their rows would report as the same metric."""
    from miaflow.evaluation.metrics import tpr_metric_name

    levels = [*((f"metrics.fpr_levels[{i}]", level)
                for i, level in enumerate(config["metrics"]["fpr_levels"])),
              *((f"llm.fpr_levels[{i}]", level)
                for i, level in enumerate(config["llm"]["fpr_levels"]))]
    first: dict[str, tuple[str, float]] = {}
    problems = []
    for key, level in levels:
        other, value = first.setdefault(tpr_metric_name(level), (key, level))
        if value != level:
            problems.append(f"{key}: {level} duplicates {other} ({value}) in effect (both report "
                            f"{tpr_metric_name(level)})")
    return problems


# --- experiments: duplicates, pools, queries --------------------------------------------------

def _duplicate_experiments(config: Mapping[str, Any]) -> list[str]:
    """Experiments that report under the name of an earlier one: each of their rows would be in
    metrics.parquet twice, halving the reported standard deviations."""
    from miaflow.workflow.plan import experiments

    entries, first, problems = config["experiments"], {}, []
    for i, experiment in enumerate(experiments(config)):
        j = first.setdefault(experiment.name, i)
        if j != i:
            same_arch = any(entries[k].get("ref_arch") == entries[k]["arch"] for k in (i, j))
            reason = "ref_arch equals arch" if same_arch else "only exclude_attacks differs"
            problems.append(f"experiments[{i}]: duplicates experiments[{j}] in effect ({reason}; "
                            f"both report {experiment.name})")
    return problems


# --- audits of models trained elsewhere ----------------------------------------------------------

AUDIT_KINDS = {"outputs": ("outputs", "membership"), "checkpoint": ("checkpoint", "arch", "dataset", "members")}


def _audit_problems(config: Mapping[str, Any]) -> list[str]:
    """Each audit gives exactly one kind of input, with files that exist; a checkpoint names a
    miaflow dataset and a torch architecture; no audit reports under another result's name."""
    from miaflow.data import DATASETS
    from miaflow.workflow.plan import audits, experiments

    taken = {e.name for e in experiments(config)}
    problems, seen = [], set()
    for i, audit in enumerate(audits(config)):
        where = f"audits[{i}]"
        given = [kind for kind, keys in AUDIT_KINDS.items() if keys[0] in audit]
        if len(given) != 1:
            problems.append(f"{where}: give either outputs and membership (the models' outputs) or "
                            "checkpoint, arch, dataset and members (a checkpoint), not both or neither")
            continue
        keys = AUDIT_KINDS[given[0]]
        other = {key for kind, names in AUDIT_KINDS.items() if kind != given[0] for key in names} - {*keys, "dataset"}
        problems += [f"{where}.{key}: missing (an audit of {given[0]} needs {', '.join(keys)})"
                     for key in keys if key not in audit]
        problems += [f"{where}.{key}: only an audit of a checkpoint takes it" for key in sorted(other) if key in audit]
        for key in ("outputs", "membership", "checkpoint", "members"):
            if key in audit and not Path(audit[key]).is_file():
                problems.append(f"{where}.{key}: {audit[key]} not found (working directory {Path.cwd()})")
        name = audit["experiment"].name
        if name in taken or name in seen:
            problems.append(f"{where}.name: {name} is already the name of another result; choose another name")
        seen.add(name)
        if given[0] != "checkpoint" or "arch" not in audit or "dataset" not in audit:
            continue
        if audit["dataset"] not in DATASETS:
            problems.append(f"{where}.dataset: {audit['dataset']!r} is not a miaflow dataset")
        arch = config["architectures"].get(audit["arch"])
        if arch is None:
            problems.append(f"{where}.arch: {audit['arch']!r} is not a key of architectures")
        elif not KINDS[arch["kind"]].torch:
            problems.append(f"{where}.arch: checkpoints of kind {arch['kind']!r} are not supported "
                            "(a torch state dict is); bring the model's outputs instead")
    return problems


def _counted(dataset: str, count: int, unit: str = "samples") -> str:
    """`the N samples of 'name'`, naming the option that sets N where one does."""
    from miaflow.data import DATASETS

    option = f" (datasets.{dataset}.n_samples)" if "n_samples" in DATASETS[dataset].defaults else ""
    return f"the {count} {unit} of {dataset!r}{option}"


def _size(config: Mapping[str, Any], dataset: str) -> DatasetSize | None:
    from miaflow.data import dataset_size

    return dataset_size(dataset, config.get("datasets", {}).get(dataset, {}))


def _split_key(config: Mapping[str, Any], dataset: str, key: str) -> str:
    """Where a partition key of `dataset` is set: its splits.datasets entry, or splits."""
    own = config["splits"].get("datasets", {}).get(dataset, {})
    return f"splits.datasets.{dataset}.{key}" if key in own else f"splits.{key}"


def _pool_problems(config: Mapping[str, Any]) -> list[str]:
    """Partitions that leave some model too few samples to train on or to be evaluated on, for
    every dataset whose models train and whose size the registry knows (an empty pool used to
    crash training), and shadow models that cannot exist."""
    from miaflow.splits import pool_sizes
    from miaflow.workflow.plan import experiments, split_settings

    trained = list(dict.fromkeys(e.dataset for e in experiments(config)))
    problems = [f"splits.datasets.{dataset}: no experiment trains models on {dataset!r}"
                for dataset in config["splits"].get("datasets", {}) if dataset not in trained]
    for dataset in trained:
        settings = split_settings(config, dataset)
        key = partial(_split_key, config, dataset)
        problems += _shadow_problems(config, dataset, settings, key)
        size = _size(config, dataset)
        if size is None:
            continue
        n_target, members, n_auxiliary = pool_sizes(
            size.n_samples, target_ratio=settings["target_ratio"],
            target_size=settings.get("target_size"), member_ratio=settings["member_ratio"],
            members=settings.get("members"), auxiliary_size=settings.get("auxiliary_size"))
        pool = "target_size" if settings.get("target_size") else "target_ratio"
        member = "members" if settings.get("members") else "member_ratio"
        if n_target >= size.n_samples:
            problems.append(f"{key(pool)}: {settings[pool]} asks for a target pool of {n_target}, "
                            f"which leaves no auxiliary pool among {_counted(dataset, size.n_samples)}")
        elif n_target + n_auxiliary > size.n_samples:
            sized = f" and {key('auxiliary_size')}: {n_auxiliary}" if settings.get("auxiliary_size") else ""
            problems.append(f"{key(pool)}: {settings[pool]}{sized} ask for a target pool of "
                            f"{n_target} and an auxiliary pool of {n_auxiliary}, more than "
                            f"{_counted(dataset, size.n_samples)}")
        elif min(n_target, n_auxiliary) < 2 * MIN_EXPECTED_SAMPLES:
            problems.append(f"{key(pool)}: {settings[pool]} splits "
                            f"{_counted(dataset, size.n_samples)} into a target pool of {n_target} "
                            f"and an auxiliary pool of {n_auxiliary}; each needs at least "
                            f"{2 * MIN_EXPECTED_SAMPLES}, as reference and population models "
                            f"train on halves of them")
        elif min(members, n_target - members) < MIN_EXPECTED_SAMPLES:
            problems.append(f"{key(member)}: {settings[member]} gives each target model about "
                            f"{members:.0f} members and {n_target - members:.0f} held-out samples "
                            f"of the {n_target} in the target pool of {dataset!r}; each needs at "
                            f"least {MIN_EXPECTED_SAMPLES}")
        else:
            problems += _class_problems(dataset, size, (n_target, members, n_auxiliary),
                                        {key(name): settings[name] for name in (pool, member)})
    return problems


def _shadow_problems(config: Mapping[str, Any], dataset: str, settings: Mapping[str, Any],
                     key: Callable[[str], str]) -> list[str]:
    """A shadow on the auxiliary pool needs population models, and query-augment, which trains
    on reference-0's query outputs, cannot follow it there."""
    from miaflow.workflow.plan import attacks_for, experiments

    if settings.get("shadow", "target") != "auxiliary":
        return []
    if config["splits"]["n_population"] < 2:
        return [f"{key('shadow')}: auxiliary makes population-0 the shadow model of {dataset!r}, "
                f"but splits.n_population is {config['splits']['n_population']}"]
    if not any("query-augment" in attacks_for(config, e) for e in experiments(config)
               if e.dataset == dataset):
        return []
    return [f"{key('shadow')}: 'query-augment' trains on the query outputs of reference-0 on the "
            f"target pool and cannot use the auxiliary shadow of {dataset!r}; leave it out "
            f"(exclude_attacks) or keep shadow: target"]


def _class_problems(dataset: str, size: DatasetSize, sizes: tuple[int, float, int],
                    partition: Mapping[str, Any]) -> list[str]:
    """Partitions under which some model's training or held-out set would expect fewer than
    MIN_EXPECTED_PER_CLASS samples of the dataset's rarest class (where the registry knows it).
    `partition`: the pool's and the members' settings in effect, by key path."""
    if size.smallest_class is None:
        return []
    n_target, members, n_auxiliary = sizes
    target_share = min(members, n_target - members) / size.n_samples  # targets (and references)
    auxiliary_share = n_auxiliary / 2 / size.n_samples  # population models
    share = min(target_share, auxiliary_share)
    if size.smallest_class * share >= MIN_EXPECTED_PER_CLASS:
        return []
    (pool_key, pool_value), (member_key, member_value) = partition.items()
    on_targets = target_share <= auxiliary_share and members != n_target / 2
    key, value = (member_key, member_value) if on_targets else (pool_key, pool_value)
    setting = " and ".join(f"{k} {v}" for k, v in partition.items())
    return [f"{key}: {value} gives some model's training or held-out set about "
            f"{size.smallest_class * share:.1f} samples of the rarest class of {dataset!r} "
            f"({size.smallest_class} in all, with {setting}); each needs at least "
            f"{MIN_EXPECTED_PER_CLASS}, or models miss that class"]


def _query_problems(config: Mapping[str, Any]) -> list[str]:
    """Query counts the query set cannot serve: more queries used than generated (the attack would
    silently use fewer), more image augmentations than distinct rotation angles, and more initial
    HopSkipJump gradient samples than its maximum (which would silently cap them)."""
    from miaflow.queries.sets import ANGLE_CANDIDATES
    from miaflow.workflow.plan import (attacks_for, experiments, generated_queries, modality,
                                       query_count_option)

    options, problems = config.get("attack_options", {}), []
    for experiment in experiments(config):
        data = modality(experiment.dataset)
        for attack in attacks_for(config, experiment):
            generated = generated_queries(config, attack, data)
            used = options.get(attack, {}).get("queries_used")
            source = f"attack_options.{query_count_option(attack, data)}.n_queries"
            if used is not None and used > generated and not (attack == "query-adv"
                                                              and data == "image"):
                problems.append(f"attack_options.{attack}.queries_used: {used} is more than the "
                                f"{generated} queries generated for {data} data ({source})")
            if attack == "query-augment" and data == "image" and generated > len(ANGLE_CANDIDATES):
                problems.append(f"{source}: {generated} is more than the {len(ANGLE_CANDIDATES)} "
                                f"distinct rotation angles of image augmentations")
    budget = options.get("query-adv", {})
    if budget.get("init_eval", 0) > budget.get("max_eval", math.inf):
        problems.append(f"attack_options.query-adv.init_eval: {budget['init_eval']} is more than "
                        f"attack_options.query-adv.max_eval {budget['max_eval']}, which would "
                        f"cap it")
    return list(dict.fromkeys(problems))


# --- datasets: generator options, local files --------------------------------------------------

def _dataset_problems(config: Mapping[str, Any]) -> list[str]:
    """For every dataset the run prepares: options its generator cannot honour, and local copies
    that are missing or differ from the published files.

    A checksum mismatch stops the run (it is not a warning): results computed on a different or
    corrupted file would be reported under the dataset's name. Files without a published checksum
    (see the README's dataset table) are only checked to exist.
    """
    from miaflow.data import DATASETS, checksum_mismatches, dataset_options, source_paths
    from miaflow.workflow.plan import datasets

    problems = []
    for dataset in [d for d in datasets(config) if d in DATASETS]:  # others: _audit_problems
        spec, options = DATASETS[dataset], config.get("datasets", {}).get(dataset, {})
        size = _size(config, dataset)
        if "n_classes" in spec.defaults and size.n_classes > size.n_samples:
            problems.append(f"datasets.{dataset}.n_classes: {size.n_classes} is more than "
                            f"datasets.{dataset}.n_samples {size.n_samples}")
        if spec.offline:
            continue
        local = options.get("path") is not None
        key = f"datasets.{dataset}.path" if local else f"datasets.{dataset}"
        missing = [str(path) for path in source_paths(dataset, options) if not path.is_file()]
        if missing and local:
            files = spec.files(dataset_options(dataset, options))
            names = ", ".join(remote.name for remote in files)
            problems.append(f"{key}: {', '.join(missing)} not found (working directory "
                            f"{Path.cwd()}); point it at a local copy (the file, or a directory "
                            f"holding {names}) or remove it to download into "
                            f"data/raw/{dataset}/")
        fix = ("replace it with the publisher's file, or remove the path to download it" if local
               else "delete it, and rule download_dataset fetches the published one")
        for path, actual, published in checksum_mismatches(dataset, options):
            problems.append(f"{key}: {path} has sha256 {actual}, but the published file has "
                            f"{published}; {fix}")
    return problems


# --- profiles and the effective config ---------------------------------------------------------

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


def validate(params: Any) -> dict[str, Any]:
    """The effective config (`resolve`) if valid; ConfigError naming every bad key otherwise.

    With a profile other than `default`, the problems are those of the effective config, and the
    message says which profile was applied.
    """
    problems = _schema_problems(params)  # the top-level settings and the catalogue's shape
    config = dict(params) if isinstance(params, Mapping) else {}
    if not problems:
        config = resolve(params)
        problems = _schema_problems(config) or _semantic_problems(config)
    if problems:
        profile = config.get("profile", DEFAULT_PROFILE)
        where = "params.yaml" if profile == DEFAULT_PROFILE else f"params.yaml (profile {profile!r})"
        raise ConfigError(f"invalid {where}:\n" + "\n".join(f"  - {p}" for p in problems))
    return config


# --- reading params.yaml -----------------------------------------------------------------------

class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: PyYAML
    (and so Snakemake) would silently keep the last value."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<` merges may be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in lines:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {lines[key] + 1})",
                    key_node.start_mark)
            lines[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(name: str, text: str, error: yaml.YAMLError) -> str:
    """`<file> line N: <what is wrong>` for a YAML error (PyYAML counts lines from 0)."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        reason = error.problem or error.context or "invalid YAML"
        if error.context and error.problem and error.context_mark:
            reason += f" ({error.context} at line {error.context_mark.line + 1})"
        return f"{name} line {mark.line + 1}: {reason}" if mark else f"{name}: {reason}"
    if isinstance(error, yaml.reader.ReaderError):
        line = text.count("\n", 0, error.position) + 1
        return f"{name} line {line}: unacceptable character #x{error.character:04x}"
    return f"{name}: {error}"


def read(path: str | Path = "params.yaml") -> Any:
    """The content of params.yaml, or ConfigError naming the line where it is not valid YAML
    (also: a key given twice in one mapping, and text that is not UTF-8)."""
    name, data = str(path), Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ConfigError(f"{name} line {line}: not UTF-8 text ({error.reason})") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as error:
        raise ConfigError(_yaml_problem(name, text, error)) from None


def checked_yaml(path: str = "params.yaml") -> str:
    """`path`, once it reads as YAML (`read`). The Snakefile hands params.yaml to `configfile:`
    through this, as Snakemake's own loader names no line and keeps duplicate keys silently (a
    missing file is left to Snakemake to report)."""
    if Path(path).exists():
        read(path)
    return path


def load(path: str | Path = "params.yaml") -> dict[str, Any]:
    """The validated effective config of a params file (`read`, then `validate`)."""
    return validate(read(path))
