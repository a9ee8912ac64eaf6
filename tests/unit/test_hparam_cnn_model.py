"""The study's batched CNNs trained from scratch: against a plain torch loop and Opacus, alone or
among others, with and without DP noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from miaflow.hparams.cnn import (
    NAMES,
    clipped_gradients,
    cnn_module,
    fit_cnns,
    inner_layout,
    module_layout,
)
from miaflow.models.heads import HeadRecipe, batch_schedules

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    images = ((x / 16.0 - 0.5) / 0.5).astype(np.float32).reshape(-1, 1, 8, 8)
    return images, y.astype(np.int64)


def test_a_member_trains_like_a_torch_loop():
    # Gaussian images of an odd side (9 -> 7 -> pooled 3, the last row and column dropped):
    # no exactly-zero gradients for Adam to amplify round-off in.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2, 9, 9)).astype(np.float32)
    y = rng.integers(0, 10, 300)
    train = np.arange(0, 300, 2)
    recipe = HeadRecipe(batch_size=32, lr=5e-3)
    stack = fit_cnns(x, y, 10, [train], [recipe], epochs=3, seeds=[7])

    torch.manual_seed(7)
    model = cnn_module((2, 9, 9), 10)
    optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    for batch in batch_schedules([train], [recipe], 3, [7])[0]:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(torch.from_numpy(x[batch])), torch.from_numpy(y[batch])
        )
        loss.backward()
        optimizer.step()
    for name, param in model.named_parameters():
        np.testing.assert_allclose(stack.params[name][0], param.detach().numpy(), atol=1e-5)
    expected = model(torch.from_numpy(x)).detach().double().numpy()
    np.testing.assert_allclose(stack.logits(x)[0], expected, atol=1e-4)


@pytest.mark.filterwarnings("ignore:Full backward hook")  # Opacus' hooks on an input layer
def test_per_sample_clipping_equals_opacus(digits):
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    x, y = digits
    batch, clip = np.arange(40), 1.0
    torch.manual_seed(3)
    model = cnn_module((1, 8, 8), 10)
    stacked = [p.detach().clone()[None] for p in model.parameters()]
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

    def gradients(clip_norm: float) -> list[np.ndarray]:
        grads = clipped_gradients(
            inner_layout(stacked, (1, 8, 8)),
            torch.from_numpy(x[batch])[None],
            torch.from_numpy(y[batch])[None],
            torch.ones(1, len(batch), dtype=torch.bool),
            torch.tensor([clip_norm]),
        )
        return [g[0].numpy() for g in module_layout(grads, (1, 8, 8))]

    clipped = gradients(clip)
    for grad, param in zip(clipped, model.parameters()):
        np.testing.assert_allclose(grad / len(batch), param.grad.numpy(), atol=1e-6)
    unclipped = gradients(float("inf"))
    assert not np.allclose(unclipped[2], clipped[2])  # the clip acted on this batch


@pytest.mark.parametrize("privacy", ["none", "all", "mixed"])
def test_a_member_trains_the_same_alone_or_among_others(digits, privacy):
    x, y = digits
    rng = np.random.default_rng(1)
    sets = [np.flatnonzero(rng.random(400) < 0.5) for _ in range(4)]
    private = {"none": [False] * 4, "all": [True] * 4, "mixed": [True, False, False, True]}
    recipes = [
        HeadRecipe(int(bs), float(lr), 1.0 if dp else None, 1.2 if dp else 0.0)
        for bs, lr, dp in zip([10, 25, 60, 200], [1e-3, 3e-3, 1e-2, 5e-3], private[privacy])
    ]
    together = fit_cnns(x, y, 10, sets, recipes, epochs=3, seeds=[1, 2, 3, 4])
    for k in range(4):
        alone = fit_cnns(x, y, 10, sets[k : k + 1], recipes[k : k + 1], epochs=3, seeds=[k + 1])
        for name in NAMES:
            # Equal up to summation order (batches padded to another width, members chunked
            # otherwise): up to 1e-7 measured here; another member's weights differ by ~0.6.
            np.testing.assert_allclose(together.params[name][k], alone.params[name][0], atol=1e-5)
    logits = together.logits(x[:100])
    for k in range(4):  # each member's logits are its own module's
        model = cnn_module((1, 8, 8), 10)
        model.load_state_dict({n: torch.from_numpy(together.params[n][k]) for n in NAMES})
        expected = model(torch.from_numpy(x[:100])).detach().double().numpy()
        np.testing.assert_allclose(logits[k], expected, atol=1e-4)


def test_dp_noise_changes_the_weights_and_members_learn(digits):
    x, y = digits
    train, held_out = np.arange(1000), np.arange(1000, len(y))
    recipes = [
        HeadRecipe(32, 1e-2),
        HeadRecipe(32, 1e-2, clip_norm=1.0, noise_multiplier=0.0),
        HeadRecipe(32, 1e-2, clip_norm=1.0, noise_multiplier=1.0),
    ]
    stack = fit_cnns(x, y, 10, [train] * 3, recipes, epochs=4, seeds=[0, 0, 0])
    clipped, noisy = stack.params["4.weight"][1], stack.params["4.weight"][2]
    assert not np.allclose(clipped, noisy, atol=1e-3)
    accuracy = (stack.logits(x[held_out]).argmax(-1) == y[held_out]).mean(1)
    assert accuracy.min() > 0.5, accuracy  # chance: 0.1; measured 0.82 to 0.92


def test_chunks_of_members_and_images_change_nothing(digits, monkeypatch):
    from miaflow.hparams import cnn

    x, y = digits
    sets = [np.arange(0, 300, 2), np.arange(1, 300, 2), np.arange(300)]
    recipes = [HeadRecipe(16, 1e-2), HeadRecipe(16, 1e-2, 1.0, 1.0), HeadRecipe(40, 3e-3, 1.0, 0.5)]
    whole = fit_cnns(x, y, 10, sets, recipes, epochs=2, seeds=[5, 6, 7])
    logits = whole.logits(x[:50])
    monkeypatch.setattr(cnn, "ACTIVATIONS", 1)  # one member (or image) per chunk
    chunked = fit_cnns(x, y, 10, sets, recipes, epochs=2, seeds=[5, 6, 7])
    for name in NAMES:
        np.testing.assert_allclose(chunked.params[name], whole.params[name], atol=1e-5)
    np.testing.assert_allclose(chunked.logits(x[:50]), logits, atol=1e-5)
