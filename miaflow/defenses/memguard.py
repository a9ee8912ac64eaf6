"""MemGuard (Jia, Salem, Backes, Zhang and Gong, "MemGuard: Defending against Black-Box Membership
Inference Attacks via Adversarial Examples", ACM CCS 2019).

MemGuard leaves the target model alone and perturbs each confidence vector it releases: the noisy
vector is an adversarial example for a membership classifier that the defender trains itself, so
that an attacker's classifier, which sees similar vectors, is pushed towards a random guess. The
predicted label never changes, so accuracy is untouched. The choices below follow the paper
(Section 4, "Phase I" with its Algorithm 1, and "Phase II") and the authors' code (GitHub
jjy1994/MemGuard: `defense_framework.py`, `train_defense_model_defensemodel.py`,
`model/fccnet_location.py`, `evaluate_nn_attack.py`, `config.ini`).

Defense classifier g (code: `model_defense`): an MLP with 256-128-64 ReLU hidden units and one
sigmoid output, trained with binary cross-entropy and plain SGD (learning rate 0.001, batch 64,
400 epochs, Glorot-uniform weights, zero biases) on the defender's member (label 1) and
non-member (label 0) confidence vectors. Its input is the confidence vector *sorted* (ascending,
as in the code), not in class order. g(s) is its member probability, h(s) the logit before the
sigmoid.

Phase I works in logit space. With z = log s (so softmax(z) = s) and predicted label
y = argmax s, it looks for z' minimising

    L(z') = |h(softmax(z'))| + c2 · ReLU(max_{j≠y} z'_j − z'_y) + c3 · ||softmax(z') − s||_1:

the classifier's logit towards 0 (g towards 0.5; its weight c1 is 1), a hinge that keeps y the
largest entry (c2 = 10, no margin, as in the code), and the L1 distortion. Each descent starts
again from z and takes normalised steps z' ← z' − β·∇L/||∇L||_2 (β = 0.1, at most 300) until
argmax z' = y and h(softmax(z')) has changed sign (g has crossed 0.5). It is the *distortion*
weight c3 that grows: it starts at 0.1 and is multiplied by 10 after every successful descent
(up to 10^5); the search ends at the first failure and keeps the last success, so the noise is
the smallest that still flips the classifier. If the first descent (c3 = 0.1) fails the vector
gets no noise, and if g(s) is within 1e-5 of 0.5 it needs none. Softmax keeps every candidate a
probability vector. One difference from the code: it sorts once before the search, while here
the classifier sees softmax(z') re-sorted at every step, so the stopping check is made on the
vector that is released. All rows descend together; each leaves the batch once it has crossed.
Because descents stop at the first step across 0.5, g ends just on the *other* side: with an
unlimited budget the defender's own classifier is not merely confused but inverted.

Phase II (randomized noise addition; code: `evaluate_nn_attack.py`): with a budget ε on the
*expected* L1 distortion of each vector, the noisy vector s' = s + r is released with
probability p = min(1, ε / ||r||_1) and s otherwise, so p · ||r||_1 ≤ ε for every vector;
p = 0 where the noise does not bring g strictly closer to 0.5 (the code's rule; it also covers
vectors without noise). The code evaluates attacks in expectation over p; here one release is
drawn per vector from `np.random.default_rng(seed)`. Song & Mittal (USENIX Security 2021,
inspire-group/membership-inference-evaluation, `MemGuard/MIA_evaluate.py`) attack the Phase I
vectors (`defense_output`), i.e. an unlimited budget.

Phase I is deterministic and is the expensive part, so `craft_noise` (Phase I) and
`randomized_release` (Phase II) are separate, for sweeping budgets; `memguard` runs both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

HIDDEN_SIZES = (256, 128, 64)  # code: model_defense
EPOCHS = 400  # config.ini: defense_epochs
BATCH_SIZE = 64  # config.ini: defense_batch_size
LEARNING_RATE = 1e-3  # train_defense_model_defensemodel.py: SGD(lr=0.001)

MAX_ITERATIONS = 300  # defense_framework.py: max_iteration
STEP_SIZE = 0.1  # β: length of each normalised gradient step in logit space
LABEL_WEIGHT = 10.0  # c2: weight of the hinge that keeps the predicted label
DISTORTION_WEIGHTS = (
    0.1,
    1.0,
    10.0,
    100.0,
    1e3,
    1e4,
    1e5,
)  # c3, tried in order while descents succeed
AT_HALF = 1e-5  # |g(s) − 0.5| below which a vector needs no noise
LOG_FLOOR = float(np.log(1e-45))  # log of a zero probability (as miaflow.signals.LOG_ZERO_PROB)


class DefenseClassifier:
    """The defender's membership classifier: an MLP on sorted confidence vectors.

    Holds float32 weights as plain tensors (no module, no pickling); `to_arrays`/`from_arrays`
    turn it into `dict[str, np.ndarray]` and back, e.g. for safetensors.
    """

    def __init__(self, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor]) -> None:
        if len(weights) != len(biases) or not weights:
            raise ValueError("need one bias per weight matrix, and at least one layer")
        for i, (w, b) in enumerate(zip(weights, biases)):
            expected_inputs = weights[i - 1].shape[0] if i else w.shape[1]
            if w.ndim != 2 or b.shape != (w.shape[0],) or w.shape[1] != expected_inputs:
                raise ValueError(
                    f"layer {i}: weight {tuple(w.shape)} and bias {tuple(b.shape)} do not chain"
                )
        if weights[-1].shape[0] != 1:
            raise ValueError("the last layer must have one output (the member logit)")
        self.weights = [w.detach().to(torch.float32) for w in weights]
        self.biases = [b.detach().to(torch.float32) for b in biases]

    @property
    def n_classes(self) -> int:
        return self.weights[0].shape[1]

    def logit(self, probs: torch.Tensor) -> torch.Tensor:
        """h: the logit of g (member probability) for (n, C) probabilities, differentiable; (n,)."""
        return _mlp_logit(probs, self.weights, self.biases)

    def member_probability(self, probs: np.ndarray) -> np.ndarray:
        """g: the probability that each (n, C) confidence vector is a member's; float64 (n,)."""
        with torch.no_grad():
            h = self.logit(torch.as_tensor(np.asarray(probs, dtype=np.float64)))
        return torch.sigmoid(h).numpy()

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Weights as numpy arrays named `weight_<layer>` and `bias_<layer>`."""
        arrays = {}
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            arrays[f"weight_{i}"] = w.numpy().copy()
            arrays[f"bias_{i}"] = b.numpy().copy()
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> DefenseClassifier:
        """Inverse of `to_arrays`; the layer count and sizes come from the arrays themselves."""
        n_layers = len(arrays) // 2
        if sorted(arrays) != sorted(
            [f"weight_{i}" for i in range(n_layers)] + [f"bias_{i}" for i in range(n_layers)]
        ):
            raise ValueError(f"expected weight_<i>/bias_<i> arrays, got {sorted(arrays)}")
        return cls(
            [torch.tensor(np.asarray(arrays[f"weight_{i}"])) for i in range(n_layers)],
            [torch.tensor(np.asarray(arrays[f"bias_{i}"])) for i in range(n_layers)],
        )


@dataclass(frozen=True)
class MemGuardResult:
    """What MemGuard released, and why; all arrays are float64 with one row per input vector."""

    probs: np.ndarray  # (n, C) released confidence vectors: `noisy_probs` or the input
    distortion: np.ndarray  # (n,) L1 distance between released and input vectors
    noisy_probs: (
        np.ndarray
    )  # (n, C) Phase I's candidates s + r (the input where Phase I found none)
    noise_size: np.ndarray  # (n,) ||r||_1, the L1 distance between `noisy_probs` and the input
    release_probability: np.ndarray  # (n,) Phase II's p

    @property
    def expected_distortion(self) -> np.ndarray:
        """p · ||r||_1 per vector: what the budget bounds (by ε for every vector)."""
        return self.release_probability * self.noise_size


def train_defense_classifier(
    member_probs: np.ndarray,
    nonmember_probs: np.ndarray,
    seed: int,
    epochs: int = EPOCHS,
    batch_size: int = BATCH_SIZE,
    learning_rate: float = LEARNING_RATE,
    hidden_sizes: Sequence[int] = HIDDEN_SIZES,
) -> DefenseClassifier:
    """Train g on the defender's own members (label 1) and non-members (label 0), as the paper does.

    Plain SGD on binary cross-entropy, as in the authors' code; initialisation and shuffling come
    from `seed` only (explicit generators), so the weights are reproducible.
    """
    members = _check_probabilities(member_probs)
    nonmembers = _check_probabilities(nonmember_probs)
    if members.shape[1] != nonmembers.shape[1]:
        raise ValueError("members and non-members must have the same number of classes")
    x = torch.as_tensor(np.vstack([members, nonmembers]), dtype=torch.float32)
    y = torch.cat([torch.ones(len(members)), torch.zeros(len(nonmembers))])

    generator = torch.Generator().manual_seed(seed)
    sizes = [x.shape[1], *hidden_sizes, 1]
    weights, biases = [], []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        weights.append(
            torch.nn.init.xavier_uniform_(
                torch.empty(n_out, n_in), generator=generator
            ).requires_grad_()
        )
        biases.append(torch.zeros(n_out, requires_grad=True))

    optimizer = torch.optim.SGD([*weights, *biases], lr=learning_rate)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for batch in order.split(batch_size):
            optimizer.zero_grad()
            F.binary_cross_entropy_with_logits(
                _mlp_logit(x[batch], weights, biases), y[batch]
            ).backward()
            optimizer.step()
    return DefenseClassifier(weights, biases)


def craft_noise(
    probs: np.ndarray,
    classifier: DefenseClassifier,
    max_iterations: int = MAX_ITERATIONS,
    step_size: float = STEP_SIZE,
) -> np.ndarray:
    """Phase I: each confidence vector moved just across g = 0.5, label kept; float64 (n, C).

    Rows where no descent succeeds (or that need none) come back unchanged, bit for bit.
    """
    s = _check_probabilities(probs)
    if s.shape[1] != classifier.n_classes:
        raise ValueError(f"{s.shape[1]} classes, but the classifier takes {classifier.n_classes}")
    labels = torch.as_tensor(s.argmax(axis=1))
    target = torch.as_tensor(
        s, dtype=torch.float32
    )  # float32 halves the search's time; steps are 0.1
    z0 = torch.log(target).clamp_min(LOG_FLOOR)
    with torch.no_grad():
        h0 = classifier.logit(target)

    found = torch.zeros(len(s), dtype=torch.bool)
    best = z0.clone()
    rows = torch.nonzero(torch.sigmoid(h0).sub(0.5).abs() > AT_HALF).squeeze(1)
    for distortion_weight in DISTORTION_WEIGHTS:
        if rows.numel() == 0:
            break
        z = _descend(
            z0[rows],
            target[rows],
            labels[rows],
            h0[rows],
            classifier,
            distortion_weight,
            max_iterations,
            step_size,
        )
        with torch.no_grad():
            crossed = _has_crossed(z, labels[rows], h0[rows], classifier)
        best[rows[crossed]] = z[crossed]
        found[rows[crossed]] = True
        rows = rows[crossed]  # a failed descent ends the search; the last success stands

    noisy = np.where(found[:, None].numpy(), torch.softmax(best.double(), dim=1).numpy(), s)
    assert (noisy.argmax(axis=1) == s.argmax(axis=1)).all(), "Phase I changed a predicted label"
    return noisy


def randomized_release(
    probs: np.ndarray,
    noisy_probs: np.ndarray,
    classifier: DefenseClassifier,
    budget: float,
    seed: int,
) -> MemGuardResult:
    """Phase II: release each noisy vector with probability min(1, budget / its L1 distortion).

    `budget` is ε, the expected L1 distortion allowed per vector (`np.inf` releases every noisy
    vector that helps); the draws come from `np.random.default_rng(seed)`.
    """
    if not budget >= 0:
        raise ValueError(f"budget must be a non-negative number, got {budget}")
    s = _check_probabilities(probs)
    noisy = _check_probabilities(noisy_probs)
    if noisy.shape != s.shape:
        raise ValueError(f"noisy vectors {noisy.shape} do not match the inputs {s.shape}")
    noise_size = np.abs(noisy - s).sum(axis=1)
    helps = np.abs(classifier.member_probability(noisy) - 0.5) < np.abs(
        classifier.member_probability(s) - 0.5
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(helps, np.minimum(1.0, budget / noise_size), 0.0)
    released = np.random.default_rng(seed).random(len(s)) < p
    out = np.where(released[:, None], noisy, s)
    return MemGuardResult(
        probs=out,
        distortion=np.where(released, noise_size, 0.0),
        noisy_probs=noisy,
        noise_size=noise_size,
        release_probability=p,
    )


def memguard(
    probs: np.ndarray,
    classifier: DefenseClassifier,
    budget: float,
    seed: int,
    max_iterations: int = MAX_ITERATIONS,
    step_size: float = STEP_SIZE,
) -> MemGuardResult:
    """Both phases: defended confidence vectors for (n, C) probabilities under expected L1
    budget ε."""
    noisy = craft_noise(probs, classifier, max_iterations=max_iterations, step_size=step_size)
    return randomized_release(probs, noisy, classifier, budget, seed)


def _mlp_logit(
    probs: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor]
) -> torch.Tensor:
    """The classifier's forward pass on the sorted vectors, in the dtype of `probs`."""
    x = torch.sort(probs, dim=1).values  # sorted, so g ignores which class is which
    for i, (w, b) in enumerate(zip(weights, biases)):
        x = F.linear(x, w.to(x.dtype), b.to(x.dtype))
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x[:, 0]


