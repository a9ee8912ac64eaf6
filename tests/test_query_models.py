"""Query-transfer, Query-qrm and Query-ref: their training jobs and their scores.

Toy experiments are written to disk as the workflow would (dataset, splits, signal store, model
shards), so the job functions and `miaflow.jobs.evaluate.score_attacks` run exactly as in a Snakemake job.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

from miaflow.jobs import evaluate, queries
from miaflow.queries import attack_models as query_models
from miaflow.workflow import plan as workflow
from miaflow.workflow.plan import Experiment
from miaflow.attacks import ATTACKS, AttackInputs, attack_inputs, run_attack
from miaflow.attacks.reference import in_out_stats
from miaflow.data import Dataset, write_dataset
from miaflow.io import read_parquet_metadata, write_parquet
from miaflow.models.kinds import KINDS
from miaflow.seeding import rng as named_rng
from miaflow.signals import SignalStore, outputs_table, write_signal_shard
from miaflow.splits import make_splits

LR = {"kind": "lr", "C": 100.0, "max_iter": 500}
MLP = {"kind": "mlp", "hidden": [32], "activation": "tanh", "optimizer": "adam", "lr": 0.01,
       "weight_decay": 0.0, "epochs": 5, "batch_size": 64, "patience": 0}
CNN = {"kind": "cnn", "channels": [4], "hidden": 16, "optimizer": "adam", "lr": 0.01,
       "weight_decay": 0.0, "epochs": 30, "batch_size": 32, "patience": 0}
CATBOOST = {"kind": "catboost", "iterations": 20, "learning_rate": 0.1, "depth": 3,
            "early_stopping_rounds": 0}


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_experiment(root, features, labels, n_classes, logits_of, modality="tabular"):
    """Dataset, splits (2 targets, 4 references) and one signal shard with `logits_of(splits)`
    (n_models, n, C) for every model. Returns the three paths and the splits."""
    dataset = Dataset("toy", modality, features.astype(np.float32), labels.astype(np.int64), n_classes)
    splits = make_splits(len(labels), seed=0, dataset="toy", repeats=2, n_reference=4, n_population=0)
    data, split_path, signals = root / "data.parquet", root / "splits.parquet", root / "signals.parquet"
    write_dataset(data, dataset)
    write_parquet(split_path, splits.to_table(), {"data_hash": dataset.content_hash()})
    table = outputs_table(list(splits.model_ids), np.arange(len(labels)), dataset.labels,
                          logits_of(splits))
    write_signal_shard(signals, table, {"data_hash": dataset.content_hash()})
    return data, split_path, signals, splits


def _scores(root, splits_path, signals, attack, artifacts, options=None, repeat=1):
    """Scores of `attack` for target `repeat` through `miaflow.jobs.evaluate.score_attacks`, and its ground truth."""
    output = root / f"{attack}.parquet"
    evaluate.score_attacks(splits=splits_path, signals=[signals], reference_signals=[signals],
                           scores=output, timings=root / f"{attack}.tsv",
                           metrics=root / f"{attack}-metrics.parquet",
                           roc=root / f"{attack}-roc.parquet", experiment=Experiment("toy", "arch", "arch"),
                           attacks=[attack], options={attack: options or {}}, seed=0,
                           fpr_levels=[0.1], confidence=0.95, **artifacts)
    table = pd.read_parquet(output)
    return table[table["repeat"] == repeat]


# --- Query-transfer ------------------------------------------------------------------------------

def _memorising_target(labels, n_classes, seed=1):
    """Every model puts logit 4 on the true label of its members and on a random label otherwise."""
    def logits_of(splits):
        rng = np.random.default_rng(seed)
        guess = rng.integers(0, n_classes, size=splits.keep.shape)
        predicted = np.where(splits.keep, labels, guess)
        return 4.0 * np.eye(n_classes, dtype=np.float32)[predicted]
    return logits_of


@pytest.fixture(scope="module")
def transfer_toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("transfer")
    rng = np.random.default_rng(0)
    n, n_classes = 400, 10
    labels = rng.integers(0, n_classes, size=n)
    features = rng.normal(size=(n, 60))
    paths = _write_experiment(root, features, labels, n_classes, _memorising_target(labels, n_classes))
    return root, paths


def test_query_transfer_detects_members_of_a_memorising_target(transfer_toy):
    root, (data, splits_path, signals, splits) = transfer_toy
    output = root / "surrogates.parquet"
    queries.query_transfer(data=data, splits=splits_path, signals=[signals], surrogates=output,
                           arch_name="lr", arch=LR, options={}, seed=0, threads=1)
    surrogates = pd.read_parquet(output)
    assert sorted(surrogates["model_id"].unique()) == ["target-0", "target-1"]
    assert len(surrogates) == 2 * len(splits.target_samples)
    scores = _scores(root, splits_path, signals, "query-transfer", {"surrogates": output})
    assert roc_auc_score(scores["is_member"], scores["score"]) > 0.75
    # The score is minus the surrogate's true-label loss, row by row.
    mine = surrogates[surrogates["model_id"] == "target-1"]
    np.testing.assert_allclose(scores["score"].to_numpy(), -mine["loss"].to_numpy())

    again = root / "surrogates-again.parquet"
    queries.query_transfer(data=data, splits=splits_path, signals=[signals], surrogates=again,
                           arch_name="lr", arch=LR, options={}, seed=0, threads=1)
    assert _digest(again) == _digest(output)


def test_surrogate_learns_the_targets_labels_on_its_training_part():
    rng = np.random.default_rng(3)
    features = rng.normal(size=(200, 300)).astype(np.float32)
    predicted = rng.integers(0, 3, size=200)
    logits = query_models.surrogate_logits(LR, features, predicted, 3, 0.1, seed=5, threads=1,
                                           model_id="s")
    held_out = named_rng(5, "validation").random(200) < 0.1
    assert 0.03 < held_out.mean() < 0.2  # Bernoulli(0.1)
    agrees = logits.argmax(axis=1) == predicted
    assert agrees[~held_out].mean() == 1.0  # random labels in 300 dims: memorised
    assert agrees[held_out].mean() < 0.7  # ... and not learnable on the held-out part


# --- Query-qrm -----------------------------------------------------------------------------------

def _qrm_target(features, labels):
    """phi (= hinge, two classes) = x·w + 3·[member]: difficulty is predictable from x on A."""
    w = np.linspace(-1, 1, features.shape[1])

    def logits_of(splits):
        phi = features @ w + 3.0 * splits.keep
        sign = np.where(np.arange(2) == labels[:, None], 0.5, -0.5)
        return (phi[..., None] * sign).astype(np.float32)
    return logits_of


@pytest.fixture(scope="module")
def qrm_toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("qrm")
    rng = np.random.default_rng(1)
    n = 500
    labels = rng.integers(0, 2, size=n)
    features = rng.normal(size=(n, 8))
    paths = _write_experiment(root, features, labels, 2, _qrm_target(features, labels))
    return root, paths, features


@pytest.mark.parametrize("arch", [LR, MLP, CATBOOST], ids=lambda a: a["kind"])
def test_query_qrm_detects_members(qrm_toy, arch):
    root, (data, splits_path, signals, splits), _ = qrm_toy
    output = root / f"regressors-{arch['kind']}.parquet"
    queries.query_qrm(data=data, splits=splits_path, signals=[signals], regressors=output,
                      arch_name=arch["kind"], arch=arch,
                      options={"epochs": 20, "catboost_iterations": 50}, seed=0, threads=1)
    scores = _scores(root, splits_path, signals, "query-qrm", {"regressors": output})
    assert roc_auc_score(scores["is_member"], scores["score"]) > 0.9
    assert read_parquet_metadata(output)["signal"] == KINDS[arch["kind"]].qrm_signal


def test_query_qrm_catboost_is_reproducible(qrm_toy):
    root, (data, splits_path, signals, _), _ = qrm_toy
    first, second = root / "cb-1.parquet", root / "cb-2.parquet"
    for path in (first, second):
        queries.query_qrm(data=data, splits=splits_path, signals=[signals], regressors=path,
                          arch_name="catboost", arch=CATBOOST,
                          options={"catboost_iterations": 30}, seed=0, threads=1)
    assert _digest(first) == _digest(second)
    table = pd.read_parquet(first)
    assert np.isfinite(table[["mu", "log_sigma"]].to_numpy()).all()


def test_query_qrm_linear_path_known_answer(qrm_toy):
    """LR path: mu = least-squares fit of phi on A, sigma = std of phi over A."""
    root, (data, splits_path, signals, splits), features = qrm_toy
    output = root / "regressors-known.parquet"
    queries.query_qrm(data=data, splits=splits_path, signals=[signals], regressors=output,
                      arch_name="lr", arch=LR, options={}, seed=0, threads=1)
    store = SignalStore.read([signals])
    aux, pool = splits.auxiliary_samples, splits.target_samples
    phi_aux = store.matrix(["target-1"], "phi", aux)[0]
    design = np.hstack([features[aux], np.ones((len(aux), 1))]).astype(np.float32).astype(np.float64)
    coef = np.linalg.lstsq(design, phi_aux, rcond=None)[0]
    regressors = pd.read_parquet(output)
    mine = regressors[regressors["model_id"] == "target-1"]
    pool_design = np.hstack([features[pool], np.ones((len(pool), 1))]).astype(np.float32)
    np.testing.assert_allclose(mine["mu"], pool_design @ coef, atol=1e-4)
    np.testing.assert_allclose(mine["log_sigma"], np.log(phi_aux.std()), rtol=1e-9)
    # On A, phi = x·w exactly (no member there): the fit is exact and sigma its spread.
    scores = _scores(root, splits_path, signals, "query-qrm", {"regressors": output})
    phi_t = store.matrix(["target-1"], "phi", pool)[0]
    np.testing.assert_allclose(scores["score"], (phi_t - mine["mu"]) / phi_aux.std(), rtol=1e-6)


def test_gaussian_nll_formula():
    output = torch.tensor([[1.0, np.log(2.0)], [0.0, 0.0]])
    target = torch.tensor([3.0, 0.0])
    # log 2 + ½·(3 − 1)²/4 = log 2 + 0.5; and 0.
    np.testing.assert_allclose(query_models.gaussian_nll(output, target).numpy(),
                               [np.log(2.0) + 0.5, 0.0], rtol=1e-6)


# --- Query-ref -----------------------------------------------------------------------------------

def test_crop_and_flip_are_crops_of_the_padded_image_or_their_mirror():
    images = torch.arange(2 * 3 * 5 * 6, dtype=torch.float32).reshape(2, 3, 5, 6)
    out = query_models.crop_and_flip(images.repeat(20, 1, 1, 1), np.random.default_rng(0))
    padded = torch.nn.functional.pad(images, (4,) * 4, value=-1.0)
    seen_flip = seen_plain = False
    for b, crop in enumerate(out):
        windows = [(padded[b % 2, :, t:t + 5, l:l + 6], f) for t in range(9) for l in range(9)
                   for f in (False, True)]
        candidates = [f for window, f in windows
                      if torch.equal(crop, window.flip(-1) if f else window)]
        assert candidates, f"output {b} is no crop of the padded image"
        seen_flip |= any(candidates)
        seen_plain |= not all(candidates)
    assert seen_flip and seen_plain
    assert out.min() == -1.0  # padding is black (-1) in normalised units


def test_pick_models_draws_only_eligible_models_uniformly():
    eligible = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0], [0, 0, 1]], dtype=bool)
    picks = query_models._pick_models(eligible, 4000, np.random.default_rng(0))
    assert picks.shape == (4000, 3)
    assert eligible[picks, np.arange(3)].all()
    for sample in range(3):
        counts = np.bincount(picks[:, sample], minlength=4)[eligible[:, sample]]
        np.testing.assert_allclose(counts / 4000, 1 / eligible[:, sample].sum(), atol=0.03)


class _LogitOfMean(torch.nn.Module):
    """Logit of every class = scale · (mean pixel): gradients are known, so is the optimum."""

    def __init__(self, scale: float, n_classes: int = 2) -> None:
        super().__init__()
        self.scale, self.n_classes = scale, n_classes
        self.anchor = torch.nn.Parameter(torch.zeros(()), requires_grad=False)

    def forward(self, x):
        return (self.scale * x.mean(dim=(1, 2, 3)))[:, None].repeat(1, self.n_classes)


def test_canaries_stay_in_the_epsilon_ball_and_the_valid_range():
    rng = np.random.default_rng(0)
    images = rng.uniform(-0.5, 0.5, size=(3, 1, 6, 6)).astype(np.float32)
    images[0] = 1.0  # saturated image: the [-1, 1] projection is what binds there
    anchors = query_models.canary_anchors(images, 4, rng)
    assert anchors.shape == (3, 4, 1, 6, 6)
    models = [_LogitOfMean(50.0), _LogitOfMean(-50.0)]
    keep = np.array([[True, True, False], [False, False, True]])
    canaries = query_models.optimise_canaries(models, keep, anchors, np.zeros(3, np.int64),
                                              steps=30, generator=rng)
    assert canaries.shape == anchors.shape
    assert canaries.min() >= -1.0 and canaries.max() <= 1.0
    moved = np.abs(canaries - anchors)
    assert moved.max() <= query_models.CANARY_EPSILON + 1e-6
    assert moved.max() > 0.9 * query_models.CANARY_EPSILON  # the optimisation did move them
    assert np.any(canaries[0] == 1.0)  # clipped at the top of the valid range


def test_canaries_move_towards_the_in_goal_within_epsilon():
    """One IN model (logit = 50·mean) and one OUT model (logit = 0·mean): the loss pushes the
    mean pixel up as far as the projection allows, i.e. every pixel to its anchor + epsilon."""
    images = np.zeros((2, 1, 4, 4), dtype=np.float32)
    rng = np.random.default_rng(1)
    anchors = query_models.canary_anchors(images, 3, rng)
    models = [_LogitOfMean(50.0), _LogitOfMean(0.0)]
    keep = np.array([[True, True], [False, False]])
    canaries = query_models.optimise_canaries(models, keep, anchors, np.zeros(2, np.int64),
                                              steps=30, generator=rng)
    np.testing.assert_allclose(canaries, anchors + query_models.CANARY_EPSILON, atol=1e-6)
    assert set(np.unique(anchors)) == {-1.0, 0.0}  # crops of a zero image padded with -1


def test_query_ref_scores_are_mean_canary_llrs(tmp_path):
    """Known answer: with one canary, Query-ref is Model-lira on the canary's phi."""
    splits = make_splits(40, seed=0, dataset="toy", repeats=1, n_reference=4, n_population=0)
    pool = splits.target_samples
    rng = np.random.default_rng(0)
    refs = [f"reference-{m}" for m in range(4)]
    keep = np.stack([splits.members(m)[pool] for m in refs])
    ref_phi = rng.normal(size=(4, len(pool))) + 2.0 * keep
    target_phi = rng.normal(size=len(pool))
    evaluated = slice(0, len(pool), 2)  # every other point has a canary
    rows = [pd.DataFrame({"model_id": m, "sample_id": pool[evaluated], "canary": 0,
                          "phi": values[evaluated]})
            for m, values in zip([*refs, "target-0"], [*ref_phi, target_phi])]
    inputs = AttackInputs(target={}, reference={}, reference_keep=keep, target_on_population={},
                          population={}, population_keep=np.zeros((0, 0), bool), options={},
                          extra={"canaries": _parquet(tmp_path, pd.concat(rows))}, sample_ids=pool)
    scores = run_attack("query-ref", inputs)
    assert np.isnan(scores[1::2]).all()  # not evaluated: NaN is kept for the table to drop
    lira_inputs = AttackInputs(target={"phi": target_phi[evaluated]},
                               reference={"phi": ref_phi[:, evaluated]},
                               reference_keep=keep[:, evaluated], target_on_population={},
                               population={}, population_keep=np.zeros((0, 0), bool), options={})
    np.testing.assert_allclose(scores[0::2], run_attack("model-lira", lira_inputs))


