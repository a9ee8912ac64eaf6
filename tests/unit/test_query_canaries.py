"""Query-ref's canaries: their job (rule query_canaries, `miaflow.queries.canaries`), the
attack's scores on them, and how the workflow plans this image-only, subset attack."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import roc_auc_score
from test_query_surrogates import CNN, _digest, _scores

from miaflow import plan as workflow
from miaflow.attacks import scoring
from miaflow.attacks.inputs import AttackInputs
from miaflow.attacks.reference import in_out_stats
from miaflow.attacks.registry import ATTACKS, Attack
from miaflow.attacks.scoring import run_attack
from miaflow.data import Dataset, write_dataset
from miaflow.io import write_parquet
from miaflow.jobs import queries
from miaflow.plan import Experiment
from miaflow.queries import canaries as canary_module
from miaflow.signals import outputs_table, write_signal_shard
from miaflow.splits import make_splits


def test_crop_and_flip_are_crops_of_the_padded_image_or_their_mirror():
    images = torch.arange(2 * 3 * 5 * 6, dtype=torch.float32).reshape(2, 3, 5, 6)
    out = canary_module.crop_and_flip(images.repeat(20, 1, 1, 1), np.random.default_rng(0))
    padded = torch.nn.functional.pad(images, (4,) * 4, value=-1.0)
    seen_flip = seen_plain = False
    for b, crop in enumerate(out):
        windows = [
            (padded[b % 2, :, top : top + 5, left : left + 6], f)
            for top in range(9)
            for left in range(9)
            for f in (False, True)
        ]
        candidates = [
            f for window, f in windows if torch.equal(crop, window.flip(-1) if f else window)
        ]
        assert candidates, f"output {b} is no crop of the padded image"
        seen_flip |= any(candidates)
        seen_plain |= not all(candidates)
    assert seen_flip and seen_plain
    assert out.min() == -1.0  # padding is black (-1) in normalised units


def test_pick_models_draws_only_eligible_models_uniformly():
    eligible = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0], [0, 0, 1]], dtype=bool)
    picks = canary_module._pick_models(eligible, 4000, np.random.default_rng(0))
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
    anchors = canary_module.canary_anchors(images, 4, rng)
    assert anchors.shape == (3, 4, 1, 6, 6)
    models = [_LogitOfMean(50.0), _LogitOfMean(-50.0)]
    keep = np.array([[True, True, False], [False, False, True]])
    canaries = canary_module.optimise_canaries(
        models, keep, anchors, np.zeros(3, np.int64), steps=30, generator=rng
    )
    assert canaries.shape == anchors.shape
    assert canaries.min() >= -1.0 and canaries.max() <= 1.0
    moved = np.abs(canaries - anchors)
    assert moved.max() <= canary_module.CANARY_EPSILON + 1e-6
    assert moved.max() > 0.9 * canary_module.CANARY_EPSILON  # the optimisation did move them
    assert np.any(canaries[0] == 1.0)  # clipped at the top of the valid range


def test_canaries_move_towards_the_in_goal_within_epsilon():
    """One IN model (logit = 50·mean) and one OUT model (logit = 0·mean): the loss pushes the
    mean pixel up as far as the projection allows, i.e. every pixel to its anchor + epsilon."""
    images = np.zeros((2, 1, 4, 4), dtype=np.float32)
    rng = np.random.default_rng(1)
    anchors = canary_module.canary_anchors(images, 3, rng)
    models = [_LogitOfMean(50.0), _LogitOfMean(0.0)]
    keep = np.array([[True, True], [False, False]])
    canaries = canary_module.optimise_canaries(
        models, keep, anchors, np.zeros(2, np.int64), steps=30, generator=rng
    )
    np.testing.assert_allclose(canaries, anchors + canary_module.CANARY_EPSILON, atol=1e-6)
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
    rows = [
        pd.DataFrame(
            {"model_id": m, "sample_id": pool[evaluated], "canary": 0, "phi": values[evaluated]}
        )
        for m, values in zip([*refs, "target-0"], [*ref_phi, target_phi])
    ]
    inputs = AttackInputs(
        target={},
        reference={},
        reference_keep=keep,
        target_on_population={},
        population={},
        population_keep=np.zeros((0, 0), bool),
        extra={"canaries": _parquet(tmp_path, pd.concat(rows))},
        sample_ids=pool,
    )
    scores = run_attack("query-ref", inputs)
    assert np.isnan(scores[1::2]).all()  # not evaluated: NaN is kept for the table to drop
    lira_inputs = AttackInputs(
        target={"phi": target_phi[evaluated]},
        reference={"phi": ref_phi[:, evaluated]},
        reference_keep=keep[:, evaluated],
        target_on_population={},
        population={},
        population_keep=np.zeros((0, 0), bool),
    )
    np.testing.assert_allclose(scores[0::2], run_attack("model-lira", lira_inputs))


def test_query_ref_averages_over_canaries(tmp_path):
    splits = make_splits(20, seed=0, dataset="toy", repeats=1, n_reference=2, n_population=0)
    pool = splits.target_samples
    keep = np.stack([splits.members(f"reference-{m}")[pool] for m in range(2)])
    rng = np.random.default_rng(2)
    phi = rng.normal(size=(3, len(pool), 2))  # reference-0, reference-1, target-0; 2 canaries
    rows = [
        pd.DataFrame(
            {
                "model_id": m,
                "sample_id": np.repeat(pool, 2),
                "canary": np.tile([0, 1], len(pool)),
                "phi": phi[k].reshape(-1),
            }
        )
        for k, m in enumerate(["reference-0", "reference-1", "target-0"])
    ]
    inputs = AttackInputs(
        target={},
        reference={},
        reference_keep=keep,
        target_on_population={},
        population={},
        population_keep=np.zeros((0, 0), bool),
        extra={"canaries": _parquet(tmp_path, pd.concat(rows[::-1]))},
        sample_ids=pool,
    )
    flat_keep = np.repeat(keep, 2, axis=1)
    phi_in, phi_out = in_out_stats(phi[:2].reshape(2, -1), flat_keep)
    from scipy.stats import norm

    llr = norm.logpdf(phi[2].reshape(-1), phi_in.median, phi_in.pooled_std) - norm.logpdf(
        phi[2].reshape(-1), phi_out.median, phi_out.pooled_std
    )
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
    monkeypatch.setattr(canary_module, "crop_and_flip", lambda images, generator: images)
    from miaflow.models.shards import save_shard
    from miaflow.models.training import train_models
    from miaflow.splits import make_splits as draw

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
    save_shard(
        shard,
        weights,
        {
            "arch_name": "cnn",
            "arch": CNN,
            "n_classes": 2,
            "data_hash": dataset.content_hash(),
            "seed": 0,
        },
    )
    from miaflow.models.shards import load_shard, shard_logits

    loaded, metadata = load_shard(shard)
    signals = tmp_path / "signals.parquet"
    write_signal_shard(
        signals,
        outputs_table(
            metadata["model_ids"],
            np.arange(n),
            dataset.labels,
            shard_logits(loaded, metadata, images),
        ),
        {"data_hash": dataset.content_hash()},
    )

    output = tmp_path / "canaries.parquet"
    options = {"boundary_eva_num": 50, "n_canaries": 3, "steps": 5}
    queries.query_canaries(
        data=data,
        splits=splits_path,
        models=[shard],
        canaries=output,
        arch_name="cnn",
        options=options,
        seed=0,
        threads=1,
    )
    table = pd.read_parquet(output)
    assert len(table) == (4 + 2) * 50 * 3
    assert set(table["sample_id"]) <= set(splits.target_samples)
    scored = _scores(tmp_path, splits_path, signals, "query-ref", {"canaries": output})
    assert len(scored) == 50  # NaN rows of points without canaries are dropped
    np.testing.assert_array_equal(
        np.sort(scored["sample_id"].unique()), np.sort(table["sample_id"].unique())
    )
    assert roc_auc_score(scored["is_member"], scored["score"]) > 0.7
    again = tmp_path / "canaries-again.parquet"
    queries.query_canaries(
        data=data,
        splits=splits_path,
        models=[shard],
        canaries=again,
        arch_name="cnn",
        options=options,
        seed=0,
        threads=1,
    )
    assert _digest(again) == _digest(output)


def test_evaluated_points_are_a_seeded_subset_of_the_pool():
    pool = np.arange(0, 200, 2)
    first = canary_module.evaluated_points(pool, 30, seed=7)
    assert len(first) == 30 and set(first) <= set(pool) and np.all(np.diff(first) > 0)
    np.testing.assert_array_equal(first, canary_module.evaluated_points(pool, 30, seed=7))
    assert not np.array_equal(first, canary_module.evaluated_points(pool, 30, seed=8))
    np.testing.assert_array_equal(canary_module.evaluated_points(pool, 1000, seed=7), pool)


def test_query_ref_is_image_only_and_skipped_on_tabular_data():
    assert ATTACKS["query-ref"].modalities == {"image"} and ATTACKS["query-ref"].subset
    config = {"attacks": ["metric-loss", "query-ref", "query-qrm"]}
    assert workflow.attacks_for(config, Experiment("digits", "cnn", "cnn")) == [
        "metric-loss",
        "query-ref",
        "query-qrm",
    ]
    assert workflow.attacks_for(config, Experiment("purchase", "mlp", "mlp")) == [
        "metric-loss",
        "query-qrm",
    ]


def test_only_subset_attacks_keep_nan_scores(monkeypatch):
    raw = np.array([1.0, np.nan, np.inf])
    inputs = AttackInputs(
        target={},
        reference={},
        reference_keep=np.zeros((0, 3), bool),
        target_on_population={},
        population={},
        population_keep=np.zeros((0, 0), bool),
    )
    toy = "miaflow.attacks.toy"
    monkeypatch.setitem(scoring.MODULES, toy, SimpleNamespace(scores=lambda _: raw))
    partial = Attack("partial", "query", f"{toy}.scores", "Some scores.", subset=True)
    monkeypatch.setitem(ATTACKS, "partial", partial)
    monkeypatch.setitem(ATTACKS, "whole", Attack("whole", "query", f"{toy}.scores", "Scores."))
    np.testing.assert_array_equal(run_attack("partial", inputs), [1.0, np.nan, 1.0 + 1e-6])
    np.testing.assert_array_equal(run_attack("whole", inputs), [1.0, 0.0, 1.0 + 1e-6])
