"""Validation that prevents misleading results: what used to pass validation and then doubled
rows, crashed a job, hung planning or was silently capped is rejected before any job, naming the
key and the reason; YAML errors name the line; local dataset files are checked."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import problems_of

from miaflow import config, plan
from miaflow.data import checksum_mismatches, dataset_size, load_dataset


@pytest.fixture
def params(repo, monkeypatch) -> dict:
    monkeypatch.chdir(repo)  # local dataset paths are relative to the working directory
    return yaml.safe_load((repo / "params.yaml").read_text())


def changed(params: dict, change) -> dict:
    changed_params = copy.deepcopy(params)
    change(changed_params)
    return changed_params


# --- duplicates in effect ----------------------------------------------------------------------


def test_an_experiment_that_duplicates_another_in_effect_is_rejected(params):
    same_arch = changed(
        params,
        lambda p: p["experiments"].append({"dataset": "digits", "arch": "cnn", "ref_arch": "cnn"}),
    )
    assert (
        "experiments[4]: duplicates experiments[0] in effect (ref_arch equals arch; both "
        "report digits/cnn)"
    ) in problems_of(same_arch)
    excluding = changed(
        params,
        lambda p: p["experiments"].append(
            {
                "dataset": "breast_cancer",
                "arch": "catboost",
                "ref_arch": "lr",
                "exclude_attacks": ["metric-loss"],
            }
        ),
    )
    assert (
        "experiments[4]: duplicates experiments[3] in effect (only exclude_attacks differs; "
        "both report breast_cancer/catboost_ref_lr)"
    ) in problems_of(excluding)
    # ref_arch equal to arch is only redundant when no other experiment says the same
    alone = changed(params, lambda p: p["experiments"][0].update(ref_arch="cnn"))
    assert config.validate(alone)["experiments"][0]["ref_arch"] == "cnn"


def test_fpr_levels_with_one_metric_name_are_rejected(params):
    near = changed(
        params, lambda p: p["metrics"].update(fpr_levels=[0.001, 0.01, 0.1, 0.0100000001])
    )
    assert (
        "metrics.fpr_levels[3]: 0.0100000001 duplicates metrics.fpr_levels[1] (0.01) in effect "
        "(both report tpr_at_1pct_fpr)"
    ) in problems_of(near)
    language = changed(params, lambda p: p["llm"].update(fpr_levels=[0.0100000001, 0.05]))
    assert "llm.fpr_levels[0]: 0.0100000001 duplicates metrics.fpr_levels[1] (0.01)" in problems_of(
        language
    )
    assert params["llm"]["fpr_levels"][0] == params["metrics"]["fpr_levels"][1]  # equal is fine
    assert config.validate(params)


def test_language_model_attacks_that_duplicate_another_are_rejected(params):
    em = changed(params, lambda p: p["llm"]["attacks"].append("em-mia-minkpp-auroc"))
    assert (
        f"llm.attacks[{len(params['llm']['attacks'])}]: 'em-mia-minkpp-auroc' duplicates "
        "'em-mia' in effect "
        "(llm.attack_options.em-mia.init is minkpp and llm.attack_options.em-mia.scoring is "
        "auroc)"
    ) in problems_of(em)
    em["llm"]["attack_options"]["em-mia"] = {"scoring": "kendall"}  # now its own variant ...
    assert "em-mia-minkpp-kendall' duplicates 'em-mia'" in problems_of(em)
    em["llm"]["attacks"].remove("em-mia-minkpp-kendall")  # ... which must then go
    assert config.validate(em)
    min_k = changed(params, lambda p: p["llm"]["attack_options"].update({"llm-mink": {"k": 0.1}}))
    assert (
        "'llm-mink-k10' duplicates 'llm-mink' in effect (llm.attack_options.llm-mink.k is 0.1)"
    ) in problems_of(min_k)


def test_a_stride_longer_than_the_window_is_rejected(params):
    far = changed(params, lambda p: p["llm"].update(max_length=10, stride=12))
    assert (
        "llm.stride: 12 is more than llm.max_length 10: windows that far apart would skip tokens"
    ) in problems_of(far)
    assert config.validate(changed(params, lambda p: p["llm"].update(max_length=120, stride=120)))


def test_recall_shots_that_cannot_fit_beside_a_typical_target_are_rejected(params):
    """8 shots and a target of 'synthetic_text' (median 12 words, a token each at least) need
    8 × 13 + 12 = 116 tokens: the library's own arithmetic (`recall_prefix`) decides."""
    short = changed(params, lambda p: p["llm"].update(max_length=64))
    message = problems_of(short)
    assert "llm.n_shots: 8 shots and a target of 'synthetic_text'" in message
    assert "need 116 tokens for ReCaLL in llm.experiments[0], more than llm.max_length 64" in (
        message
    )
    for key in ("llm.models.gpt2_tiny.context", "llm.models.gpt2_tiny.block_size"):
        assert key in message
    narrow = changed(params, lambda p: p["llm"]["models"]["gpt2_tiny"].update(context=100))
    assert "more than llm.models.gpt2_tiny.context 100" in problems_of(narrow)
    assert config.validate(changed(params, lambda p: p["llm"].update(max_length=116)))
    assert config.validate(changed(params, lambda p: p["llm"].update(max_length=64, n_shots=4)))
    # without ReCaLL (and Con-ReCall, which reads its likelihoods) nothing needs the room
    prefixed = ("llm-recall", "llm-conrecall")
    assert config.validate(
        changed(
            params,
            lambda p: p["llm"].update(
                max_length=64, attacks=[a for a in p["llm"]["attacks"] if a not in prefixed]
            ),
        )
    )
    for profile in ("llm-cpu", "paper"):  # their recipes leave every target its full prefix
        assert config.validate({**params, "profile": profile})