def test_query_ref_averages_over_canaries(tmp_path):
    splits = make_splits(20, seed=0, dataset="toy", repeats=1, n_reference=2, n_population=0)
    pool = splits.target_samples
    keep = np.stack([splits.members(f"reference-{m}")[pool] for m in range(2)])
    rng = np.random.default_rng(2)
    phi = rng.normal(size=(3, len(pool), 2))  # reference-0, reference-1, target-0; 2 canaries
    rows = [pd.DataFrame({"model_id": m, "sample_id": np.repeat(pool, 2),
                          "canary": np.tile([0, 1], len(pool)), "phi": phi[k].reshape(-1)})
            for k, m in enumerate(["reference-0", "reference-1", "target-0"])]
    inputs = AttackInputs(target={}, reference={}, reference_keep=keep, target_on_population={},
                          population={}, population_keep=np.zeros((0, 0), bool), options={},
                          extra={"canaries": _parquet(tmp_path, pd.concat(rows[::-1]))},
                          sample_ids=pool)
    flat_keep = np.repeat(keep, 2, axis=1)
    phi_in, phi_out = in_out_stats(phi[:2].reshape(2, -1), flat_keep)
    from scipy.stats import norm

    llr = (norm.logpdf(phi[2].reshape(-1), phi_in.median, phi_in.pooled_std)
           - norm.logpdf(phi[2].reshape(-1), phi_out.median, phi_out.pooled_std))
    np.testing.assert_allclose(run_attack("query-ref", inputs), llr.reshape(-1, 2).mean(axis=1))