def _descend(
    z0: torch.Tensor,
    target: torch.Tensor,
    labels: torch.Tensor,
    h0: torch.Tensor,
    classifier: DefenseClassifier,
    distortion_weight: float,
    max_iterations: int,
    step_size: float,
) -> torch.Tensor:
    """Normalised gradient descent on L from z0, each row stopping once it has crossed."""
    z = z0.clone()
    active = torch.arange(len(z))
    is_label = F.one_hot(labels, z.shape[1]).bool()
    for _ in range(max_iterations):
        if active.numel() == 0:
            break
        z_active = z[active].requires_grad_()
        softmax = torch.softmax(z_active, dim=1)
        h = classifier.logit(softmax)
        with torch.no_grad():
            done = (z_active.argmax(dim=1) == labels[active]) & (h * h0[active] <= 0)
        label_logit = z_active[is_label[active]]
        best_other = z_active.masked_fill(is_label[active], -torch.inf).amax(dim=1)
        loss = (
            h.abs()
            + LABEL_WEIGHT * torch.relu(best_other - label_logit)
            + distortion_weight * (softmax - target[active]).abs().sum(dim=1)
        )
        (gradient,) = torch.autograd.grad(loss.sum(), z_active)  # rows are independent
        moving = active[~done]
        gradient = gradient[~done]
        z[moving] -= step_size * gradient / gradient.norm(dim=1, keepdim=True).clamp_min(1e-30)
        active = moving
    return z


