"""params.yaml validation: bad values stop the run, naming the key."""

from __future__ import annotations

import copy

import pytest
import yaml

from miaflow import config


@pytest.fixture
def params(repo) -> dict:
    return yaml.safe_load((repo / "params.yaml").read_text())


def problems_of(params: dict) -> str:
    with pytest.raises(config.ConfigError) as caught:
        config.validate(params)
    return str(caught.value)


def test_shipped_params_are_valid(repo):
    assert config.load(repo / "params.yaml")["seed"] >= 0


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda p: p["splits"].update(repeats=-1), "splits.repeats: -1 is less than the minimum of 1"),
    (lambda p: p["splits"].update(n_reference=3), "splits.n_reference: 3 is not a multiple of 2"),
    (lambda p: p["attacks"].insert(0, "no-such-attack"), "attacks[0]: 'no-such-attack' is not one of"),
    (lambda p: p["experiments"].append({"dataset": "imagenet", "arch": "mlp"}),
     "experiments[3].dataset: 'imagenet' is not one of"),
    (lambda p: p["architectures"]["mlp"].update(epochs="ten"), "architectures.mlp.epochs: 'ten' is not of type 'integer'"),
    (lambda p: p.update(sead=1), "sead: unknown key"),
    (lambda p: p["training"].update(gpus=2), "training.gpus: unknown key"),
    (lambda p: p["experiments"].append({"dataset": "digits", "arch": "vit"}),
     "experiments[3].arch: 'vit' is not a key of architectures"),
    (lambda p: p["architectures"].update(big={"kind": "mlp"}), "architectures.big: 'hidden' is a required property"),
    (lambda p: p["experiments"].append({"dataset": "purchase", "arch": "cnn"}),
     "experiments[3]: architecture 'cnn' (cnn) needs image data, but 'purchase' is tabular"),
    (lambda p: p["splits"].update(n_reference=0), "attacks[5]: 'model-loss' needs reference models, but splits.n_reference is 0"),
    (lambda p: p["splits"].update(n_population=0), "'model-robust' needs population models, but splits.n_population is 0"),
    (lambda p: p["metrics"].update(fpr_levels=[0.05]), "stats.metrics[1]: 'tpr_at_0.1pct_fpr' is not a metric of this run"),
    (lambda p: p["stats"].update(metrics=["auroc", "tpr_at_5pct_fpr"]), "stats.metrics[1]: 'tpr_at_5pct_fpr' is not a metric"),
])
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
    from miaflow.attacks import ATTACKS
    from miaflow.data import DATASETS

    defs = config.schema()["$defs"]
    assert set(defs["attack_name"]["enum"]) == set(ATTACKS)
    assert set(defs["dataset_name"]["enum"]) == set(DATASETS)
    assert set(config.schema()["properties"]["datasets"]["properties"]) == set(DATASETS)
