"""The DAG's shape is derived from params.yaml alone."""

from __future__ import annotations

import copy

import yaml

from miaflow import plan as workflow


def test_shards_cover_every_model_once(repo):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["training"]["models_per_job"] = 4
    params["splits"].update(repeats=3, n_reference=4, n_population=2)
    shards = workflow.shards(params)
    assert [len(s) for s in shards] == [4, 4, 1]
    assert sum(shards, []) == workflow.model_ids(params)
    assert workflow.model_ids(params)[:4] == ["target-0", "target-1", "target-2", "reference-0"]


def test_experiments_datasets_and_inputs(repo):
    params = copy.deepcopy(yaml.safe_load((repo / "params.yaml").read_text()))
    params["experiments"] = [
        {"dataset": "digits", "arch": "cnn"},
        {"dataset": "location30", "arch": "lr"},
        {"dataset": "digits", "arch": "mlp"},
    ]
    # the experiments', then the study's (digits again) and the language models' corpus
    assert workflow.datasets(params) == ["digits", "location30", "synthetic_text"]
    assert workflow.local_inputs(params, "digits") == []
    assert workflow.local_inputs(params, "location30") == [params["datasets"]["location30"]["path"]]
    assert workflow.uses_torch(params, "cnn") and not workflow.uses_torch(params, "lr")
    params["attack_options"] = {"model-robust": {"gamma": 3.0}}  # overrides, not the defaults
    assert workflow.attack_options(params, "model-robust") == {"gamma": 3.0}
    assert workflow.attack_options(params, "metric-loss") == {}


def test_reference_counts_double_up_to_all_reference_models():
    from miaflow.plan import reference_counts

    assert reference_counts({"splits": {"n_reference": 16}}) == [2, 4, 8, 16]
    assert reference_counts({"splits": {"n_reference": 6}}) == [2, 4, 6]
    assert reference_counts({"splits": {"n_reference": 0}}) == []


def test_experiments_with_references_of_another_architecture():
    from miaflow import plan as wf
    from miaflow.plan import Experiment

    config = {
        "experiments": [
            {"dataset": "digits", "arch": "cnn"},
            {"dataset": "purchase", "arch": "mlp", "ref_arch": "lr"},
            {
                "dataset": "purchase",
                "arch": "mlp",
                "ref_arch": "mlp",
                "exclude_attacks": ["model-lira"],
            },
        ],
        "attacks": ["metric-loss", "model-lira", "query-neighbor", "query-ref"],
    }
    digits, mixed, matched = wf.experiments(config)
    assert [e.label for e in (digits, mixed, matched)] == ["cnn", "mlp_ref_lr", "mlp"]
    assert mixed == Experiment("purchase", "mlp", "lr") and mixed.mixed and not matched.mixed
    assert (
        mixed.name == "purchase/mlp_ref_lr"
        and digits.file_name("roc", ".png") == "roc-digits-cnn.png"
    )
    assert wf.trained(config) == [("digits", "cnn"), ("purchase", "mlp"), ("purchase", "lr")]
    # Query attacks build their artifacts per architecture: not run with mismatched references.
    assert wf.attacks_for(config, mixed) == ["metric-loss", "model-lira"]
    assert wf.attacks_for(config, matched) == ["metric-loss", "query-neighbor"]  # one excluded
    assert wf.attacks_for(config, digits) == config["attacks"]
    assert wf.artifacts_for(config, digits) == ["canaries", "outputs"]
    assert wf.queried(config) == {(digits, "canaries"), (digits, "outputs"), (matched, "outputs")}