def _has_crossed(
    z: torch.Tensor, labels: torch.Tensor, h0: torch.Tensor, classifier: DefenseClassifier
) -> torch.Tensor:
    """Whether softmax(z) keeps each row's label and lies on the other side of g = 0.5."""
    return (z.argmax(dim=1) == labels) & (classifier.logit(torch.softmax(z, dim=1)) * h0 <= 0)


def _check_probabilities(probs: np.ndarray) -> np.ndarray:
    """(n, C) non-negative rows summing to 1 (to 1e-4), as float64."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"expected (n, C >= 2) confidence vectors, got shape {p.shape}")
    if not (
        np.isfinite(p).all()
        and (p >= 0).all()
        and np.allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-4)
    ):
        raise ValueError("confidence vectors must be non-negative and sum to 1 per row")
    return p


def defend_outputs(
    logits: np.ndarray,
    members: np.ndarray,
    nonmembers: np.ndarray,
    budget: float,
    seed: int,
    epochs: int = EPOCHS,
    learning_rate: float = LEARNING_RATE,
) -> np.ndarray:
    """What a MemGuard-defended model releases, as log-probabilities (valid logits) (n, C).

    The defender trains its classifier on the model's own outputs: its training samples
    (`members`, indices) against samples it never trained on (`nonmembers`), then perturbs every
    output vector (`logits` (n, C), all samples) under the expected L1 budget."""
    from scipy.special import softmax

    probs = softmax(np.asarray(logits, dtype=np.float64), axis=1)
    classifier = train_defense_classifier(
        probs[members], probs[nonmembers], seed, epochs=epochs, learning_rate=learning_rate
    )
    released = memguard(probs, classifier, budget, seed).probs
    with np.errstate(divide="ignore"):  # a released zero probability: LOG_FLOOR stands in
        return np.maximum(np.log(released), LOG_FLOOR)