def test_recall_takes_a_compat_option(params):
    compat = changed(
        params, lambda p: p["llm"]["attack_options"].update({"llm-recall": {"compat": True}})
    )
    assert config.validate(compat)["llm"]["attack_options"]["llm-recall"] == {"compat": True}
    unknown = changed(
        params, lambda p: p["llm"]["attack_options"].update({"llm-recall": {"separator": ""}})
    )
    assert "llm.attack_options.llm-recall" in problems_of(unknown)


def test_study_settings_and_privacy_budgets_need_distinct_paths(params):
    twin = changed(
        params,
        lambda p: p["hparam_study"]["settings"].append(
            {"dataset": "digits", "shots": 8, "backbone_model": "elsewhere"}
        ),
    )
    assert (
        "hparam_study.settings[1]: duplicates hparam_study.settings[0] in effect (both are "
        "setting digits_s8)"
    ) in problems_of(twin)
    close = changed(params, lambda p: p["hparam_study"].update(epsilons=[8, 8.0000001]))
    assert [plan.epsilon_tag(e) for e in config.validate(close)["hparam_study"]["epsilons"]] == [
        "8",
        "8.0000001",
    ]  # once both were eps-8 (and ran as ε = 8)
    assert plan.epsilon_tag(0.001) == "0.001" and float(plan.epsilon_tag(0.1 + 0.2)) == 0.1 + 0.2
    tiny = changed(params, lambda p: p["hparam_study"].update(epsilons=[float("inf"), 1e-5]))
    assert "hparam_study.epsilons[1]: 1e-05 is outside [0.001, 1000.0]" in problems_of(tiny)
    deltas = changed(params, lambda p: p["hparam_study"].update(bound_deltas=[0.1, 0.1]))
    assert "hparam_study.bound_deltas: [0.1, 0.1] has non-unique elements" in problems_of(deltas)


# --- what the data supports ------------------------------------------------------------------


def test_split_ratios_that_leave_a_pool_too_small_are_rejected(params):
    target = changed(params, lambda p: p["splits"].update(target_ratio=0.02))
    message = problems_of(target)
    assert (
        "splits.target_ratio: 0.02 splits the 1797 samples of 'digits' into a target pool of "
        "35 and an auxiliary pool of 1762; each needs at least 40"
    ) in message
    assert "'purchase'" not in message  # 40 of its 2000 samples are enough
    member = changed(params, lambda p: p["splits"].update(member_ratio=0.05))
    assert (
        "splits.member_ratio: 0.05 gives each target model about 14 members and 270 held-out "
        "samples of the 284 in the target pool of 'breast_cancer'; each needs at least 20"
    ) in problems_of(member)
    rare = changed(params, lambda p: p["splits"].update(target_ratio=0.05))  # T: 89 of 1797
    # each target: about 44.5 of the 89, so 174 * 44.5 / 1797 samples of the rarest class
    assert (
        "splits.target_ratio: 0.05 gives some model's training or held-out set about 4.3 "
        "samples of the rarest class of 'digits' (174 in all, with splits.target_ratio 0.05 and "
        "splits.member_ratio 0.5); each needs at least 5"
    ) in problems_of(rare)
    generated = changed(
        params,
        lambda p: (
            p["datasets"]["purchase"].update(n_samples=100),
            p["splits"].update(target_ratio=0.3),
        ),
    )
    assert (
        "the 100 samples of 'purchase' (datasets.purchase.n_samples) into a target pool of 30"
        in problems_of(generated)
    )
    generated["splits"]["target_ratio"] = 0.5
    assert config.validate(generated)


