"""Query generation (neighbours, augmentations), HopSkipJump, and the query attacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from conftest import toy_texts
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from miaflow import io
from miaflow.attacks.inputs import AttackInputs
from miaflow.attacks.options import QueryAugmentOptions, QueryNeighborOptions
from miaflow.attacks.registry import ATTACKS
from miaflow.attacks.scoring import run_attack
from miaflow.data import Dataset, write_dataset
from miaflow.jobs import evaluate, queries, train
from miaflow.models.shards import save_shard
from miaflow.models.training import train_models
from miaflow.plan import Experiment
from miaflow.queries.hopskipjump import Budget, boundary_distances
from miaflow.queries.sets import (
    ANGLE_CANDIDATES,
    AUGMENT,
    AUGMENT_SHADOW,
    NEIGHBOUR,
    ORIG,
    cutmix,
    evaluated_subset,
    info_metadata,
    make_query_set,
    query_outputs,
    read_queries,
    rotate,
)
from miaflow.splits import make_splits

# The query set as the default options make it (the queries job fills them from params.yaml).
DEFAULTS = {"neighbour": QueryNeighborOptions(), "augment": QueryAugmentOptions()}

# --- neighbours ---------------------------------------------------------------------------------


def test_image_neighbours_use_the_global_scale_of_the_first_image():
    images = np.random.default_rng(0).uniform(-1, 1, size=(400, 1, 6, 6)).astype(np.float32)
    images[0] = 0.0
    images[0, 0, 0, 0], images[0, 0, 0, 1] = -2.0, 2.0  # s = (2 − (−2)) / 2 = 2
    queries = make_query_set(images, np.arange(400), "image", seed=1, dataset="toy", **DEFAULTS)
    noise = queries.features[NEIGHBOUR] - images[None]
    assert queries.features[NEIGHBOUR].shape == (10, 400, 1, 6, 6)
    assert queries.info[NEIGHBOUR]["scale"] == 2.0
    assert noise.std() == pytest.approx(0.01 * 2.0, rel=0.02)
    assert abs(noise.mean()) < 1e-3


def test_continuous_tabular_neighbours_use_per_feature_scales():
    rng = np.random.default_rng(0)
    features = np.stack([rng.uniform(0, 2, 3000), rng.uniform(-10, 10, 3000)], axis=1)
    features = features.astype(np.float32)
    queries = make_query_set(
        features,
        np.arange(3000),
        "tabular",
        seed=1,
        dataset="toy",
        neighbour=QueryNeighborOptions(magnitude=0.1, n_queries=4),
        augment=QueryAugmentOptions(),
    )
    scales = np.array(queries.info[NEIGHBOUR]["scale"])
    np.testing.assert_allclose(scales, (features.max(0) - features.min(0)) / 2)
    noise = (queries.features[NEIGHBOUR] - features[None]).reshape(-1, 2)
    np.testing.assert_allclose(noise.std(axis=0), 0.1 * scales, rtol=0.03)


@pytest.mark.parametrize("n_features, flips", [(600, 6), (446, 4), (99, 0)])
def test_binary_neighbours_flip_floor_lambda_f_distinct_features(n_features, flips):
    bits = (np.random.default_rng(0).random((50, n_features)) < 0.1).astype(np.float32)
    queries = make_query_set(bits, np.arange(50), "tabular", seed=1, dataset="toy", **DEFAULTS)
    changed = (queries.features[NEIGHBOUR] != bits[None]).sum(axis=2)
    np.testing.assert_array_equal(changed, flips)
    assert queries.info[NEIGHBOUR]["method"] == "flip"
    assert set(np.unique(queries.features[NEIGHBOUR])) <= {0.0, 1.0}


def test_raw_text_queries_are_masked_lm_neighbours_stored_as_strings(tiny_masked_lm, tmp_path):
    texts = np.empty(6, dtype=object)
    texts[:] = toy_texts(6, seed=1)
    options = QueryNeighborOptions(n_queries=3, magnitude=0.1, masked_lm=str(tiny_masked_lm))
    made = [
        make_query_set(texts, np.arange(10, 16), "text", seed, "toy", options, DEFAULTS["augment"])
        for seed in (1, 1, 2)
    ]
    queries = made[0]
    assert set(queries.features) == {ORIG, NEIGHBOUR}  # text augmentations are its neighbours
    assert queries.features[NEIGHBOUR].shape == (3, 6)
    assert queries.info[NEIGHBOUR]["method"] == "masked-lm"
    assert all(
        near != text for text, own in zip(texts, queries.features[NEIGHBOUR].T) for near in own
    )
    blocks = read_queries(queries.to_table(), ())
    ids, values = blocks[(NEIGHBOUR, 2)]
    np.testing.assert_array_equal(ids, np.arange(10, 16))
    assert list(values) == list(queries.features[NEIGHBOUR][1])
    assert list(blocks[(ORIG, 0)][1]) == list(texts)
    tables = []
    for k, each in enumerate(made):
        io.write_parquet(tmp_path / f"{k}.parquet", each.to_table(), info_metadata(each.info))
        tables.append((tmp_path / f"{k}.parquet").read_bytes())
    assert tables[0] == tables[1] != tables[2]


def test_text_embeddings_get_continuous_neighbours_and_no_augmentations():
    embeddings = np.random.default_rng(0).normal(size=(20, 8)).astype(np.float32)
    queries = make_query_set(embeddings, np.arange(20), "text", seed=1, dataset="toy", **DEFAULTS)
    assert queries.info[NEIGHBOUR]["method"] == "gaussian-per-feature"
    assert set(queries.features) == {ORIG, NEIGHBOUR}


def test_queries_are_deterministic_by_named_seed(tmp_path):
    features = np.random.default_rng(0).normal(size=(30, 120)).astype(np.float32)
    tables = []
    for seed, name in [(1, "a"), (1, "a"), (2, "a"), (1, "b")]:
        path = tmp_path / f"q-{len(tables)}.parquet"
        queries = make_query_set(features, np.arange(30), "tabular", seed, name, **DEFAULTS)
        io.write_parquet(path, queries.to_table(), info_metadata(queries.info))
        tables.append(path.read_bytes())
    assert tables[0] == tables[1]
    assert tables[0] != tables[2] and tables[0] != tables[3]


def test_queries_table_round_trip():
    images = np.random.default_rng(0).normal(size=(7, 1, 3, 3)).astype(np.float32)
    queries = make_query_set(
        images,
        np.arange(10, 17),
        "image",
        1,
        "toy",
        neighbour=QueryNeighborOptions(n_queries=3),
        augment=QueryAugmentOptions(n_queries=2),
    )
    blocks = read_queries(queries.to_table(), (1, 3, 3))
    assert sorted(blocks) == [
        ("augment", 1),
        ("augment", 2),
        ("neighbour", 1),
        ("neighbour", 2),
        ("neighbour", 3),
        ("orig", 0),
    ]
    ids, values = blocks[(NEIGHBOUR, 2)]
    np.testing.assert_array_equal(ids, np.arange(10, 17))
    np.testing.assert_array_equal(values, queries.features[NEIGHBOUR][1])
    np.testing.assert_array_equal(blocks[(ORIG, 0)][1], images)


# --- augmentations ------------------------------------------------------------------------------


def test_angle_candidates_and_draw():
    assert len(ANGLE_CANDIDATES) == 282
    assert np.allclose(np.abs(ANGLE_CANDIDATES) * 10, np.round(np.abs(ANGLE_CANDIDATES) * 10))
    assert np.abs(ANGLE_CANDIDATES).min() == 1.0 and np.abs(ANGLE_CANDIDATES).max() == 15.0
    images = np.zeros((3, 1, 5, 5), np.float32)
    angles = make_query_set(images, np.arange(3), "image", 1, "toy", **DEFAULTS).info[AUGMENT][
        "angles"
    ]
    assert len(set(angles)) == 10 and set(angles) <= set(ANGLE_CANDIDATES.tolist())


def test_rotation_is_counter_clockwise_nearest_with_zero_fill():
    image = np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)
    np.testing.assert_array_equal(rotate(image, 90.0), np.rot90(image, 1, axes=(2, 3)))
    np.testing.assert_array_equal(rotate(image, 0.0), image)
    tilted = rotate(image, 45.0)
    assert tilted[0, 0, 0, 0] == 0.0  # corners come from outside the image: fill 0
    assert tilted[0, 0, 2, 2] == image[0, 0, 2, 2]  # the centre stays
    assert set(np.unique(tilted)) <= set(np.unique(image)) | {0.0}  # nearest: no new values


def test_rotations_of_the_query_set_use_the_drawn_angles():
    images = np.random.default_rng(0).normal(size=(4, 1, 8, 8)).astype(np.float32)
    queries = make_query_set(images, np.arange(4), "image", 1, "toy", **DEFAULTS)
    for k, angle in enumerate(queries.info[AUGMENT]["angles"]):
        np.testing.assert_array_equal(queries.features[AUGMENT][k], rotate(images, angle))


def test_compat_draws_a_separate_augmentation_set_for_the_shadow():
    images = np.random.default_rng(0).normal(size=(4, 1, 8, 8)).astype(np.float32)
    corrected = make_query_set(images, np.arange(4), "image", 1, "toy", **DEFAULTS)
    compat_options = {**DEFAULTS, "augment": QueryAugmentOptions(compat=True)}
    compat = make_query_set(images, np.arange(4), "image", 1, "toy", **compat_options)
    assert AUGMENT_SHADOW not in corrected.features
    assert compat.info[AUGMENT]["angles"] == corrected.info[AUGMENT]["angles"]
    assert compat.info[AUGMENT_SHADOW]["angles"] != compat.info[AUGMENT]["angles"]


def test_cutmix_is_identity_below_100_features():
    features = np.random.default_rng(0).normal(size=(20, 99)).astype(np.float32)
    queries = make_query_set(features, np.arange(20), "tabular", 1, "toy", **DEFAULTS)
    np.testing.assert_array_equal(queries.features[AUGMENT], np.repeat(features[None], 10, 0))


def test_cutmix_overwrites_floor_one_percent_from_a_donor():
    features = np.arange(40 * 200, dtype=np.float32).reshape(40, 200)  # every value unique
    mixed = cutmix(features, 0.01, np.random.default_rng(0))
    changed = mixed != features
    assert changed.sum(axis=1).max() <= 2 and changed.any()
    rows, columns = np.nonzero(changed)
    for i, j in zip(rows, columns):  # each new value is another sample's value of that feature
        assert mixed[i, j] in features[:, j] and mixed[i, j] != features[i, j]


class _ScriptedDraws:
    """Stands in for a numpy Generator: returns scripted feature choices and donors."""

    def __init__(self, columns, donors):
        self._columns, self._donors = list(columns), list(donors)

    def choice(self, n, size, replace):
        return np.array(self._columns.pop(0))

    def integers(self, n):
        return self._donors.pop(0)


def test_cutmix_is_sequential_and_in_place():
    features = np.arange(3 * 100, dtype=np.float32).reshape(3, 100)
    # Sample 0 takes feature 5 from sample 1; sample 1 then takes it back from sample 0, which
    # by now holds sample 1's own value; sample 2 copies from itself.
    mixed = cutmix(features, 0.01, _ScriptedDraws([[5], [5], [7]], [1, 0, 2]))
    assert mixed[0, 5] == features[1, 5]
    assert mixed[1, 5] == features[1, 5]  # a swap would have given features[0, 5]
    np.testing.assert_array_equal(mixed[2], features[2])
    np.testing.assert_array_equal(np.delete(mixed, 5, axis=1), np.delete(features, 5, axis=1))


def test_evaluated_subset_is_a_seeded_prefix():
    pool = np.arange(0, 200, 2)
    subset = evaluated_subset(pool, 30, seed=1, dataset="toy")
    assert len(subset) == 30 and len(set(subset)) == 30 and set(subset) <= set(pool)
    np.testing.assert_array_equal(subset, evaluated_subset(pool, 30, seed=1, dataset="toy"))
    np.testing.assert_array_equal(subset[:10], evaluated_subset(pool, 10, seed=1, dataset="toy"))
    assert len(evaluated_subset(pool, 10**8, seed=1, dataset="toy")) == len(pool)


# --- HopSkipJump --------------------------------------------------------------------------------


def _linear(w: np.ndarray, b: float):
    """Two-class linear model: class 1 iff w·x + b > 0; distance to its boundary is |w·x+b|/|w|."""
    weight = torch.from_numpy(w.astype(np.float32))

    def logits_of(x):
        score = x.reshape(len(x), -1) @ weight + b
        return torch.stack([torch.zeros_like(score), score], dim=1)

    return logits_of


def test_hopskipjump_finds_the_distance_to_a_linear_boundary():
    rng = np.random.default_rng(0)
    w = rng.normal(size=16)
    x = rng.uniform(-0.3, 0.3, size=(12, 1, 4, 4)).astype(np.float32)
    x[-1, 0, 0, :2] = [-3.0, 3.0]  # a wide clip range: the nearest boundary points lie inside it
    margin = x.reshape(12, -1) @ w
    labels = (margin > 0).astype(np.int64)
    labels[0] = 1 - labels[0]  # misclassified: d = 0
    true_distance = np.abs(margin) / np.linalg.norm(w)
    distance, success = boundary_distances(
        _linear(w, 0.0), x, labels, Budget(max_iter=20, max_eval=2000), 5, seed=3
    )
    assert distance[0] == 0.0 and not success[0]
    assert success[1:].all()
    assert np.all(distance[1:] >= true_distance[1:] * (1 - 1e-4))  # never inside the boundary
    # ART's loop ends on a step (no final binary search), so it approaches the boundary slowly;
    # the ranking, which is all the attack uses, is already right.
    assert np.all(distance[1:] <= 1.5 * true_distance[1:])
    assert spearmanr(distance[1:], true_distance[1:]).statistic > 0.95
    longer, _ = boundary_distances(
        _linear(w, 0.0), x, labels, Budget(max_iter=60, max_eval=2000), 5, seed=3
    )
    assert np.mean(longer[1:] / true_distance[1:]) < np.mean(distance[1:] / true_distance[1:])
    again, _ = boundary_distances(
        _linear(w, 0.0), x, labels, Budget(max_iter=20, max_eval=2000), 5, seed=3
    )
    np.testing.assert_array_equal(distance, again)


def test_hopskipjump_failure_distance_uses_the_first_image():
    x = np.zeros((3, 1, 2, 2), np.float32)
    x[0, 0, 0, 0], x[0, 0, 1, 1] = -1.0, 0.5  # max − min of x_0 = 1.5

    def constant(points):  # always class 0: no adversarial start exists
        return torch.stack([torch.ones(len(points)), torch.zeros(len(points))], dim=1)

    distance, success = boundary_distances(
        constant, x, np.zeros(3, np.int64), Budget(max_iter=2, init_size=5), 8, seed=0
    )
    assert not success.any()
    np.testing.assert_allclose(distance, 1.5 * np.sqrt(4))


# --- attacks: known answers on hand-made outputs --------------------------------------------------


def _known_outputs(tmp_path, modality: str, extra_blocks=()) -> tuple[str, np.ndarray]:
    """Outputs of `target-0` on samples [3, 7]: two classes, logits [0, v], label 1.

    Loss log(1 + e^−v) falls as v grows; the model is correct iff v > 0.
    v (orig, neighbour 1, neighbour 2): sample 3: 0, −1, 1; sample 7: 2, 1, 0.
    """
    values = {
        (ORIG, 0): [0.0, 2.0],
        (NEIGHBOUR, 1): [-1.0, 1.0],
        (NEIGHBOUR, 2): [1.0, 0.0],
        **dict(extra_blocks),
    }
    ids = np.array([3, 7])
    blocks = {key: (ids, np.array(v, np.float32)[:, None]) for key, v in values.items()}
    labels = np.zeros(8, np.int64)
    labels[ids] = 1

    def logits_of(features):
        v = features[:, 0]
        return np.stack([np.zeros_like(v), v], axis=1)[None]

    path = tmp_path / f"{modality}.parquet"
    io.write_parquet(
        path,
        query_outputs(blocks, labels, ["target-0"], logits_of),
        info_metadata({"modality": modality}),
    )
    return str(path), ids


def _query_inputs(queries: str, ids: np.ndarray, **extra) -> AttackInputs:
    return AttackInputs(
        target={},
        reference={},
        reference_keep=np.ones((1, len(ids)), bool),
        target_on_population={},
        population={},
        population_keep=np.zeros((0, 0), bool),
        seed=0,
        target_model="target-0",
        extra={"outputs": queries, **extra},
        sample_ids=ids,
    )


def test_query_neighbor_counts_neighbours_with_higher_loss(tmp_path):
    inputs = _query_inputs(*_known_outputs(tmp_path, "tabular"))
    # Sample 3: one neighbour (v = −1) has a higher loss of two; sample 7: both.
    np.testing.assert_array_equal(run_attack("query-neighbor", inputs), [0.5, 1.0])


def test_query_neighbor_with_only_the_first_queries(tmp_path):
    queries, ids = _known_outputs(tmp_path, "tabular")
    inputs = _query_inputs(queries, ids)
    first = AttackInputs(**{**inputs.__dict__, "options": QueryNeighborOptions(queries_used=1)})
    # Neighbour 1 alone has a higher loss than the original for both samples (v: 0 → −1, 2 → 1).
    np.testing.assert_array_equal(run_attack("query-neighbor", first), [1.0, 1.0])
    np.testing.assert_array_equal(run_attack("query-neighbor", inputs), [0.5, 1.0])


def test_query_neighbor_text_is_the_mean_loss_rise(tmp_path):
    inputs = _query_inputs(*_known_outputs(tmp_path, "text"))
    loss = lambda v: np.log1p(np.exp(-np.array(v)))  # noqa: E731
    expected = [np.mean(loss([-1, 1]) - loss(0)), np.mean(loss([1, 0]) - loss(2))]
    np.testing.assert_allclose(run_attack("query-neighbor", inputs), expected)


def test_query_adv_tabular_is_mean_correctness_over_the_sample_and_its_neighbours(tmp_path):
    inputs = _query_inputs(*_known_outputs(tmp_path, "tabular"))
    # Correct iff v > 0: sample 3 (0, −1, 1) -> 1/3; sample 7 (2, 1, 0) -> 2/3.
    np.testing.assert_allclose(run_attack("query-adv", inputs), [1 / 3, 2 / 3])


def test_query_adv_image_reads_distances_and_leaves_the_rest_unevaluated(tmp_path):
    queries, ids = _known_outputs(tmp_path, "image")
    distances = tmp_path / "hsj.parquet"
    io.write_parquet(
        distances,
        pa.table(
            {
                "model_id": ["target-0", "target-1"],
                "sample_id": [7, 3],
                "distance": [0.25, 9.0],
                "success": [True, True],
            }
        ),
    )
    scores = run_attack("query-adv", _query_inputs(queries, ids, distances=str(distances)))
    assert np.isnan(scores[0]) and scores[1] == 0.25
    assert ATTACKS["query-adv"].subset


# --- every query attack, end to end through the jobs, on models that memorise -------------------


def _memorising_experiment(tmp_path, modality: str):
    """A dataset with random labels (only memorisation helps), small MLPs trained on it, written
    as the workflow writes them; then every query job runs."""
    rng = np.random.default_rng(0)
    n = 240
    shape = (1, 10, 10) if modality == "image" else (120,)
    features = rng.normal(size=(n, *shape)).astype(np.float32)
    dataset = Dataset("toy", modality, features, rng.integers(0, 2, n).astype(np.int64), 2)
    data = tmp_path / "data.parquet"
    write_dataset(data, dataset)
    splits = make_splits(n, seed=0, dataset="toy", repeats=2, n_reference=2, n_population=0)
    splits_path = tmp_path / "splits.parquet"
    io.write_parquet(splits_path, splits.to_table(), {"data_hash": dataset.content_hash()})
    arch = {
        "kind": "mlp",
        "hidden": [64],
        "activation": "tanh",
        "optimizer": "adam",
        "lr": 0.01,
        "weight_decay": 0.0,
        "epochs": 60,
        "batch_size": 32,
        "patience": 0,
    }
    weights, _ = train_models(dataset, splits, list(splits.model_ids), "mlp", arch, seed=0)
    shard = tmp_path / "shard-0.safetensors"
    save_shard(
        shard,
        weights,
        {
            "arch_name": "mlp",
            "arch": arch,
            "n_classes": 2,
            "data_hash": dataset.content_hash(),
            "seed": 0,
        },
    )
    signals = tmp_path / "signals.parquet"
    train.compute_signals(data=data, models=shard, signals=signals, threads=1)
    query_set = tmp_path / "queries.parquet"
    queries.query_sets(
        data=data,
        splits=splits_path,
        query_set=query_set,
        neighbour={"magnitude": 0.5},
        augment={},
        seed=0,
        threads=1,
    )
    outputs = tmp_path / "outputs.parquet"
    queries.query_outputs(
        data=data, query_set=query_set, models=[shard], outputs=outputs, threads=1
    )
    distances = tmp_path / "distances.parquet"
    queries.query_distances(
        data=data,
        splits=splits_path,
        models=[shard],
        distances=distances,
        arch_name="mlp",
        options={"max_iter": 3, "max_eval": 200, "boundary_eva_num": 60},
        seed=0,
        threads=1,
    )
    return splits_path, signals, {"outputs": outputs, "distances": distances}


@pytest.mark.parametrize("modality", ["tabular", "image"])
def test_query_attacks_detect_members_of_memorising_models(tmp_path, modality):
    import pandas as pd

    splits, signals, artifacts = _memorising_experiment(tmp_path, modality)
    for attack in ["query-neighbor", "query-augment", "query-adv"]:
        output = tmp_path / f"{attack}.parquet"
        evaluate.score_attacks(
            splits=splits,
            signals=[signals],
            reference_signals=[signals],
            scores=output,
            timings=tmp_path / f"{attack}.tsv",
            metrics=tmp_path / f"{attack}-metrics.parquet",
            roc=tmp_path / f"{attack}-roc.parquet",
            experiment=Experiment("toy", "mlp", "mlp"),
            attacks=[attack],
            options={},
            seed=0,
            fpr_levels=[0.1],
            confidence=0.95,
            **artifacts,
        )
        scores = pd.read_parquet(output)
        for repeat, part in scores.groupby("repeat"):
            auroc = roc_auc_score(part["is_member"], part["score"])
            assert auroc > 0.6, (attack, repeat)
        if attack == "query-adv" and modality == "image":
            assert len(scores) == 2 * 60  # only the evaluated subset is scored
        else:
            assert len(scores) == 2 * 120


def _correctness_table(path, members: dict[str, np.ndarray], kinds: dict[str, str], seed: int):
    """Correctness of each model on 11 queries: always right on its members, else right w.p. 0.3."""
    rng = np.random.default_rng(seed)
    rows = []
    for model, member in members.items():
        for index in range(11):
            kind = ORIG if index == 0 else kinds[model]
            correct = np.where(member, 1.0, (rng.random(len(member)) < 0.3).astype(float))
            rows.append(
                pa.table(
                    {
                        "model_id": [model] * len(member),
                        "sample_id": np.arange(len(member)),
                        "query_kind": [kind] * len(member),
                        "query_index": np.full(len(member), index, np.int32),
                        "correct": correct,
                    }
                )
            )
    info = {
        "modality": "image",
        AUGMENT: {},
        **({AUGMENT_SHADOW: {}} if AUGMENT_SHADOW in kinds.values() else {}),
    }
    io.write_parquet(path, pa.concat_tables(rows), info_metadata(info))


@pytest.mark.parametrize("shadow_kind", [AUGMENT, AUGMENT_SHADOW])
def test_query_augment_learns_from_the_shadow_membership(tmp_path, shadow_kind):
    rng = np.random.default_rng(1)
    shadow_members, target_members = rng.random(300) < 0.5, rng.random(300) < 0.5
    path = tmp_path / "outputs.parquet"
    _correctness_table(
        path,
        {"reference-0": shadow_members, "target-0": target_members},
        {"reference-0": shadow_kind, "target-0": AUGMENT},
        seed=2,
    )
    inputs = _query_inputs(str(path), np.arange(300))
    inputs = AttackInputs(**{**inputs.__dict__, "reference_keep": shadow_members[None]})
    assert roc_auc_score(target_members, run_attack("query-augment", inputs)) > 0.9
    flipped = AttackInputs(**{**inputs.__dict__, "reference_keep": ~shadow_members[None]})
    assert roc_auc_score(target_members, run_attack("query-augment", flipped)) < 0.1


# --- the rules, through the real snakemake --------------------------------------------------------


def test_query_rules_run_through_snakemake(tmp_path, repo):
    """The hook end to end: score_attacks pulls each query attack's artifacts from the rules."""
    import os
    import shutil
    import subprocess
    import sys

    import pandas as pd
    import yaml

    root = tmp_path / "project"
    root.mkdir()
    for name in ["Snakefile", "rules", "scripts", "miaflow", "profiles", "envs"]:
        source = repo / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / name)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["experiments"] = [{"dataset": "digits", "arch": "lr"}]
    params["splits"].update(repeats=2, n_reference=2, n_population=2)
    params["training"]["models_per_job"] = 6
    params["attacks"] = ["query-neighbor", "query-augment", "query-adv"]
    params["attack_options"]["query-adv"] = {
        "max_iter": 2,
        "max_eval": 100,
        "init_eval": 20,
        "boundary_eva_num": 40,
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    scores = "results/evaluate/scores/digits/lr.parquet"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    result = subprocess.run(
        ["snakemake", scores, "--cores", "2"], cwd=root, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    queries = pd.read_parquet(root / "results/queries/sets/digits.parquet")
    assert set(queries["query_kind"]) == {ORIG, NEIGHBOUR, AUGMENT}
    outputs = pd.read_parquet(
        root / "results/queries/outputs/digits/lr.parquet", columns=["model_id"]
    )
    assert set(outputs["model_id"]) == {"target-0", "target-1", "reference-0"}
    table = pd.read_parquet(root / scores)
    adv = table[table["attack"] == "query-adv"]
    assert len(adv) == 2 * 40 and adv["score"].notna().all()
    for attack in ["query-neighbor", "query-augment"]:
        assert (table["attack"] == attack).sum() == 2 * 898  # |T| of digits
