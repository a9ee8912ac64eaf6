"""Adversarial regularization (Nasr, Shokri & Houmansadr, "Machine Learning with Membership Privacy
using Adversarial Regularization", CCS 2018, arXiv:1807.05852).

The classifier f is trained against its own membership-inference model h, which learns to tell
f's training members D from a disjoint reference set D' drawn from the same distribution:

    min_f  max_h  L_D(f) + lambda * G(f, h),
    G(f, h) = mean over (x, y) in D of log h(x, y, f(x))
              + mean over (x', y') in D' of log(1 - h(x', y', f(x'))).

G is h's log-likelihood of telling the two sets apart, so the best h's gain is the privacy cost
that lambda trades against the classification loss L_D.

Algorithm 1 of the paper alternates, per classifier step:

* k steps of h (`attack_steps`): each samples a fresh mini-batch of m members and m reference
  points and ascends G in h's parameters (f fixed);
* one step of f on a fresh mini-batch of m members, descending
  (1/m) sum_i [ loss(f(x_i), y_i) + lambda * log h(x_i, y_i, f(x_i)) ].
  Only members enter f's step: the reference set trains h and is never fitted by f.

Here an epoch is one pass of f over the members in shuffled mini-batches, each preceded by its k
steps of h, so lambda = 0 is plain cross-entropy training with the same batches, bit for bit.

The inference model h (`InferenceModel`) follows the paper's black-box attack model: a branch on
the prediction vector f(x) (fully connected 1024-512-64), a branch on the one-hot label (512-64),
and a head on their concatenation (256-64-1) whose sigmoid is h's membership probability; ReLU
between layers. The prediction vector is the softmax output, unsorted, so h can read the
probability of the true class through its alignment with the one-hot label.

The authors' code (github.com/SPIN-UMass/ML-Privacy-Regulization, PPN_Purchase_GIT.py and
PPN_Texas_GIT.py; reused by Song & Mittal, github.com/inspire-group/membership-inference-evaluation,
"adversarial regularization/training_code/purchase_defended.py") differs from the paper, and this
module follows the paper:

* f's step minimises CE + alpha * (mean h(member) - 0.5), the probability rather than its log
  (alpha = 3 for Purchase100, 1 for Texas100; the -0.5 does not change the gradient). In h's
  logit the code's term has gradient h(1 - h), which fades once h calls a member a non-member;
  the paper's log h is unbounded below and its gradient 1 - h stays near 1 there, so f keeps
  pushing its members towards "non-member" until h adapts. We follow the paper: its term is the
  member half of lambda * G, so f and h play one zero-sum game, the one whose equilibrium (h no
  better than a guess) the privacy argument is about; the code's term, with h fitted by MSE, is
  a different game.
* h is fitted with a mean squared error on its sigmoid output instead of the log-likelihood G.
* h reads raw logits (not softmax), its layer sizes are per dataset (Purchase: 1024-512-64 /
  128-64 / 512-256-128-64-1; Texas: 512-64 / 64 / 64-1), weights start N(0, 0.01^2) with zero
  biases; here torch's default initialisation.
* the first epoch trains f alone; then each epoch runs 76 rounds of about 50 batches of h and 2
  batches of f, both taken as consecutive slices of the once-per-epoch shuffled data. h uses Adam
  (lr 1e-4 Purchase, 1e-3 Texas), as here.

RelaxLoss's re-implementation (github.com/DingfanChen/RelaxLoss, source/*/defense/advreg.py) keeps
the code's loss and sorts the logits before h; the authors' code does not sort, and neither do we:
sorting would cut the link between each probability and the one-hot label beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from miaflow.seeding import derive_seed


class Optimizer(Protocol):
    """What `train_adversarial` needs of an optimizer: the caller owns the classifier's (and its
    learning-rate schedule), so the defense works with any update rule."""

    def zero_grad(self) -> None: ...

    def step(self) -> None: ...


class InferenceModel(nn.Module):
    """h: (prediction vector, one-hot label) -> membership logit; sigmoid(logit) = P(member).

    It returns the logit, not the probability, so that log h and log(1 - h) are computed as
    logsigmoid(+-logit), finite even when h is certain."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.prediction = nn.Sequential(
            nn.Linear(n_classes, 1024),
            nn.ReLU(),
            nn.Linear(1024, 512),
            nn.ReLU(),
            nn.Linear(512, 64),
            nn.ReLU(),
        )
        self.label = nn.Sequential(
            nn.Linear(n_classes, 512), nn.ReLU(), nn.Linear(512, 64), nn.ReLU()
        )
        self.head = nn.Sequential(
            nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 1)
        )

    def forward(self, probs: torch.Tensor, labels_one_hot: torch.Tensor) -> torch.Tensor:
        features = torch.cat([self.prediction(probs), self.label(labels_one_hot)], dim=1)
        return self.head(features).squeeze(1)