def test_a_dataset_partition_is_checked_under_its_own_keys(params):
    def memguard(p, exclude=("query-augment",), **partition):
        p["experiments"].append(
            {"dataset": "location30", "arch": "mlp", "exclude_attacks": list(exclude)}
        )
        p["splits"]["datasets"] = {
            "location30": {
                "target_size": 2000,
                "members": 1000,
                "auxiliary_size": 1000,
                "shadow": "auxiliary",
                **partition,
            }
        }

    assert config.validate(changed(params, memguard))
    too_many = problems_of(changed(params, lambda p: memguard(p, auxiliary_size=4000)))
    assert (
        "splits.datasets.location30.target_size: 2000 and splits.datasets.location30."
        "auxiliary_size: 4000 ask for a target pool of 2000 and an auxiliary pool of 4000, more "
        "than the 5010 samples of 'location30'"
    ) in too_many
    too_large = problems_of(
        changed(params, lambda p: memguard(p, target_size=6000, auxiliary_size=None))
    )
    assert (
        "splits.datasets.location30.target_size: 6000 asks for a target pool of 6000, which "
        "leaves no auxiliary pool among the 5010 samples of 'location30'"
    ) in too_large
    few = problems_of(changed(params, lambda p: memguard(p, members=1990)))
    assert (
        "splits.datasets.location30.members: 1990 gives each target model about 1990 members "
        "and 10 held-out samples of the 2000 in the target pool of 'location30'"
    ) in few
    assert "splits.target_ratio" not in few  # the global partition of the other datasets is fine
    no_population = problems_of(
        changed(params, lambda p: (memguard(p), p["splits"].update(n_population=0)))
    )
    assert (
        "splits.datasets.location30.shadow: auxiliary makes population-0 the shadow model of "
        "'location30', but splits.n_population is 0"
    ) in no_population
    with_augment = changed(params, lambda p: memguard(p, exclude=()))
    assert (
        "splits.datasets.location30.shadow: 'query-augment' trains on the query outputs of "
        "reference-0"
    ) in problems_of(with_augment)
    unused = problems_of(
        changed(params, lambda p: p["splits"].update(datasets={"adult": {"members": 10}}))
    )
    assert "splits.datasets.adult: no experiment trains models on 'adult'" in unused
    typo = problems_of(
        changed(params, lambda p: p["splits"].update(datasets={"digits": {"member": 10}}))
    )
    assert "splits.datasets.digits" in typo


def test_momentum_is_only_for_sgd(params):
    adam = changed(params, lambda p: p["architectures"]["mlp"].update(momentum=0.5))
    assert (
        "architectures.mlp.momentum: only optimizer sgd has momentum, 'mlp' uses 'adam'"
        in problems_of(adam)
    )
    assert config.validate(
        changed(
            params,
            lambda p: p["architectures"]["mlp"].update(
                optimizer="sgd", momentum=0.0, lr_schedule={"step_size": 10, "gamma": 0.1}
            ),
        )
    )
    bad_schedule = changed(params, lambda p: p["architectures"]["mlp"].update(lr_schedule="linear"))
    assert "architectures.mlp.lr_schedule" in problems_of(bad_schedule)


def test_study_shots_need_enough_samples_of_every_class(params):
    params["hparam_study"]["settings"] = [{"dataset": "digits", "shots": 43}]  # 172 <= 174
    assert config.validate(params)
    params["hparam_study"]["settings"] = [{"dataset": "digits", "shots": 44}]
    assert (
        "hparam_study.settings[0].shots: 44 needs 176 samples of every class of 'digits' (two "
        "disjoint universes of 2·shots), but its smallest class has 174"
    ) in problems_of(params)
    params["hparam_study"]["settings"] = [{"dataset": "purchase", "shots": 16}]
    assert (
        "hparam_study.settings[0].shots: 16 needs 64 samples of each of the 50 classes of "
        "'purchase' (two disjoint universes of 2·shots), more than the 2000 samples of "
        "'purchase' (datasets.purchase.n_samples)"
    ) in problems_of(params)


