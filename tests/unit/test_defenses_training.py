"""Defenses as training options: an architecture's `defense` trains every model of it through
miaflow.defenses (adversarial regularization, DP-SGD), per model, deterministically, and narrows
the members' advantage on a toy that only memorisation fits; bad combinations stop validation."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from conftest import problems_of
from sklearn.metrics import roc_auc_score
from test_training import toy_dataset

from miaflow import config
from miaflow.jobs.train import memguard_release
from miaflow.models.ensemble import wants_batched
from miaflow.models.training import LEARNERS, defense_reference, train_models
from miaflow.splits import make_splits

MLP = {
    "kind": "mlp",
    "hidden": [128],
    "activation": "tanh",
    "optimizer": "adam",
    "lr": 0.01,
    "weight_decay": 0.0,
    "epochs": 60,
    "batch_size": 32,
    "patience": 0,
}
DEFENSES = {
    "adversarial_regularization": {"kind": "adversarial_regularization", "lambda": 3.0},
    "dp_sgd": {"kind": "dp_sgd", "epsilon": 1.0, "delta": 1e-5, "max_grad_norm": 1.0},
}


def member_advantage(arch: dict) -> tuple[float, dict]:
    """AUROC of the negative loss, target members against its held-out half, and the weights."""
    dataset = toy_dataset(image=False)
    splits = make_splits(
        len(dataset.labels), seed=1, dataset="toy", repeats=1, n_reference=0, n_population=2
    )
    weights, _ = train_models(dataset, splits, ["target-0"], "mlp", arch, seed=3)
    logits = LEARNERS["mlp"].logits(arch, weights["target-0"], dataset.features, 3)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_probs[np.arange(len(dataset.labels)), dataset.labels]
    pool = splits.pool_of("target-0")
    members = splits.members("target-0")
    return roc_auc_score(members[pool], -loss[pool]), weights["target-0"]


@pytest.fixture(scope="module")
def undefended() -> float:
    return member_advantage(MLP)[0]


@pytest.mark.parametrize("kind", list(DEFENSES))
def test_a_defense_narrows_the_members_advantage_deterministically(kind, undefended):
    arch = {**MLP, "defense": DEFENSES[kind]}
    assert not wants_batched(arch)
    advantage, weights = member_advantage(arch)
    assert undefended > 0.8, "the toy must be memorised without a defense"
    assert advantage < undefended - 0.1, (kind, advantage, undefended)
    _, again = member_advantage(arch)
    assert all(np.array_equal(weights[k], again[k]) for k in weights)


def test_the_reference_set_lies_outside_the_models_pool():
    splits = make_splits(240, seed=1, dataset="toy", repeats=1, n_reference=2, n_population=2)
    for model_id in ("target-0", "reference-1", "population-0"):
        chosen = defense_reference(splits, model_id, seed=7)
        assert len(set(chosen)) == len(chosen) == splits.members(model_id).sum()
        assert not splits.pool_of(model_id)[chosen].any()
        assert np.array_equal(chosen, defense_reference(splits, model_id, seed=7))


def test_memguard_releases_the_same_labels_within_its_budget_deterministically():
    dataset = toy_dataset(image=False)
    splits = make_splits(
        len(dataset.labels), seed=1, dataset="toy", repeats=1, n_reference=2, n_population=0
    )
    ids = ["target-0", "reference-0"]
    weights, _ = train_models(dataset, splits, ids, "mlp", MLP, seed=3)
    logits = np.stack([LEARNERS["mlp"].logits(MLP, weights[m], dataset.features, 3) for m in ids])
    arch = {
        **MLP,
        "defense": {
            "kind": "memguard",
            "budget": 0.3,
            "classifier_epochs": 40,
            "classifier_lr": 0.05,
        },
    }
    released = memguard_release(dataset, splits, ids, logits, arch, "mlp_memguard", seed=5)
    assert released.shape == logits.shape
    assert np.array_equal(released.argmax(axis=2), logits.argmax(axis=2))
    probs = np.exp(released)
    assert np.allclose(probs.sum(axis=2), 1.0)
    original = np.exp(logits - logits.max(axis=2, keepdims=True))
    original /= original.sum(axis=2, keepdims=True)
    distortion = np.abs(probs - original).sum(axis=2)
    assert 0 < distortion.mean() <= 0.3 + 0.05  # the budget bounds the expected distortion
    again = memguard_release(dataset, splits, ids, logits, arch, "mlp_memguard", seed=5)
    assert np.array_equal(released, again)


@pytest.fixture
def params(repo, monkeypatch) -> dict:
    monkeypatch.chdir(repo)  # local dataset paths are relative to the working directory
    return yaml.safe_load((repo / "params.yaml").read_text())


def test_memguard_rejects_query_attacks_naming_exclude_attacks(params):
    params["architectures"]["mlp_memguard"] = {**MLP, "defense": {"kind": "memguard", "budget": 1}}
    params["experiments"] = [{"dataset": "purchase", "arch": "mlp_memguard"}]
    params["attacks"] = ["metric-loss", "query-neighbor"]
    found = problems_of(params)
    assert "experiments[0]: attack 'query-neighbor' queries the model itself" in found
    assert "experiments[0].exclude_attacks" in found
    params["experiments"][0]["exclude_attacks"] = ["query-neighbor"]
    config.validate(params)


def test_validation_names_defenses_that_cannot_train(params):
    params["architectures"]["mlp"] = {**MLP, "precision": "bf16", "defense": DEFENSES["dp_sgd"]}
    params["architectures"]["wrn"] = {
        "kind": "wrn28_2",
        "optimizer": "sgd",
        "lr": 0.1,
        "weight_decay": 5e-4,
        "epochs": 2,
        "batch_size": 64,
        "patience": 0,
        "augment": False,
        "defense": DEFENSES["dp_sgd"],
    }
    found = problems_of(params)
    assert (
        "architectures.mlp.defense: a defended model trains in plain fp32 eager mode; "
        "remove precision" in found
    )
    assert "architectures.wrn.defense: DP-SGD cannot bound" in found


def test_the_schema_names_a_bad_defense_key(params):
    params["architectures"]["mlp"] = {**MLP, "defense": {"kind": "adversarial_regularization"}}
    assert "architectures.mlp.defense" in problems_of(params)
    params["architectures"]["mlp"] = {**MLP, "defense": {**DEFENSES["dp_sgd"], "delta": 1.5}}
    assert "architectures.mlp.defense" in problems_of(params)
    params["architectures"]["mlp"] = {**MLP, "defense": DEFENSES["dp_sgd"]}
    config.validate(params)
