"""Section `llm`: language-model experiments name known recipes and raw-text corpora that hold
what they draw, measured with the split sizes of `miaflow.llm.corpus` (`trained_sizes`,
`scored_needs`); ReCaLL's shots fit beside a typical target (`miaflow.llm.scores.recall_prefix`);
no attack computes what another configured one does (`miaflow.attacks.registry`); EM-MIA's benchmark
settings have texts to draw from (`miaflow.llm.settings`), and dataset inference's suspect sets
(`miaflow.llm.dataset_inference`); traps go only into texts the workflow trains on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from miaflow.validation.datasets import counted, size


def problems(config: Mapping[str, Any]) -> list[str]:
    """Language-model experiments name known recipes, raw-text corpora that hold what they draw,
    and a pretrained target only on a corpus whose labels are membership; no attack computes what
    another configured one does."""
    from miaflow.data import DATASETS, dataset_options
    from miaflow.plan import MEMBERSHIP_CORPORA, llm_experiments

    llm, problems = config["llm"], []
    for name, recipe in llm["models"].items():
        if recipe["kind"] == "scratch" and recipe["width"] % recipe["heads"]:
            problems.append(
                f"llm.models.{name}: width {recipe['width']} is not a multiple of "
                f"heads {recipe['heads']}"
            )
    if llm["stride"] is not None and llm["stride"] > llm["max_length"]:
        problems.append(
            f"llm.stride: {llm['stride']} is more than llm.max_length "
            f"{llm['max_length']}: windows that far apart would skip tokens"
        )
    seen = set()
    for i, experiment in enumerate(llm_experiments(config)):
        where, dataset = f"llm.experiments[{i}]", experiment["dataset"]
        for role in ("target", "reference"):
            if experiment[f"{role}_recipe"] is None:
                problems.append(
                    f"{where}.{role}: {experiment[role]!r} is not in llm.models "
                    f"(known: {', '.join(sorted(llm['models'])) or 'none'})"
                )
        if (dataset, experiment["label"]) in seen:
            problems.append(f"{where}: target {experiment['target']!r} appears twice on {dataset}")
        seen.add((dataset, experiment["label"]))
        if dataset not in DATASETS:
            continue
        options = dataset_options(dataset, config.get("datasets", {}).get(dataset, {}))
        if DATASETS[dataset].modality != "text" or options.get("representation", "text") != "text":
            problems.append(
                f"{where}.dataset: {dataset!r} is not raw text; language models need "
                f"a text dataset with datasets.{dataset}.representation: text"
            )
        target = experiment["target_recipe"]
        if target and target["kind"] == "pretrained" and dataset not in MEMBERSHIP_CORPORA:
            problems.append(
                f"{where}.target: a pretrained target's members are unknown on "
                f"{dataset!r}; use a corpus whose labels are membership "
                f"({', '.join(MEMBERSHIP_CORPORA)}) or a scratch/finetune recipe"
            )
        if llm["pair_shards"] > experiment["n_eval"]:
            problems.append(
                f"llm.pair_shards: {llm['pair_shards']} is more than {where}'s n_eval "
                f"{experiment['n_eval']} (one prefix row at least per shard)"
            )
        if experiment["target_recipe"] and experiment["reference_recipe"]:
            problems += _corpus_problems(where, i, experiment, config)
            problems += _prefix_problems(where, experiment, options, llm)
    return (
        problems
        + _attack_duplicates(llm)
        + _settings_problems(config)
        + _inference_problems(config)
        + _trap_problems(config)
    )


def _inference_problems(config: Mapping[str, Any]) -> list[str]:
    """Dataset inference's suspect sets fit every tested experiment's repeats: a suspect set of n
    members needs n members, and n non-member suspects with n others to validate them need 2n
    non-members outside the reference share (`miaflow.llm.dataset_inference.simulate`)."""
    from miaflow.llm.corpus import trained_sizes
    from miaflow.plan import llm_inference_experiments

    llm, problems = config["llm"], []
    for experiment in llm_inference_experiments(config):
        dataset_size = size(config, experiment["dataset"])
        if dataset_size is None:
            continue
        corpus = experiment["n_texts"] or dataset_size.n_samples
        _, members, non_members = trained_sizes(corpus, llm["reference_ratio"])
        largest = max(llm["dataset_inference"]["sizes"])
        if largest > members or 2 * largest > non_members:
            problems.append(
                f"llm.dataset_inference.sizes: a suspect set of {largest} texts needs {largest} "
                f"members and {2 * largest} non-members per repeat, but the experiment on "
                f"{experiment['dataset']!r} with target {experiment['target']!r} has {members} "
                f"and {non_members} (besides llm.reference_ratio's share)"
            )
    return problems


def _trap_problems(config: Mapping[str, Any]) -> list[str]:
    """Traps are inserted into texts the workflow trains on: a pretrained target's training data
    is not ours to change."""
    from miaflow.plan import llm_experiments

    problems = []
    for i, experiment in enumerate(llm_experiments(config)):
        target = experiment["target_recipe"]
        if experiment["traps"] is not None and target and target["kind"] == "pretrained":
            problems.append(
                f"llm.experiments[{i}].traps: target {experiment['target']!r} is pretrained; "
                "traps need a target trained or fine-tuned here (kind scratch or finetune)"
            )
    return problems


def _settings_problems(config: Mapping[str, Any]) -> list[str]:
    """EM-MIA's benchmark settings (`miaflow.llm.settings`): lengths either whole texts or word
    counts, and per repeat of every trained experiment enough members and non-members for a
    setting and for a shard of its matrices."""
    from miaflow.llm.corpus import trained_sizes
    from miaflow.plan import llm_experiments, llm_membership

    llm = config["llm"]
    settings, problems = llm["settings"], []
    if not settings["names"]:
        return []
    if None in settings["lengths"] and len(settings["lengths"]) > 1:
        problems.append(
            "llm.settings.lengths: null (whole texts) cannot be combined with word lengths "
            f"{[n for n in settings['lengths'] if n is not None]}: a text has one scored form"
        )
    if llm["pair_shards"] > settings["n_eval"]:
        problems.append(
            f"llm.pair_shards: {llm['pair_shards']} is more than llm.settings.n_eval "
            f"{settings['n_eval']} (one prefix row at least per shard)"
        )
    half = settings["n_eval"] // 2
    for i, experiment in enumerate(llm_experiments(config)):
        dataset_size = size(config, experiment["dataset"])
        if (
            dataset_size is None
            or experiment["target_recipe"] is None
            or llm_membership(experiment) != "trained"
        ):
            continue
        corpus = experiment["n_texts"] or dataset_size.n_samples
        _, members, non_members = trained_sizes(corpus, llm["reference_ratio"])
        non_members -= llm["n_shots"]
        if min(members, non_members) < max(half, settings["clusters"]):
            problems.append(
                f"llm.settings: n_eval {settings['n_eval']} and clusters "
                f"{settings['clusters']} need {max(half, settings['clusters'])} members and as "
                f"many non-members per repeat, but llm.experiments[{i}] has {members} and "
                f"{non_members} (besides the reference share and ReCaLL's shots)"
            )
    return problems


def _corpus_problems(
    where: str, index: int, experiment: Mapping[str, Any], config: Mapping[str, Any]
) -> list[str]:
    """Whether a language-model experiment's corpus holds what it draws: `n_texts` texts (else the
    subset would silently be the whole corpus), the reference model's share, and per repeat
    n_eval/2 members plus n_eval/2 + n_shots non-members (`miaflow.llm.corpus.draw_splits`)."""
    from miaflow.llm.corpus import scored_needs, trained_sizes
    from miaflow.plan import MEMBERSHIP_CORPORA

    llm, dataset = config["llm"], experiment["dataset"]
    dataset_size = size(config, dataset)
    if dataset_size is None:
        return []
    corpus, texts = dataset_size.n_samples, counted(dataset, dataset_size.n_samples, "texts")
    if experiment["n_texts"] is not None:
        if experiment["n_texts"] > corpus:
            return [f"{where}.n_texts: {experiment['n_texts']} is more than {texts}"]
        corpus = experiment["n_texts"]
        texts = f"the {corpus} texts of {where}.n_texts"
    key = f"{where}.n_eval" if "n_eval" in llm["experiments"][index] else "llm.n_eval"
    n_eval, shots = experiment["n_eval"], llm["n_shots"]
    if experiment["target_recipe"]["kind"] == "pretrained" and dataset in MEMBERSHIP_CORPORA:
        if n_eval + shots > corpus:
            return [
                f"{key}: {n_eval} scored texts and llm.n_shots {shots} need {n_eval + shots} "
                f"texts, more than {texts}"
            ]
        return []
    n_reference, members, non_members = trained_sizes(corpus, llm["reference_ratio"])
    if n_reference < 1 and experiment["reference_recipe"]["kind"] != "pretrained":
        return [
            f"llm.reference_ratio: {llm['reference_ratio']} leaves none of {texts} to train "
            f"the reference model of {where}"
        ]
    needed_members, needed_non_members = scored_needs(n_eval, shots)
    if members < needed_members or non_members < needed_non_members:
        return [
            f"{key}: {n_eval} scored texts (half members) and llm.n_shots {shots} need "
            f"{needed_members} members and {needed_non_members} non-members per repeat, but "
            f"{texts} leave {members} and {non_members} besides llm.reference_ratio's share"
        ]
    return []


def _prefix_problems(
    where: str, experiment: Mapping[str, Any], options: Mapping[str, Any], llm: Mapping[str, Any]
) -> list[str]:
    """Whether ReCaLL's n_shots shots fit beside a typical target in the tokens its conditional
    likelihood gets: llm.max_length, and for a scratch target also the positions it has
    (`context`) and trains at (`block_size`). A typical text is taken as its corpus' median words,
    one token each (`miaflow.llm.corpus.typical_words`, a lower bound), so a setting rejected here
    cuts the prefix of most targets; corpora of unknown length are not checked (the prefix-cut
    column of the language-model table shows what happened). A pretrained or fine-tuned model's
    own context is not known before it loads."""
    from miaflow.attacks.registry import attack_options, llm_reads
    from miaflow.llm.corpus import typical_words
    from miaflow.llm.scores import recall_prefix

    words = typical_words(experiment["dataset"], options)
    if words is None or "recall" not in llm_reads(llm["attacks"], llm["attack_options"]):
        return []
    limits = {"llm.max_length": llm["max_length"]}
    target = experiment["target_recipe"]
    if target["kind"] == "scratch":
        limits[f"llm.models.{experiment['target']}.context"] = target["context"]
        limits[f"llm.models.{experiment['target']}.block_size"] = target["block_size"]
    window = min(limits.values())
    compat = attack_options("llm-recall", llm["attack_options"]).compat
    separator = 0 if compat or not llm["separator"] else 1
    shots = llm["n_shots"]
    kept = recall_prefix([words] * shots, separator, words, window)
    if kept == shots:
        return []
    binding = " and ".join(f"{key} {value}" for key, value in limits.items() if value == window)
    needed = shots * (words + separator) + words
    return [
        f"llm.n_shots: {shots} shots and a target of {experiment['dataset']!r} (median {words} "
        f"words, at least a token each) need {needed} tokens for ReCaLL in {where}, more than "
        f"{binding}: a typical target's prefix would keep {kept} shots; raise "
        f"{', '.join(limits)} to at least {needed} or lower llm.n_shots"
    ]


def _attack_duplicates(llm: Mapping[str, Any]) -> list[str]:
    """Language-model attacks that compute the same scores as another configured one: a
    generated variant (the Min-K% k sweep, EM-MIA from a start with a prefix score) whose fixed
    settings are what the options of the attack it varies give it (e.g. llm-mink at k 0.1 and
    llm-mink-k10)."""
    from miaflow.attacks.registry import ATTACKS, attack_options

    attacks, options = llm["attacks"], llm["attack_options"]
    problems = []
    for i, name in enumerate(attacks):
        base = ATTACKS[name].options_of
        if base in attacks and attack_options(base, options) == attack_options(name, options):
            settings = ATTACKS[name].settings
            given = " and ".join(
                f"llm.attack_options.{base}.{key} is {value}" for key, value in settings.items()
            )
            problems.append(f"llm.attacks[{i}]: {name!r} duplicates {base!r} in effect ({given})")
    return problems