def test_study_settings_need_features_their_heads_can_read(params):
    params["hparam_study"]["settings"] = [
        {"dataset": "breast_cancer", "shots": 8, "backbone": "vit-b16"},
        {"dataset": "rotten_tomatoes", "shots": 8},
    ]
    params["datasets"]["rotten_tomatoes"]["representation"] = "text"
    message = problems_of(params)
    assert (
        "hparam_study.settings[0].backbone: 'vit-b16' embeds images, but 'breast_cancer' is tabular"
    ) in message
    assert (
        "hparam_study.settings[1].dataset: the study's linear heads need features, but "
        "'rotten_tomatoes' is raw text"
    ) in message


def test_a_black_box_setting_needs_a_backbone_an_image_dataset_and_another_shadow(params):
    lite0 = {"dataset": "mnist5k", "shots": 32, "backbone": "efficientnet-lite0"}
    pixels = {"shadow_backbone": "pixels"}
    params["hparam_study"]["settings"] = [
        {**lite0, "shadow_backbone": "efficientnet-lite2"},
        {**lite0, **pixels},
        {"dataset": "digits", "shots": 8, "shadow_backbone": "efficientnet-lite2"},
        {**lite0, "shadow_backbone": "efficientnet-lite0"},
        {"dataset": "breast_cancer", "shots": 8, "backbone": "vit-b16", **pixels},
    ]
    message = problems_of(params)
    assert "settings[0]" not in message and "settings[1]" not in message
    assert (
        "hparam_study.settings[2].shadow_backbone: 'efficientnet-lite2' needs the targets' "
        "backbone too"
    ) in message
    assert (
        "hparam_study.settings[3].shadow_backbone: 'efficientnet-lite0' is the targets' backbone"
    ) in message
    assert (
        "hparam_study.settings[4].shadow_backbone: 'pixels' embeds images, but the dataset is "
        "tabular"
    ) in message
    params["hparam_study"]["settings"] = [{**lite0, "shadow_backbone": "resnet"}]
    assert "shadow_backbone" in problems_of(params)
    params["hparam_study"]["settings"] = [{**lite0, "shadow_backbone": "efficientnet-lite2"}]
    assert plan.hparam_settings(config.validate(params))[0]["name"] == (
        "mnist5k_s32_efficientnet_lite0_shadow_efficientnet_lite2"
    )


def test_language_model_corpora_must_hold_what_an_experiment_draws(params):
    subset = changed(params, lambda p: p["llm"]["experiments"][0].update(n_texts=5000))
    assert (
        "llm.experiments[0].n_texts: 5000 is more than the 600 texts of 'synthetic_text' "
        "(datasets.synthetic_text.n_samples)"
    ) in problems_of(subset)  # was silently all 600
    # 600 texts: 150 train the reference model, 225 members and 225 non-members remain
    assert config.validate(changed(params, lambda p: p["llm"].update(n_eval=434)))  # 217 + 225
    shots = changed(params, lambda p: p["llm"].update(n_eval=436))  # 218 + 8 shots > 225
    assert (
        "llm.n_eval: 436 scored texts (half members) and llm.n_shots 8 need 218 members and "
        "226 non-members per repeat, but the 600 texts of 'synthetic_text' "
        "(datasets.synthetic_text.n_samples) leave 225 and 225"
    ) in problems_of(shots)
    own = changed(params, lambda p: p["llm"]["experiments"][0].update(n_eval=752))
    assert "llm.experiments[0].n_eval: 752 scored texts" in problems_of(own)
    reference = changed(params, lambda p: p["llm"].update(reference_ratio=0.0001))
    assert (
        "llm.reference_ratio: 0.0001 leaves none of the 600 texts of 'synthetic_text' "
        "(datasets.synthetic_text.n_samples) to train the reference model of llm.experiments[0]"
    ) in problems_of(reference)


