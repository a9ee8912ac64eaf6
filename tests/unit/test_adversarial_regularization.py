"""miaflow.defenses.adversarial: Nasr et al.'s gain and classifier objective against hand-computed
values, lambda = 0 as plain training bit for bit, determinism, and a memorising toy on which the
defense lowers the membership advantage."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score
from torch import nn

from miaflow.defenses.adversarial import (
    InferenceModel,
    classifier_objective,
    inference_gain,
    train_adversarial,
)
from miaflow.models import optimizers

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_CLASSES, N_FEATURES, N = 4, 20, 200


# --- hand-computed gain and objective ----------------------------------------------------------


def _known_attack() -> InferenceModel:
    """h with logit z = 2 (p_0 + [y = 0]) - 1.5: each branch carries one input through its first
    unit (ReLU passes it, it is >= 0), the head adds the two and scales."""
    attack = InferenceModel(2)
    with torch.no_grad():
        for p in attack.parameters():
            p.zero_()
        for branch in (attack.prediction, attack.label):
            linears = [m for m in branch if isinstance(m, nn.Linear)]
            linears[0].weight[0, 0] = 1.0
            for layer in linears[1:]:
                layer.weight[0, 0] = 1.0
        head = [m for m in attack.head if isinstance(m, nn.Linear)]
        head[0].weight[0, 0] = head[0].weight[0, 64] = 1.0  # unit 0 of each branch's 64 outputs
        head[1].weight[0, 0] = 1.0
        head[2].weight[0, 0], head[2].bias[0] = 2.0, -1.5
    return attack.double()


def _known_logit(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return 2 * (probs[:, 0] + (labels == 0)) - 1.5


def _log_sigmoid(z: np.ndarray) -> np.ndarray:
    return np.log(1 / (1 + np.exp(-z)))


def test_known_attack_computes_its_logit():
    probs, labels = np.array([[0.9, 0.1], [0.3, 0.7]]), np.array([0, 1])
    with torch.no_grad():
        got = _known_attack()(torch.tensor(probs), F.one_hot(torch.tensor(labels), 2).double())
    np.testing.assert_allclose(got.numpy(), [2 * 1.9 - 1.5, 2 * 0.3 - 1.5])


def test_inference_gain_hand_computed():
    member_probs, member_labels = np.array([[0.9, 0.1], [0.3, 0.7]]), np.array([0, 1])
    reference_probs = np.array([[0.6, 0.4], [0.2, 0.8], [0.5, 0.5]])
    reference_labels = np.array([1, 1, 0])
    # mean log h over the 2 members + mean log(1 - h) over the 3 reference points, each set on its
    # own
    expected = (
        _log_sigmoid(_known_logit(member_probs, member_labels)).mean()
        + np.log(1 - 1 / (1 + np.exp(-_known_logit(reference_probs, reference_labels)))).mean()
    )
    got = inference_gain(
        _known_attack(),
        torch.tensor(member_probs),
        torch.tensor(member_labels),
        torch.tensor(reference_probs),
        torch.tensor(reference_labels),
        2,
    )
    assert got.item() == pytest.approx(expected, rel=1e-12)
    assert got.item() < 0


def _objective_by_hand(logits: np.ndarray, labels: np.ndarray, lam: float) -> float:
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    cross_entropy = -np.log(probs[np.arange(len(labels)), labels]).mean()
    return cross_entropy + lam * _log_sigmoid(_known_logit(probs, labels)).mean()


def test_classifier_objective_hand_computed_value_and_gradient():
    logits, labels, lam = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.array([0, 1, 1]), 0.7
    attack = _known_attack()
    z = torch.tensor(logits, requires_grad=True)
    got = classifier_objective(z, torch.tensor(labels), attack, lam, 2)
    assert got.item() == pytest.approx(_objective_by_hand(logits, labels, lam), rel=1e-12)

    # the gradient reaches the logits through the softmax h reads, not only through the loss
    got.backward()
    step = 1e-6
    numeric = np.zeros_like(logits)
    for i in np.ndindex(logits.shape):
        up, down = logits.copy(), logits.copy()
        up[i] += step
        down[i] -= step
        numeric[i] = (
            _objective_by_hand(up, labels, lam) - _objective_by_hand(down, labels, lam)
        ) / (2 * step)
    np.testing.assert_allclose(z.grad.numpy(), numeric, atol=1e-8)
    plain = torch.tensor(logits, requires_grad=True)
    F.cross_entropy(plain, torch.tensor(labels)).backward()
    assert not np.allclose(z.grad.numpy(), plain.grad.numpy())


# --- training ----------------------------------------------------------------------------------


def _toy() -> dict[str, torch.Tensor]:
    """Random labels, so anything a model fits on its members is memorised: disjoint members,
    reference points (h's non-members) and held-out points (the evaluation's non-members)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3 * N, N_FEATURES, generator=g)
    y = torch.randint(0, N_CLASSES, (3 * N,), generator=g)
    return {
        "x_train": x[:N],
        "y_train": y[:N],
        "x_reference": x[N : 2 * N],
        "y_reference": y[N : 2 * N],
        "x_heldout": x[2 * N :],
        "y_heldout": y[2 * N :],
    }


