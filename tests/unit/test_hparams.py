"""The hyperparameter study's library: batched heads (against torch and Opacus), HPO, the DP
accountant and bound, Algorithm 2, the grid's splits and the leave-one-out rotation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import integrate, stats

from miaflow.hparams import attacks, grid, privacy, search, selection
from miaflow.models.heads import (
    HeadRecipe,
    batch_schedules,
    fit_heads,
    head_gradients,
    head_logits,
)


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return ((x / 16.0 - 0.5) / 0.5).astype(np.float32), y.astype(np.int64)


# --- heads --------------------------------------------------------------------------------------


def test_a_head_trains_like_torch_linear_with_adam():
    # Gaussian features: Adam amplifies round-off wherever a gradient is (nearly) exactly zero,
    # as on digits' always-blank border pixels, which would make the comparison meaningless.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 64)).astype(np.float32)
    y = (x @ rng.normal(size=(64, 10))).argmax(1)
    train = np.arange(0, 300, 2)
    recipe = HeadRecipe(batch_size=32, lr=5e-3)
    weight, bias = fit_heads(x, y, 10, [train], [recipe], epochs=3, seeds=[7])

    model = torch.nn.Linear(64, 10)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    for batch in batch_schedules([train], [recipe], 3, [7])[0]:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(torch.from_numpy(x[batch])), torch.from_numpy(y[batch])
        )
        loss.backward()
        optimizer.step()
    np.testing.assert_allclose(weight[0], model.weight.detach().numpy().T, atol=2e-5)
    np.testing.assert_allclose(bias[0], model.bias.detach().numpy(), atol=2e-5)


def test_per_sample_clipping_equals_opacus(digits):
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    x, y = digits
    generator = torch.Generator().manual_seed(0)
    w, b = torch.randn(64, 10, generator=generator) * 0.3, torch.randn(10, generator=generator)
    batch, clip = np.arange(40), 0.7
    model = torch.nn.Linear(64, 10)
    with torch.no_grad():
        model.weight.copy_(w.T)
        model.bias.copy_(b)
    private = GradSampleModule(model)
    optimizer = DPOptimizer(
        torch.optim.SGD(private.parameters(), lr=0.0),
        noise_multiplier=0.0,
        max_grad_norm=clip,
        expected_batch_size=len(batch),
    )
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(
        private(torch.from_numpy(x[batch])), torch.from_numpy(y[batch])
    ).backward()
    optimizer.step()  # leaves the clipped, averaged gradient in .grad

    grad_w, grad_b = head_gradients(
        w.T[None],
        b[None],
        torch.from_numpy(x[batch])[None],
        torch.from_numpy(y[batch])[None],
        torch.ones(1, len(batch), dtype=torch.bool),
        torch.tensor([clip]),
    )
    np.testing.assert_allclose(grad_w[0].numpy() / len(batch), model.weight.grad.numpy(), atol=1e-6)
    np.testing.assert_allclose(grad_b[0].numpy() / len(batch), model.bias.grad.numpy(), atol=1e-6)
    unclipped = head_gradients(
        w.T[None],
        b[None],
        torch.from_numpy(x[batch])[None],
        torch.from_numpy(y[batch])[None],
        torch.ones(1, len(batch), dtype=torch.bool),
        torch.tensor([math.nan]),
    )[0]
    assert not np.allclose(unclipped[0].numpy(), grad_w[0].numpy() / len(batch))


@pytest.mark.parametrize("private", [False, True])
def test_a_head_trains_the_same_alone_or_among_others(digits, private):
    x, y = digits
    rng = np.random.default_rng(1)
    sets = [np.flatnonzero(rng.random(400) < 0.5) for _ in range(4)]
    recipes = [
        HeadRecipe(int(bs), float(lr), 1.0 if private else None, 1.2 if private else 0.0)
        for bs, lr in zip([10, 25, 60, 200], [1e-3, 3e-3, 1e-2, 5e-3])
    ]
    together = fit_heads(x, y, 10, sets, recipes, epochs=4, seeds=[1, 2, 3, 4])
    for k in range(4):
        alone = fit_heads(x, y, 10, sets[k : k + 1], recipes[k : k + 1], epochs=4, seeds=[k + 1])
        # Equal up to summation order (batches padded to another width), which Adam amplifies
        # where a gradient nearly cancels: up to 2e-5 here; a head mixing with another: ~1e-2.
        np.testing.assert_allclose(together[0][k], alone[0][0], atol=5e-5)
    accuracy = (head_logits(x[:400], *together).argmax(-1) == y[:400]).mean(1)
    assert accuracy.min() > 0.3  # they learn (chance: 0.1), with or without noise


def test_dp_noise_changes_the_weights(digits):
    x, y = digits
    train = np.arange(200)
    clipped = fit_heads(x, y, 10, [train], [HeadRecipe(20, 1e-2, 1.0, 0.0)], 2, [0])[0]
    noisy = fit_heads(x, y, 10, [train], [HeadRecipe(20, 1e-2, 1.0, 2.0)], 2, [0])[0]
    assert not np.allclose(clipped, noisy)


# --- privacy ------------------------------------------------------------------------------------


def test_the_bound_by_hand():
    fpr = np.array([0.0, 0.01, 0.5, 1.0])
    eps, delta = 1.0, 0.01
    by_hand = [min(math.e * f + delta, 1 - math.exp(-eps) * (1 - delta - f)) for f in fpr]
    np.testing.assert_allclose(privacy.tpr_bound(fpr, [(eps, delta)]), np.clip(by_hand, 0, 1))
    # the tightest over pairs is the minimum of the pairs' bounds
    pairs = [(1.0, 0.01), (2.0, 1e-4)]
    both = privacy.tpr_bound(fpr, pairs)
    np.testing.assert_allclose(both, np.minimum(*(privacy.tpr_bound(fpr, [p]) for p in pairs)))
    assert privacy.tpr_bound(np.array([0.3]), [])[0] == 1.0  # no guarantee, no bound


def test_the_accountant_round_trip_and_the_tightened_bound():
    sigma = privacy.noise_multiplier(8.0, 1e-5, batches_per_epoch=4, epochs=40)
    assert 1.0 < sigma < 4.0
    [eps_back] = privacy.epsilons(sigma, 0.25, 160, [1e-5])
    assert eps_back == pytest.approx(8.0, abs=0.05) and eps_back <= 8.0
    deltas = [10.0**-k for k in range(1, 9)]
    pairs = list(zip(privacy.epsilons(sigma, 0.25, 160, deltas), deltas))
    tight = privacy.tpr_bound(np.array([1e-3, 1e-2, 1e-1]), pairs)
    loose = privacy.tpr_bound(np.array([1e-3, 1e-2, 1e-1]), [(8.0, 1e-5)])
    assert (tight <= loose).all() and tight[0] < 0.2 and loose[0] > 0.9


# --- Algorithm 2 --------------------------------------------------------------------------------


def test_forward_kl_of_two_normals_matches_integration():
    mu_p, sd_p, mu_q, sd_q = 0.3, 0.8, -0.5, 1.7
    numeric = integrate.quad(
        lambda v: (
            stats.norm.pdf(v, mu_p, sd_p)
            * (stats.norm.logpdf(v, mu_p, sd_p) - stats.norm.logpdf(v, mu_q, sd_q))
        ),
        -20,
        20,
    )[0]
    closed = selection.DIVERGENCES["kl"](
        np.array(mu_p), np.array(sd_p**2), np.array(mu_q), np.array(sd_q**2)
    )
    assert float(closed) == pytest.approx(numeric, rel=1e-7)
    reverse = selection.DIVERGENCES["reverse-kl"](
        np.array(mu_p), np.array(sd_p**2), np.array(mu_q), np.array(sd_q**2)
    )
    assert float(reverse) != pytest.approx(float(closed))
    for name, measure in selection.DIVERGENCES.items():  # zero between identical normals
        assert float(
            measure(np.array(1.0), np.array(2.0), np.array(1.0), np.array(2.0))
        ) == pytest.approx(0, abs=1e-12), name


def test_selection_picks_the_closest_column_and_never_the_targets_own():
    rng = np.random.default_rng(0)
    size, n = 5, 400
    members = rng.random((size, n)) < 0.5
    shifts = np.array([0.0, 1.0, 2.0, 3.0, 4.0])  # column j's statistic ~ N(shift_j, 1)
    stats_ = shifts[None, :, None] + rng.normal(size=(size, size, n))
    target = 2.05 + rng.normal(size=n)
    moments = selection.grid_moments(stats_, members)
    everyone = attacks.others(0, size)
    chosen, scores = selection.select(
        target, moments, members, everyone, [everyone] * len(everyone)
    )
    assert chosen == 2 and np.isinf(scores[0]) and np.isfinite(scores[1:]).all()
    without_two = np.array([1, 3, 4])
    chosen, scores = selection.select(target, moments, members, without_two, [everyone] * 3)
    assert chosen in (1, 3) and np.isinf(scores[[0, 2]]).all()


def test_kl_lira_recovers_the_targets_hyperparameters_when_they_are_candidates(digits):
    """Statistical: a target trained with η_j* is matched to column j* far more often than
    chance."""
    x, y = digits
    etas = [HeadRecipe(10, 1e-2), HeadRecipe(50, 1e-4), HeadRecipe(100, 1e-3), HeadRecipe(20, 3e-6)]
    picked = []
    for trial in range(3):
        splits = grid.draw_splits(y, 10, shots=10, n_shadow=6, seed=trial, setting="test", run=0)
        universe, size = splits.universe["td"], splits.n_splits
        sets = [universe[splits.train_set("td", i)] for i in range(size)]
        columns = []
        for j, eta in enumerate(etas):
            w, b = fit_heads(x, y, 10, sets, [eta] * size, 20, [100 * j + i for i in range(size)])
            columns.append(_phi(head_logits(x[universe], w, b), y[universe]))
        stats_ = np.stack(columns, axis=1)  # (rows, columns, n)
        members = splits.members["td"]
        moments = selection.grid_moments(stats_, members)
        for truth in range(len(etas)):
            target = stats_[0, truth]
            rows = attacks.others(0, size)
            chosen, _ = selection.select(
                target, moments, members, np.arange(len(etas)), [rows] * len(etas)
            )
            picked.append(chosen == truth)
    assert np.mean(picked) >= 0.75  # chance: 0.25


def _phi(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    from miaflow.signals import signals_from_logits

    return signals_from_logits(logits, labels)["phi"]


# --- grid splits and rotation -------------------------------------------------------------------


def test_universes_are_class_balanced_disjoint_and_round_trip(digits):
    _, y = digits
    drawn = grid.draw_splits(y, 10, shots=4, n_shadow=7, seed=3, setting="digits_s4", run=1)
    td, ed = drawn.universe["td"], drawn.universe["ed"]
    assert len(td) == len(ed) == 2 * 4 * 10 and not set(td) & set(ed)
    assert (np.bincount(y[td], minlength=10) == 8).all()
    assert drawn.members["td"].shape == (8, 80) and 0.3 < drawn.members["td"].mean() < 0.7
    again = grid.GridSplits.from_frame(drawn.to_frame())
    for family in grid.FAMILIES:
        np.testing.assert_array_equal(again.universe[family], drawn.universe[family])
        np.testing.assert_array_equal(again.members[family], drawn.members[family])
    other_run = grid.draw_splits(y, 10, shots=4, n_shadow=7, seed=3, setting="digits_s4", run=2)
    assert not np.array_equal(other_run.universe["td"], td)
    with pytest.raises(ValueError, match="shots"):
        grid.draw_splits(y, 10, shots=100, n_shadow=3, seed=0, setting="x", run=0)


def test_rotation_makes_each_diagonal_model_the_target_once_and_never_a_shadow(monkeypatch):
    size, n = 6, 30
    rng = np.random.default_rng(2)
    members = rng.random((size, n)) < 0.5
    # stats[k, j] encodes the model's (row, column) so each call's shadows can be read back
    code = 1000 * np.arange(size)[:, None, None] + np.arange(size)[None, :, None]
    stats_ = code + 0.01 * rng.normal(size=(size, size, n))
    calls = []
    monkeypatch.setattr(
        attacks,
        "lira_scores",
        lambda target, shadows, keep: (
            calls.append(
                (np.round(target.mean()).astype(int), np.round(shadows.mean(1)).astype(int))
            ),
            np.zeros(len(target)),
        )[1],
    )
    targets = stats_[np.arange(size), np.arange(size)]
    for attack in attacks.ATTACKS:
        calls.clear()
        _, labels, used = attacks.rotate(stats_, targets, members, attack)
        np.testing.assert_array_equal(labels, members.ravel())
        assert [t for t, _ in calls] == [1001 * i for i in range(size)]  # each diagonal, once
        for i, (_, shadows) in enumerate(calls):
            rows = shadows // 1000
            np.testing.assert_array_equal(rows, attacks.others(i, size))  # all k != i, never i
            columns = shadows % 1000
            if attack == "lira":
                assert (columns == i).all()
            elif attack == "acc-lira":
                np.testing.assert_array_equal(columns, rows)
            else:
                assert (columns == used[i]).all() and used[i] != i


def test_every_study_attack_scores_members_higher_on_a_memorising_grid():
    rng = np.random.default_rng(5)
    size, n = 9, 200
    members = rng.random((size, n)) < 0.5
    difficulty = rng.normal(size=n)
    stats_ = difficulty + 2.0 * members[:, None, :] + 0.5 * rng.normal(size=(size, size, n))
    targets = stats_[np.arange(size), np.arange(size)]
    for attack in attacks.ATTACKS:
        scores, labels, _ = attacks.rotate(stats_, targets, members, attack)
        metrics = attacks.roc_metrics(scores, labels, [0.01, 0.1])
        assert metrics[0]["auroc"] > 0.8, attack
    reduced = attacks.rotate(
        stats_, targets, members, "kl-lira", attacks.Budget(2, 1), seed=1, tag=("t",)
    )
    assert attacks.roc_metrics(reduced[0], reduced[1], [0.1])[0]["auroc"] > 0.8


def test_the_cost_formula():
    assert attacks.cost("lira", 64, 20) == 64
    assert attacks.cost("acc-lira", 64, 20) == 64 * 20
    assert attacks.cost("kl-lira", 64, 20, attacks.Budget(16, 1)) == 16 * 20 + 0 + 64 - 1
    assert attacks.cost("kl-lira", 64, 20) == 64 * 20 + 64 * 63


# --- HPO ----------------------------------------------------------------------------------------

SPACE = {
    "trials": 4,
    "epochs": 3,
    "sampler": "tpe",
    "val_ratio": 0.3,
    "batch_size": [10, 1000],
    "lr": [1e-4, 1e-2],
    "clip_norm": [0.5, 2.0],
}


def test_tuning_is_seeded_marks_the_first_best_trial_and_respects_the_space(digits):
    x, y = digits
    sets = [np.arange(0, 120), np.arange(200, 290)]
    first = search.tune(x, y, 10, sets, SPACE, [11, 12])
    again = search.tune(x, y, 10, sets, SPACE, [11, 12])
    pd.testing.assert_frame_equal(first, again)
    assert len(first) == 2 * SPACE["trials"] and first["best"].sum() == 2
    for split, part in first.groupby("split"):
        best = part[part["best"]].iloc[0]
        assert best["accuracy"] == part["accuracy"].max()
        assert best["trial"] == part.loc[part["accuracy"] == part["accuracy"].max(), "trial"].min()
        assert part["batch_size"].between(10, round(0.7 * len(sets[split]))).all()
    assert first["lr"].between(*SPACE["lr"]).all() and first["clip_norm"].isna().all()
    private = search.tune(x, y, 10, sets, SPACE, [11, 12], noise_for=lambda batches: 0.5 + batches)
    assert private["clip_norm"].between(*SPACE["clip_norm"]).all()
    batches = np.ceil(np.array([84, 63])[private["split"]] / private["batch_size"])
    np.testing.assert_allclose(private["noise_multiplier"], 0.5 + batches)
    assert search.chosen(first).index.tolist() == [0, 1]


def test_samplers_by_name():
    assert type(search.make_sampler("gp", 1)).__name__ == "GPSampler"
    with pytest.raises(ValueError, match="unknown sampler"):
        search.make_sampler("grid", 1)


# --- backbone features --------------------------------------------------------------------------


def test_vit_features_from_a_local_checkpoint(tmp_path):
    from transformers import ViTConfig, ViTModel

    from miaflow.hparams.features import backbone_features

    torch.manual_seed(0)
    ViTModel(
        ViTConfig(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=24,
            image_size=16,
            patch_size=8,
        ),
        add_pooling_layer=False,
    ).save_pretrained(tmp_path)
    images = np.random.default_rng(0).uniform(-1, 1, size=(5, 3, 32, 32)).astype(np.float32)
    features = backbone_features(images, "vit-b16", str(tmp_path), batch_size=2)
    assert features.shape == (5, 16) and np.isfinite(features).all()
    np.testing.assert_allclose(
        features, backbone_features(images, "vit-b16", str(tmp_path), batch_size=5), atol=1e-5
    )
    grey = backbone_features(images[:, :1], "vit-b16", str(tmp_path))  # one channel is repeated
    assert grey.shape == (5, 16)
    with pytest.raises(ValueError, match="unknown backbone"):
        backbone_features(images, "resnet", str(tmp_path))