def test_benchmark_settings_name_the_key_of_what_they_cannot_draw(params):
    """llm.settings: names and lengths checked by the schema; null (whole texts) not mixed with
    word lengths; a repeat's members and non-members hold half a setting and the clusters."""
    assert config.validate(changed(params, lambda p: p["llm"]["settings"].update(names=[])))
    unknown = changed(params, lambda p: p["llm"]["settings"].update(names=["random", "tough"]))
    assert "llm.settings.names[1]: 'tough' is not one of" in problems_of(unknown)
    lengths = changed(params, lambda p: p["llm"]["settings"].update(lengths=[0]))
    assert "llm.settings.lengths[0]: 0 is less than the minimum of 1" in problems_of(lengths)
    mixed = changed(params, lambda p: p["llm"]["settings"].update(lengths=[None, 12]))
    assert (
        "llm.settings.lengths: null (whole texts) cannot be combined with word lengths [12]"
        in problems_of(mixed)
    )
    assert config.validate(changed(params, lambda p: p["llm"]["settings"].update(lengths=[8, 12])))
    # 600 texts: 225 members and 225 - 8 shots = 217 non-members per repeat
    assert config.validate(changed(params, lambda p: p["llm"]["settings"].update(n_eval=434)))
    large = changed(params, lambda p: p["llm"]["settings"].update(n_eval=436))
    assert (
        "llm.settings: n_eval 436 and clusters 4 need 218 members and as many non-members per "
        "repeat, but llm.experiments[0] has 225 and 217"
    ) in problems_of(large)
    shards = changed(params, lambda p: p["llm"].update(pair_shards=40))
    assert "llm.pair_shards: 40 is more than llm.settings.n_eval 32" in problems_of(shards)


def test_generated_datasets_need_options_their_generator_honours(params):
    params["datasets"]["purchase"].update(n_samples=100, n_classes=150)
    assert (
        "datasets.purchase.n_classes: 150 is more than datasets.purchase.n_samples 100"
        in problems_of(params)
    )


# --- counts beyond what the machine supports, values that would be capped ---------------------


def test_runs_beyond_an_exact_permutation_test_are_rejected(params):
    assert config.validate(changed(params, lambda p: p["hparam_study"].update(runs=16)))
    many = changed(
        params,
        lambda p: (
            p["splits"].update(repeats=17),
            p["llm"].update(repeats=17),
            p["hparam_study"].update(runs=17),
        ),
    )
    message = problems_of(many)
    assert (
        "hparam_study.runs: 17 is more than 16: the exact paired permutation tests would "
        "enumerate all 2^17 sign flips (or set hparam_study.permutation_resamples"
    ) in message
    # The tests between attacks permute samples, not repeats: any number of repeats will do.
    assert "splits.repeats" not in message and "llm.repeats" not in message
    sampled = changed(
        params, lambda p: p["hparam_study"].update(runs=17, permutation_resamples=1000)
    )
    assert config.validate(sampled)["hparam_study"]["runs"] == 17


def test_absurd_counts_are_rejected_with_the_reason_of_their_bound(params):
    params["splits"]["n_reference"] = 1024
    params["llm"]["n_eval"] = 100000
    message = problems_of(params)
    assert (
        "splits.n_reference: 1024 is greater than the maximum of 512; Paired design: even; at "
        "most 512 models per experiment and role."
    ) in message
    assert (
        "llm.n_eval: 100000 is greater than the maximum of 10000; N texts scored per repeat"
        in message
    )


def test_query_counts_beyond_the_query_set_are_rejected(params):
    params["attack_options"]["query-neighbor"] = {"queries_used": 10}  # the 10 generated
    assert config.validate(params)
    params["attack_options"]["query-neighbor"]["queries_used"] = 11  # was silently 10
    assert (
        "attack_options.query-neighbor.queries_used: 11 is more than the 10 queries generated "
        "for tabular data (attack_options.query-neighbor.n_queries)"
    ) in problems_of(params)
    params["attack_options"]["query-neighbor"].pop("queries_used")
    params["attack_options"]["query-augment"] = {"n_queries": 283}  # crashed drawing the angles
    assert (
        "attack_options.query-augment.n_queries: 283 is more than the 282 distinct rotation "
        "angles of image augmentations"
    ) in problems_of(params)
    params["attack_options"]["query-augment"]["n_queries"] = 10
    params["attack_options"]["query-adv"] = {"init_eval": 2000, "max_eval": 1000}
    assert (
        "attack_options.query-adv.init_eval: 2000 is more than attack_options.query-adv.max_eval "
        "1000, which would cap it"
    ) in problems_of(params)
    params["attack_options"]["query-adv"] = {"init_eval": 201}  # over the default max_eval 200
    assert (
        "attack_options.query-adv.init_eval: 201 is more than attack_options.query-adv.max_eval "
        "200, which would cap it"
    ) in problems_of(params)


