"""Learning-based attacks: an MLP trained on the shadow model's outputs
(docs/algorithms.md#learning-based-attacks, #attack-classifier).

The shadow model is reference model 0 (its pool is T), or population model 0 on A when the splits
say `shadow: auxiliary` (`AttackInputs.shadow`): its features on its pool, labelled by its own
membership, train the attack classifier; the classifier's member probability on the target's
features is the score. Every random choice (validation split, initialisation, shuffling) comes
from `inputs.seed`, and training runs single-threaded on CPU, so scores are reproducible bit for
bit. (The classifier is tiny; score jobs hold no GPU slot, so the GPU would not pay off.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from miaflow.attacks.inputs import AttackInputs
from miaflow.models.optimizers import Adam
from miaflow.signals import LOG_ZERO_PROB

HIDDEN = (64, 32)
LEARNING_RATE = 1e-3
BATCH_SIZE = 128
VALIDATION_FRACTION = 0.1
PATIENCE = 30  # stop once this many epochs in a row brought no strict improvement, plus one
MAX_EPOCHS = 500
TOP_K = 3
ULD_FILL = -1.0  # TDDBench's stand-in for the true-label logit in ULD's max (compat quirk)


# --- feature maps Ψ(model, i) (docs/algorithms.md#learning-based-attacks) -------------------------


def _finite_logits(signals: Mapping[str, np.ndarray]) -> np.ndarray:
    """Logits in float64; GBDT/LR log-probabilities of exactly 0 become log(1e-45), as signals
    do."""
    logits = np.asarray(signals["logits"], dtype=np.float64)
    return np.where(np.isneginf(logits), LOG_ZERO_PROB, logits)


def _probabilities(signals: Mapping[str, np.ndarray]) -> np.ndarray:
    from scipy.special import softmax  # imported on first use, as every heavy library

    return softmax(_finite_logits(signals), axis=-1)


def _one_hot(signals: Mapping[str, np.ndarray], n_classes: int) -> np.ndarray:
    return np.eye(n_classes)[np.asarray(signals["label"], dtype=np.int64)]


def features_original(signals: Mapping[str, np.ndarray]) -> np.ndarray:
    """Learn-original: the probability vector in class order, (n, C)."""
    return _probabilities(signals)


def features_top3(signals: Mapping[str, np.ndarray]) -> np.ndarray:
    """Learn-top3: the min(3, C) largest probabilities, descending."""
    return features_sorted(signals)[:, :TOP_K]


def features_sorted(signals: Mapping[str, np.ndarray]) -> np.ndarray:
    """Learn-sorted: the probability vector sorted in descending order."""
    return -np.sort(-_probabilities(signals), axis=-1)


def features_label(signals: Mapping[str, np.ndarray]) -> np.ndarray:
    """Learn-label: [p, onehot(y)], (n, 2C)."""
    p = _probabilities(signals)
    return np.hstack([p, _one_hot(signals, p.shape[1])])


def unnormalized_logit_difference(
    logits: np.ndarray, labels: np.ndarray, compat: bool = True
) -> np.ndarray:
    """ULD = max over other classes of z − z_y.

    compat (TDDBench): the true-label entry is replaced by −1 before the max over all classes, so
    the result is at least −1 − z_y; corrected: the max runs over c ≠ y only.
    """
    is_label = np.arange(logits.shape[-1]) == np.asarray(labels)[:, None]
    z_y = logits[is_label]
    fill = ULD_FILL if compat else -np.inf
    return np.where(is_label, fill, logits).max(axis=-1) - z_y


def features_merge(signals: Mapping[str, np.ndarray], compat_uld: bool = True) -> np.ndarray:
    """Learn-merge: [onehot(y), ℓ, Mentr, ULD, −φ, argmax p], TDDBench's loss-like signs,
    (n, C+5)."""
    logits = _finite_logits(signals)
    labels = np.asarray(signals["label"], dtype=np.int64)
    columns = [
        np.asarray(signals["loss"], dtype=np.float64),
        np.asarray(signals["mentr"], dtype=np.float64),
        unnormalized_logit_difference(logits, labels, compat_uld),
        -np.asarray(signals["phi"], dtype=np.float64),
        logits.argmax(axis=-1).astype(np.float64),  # the predicted label as a raw number
    ]
    return np.hstack([_one_hot(signals, logits.shape[1]), np.stack(columns, axis=1)])


# --- the attack classifier (docs/algorithms.md#attack-classifier) ---------------------------------


def train_attack_classifier(features: np.ndarray, is_member: np.ndarray, seed: int):
    """The TDDBench attack MLP F→64→32→2 fitted on shadow features, as a torch module.

    Adam (lr 1e-3), batches of 128 shuffled each epoch, a 10% validation split drawn without
    replacement; after each epoch the weights are kept if validation accuracy strictly improved;
    training stops after more than PATIENCE epochs without improvement (at most MAX_EPOCHS), and
    the best weights are restored.
    """
    import torch
    from torch import nn

    rng = np.random.default_rng(seed)
    n = len(features)
    validation = np.zeros(n, dtype=bool)
    validation[rng.choice(n, size=max(1, int(VALIDATION_FRACTION * n)), replace=False)] = True
    x = torch.tensor(np.asarray(features, dtype=np.float32))  # a copy: stored arrays are read-only
    y = torch.as_tensor(np.asarray(is_member, dtype=np.int64))
    held_out = torch.as_tensor(validation)
    x_train, y_train, x_val, y_val = x[~held_out], y[~held_out], x[held_out], y[held_out]

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):  # PyTorch's default init, from our seed only
            torch.manual_seed(int(rng.integers(2**63)))
            sizes = (features.shape[1], *HIDDEN)
            layers: list[nn.Module] = []
            for fan_in, fan_out in zip(sizes, sizes[1:]):
                layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
            model = nn.Sequential(*layers, nn.Linear(sizes[-1], 2))
            shuffle = torch.Generator().manual_seed(int(rng.integers(2**63)))
        optimizer = Adam(model.parameters(), lr=LEARNING_RATE)
        loss_fn = nn.CrossEntropyLoss()
        best_accuracy, best_state, stale = -1.0, None, 0
        for _ in range(MAX_EPOCHS):
            model.train()
            order = torch.randperm(len(x_train), generator=shuffle)
            for start in range(0, len(order), BATCH_SIZE):
                batch = order[start : start + BATCH_SIZE]
                optimizer.zero_grad()
                loss_fn(model(x_train[batch]), y_train[batch]).backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                accuracy = (model(x_val).argmax(dim=1) == y_val).double().mean().item()
            if accuracy > best_accuracy:
                best_accuracy, stale = accuracy, 0
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
            else:
                stale += 1
                if stale > PATIENCE:
                    break
        model.load_state_dict(best_state)
        model.eval()
        return model
    finally:
        torch.set_num_threads(threads)


def member_probability(model, features: np.ndarray) -> np.ndarray:
    """softmax(MLP(features))[:, 1] in float64."""
    import torch

    with torch.no_grad():
        logits = model(torch.as_tensor(features, dtype=torch.float32)).double()
    return torch.softmax(logits, dim=1)[:, 1].numpy()


def learning_scores(
    inputs: AttackInputs, features: Callable[[Mapping[str, np.ndarray]], np.ndarray]
) -> np.ndarray:
    """Train on the shadow's features (labels: its membership in its pool), score the target's
    features."""
    shadow, shadow_members = inputs.shadow()
    model = train_attack_classifier(features(shadow), shadow_members, inputs.seed)
    return member_probability(model, features(inputs.target))


def learn_original(inputs: AttackInputs) -> np.ndarray:
    """Attack MLP on the probability vector (Shokri et al., one model for all classes)."""
    return learning_scores(inputs, features_original)


def learn_top3(inputs: AttackInputs) -> np.ndarray:
    """Attack MLP on the three largest probabilities (Salem et al.)."""
    return learning_scores(inputs, features_top3)


def learn_sorted(inputs: AttackInputs) -> np.ndarray:
    """Attack MLP on the probability vector sorted in descending order."""
    return learning_scores(inputs, features_sorted)


def learn_label(inputs: AttackInputs) -> np.ndarray:
    """Attack MLP on the probability vector and the one-hot label (Nasr et al., one branch)."""
    return learning_scores(inputs, features_label)


def learn_merge(inputs: AttackInputs) -> np.ndarray:
    """Attack MLP on [onehot(y), loss, Mentr, ULD, −phi, predicted label] (TDDBench's mix).

    Option `uld` (`LearnMergeOptions`): "compat" (TDDBench's −1 fill) or "corrected" (max over
    c ≠ y).
    """
    compat = inputs.options.uld == "compat"
    return learning_scores(inputs, lambda signals: features_merge(signals, compat))
