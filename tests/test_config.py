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
    (lambda p: p["attacks"].append("no-such-attack"), "attacks[14]: 'no-such-attack' is not one of"),
    (lambda p: p["experiments"].append({"dataset": "imagenet", "arch": "mlp"}),
     "experiments[3].dataset: 'imagenet' is not one of"),
    (lambda p: p["architectures"]["mlp"].update(epochs="ten"), "architectures.mlp.epochs: 'ten' is not of type 'integer'"),
    (lambda p: p.update(sead=1), "sead: unknown key"),
    (lambda p: p["training"].update(gpus=2), "training.gpus: unknown key"),
    (lambda p: p["experiments"].append({"dataset": "digits", "arch": "vit"}),
     "experiments[3].arch: 'vit' is not a key of architectures"),
    (lambda p: p["architectures"].update(big={"kind": "mlp"}), "architectures.big: 'hidden' is a required property"),
])
def test_bad_values_name_the_key(params, mutate, expected):
    bad = copy.deepcopy(params)
    mutate(bad)
    assert expected in problems_of(bad)


def test_every_problem_is_reported_at_once(params):
    bad = copy.deepcopy(params)
    bad["seed"] = -5
    bad["metrics"]["confidence"] = 2
    message = problems_of(bad)
    assert "seed:" in message and "metrics.confidence:" in message


def test_schema_names_match_registries():
    from miaflow.attacks import ATTACKS
    from miaflow.data import DATASETS
    from miaflow.metrics import METRIC_NAMES

    defs = config.schema()["$defs"]
    assert set(defs["attack_name"]["enum"]) == set(ATTACKS)
    assert set(defs["dataset_name"]["enum"]) == set(DATASETS)
    assert set(config.schema()["properties"]["datasets"]["properties"]) == set(DATASETS)
    assert tuple(defs["metric_name"]["enum"]) == tuple(METRIC_NAMES)