def test_the_scaling_sweep_counts_the_queries_each_attack_reads():
    config_ = {
        "attacks": ["query-augment"],
        "experiments": [],
        "attack_options": {"query-neighbor": {"n_queries": 4}, "query-augment": {"n_queries": 6}},
    }
    text = plan.Experiment("rotten_tomatoes", "mlp", "mlp")
    tabular = plan.Experiment("purchase", "mlp", "mlp")
    assert plan.swept_query_attacks(config_, text) == {"query-augment": [1, 2, 4]}  # neighbours
    assert plan.swept_query_attacks(config_, tabular) == {"query-augment": [1, 2, 5, 6]}
    config_["attack_options"] = {"query-neighbor": {"n_queries": 20}}  # augment keeps its 10
    assert plan.swept_query_attacks(config_, tabular) == {"query-augment": [1, 2, 5, 10]}


# --- local dataset files --------------------------------------------------------------------


def test_a_missing_local_file_names_the_path_key(params, tmp_path):
    params["experiments"].append({"dataset": "adult", "arch": "mlp"})
    params["datasets"]["adult"]["path"] = str(tmp_path / "nowhere")
    assert (
        f"datasets.adult.path: {tmp_path}/nowhere/adult.data, {tmp_path}/nowhere/adult.test not "
        f"found"
    ) in problems_of(params)
    params["datasets"]["adult"].pop("path")  # then rule download_dataset fetches it
    assert config.validate(params)


def test_a_local_copy_must_match_the_published_checksum(params, tmp_path, shared_data):
    params["experiments"].append({"dataset": "location30", "arch": "mlp"})
    assert config.validate(params)  # the shared copy is the published file
    other = tmp_path / "dataset_location.tgz"
    other.write_bytes((shared_data / "location30/dataset_location.tgz").read_bytes()[:-1])
    params["datasets"]["location30"]["path"] = str(other)
    assert (f"datasets.location30.path: {other} has sha256 ") in problems_of(params)
    assert (
        "but the published file has "
        "927203f85a868f8ee17a0ded1dc61699efe602167beabe34fbf45b4b1de94b33"
    ) in problems_of(params)
    assert [
        (path, published[:6])
        for path, _, published in checksum_mismatches("location30", {"path": str(other)})
    ] == [(other, "927203")]


def test_a_file_placed_in_data_raw_is_checked_too(params, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params["experiments"].append({"dataset": "location30", "arch": "mlp"})
    params["datasets"]["location30"] = {}
    assert config.validate(params)  # missing: rule download_dataset fetches (and checks) it
    raw = tmp_path / "data/raw/location30/dataset_location.tgz"
    raw.parent.mkdir(parents=True)
    raw.write_bytes(b"not the archive")
    assert (
        "datasets.location30: data/raw/location30/dataset_location.tgz has sha256"
    ) in problems_of(params)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("digits", {}),
        ("breast_cancer", {}),
        ("synthetic_text", {"n_samples": 64}),
        ("purchase", {"n_samples": 300, "n_features": 20, "n_classes": 3}),
    ],
)
def test_registered_sizes_match_the_embedded_data(name, options):
    loaded, size = load_dataset(name, options, seed=0), dataset_size(name, options)
    counts = np.bincount(loaded.labels, minlength=loaded.n_classes)
    assert (size.n_samples, size.n_classes) == (len(loaded.labels), loaded.n_classes)
    assert size.smallest_class in (None, counts.min())


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("location30", {"path": "location30/dataset_location.tgz"}),
        ("students_dropout", {"path": "students_dropout/students_dropout_academic_success.csv"}),
        ("adult", {"path": "adult"}),
        ("rotten_tomatoes", {"path": "rotten_tomatoes"}),
        ("cola", {"path": "cola"}),
        ("tweeteval", {"path": "tweeteval", "task": "hate"}),
        ("tweeteval", {"path": "tweeteval", "task": "emotion"}),
        ("tweeteval", {"path": "tweeteval", "task": "stance/climate"}),
    ],
)
def test_registered_sizes_match_the_published_files(name, options, shared_data):
    options = {**options, "path": str(shared_data / options["path"])}
    if name in ("rotten_tomatoes", "cola", "tweeteval"):
        options["representation"] = "text"  # no embedding model needed to count
    loaded, size = load_dataset(name, options, seed=0), dataset_size(name, options)
    assert (size.n_samples, size.n_classes) == (len(loaded.labels), loaded.n_classes)
    assert size.smallest_class == np.bincount(loaded.labels, minlength=loaded.n_classes).min()