def _mlp(seed: int) -> nn.Module:
    """Dropout draws from the global RNG in training: any draw the defense took from it would
    show."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(N_FEATURES, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, N_CLASSES)
    )


def _train(
    model: nn.Module,
    lam: float,
    epochs: int,
    attack_steps: int,
    seed: int = 0,
    batch_size: int = 48,
    **kwargs,
) -> InferenceModel:
    toy = _toy()
    shuffle = torch.Generator().manual_seed(seed)  # as training's plain loop shuffles
    return train_adversarial(
        model,
        optimizers.Adam(model.parameters(), lr=1e-2),
        lambda: torch.randperm(N, generator=shuffle).split(batch_size),
        toy["x_train"],
        toy["y_train"],
        toy["x_reference"],
        toy["y_reference"],
        n_classes=N_CLASSES,
        lam=lam,
        epochs=epochs,
        batch_size=batch_size,
        attack_steps=attack_steps,
        attack_optimizer=optimizers.Adam,
        attack_lr=1e-3,
        seed=seed,
        **kwargs,
    )


def _weights(module: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in module.state_dict().values()]


def _losses(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    model.eval()
    with torch.no_grad():
        return F.cross_entropy(model(x), y, reduction="none").numpy()


def test_lambda_zero_is_plain_cross_entropy_training_and_h_still_learns():
    toy, epochs, seed, batch_size = _toy(), 20, 0, 48  # 200 = 4 x 48 + 8: a short last batch
    model = _mlp(0)
    attack = _train(model, lam=0.0, epochs=epochs, attack_steps=1, seed=seed, batch_size=batch_size)
    rng_after = torch.get_rng_state()

    plain = _mlp(0)
    optimizer = optimizers.Adam(plain.parameters(), lr=1e-2)
    shuffle = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        plain.train()
        for batch in torch.randperm(N, generator=shuffle).split(batch_size):
            loss = F.cross_entropy(plain(toy["x_train"][batch]), toy["y_train"][batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    assert all(torch.equal(a, b) for a, b in zip(_weights(model), _weights(plain)))
    assert torch.equal(rng_after, torch.get_rng_state())  # same dropout draws, nothing else drawn
    # h, trained alongside, tells members from points it never saw (its gain is not f's concern at
    # lambda = 0)
    model.eval()
    with torch.no_grad():
        scores = [
            attack(
                F.softmax(model(toy[f"x_{s}"]), dim=1), F.one_hot(toy[f"y_{s}"], N_CLASSES).float()
            )
            for s in ("train", "heldout")
        ]
    assert roc_auc_score([1] * N + [0] * N, torch.cat(scores).numpy()) > 0.75


def test_reduces_membership_advantage_on_a_memorising_toy():
    toy = _toy()
    results = {}
    for lam, attack_steps in ((0.0, 0), (3.0, 1)):
        model = _mlp(0)
        _train(model, lam=lam, epochs=20, attack_steps=attack_steps, batch_size=50)
        members = _losses(model, toy["x_train"], toy["y_train"])
        heldout = _losses(model, toy["x_heldout"], toy["y_heldout"])
        auroc = roc_auc_score([1] * N + [0] * N, -np.concatenate([members, heldout]))
        results[lam] = auroc, heldout.mean() - members.mean()
    (plain_auroc, plain_gap), (defended_auroc, defended_gap) = results[0.0], results[3.0]
    assert plain_auroc > 0.9  # the toy is memorised without the defense
    assert defended_auroc < plain_auroc - 0.1
    assert defended_gap < plain_gap


def test_same_seed_same_weights_other_seed_other_weights():
    runs = {}
    for name, seed in (("first", 3), ("again", 3), ("other", 4)):
        model = _mlp(0)
        attack = _train(model, lam=1.0, epochs=2, attack_steps=2, seed=seed)
        runs[name] = _weights(model), _weights(attack)
    for part in (0, 1):
        assert all(torch.equal(a, b) for a, b in zip(runs["first"][part], runs["again"][part]))
        assert not all(torch.equal(a, b) for a, b in zip(runs["first"][part], runs["other"][part]))


def test_on_epoch_sees_each_epoch_and_stops_training():
    seen = []
    model = _mlp(0)
    _train(
        model,
        lam=1.0,
        epochs=10,
        attack_steps=1,
        on_epoch=lambda epoch: seen.append(epoch) or epoch == 2,
    )
    stopped = _weights(model)
    assert seen == [1, 2]
    two_epochs = _mlp(0)
    _train(two_epochs, lam=1.0, epochs=2, attack_steps=1)
    assert all(torch.equal(a, b) for a, b in zip(stopped, _weights(two_epochs)))