def _parquet(directory, frame: pd.DataFrame) -> str:
    path = directory / "canaries.parquet"
    write_parquet(path, frame)
    return str(path)


def test_query_ref_job_end_to_end(tmp_path, monkeypatch):
    """Tiny CNNs trained on random images: canaries, the phi table, and scores of the subset.

    Crops of 8x8 noise images padded by 4 carry almost no trace of the image the models saw, so
    here the anchors are the images themselves: the canaries then stay within epsilon of them
    and Query-ref must find the members as Model-lira does (checks rows, keep and alignment).
    """
    monkeypatch.setattr(query_models, "crop_and_flip", lambda images, generator: images)
    from miaflow.splits import make_splits as draw
    from miaflow.models.training import save_shard, train_models

    rng = np.random.default_rng(0)
    n = 160
    images = rng.uniform(-1, 1, size=(n, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 2, size=n)
    dataset = Dataset("toy", "image", images, labels.astype(np.int64), 2)
    splits = draw(n, seed=0, dataset="toy", repeats=2, n_reference=4, n_population=0)
    data, splits_path = tmp_path / "data.parquet", tmp_path / "splits.parquet"
    write_dataset(data, dataset)
    write_parquet(splits_path, splits.to_table(), {"data_hash": dataset.content_hash()})
    weights, _ = train_models(dataset, splits, list(splits.model_ids), "cnn", CNN, seed=0)
    shard = tmp_path / "shard-0.safetensors"
    save_shard(shard, weights, {"arch_name": "cnn", "arch": CNN, "n_classes": 2,
                                "data_hash": dataset.content_hash(), "seed": 0})
    from miaflow.models.training import load_shard, shard_logits

    loaded, metadata = load_shard(shard)
    signals = tmp_path / "signals.parquet"
    write_signal_shard(signals, outputs_table(metadata["model_ids"], np.arange(n), dataset.labels,
                                              shard_logits(loaded, metadata, images)),
                       {"data_hash": dataset.content_hash()})

    output = tmp_path / "canaries.parquet"
    options = {"boundary_eva_num": 50, "n_canaries": 3, "steps": 5}
    queries.query_ref(data=data, splits=splits_path, models=[shard], canaries=output,
                      arch_name="cnn", options=options, seed=0, threads=1)
    table = pd.read_parquet(output)
    assert len(table) == (4 + 2) * 50 * 3
    assert set(table["sample_id"]) <= set(splits.target_samples)
    scored = _scores(tmp_path, splits_path, signals, "query-ref", {"canaries": output})
    assert len(scored) == 50  # NaN rows of points without canaries are dropped
    np.testing.assert_array_equal(np.sort(scored["sample_id"].unique()),
                                  np.sort(table["sample_id"].unique()))
    assert roc_auc_score(scored["is_member"], scored["score"]) > 0.7
    again = tmp_path / "canaries-again.parquet"
    queries.query_ref(data=data, splits=splits_path, models=[shard], canaries=again,
                      arch_name="cnn", options=options, seed=0, threads=1)
    assert _digest(again) == _digest(output)


def test_evaluated_points_are_a_seeded_subset_of_the_pool():
    pool = np.arange(0, 200, 2)
    first = query_models.evaluated_points(pool, 30, seed=7)
    assert len(first) == 30 and set(first) <= set(pool) and np.all(np.diff(first) > 0)
    np.testing.assert_array_equal(first, query_models.evaluated_points(pool, 30, seed=7))
    assert not np.array_equal(first, query_models.evaluated_points(pool, 30, seed=8))
    np.testing.assert_array_equal(query_models.evaluated_points(pool, 1000, seed=7), pool)


# --- registry and workflow -----------------------------------------------------------------------

def test_query_ref_is_image_only_and_skipped_on_tabular_data():
    assert ATTACKS["query-ref"].modalities == {"image"} and ATTACKS["query-ref"].subset
    config = {"attacks": ["metric-loss", "query-ref", "query-qrm"]}
    assert workflow.attacks_for(config, Experiment("digits", "cnn", "cnn")) == [
        "metric-loss", "query-ref", "query-qrm"]
    assert workflow.attacks_for(config, Experiment("purchase", "mlp", "mlp")) == [
        "metric-loss", "query-qrm"]


def test_only_subset_attacks_keep_nan_scores(monkeypatch):
    from miaflow.attacks import Attack

    raw = np.array([1.0, np.nan, np.inf])
    inputs = AttackInputs(target={}, reference={}, reference_keep=np.zeros((0, 3), bool),
                          target_on_population={}, population={},
                          population_keep=np.zeros((0, 0), bool), options={})
    monkeypatch.setitem(ATTACKS, "partial", Attack("partial", "query", frozenset(), lambda _: raw,
                                                   subset=True))
    monkeypatch.setitem(ATTACKS, "whole", Attack("whole", "query", frozenset(), lambda _: raw))
    np.testing.assert_array_equal(run_attack("partial", inputs), [1.0, np.nan, 1.0 + 1e-6])
    np.testing.assert_array_equal(run_attack("whole", inputs), [1.0, 0.0, 1.0 + 1e-6])


def test_rows_of_another_pool_are_rejected(transfer_toy, tmp_path):
    root, (data, splits_path, signals, splits) = transfer_toy
    frame = pd.DataFrame({"model_id": "target-0", "sample_id": splits.target_samples[:-1],
                          "loss": 0.0})
    path = tmp_path / "short.parquet"
    write_parquet(path, frame)
    inputs, _ = attack_inputs(SignalStore.read([signals]), splits, 0, {}, extra={"surrogates": path})
    with pytest.raises(ValueError, match="do not cover"):
        run_attack("query-transfer", inputs)