# --- reading params.yaml ------------------------------------------------------------------------


def test_yaml_errors_name_the_line(repo, tmp_path):
    text = (repo / "params.yaml").read_text()
    path = tmp_path / "params.yaml"
    path.write_text(text.replace("  repeats: 3\n", "  repeats: [3\n", 1))
    line = text.splitlines().index("  repeats: 3") + 1
    with pytest.raises(
        config.ConfigError,
        match=rf"params.yaml line {line + 1}: expected ',' or "
        rf"']', but got ':' \(while parsing a flow "
        rf"sequence at line {line}\)",
    ):
        config.load(path)
    path.write_text(text + "\nseed: 7\n")  # YAML itself would silently keep the last one
    with pytest.raises(
        config.ConfigError,
        match=r"params.yaml line \d+: duplicate key 'seed' "
        r"\(first at line 10\)",
    ):
        config.load(path)
    path.write_bytes(b"seed: 1\nname: caf\xe9\n")
    with pytest.raises(config.ConfigError, match="params.yaml line 2: not UTF-8 text"):
        config.load(path)
    path.write_text("base: &base {a: 1}\nother:\n  <<: *base\n  a: 2\n")  # merges may override
    assert config.read(path)["other"] == {"a": 2}
    assert config.checked_yaml(str(repo / "params.yaml")) == str(repo / "params.yaml")


def test_params_that_are_not_a_mapping_are_rejected():
    for content in (None, [1], "seed"):
        with pytest.raises(config.ConfigError, match=r"\(top level\): .* is not of type 'object'"):
            config.validate(content)


FILES = ["Snakefile", "rules", "scripts", "miaflow", "profiles", "envs", "params.yaml"]


def snakemake_dry_run(repo: Path, root: Path, params_text: str) -> tuple[int, str]:
    """`snakemake -n` in a copy of the workflow whose params.yaml is `params_text`: its exit
    status and output."""
    root.mkdir()
    for name in FILES:
        (shutil.copytree if (repo / name).is_dir() else shutil.copy)(repo / name, root / name)
    (root / "params.yaml").write_text(params_text)
    snakemake = Path(sys.executable).parent / "snakemake"
    result = subprocess.run(
        [str(snakemake), "-n", "--quiet", "rules"], cwd=root, capture_output=True, text=True
    )
    return result.returncode, result.stdout + result.stderr


def test_snakemake_reports_the_yaml_line_and_the_duplicate_before_any_job(repo, tmp_path):
    text = (repo / "params.yaml").read_text()
    status, output = snakemake_dry_run(
        repo, tmp_path / "broken", text.replace("  repeats: 3\n", "  repeats: [3\n")
    )
    line = text.splitlines().index("  repeats: 3") + 2
    assert status != 0 and f"params.yaml line {line}: expected ','" in output
    first = "  - {dataset: digits, arch: cnn}\n"
    duplicate = text.replace(first, first + "  - {dataset: digits, arch: cnn, ref_arch: cnn}\n")
    status, output = snakemake_dry_run(repo, tmp_path / "duplicate", duplicate)
    assert status != 0
    assert "experiments[1]: duplicates experiments[0] in effect (ref_arch equals arch" in output


def test_a_cnn_setting_trains_on_images_alone(params):
    cnn = {"dataset": "mnist5k", "shots": 8, "model": "cnn"}
    params["hparam_study"]["settings"] = [
        cnn,
        {"dataset": "breast_cancer", "shots": 8, "model": "cnn"},
        {**cnn, "shots": 16, "backbone": "efficientnet-lite0", "components": 64},
    ]
    message = problems_of(params)
    assert "settings[0]" not in message
    assert "hparam_study.settings[1].model: 'cnn' trains on images, but the dataset is tabular" in (
        message
    )
    for key in ("backbone", "components"):
        assert f"hparam_study.settings[2].{key}: the CNN trains from scratch" in message
    params["hparam_study"]["settings"] = [{**cnn, "model": "resnet"}]
    assert "model" in problems_of(params)
    params["hparam_study"]["settings"] = [cnn]
    assert plan.hparam_settings(config.validate(params))[0]["name"] == "mnist5k_s8_cnn"
