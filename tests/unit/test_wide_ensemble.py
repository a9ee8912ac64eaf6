"""Image networks with batch norm and skip connections train as one widened ensemble, each member
as the per-model loop would train it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from miaflow.models import architectures, ensemble, wide
from miaflow.models.training import _fit_torch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# The image recipe (TDDBench: SGD with momentum, weight decay, cosine rates, crop + flip) on a
# WideResNet of depth 10 and width 1. Batch 16 with members of 65 (a last batch of one sample,
# left out), 58 (a smaller last batch: masked batch statistics) and 80 samples (full batches, so
# it trains alone at its last step: the others' running statistics must stay).
TINY_WRN = {
    "kind": "wrn28_2",
    "optimizer": "sgd",
    "lr": 0.05,
    "weight_decay": 5e-4,
    "epochs": 3,
    "batch_size": 16,
    "patience": 1,
    "augment": True,
}
TRAIN_SETS = [np.arange(0, 65), np.arange(40, 98), np.arange(70, 150)]
HELDOUT = [np.arange(150, 200)] * 3
SEEDS = [11, 12, 13]


@pytest.fixture
def tiny_wrn(monkeypatch):
    monkeypatch.setitem(
        architectures.IMAGE_MODELS,
        "wrn28_2",
        lambda shape, n_classes: architectures.WideResNet(shape[0], n_classes, depth=10, width=1),
    )
    generator = np.random.default_rng(0)
    labels = generator.integers(0, 4, 200)
    features = generator.normal(size=(200, 3, 8, 8)).astype(np.float32)
    features[:, 0] += labels[:, None, None]  # a weak real signal
    return features, labels


def fit_both(arch, features, labels):
    batched = ensemble.fit_ensemble(
        arch, features, labels, TRAIN_SETS, HELDOUT, 4, SEEDS, ["a", "b", "c"]
    )
    looped = [
        _fit_torch(
            arch,
            features[train],
            labels[train],
            features[held],
            labels[held],
            4,
            seed,
            1,
            "m",
        )
        for train, held, seed in zip(TRAIN_SETS, HELDOUT, SEEDS)
    ]
    return batched, looped


def test_wide_resnet_members_equal_the_loop_in_fp32(tiny_wrn):
    """Weights, batch-norm running statistics and batch counts of every member equal the loop's:
    same seeds, shuffles, augmentation draws, SGD steps and early-stopping choices."""
    batched, looped = fit_both(TINY_WRN, *tiny_wrn)
    assert batched is not None
    for mine, theirs in zip(batched, looped):
        assert set(mine) == set(theirs)
        for key, value in theirs.items():
            assert mine[key].dtype == value.dtype and mine[key].shape == value.shape, key
            np.testing.assert_allclose(mine[key], value, rtol=0, atol=1e-5, err_msg=key)
    counts = [m["layers.1.norm_1.num_batches_tracked"] for m in batched]
    assert len(set(map(int, counts))) > 1  # members took different numbers of steps


def test_gpu_path_options_leave_the_cpu_wide_ensemble_sound(tiny_wrn):
    """channels_last only changes memory layout; bf16 autocast trains to different, finite
    weights."""
    arch = dict(TINY_WRN, epochs=1, patience=0)
    fp32 = ensemble.fit_ensemble(arch, *tiny_wrn, TRAIN_SETS, HELDOUT, 4, SEEDS, list("abc"))
    for options, same in (({"channels_last": True}, True), ({"precision": "bf16"}, False)):
        other = ensemble.fit_ensemble(
            dict(arch, **options), *tiny_wrn, TRAIN_SETS, HELDOUT, 4, SEEDS, list("abc")
        )
        worst = max(float(np.abs(a[k] - b[k]).max()) for a, b in zip(fp32, other) for k in a)
        assert (worst < 1e-5) == same and np.isfinite(worst)


def test_masked_batch_norm_equals_each_members_own_on_its_real_rows():
    members, channels = 3, 4
    norms = [nn.BatchNorm2d(channels, momentum=0.3) for _ in range(members)]
    widened = wide._wide_leaf(norms[0], members).to_empty(device="cpu")
    widened.reset_parameters()
    x = torch.randn(5, members * channels, 2, 2)
    real = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=torch.bool)
    widened.rows = real
    out = widened(x)
    for m, norm in enumerate(norms):
        own = norm(x[real[:, m], m * channels : (m + 1) * channels])
        torch.testing.assert_close(out[real[:, m], m * channels : (m + 1) * channels], own)
        torch.testing.assert_close(
            widened.running_var[m * channels : (m + 1) * channels], norm.running_var
        )
        torch.testing.assert_close(
            widened.running_mean[m * channels : (m + 1) * channels], norm.running_mean
        )


@pytest.mark.parametrize(
    "layer", [nn.Dropout(0.1), nn.BatchNorm2d(4, momentum=None), nn.LayerNorm(4)]
)
def test_layers_that_would_mix_or_differ_are_not_widened(layer):
    assert wide.widen(nn.Sequential(nn.Conv2d(3, 4, 3), layer), 2) is None


@pytest.mark.parametrize("kind", ["resnet18", "vgg11", "mobilenetv2", "wrn28_2"])
def test_every_image_network_widens_to_its_members_outputs(kind):
    """The probe check that guards training passes for each image network of the benchmark."""
    modules = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        modules.append(architectures.IMAGE_MODELS[kind]((3, 8, 8), 5))
    features = np.random.default_rng(0).normal(size=(4, 3, 8, 8)).astype(np.float32)
    assert ensemble._wide_matches(modules, features)