def test_query_counts_of_the_scaling_sweep():
    from miaflow.plan import Experiment, swept_query_attacks

    config = {
        "experiments": [],
        "attacks": ["metric-loss", "query-neighbor", "query-augment", "query-adv"],
        "attack_options": {"query-neighbor": {"n_queries": 10}, "query-augment": {"n_queries": 4}},
    }
    assert swept_query_attacks(config, Experiment("purchase", "mlp", "mlp")) == {
        "query-neighbor": [1, 2, 5, 10],
        "query-augment": [1, 2, 4],
        "query-adv": [1, 2, 5, 10],
    }
    # On images Query-adv is a boundary distance, not a count of queries.
    assert "query-adv" not in swept_query_attacks(config, Experiment("digits", "cnn", "cnn"))
    assert swept_query_attacks(config, Experiment("purchase", "mlp", "lr")) == {}


def test_the_reports_that_run_follow_the_attack_registry_and_the_architectures():
    from miaflow import plan as wf

    config = {
        "experiments": [{"dataset": "purchase", "arch": "mlp"}],
        "architectures": {
            "mlp": {"kind": "mlp"},
            "guarded": {"kind": "mlp", "defense": {"kind": "memguard"}},
        },
        "attacks": ["metric-loss", "sm-risk"],
    }
    # Song & Mittal's family by the registry; its risk score has its own report, not the table
    assert wf.song_mittal_thresholds(config) == [] and wf.risk_scored(config)
    config["attacks"] = ["sm-conf", "metric-loss", "sm-ment-global"]
    assert wf.song_mittal_thresholds(config) == ["sm-conf", "sm-ment-global"]
    assert not wf.risk_scored(config) and not wf.defended(config)
    config["experiments"].append({"dataset": "purchase", "arch": "guarded"})
    assert wf.defended(config)


def test_the_study_settings_budgets_and_backbones():
    from miaflow import plan as wf

    study = {"settings": [], "epsilons": [float("inf"), 8, 0.5]}
    assert wf.epsilon_tags({"hparam_study": study}) == []  # no setting: no run of any budget
    study["settings"] = [
        {"dataset": "cifar10", "shots": 8, "backbone": "vit-b16", "backbone_model": "local/vit"},
        {"dataset": "digits", "shots": 8},
    ]
    assert wf.epsilon_tags({"hparam_study": study}) == ["inf", "8", "0.5"]
    assert wf.backbone_model({"hparam_study": study}, "cifar10", "vit-b16") == "local/vit"
    assert wf.backbone_model({"hparam_study": study}, "digits", "vit-b16") is None


def test_language_model_membership_and_needs(repo):
    from miaflow import plan as wf

    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert wf.llm_membership({"target_recipe": {"kind": "pretrained"}}) == "labels"
    assert wf.llm_membership({"target_recipe": {"kind": "scratch"}}) == "trained"
    params["llm"]["attacks"] = ["llm-loss"]
    assert wf.llm_needs(params) == set()
    params["llm"]["attacks"] = ["llm-loss", "llm-ref", "llm-recall"]
    assert wf.llm_needs(params) == {"reference", "recall"}


def test_benchmarks_of_follows_the_producers_of_inputs_recursively():
    """The cost table's inputs: the benchmark file of every job a target needs, not of the rule
    that asks."""
    from types import SimpleNamespace

    from miaflow.plan import benchmarks_of

    def rule(name, output, inputs, benchmark):
        return SimpleNamespace(
            name=name,
            is_producer=lambda target: target == output,
            get_wildcards=lambda t: {},
            expand_input=lambda wildcards: (inputs,),
            benchmark=benchmark and SimpleNamespace(apply_wildcards=lambda w: benchmark),
        )

    rules = [
        rule("prepare", "data", [], "prepare.tsv"),
        rule("train", "model", ["data", "miaflow/train.py"], "train.tsv"),
        rule("target", "all", ["model", "data"], None),
        rule("cost", "model", ["model"], "cost.tsv"),
        # the package's files are code inputs, never looked up (no rule makes them)
        rule("source", "miaflow/train.py", [], "source.tsv"),
    ]
    assert benchmarks_of(rules, ["all"], skip="cost") == ["prepare.tsv", "train.tsv"]