def _membership_logits(
    attack: InferenceModel, probs: torch.Tensor, labels: torch.Tensor, n_classes: int
) -> torch.Tensor:
    return attack(probs, F.one_hot(labels, n_classes).to(probs.dtype))


def inference_gain(
    attack: InferenceModel,
    member_probs: torch.Tensor,
    member_labels: torch.Tensor,
    reference_probs: torch.Tensor,
    reference_labels: torch.Tensor,
    n_classes: int,
) -> torch.Tensor:
    """G(f, h): mean log h on members plus mean log(1 - h) on reference points; h ascends it.

    Each set is averaged on its own, so G weighs members and non-members equally whatever the
    batch sizes; its maximum 0 means h separates them perfectly, -2 log 2 that it guesses."""
    member = F.logsigmoid(_membership_logits(attack, member_probs, member_labels, n_classes))
    reference = F.logsigmoid(
        -_membership_logits(attack, reference_probs, reference_labels, n_classes)
    )
    return member.mean() + reference.mean()


def classifier_objective(
    logits: torch.Tensor, labels: torch.Tensor, attack: InferenceModel, lam: float, n_classes: int
) -> torch.Tensor:
    """What f minimises on a batch of members (Algorithm 1): cross-entropy plus lambda times the
    mean log h, the member half of G, so f lowers both its loss and h's confidence that its
    training points are members. Gradients flow into f through the softmax that h reads."""
    membership = _membership_logits(attack, F.softmax(logits, dim=1), labels, n_classes)
    return F.cross_entropy(logits, labels) + lam * F.logsigmoid(membership).mean()


def train_adversarial(
    model: nn.Module,
    optimizer: Optimizer,
    epoch_batches: Callable[[], Sequence[torch.Tensor]],
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_reference: torch.Tensor,
    y_reference: torch.Tensor,
    *,
    n_classes: int,
    lam: float,
    epochs: int,
    batch_size: int,
    attack_steps: int,
    attack_optimizer: Callable[..., Optimizer],
    attack_lr: float,
    seed: int,
    on_epoch: Callable[[int], bool] | None = None,
) -> InferenceModel:
    """Train `model` (logits out) in place by Algorithm 1; return the inference model h it faced.

    The caller's training loop lends what it shares with plain training, so that lambda = 0 is
    that training bit for bit: `optimizer` steps the classifier, and `epoch_batches()` gives each
    epoch's shuffled mini-batches of member indices (of size `batch_size`). h gets its own
    `attack_optimizer(parameters, lr=attack_lr)`, an Adam (training passes miaflow's bit-identical
    copy of torch.optim.Adam, which saves importing torch._dynamo). Before each mini-batch's
    update of f, `attack_steps` updates of h run on fresh random batches of
    min(batch_size, |D|, |D'|) members and as many reference points. `on_epoch(epoch)` runs after
    each epoch (1-based) and returns True to stop: early stopping and learning-rate schedules stay
    with the caller. The caller's global RNG is untouched (h is initialised inside a forked RNG),
    and f's forward passes for h run in eval mode under no_grad, so dropout draws and batch-norm
    statistics are exactly those of plain training. Everything runs on the model's device. h is
    returned with its parameters frozen (requires_grad False), as it is between its own steps.
    """
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "adversarial", "inference model"))
        attack = InferenceModel(n_classes)
    attack.to(device).requires_grad_(False)  # trainable only inside its own steps
    attack_updates = attack_optimizer(attack.parameters(), lr=attack_lr)
    x_train, y_train = x_train.to(device), y_train.to(device)
    x_reference, y_reference = x_reference.to(device), y_reference.to(device)
    sample = torch.Generator().manual_seed(derive_seed(seed, "adversarial", "attack batches"))
    attack_batch = min(batch_size, len(x_train), len(x_reference))

    def attack_step() -> None:
        members = torch.randperm(len(x_train), generator=sample)[:attack_batch].to(device)
        reference = torch.randperm(len(x_reference), generator=sample)[:attack_batch].to(device)
        model.eval()
        with torch.no_grad():
            member_probs = F.softmax(model(x_train[members]), dim=1)
            reference_probs = F.softmax(model(x_reference[reference]), dim=1)
        attack.requires_grad_(True)
        loss = -inference_gain(
            attack,
            member_probs,
            y_train[members],
            reference_probs,
            y_reference[reference],
            n_classes,
        )
        attack_updates.zero_grad()
        loss.backward()
        attack_updates.step()
        attack.requires_grad_(False)

    for epoch in range(1, epochs + 1):
        for batch in epoch_batches():
            for _ in range(attack_steps):
                attack_step()
            model.train()
            loss = classifier_objective(
                model(x_train[batch]), y_train[batch], attack, lam, n_classes
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if on_epoch is not None and on_epoch(epoch):
            break
    return attack
