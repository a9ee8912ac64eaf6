"""Train shards of models: the learners of every kind, the per-model torch loop and its defended
variant, and training a shard's models (batched where the ensemble can).

A shard is a few models of one (dataset, architecture), trained by one job to amortise the
interpreter's start-up. Every model is a plain dict of arrays (its weights), so all kinds share
one storage format (`miaflow.models.shards`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from miaflow.compute import torch_device
from miaflow.data.dataset import Dataset
from miaflow.defenses import TRAINING, defense_kind
from miaflow.models import classical, transformers
from miaflow.models.kinds import KINDS
from miaflow.progress import Progress
from miaflow.seeding import derive_seed
from miaflow.splits import Splits, role_of

log = logging.getLogger(__name__)

Weights = dict[str, np.ndarray]


@dataclass(frozen=True)
class ModelRecord:
    """What one training run produced beside the weights: accuracy on members and on held-out.

    Timings are left to Snakemake's benchmark files so that artifacts stay byte-identical.
    """

    model_id: str
    role: str
    n_train: int
    n_heldout: int
    train_acc: float
    test_acc: float


@dataclass(frozen=True)
class Learner:
    """How to fit one kind of model and how to get logits (or log-probabilities) from it."""

    fit: Callable[..., Weights]
    logits: Callable[..., np.ndarray]


# --- torch models (mlp, cnn, torch_lr) -------------------------------------------------------


def predict(model: Any, features: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    """Logits of a torch module, always in eval mode: no dropout or batch-norm updates."""
    import torch

    device = next(model.parameters()).device
    model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, len(features), batch_size):
            batch = torch.tensor(features[start : start + batch_size]).to(
                device
            )  # a copy: inputs may be read-only
            outputs.append(model(batch).float().cpu().numpy())
    return np.concatenate(outputs)


def _torch_logits(
    arch: Mapping[str, Any], weights: Weights, features: np.ndarray, n_classes: int
) -> np.ndarray:
    import torch

    from miaflow.models.recipe import build_module

    model = build_module(arch, features.shape[1:], n_classes)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    return predict(model.to(torch_device()), features)


def _fit_torch(
    arch: Mapping[str, Any],
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_heldout: np.ndarray,
    y_heldout: np.ndarray,
    n_classes: int,
    seed: int,
    threads: int,
    model_id: str,
    reference: tuple[np.ndarray, np.ndarray] | None = None,
) -> Weights:
    """Minibatch training (TDDBench recipe); early stopping on held-out accuracy if patience > 0.

    The architecture's GPU-path options apply here as in the ensemble: `precision: bf16` autocasts
    the forward (weights, optimizer and held-out inference stay fp32), `channels_last` keeps
    images and convolution weights NHWC, `compile` runs the training forward through
    `torch.compile`. The training data are copied to the device once. A `defense` trains through
    `miaflow.defenses` instead (`_fit_defended`), with the same epochs, learning rates and early
    stopping; adversarial regularization takes its `reference` set from the caller."""
    import torch
    import torch.nn.functional as F

    from miaflow.models import optimizers
    from miaflow.models.architectures import augment_images, trainable_batches
    from miaflow.models.recipe import Options, build_module, learning_rates, sgd_momentum

    device = torch_device()
    options = Options.of(arch)
    torch.manual_seed(seed)
    model = build_module(arch, x_train.shape[1:], n_classes).to(device)
    if options.channels_last:
        model = model.to(memory_format=torch.channels_last)
    forward = options.compiled(model)
    autocast = torch.autocast(
        torch.device(device).type, dtype=torch.bfloat16, enabled=options.precision == "bf16"
    )
    if arch["optimizer"] == "sgd":
        optimizer = optimizers.SGD(
            model.parameters(),
            lr=arch["lr"],
            momentum=sgd_momentum(arch),
            weight_decay=arch["weight_decay"],
        )
    else:
        optimizer = optimizers.Adam(
            model.parameters(), lr=arch["lr"], weight_decay=arch["weight_decay"]
        )
    x = torch.from_numpy(x_train).to(device)
    y = torch.from_numpy(y_train).to(device)
    shuffle = torch.Generator().manual_seed(seed)
    augmenter = (
        torch.Generator().manual_seed(derive_seed(seed, "augment")) if arch.get("augment") else None
    )
    best_acc, best_state, stale = -1.0, None, 0
    epochs, patience = arch["epochs"], arch["patience"]
    report_every = max(1, epochs // 5)
    rates = learning_rates(arch)

    def epoch_batches() -> list[torch.Tensor]:
        """The next epoch's shuffled mini-batches: sample indices on the device."""
        order = torch.randperm(len(x), generator=shuffle).to(device)
        return trainable_batches(order, arch["batch_size"], model)

    def end_of_epoch(epoch: int, mean_loss: float | None) -> bool:
        """Log, keep the best held-out state, and say whether to stop (patience exceeded)."""
        nonlocal best_acc, best_state, stale
        if epoch < epochs:
            optimizer.lr = rates[epoch]  # the next epoch's rate
        if not (patience or epoch % report_every == 0 or epoch == epochs):
            return False
        acc = _accuracy(predict(model, x_heldout), y_heldout)
        loss = "" if mean_loss is None else f" loss {mean_loss:.4f}"
        log.info("%s epoch %d/%d%s held-out acc %.4f", model_id, epoch, epochs, loss, acc)
        if not patience:
            return False
        if acc > best_acc:
            best_acc, stale = acc, 0
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            return False
        stale += 1
        if stale > patience:
            log.info("%s early stop at epoch %d", model_id, epoch)
        return stale > patience

    optimizer.lr = rates[0]
    with Progress(epochs, f"{model_id} training", "epochs") as progress:
        if defense_kind(arch) in TRAINING:

            def on_epoch(epoch: int) -> bool:
                progress.advance()
                return end_of_epoch(epoch, None)

            _fit_defended(
                arch,
                model,
                optimizer,
                epoch_batches,
                rates,
                x,
                y,
                reference,
                n_classes,
                seed,
                on_epoch,
            )
        else:
            for epoch in range(1, epochs + 1):
                model.train()
                total = torch.zeros((), device=device)
                batches = epoch_batches()
                for batch in batches:
                    inputs = x[batch] if augmenter is None else augment_images(x[batch], augmenter)
                    if options.channels_last:
                        inputs = inputs.contiguous(memory_format=torch.channels_last)
                    with autocast:
                        logits = forward(inputs)
                    loss = F.cross_entropy(logits.float(), y[batch])
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    total += loss.detach() * len(batch)
                    progress.advance(1 / len(batches))
                if end_of_epoch(epoch, total.item() / len(x)):
                    break
    if best_state is not None:
        model.load_state_dict(best_state)
    return {k: v.detach().cpu().contiguous().numpy() for k, v in model.state_dict().items()}


def _fit_defended(
    arch: Mapping[str, Any],
    model: Any,
    optimizer: Any,
    epoch_batches: Callable[[], list[Any]],
    rates: Sequence[float],
    x: Any,
    y: Any,
    reference: tuple[np.ndarray, np.ndarray] | None,
    n_classes: int,
    seed: int,
    on_epoch: Callable[[int], bool],
) -> None:
    """Train `model` in place with the architecture's `defense` (miaflow.defenses).

    The defenses import nothing of miaflow.models: what they share with the plain loop (the
    optimizers, the mini-batches, the learning rate of each epoch) is handed to them here."""
    import torch

    from miaflow.models import optimizers
    from miaflow.models.recipe import sgd_momentum

    defense = arch["defense"]
    if defense["kind"] == "adversarial_regularization":
        from miaflow.defenses.adversarial import train_adversarial

        if reference is None:
            raise ValueError("adversarial regularization needs a reference set")
        x_reference, y_reference = (torch.from_numpy(a) for a in reference)
        train_adversarial(
            model,
            optimizer,
            epoch_batches,
            x,
            y,
            x_reference,
            y_reference,
            n_classes=n_classes,
            lam=defense["lambda"],
            epochs=arch["epochs"],
            batch_size=arch["batch_size"],
            attack_steps=defense.get("attack_steps", 1),
            attack_optimizer=optimizers.Adam,
            attack_lr=defense.get("attack_lr", 1e-3),
            seed=seed,
            on_epoch=on_epoch,
        )
    else:  # dp_sgd: Opacus builds its own optimizer, with the same recipe
        from miaflow.defenses.dpsgd import train_dp

        train_dp(
            model,
            x,
            y,
            epsilon=defense["epsilon"],
            delta=defense["delta"],
            max_grad_norm=defense["max_grad_norm"],
            epochs=arch["epochs"],
            batch_size=arch["batch_size"],
            lr=arch["lr"],
            weight_decay=arch["weight_decay"],
            optimizer=arch["optimizer"],
            seed=seed,
            accountant=defense.get("accountant", "prv"),
            on_epoch=on_epoch,
            momentum=sgd_momentum(arch),
            learning_rates=rates,
        )


# How each trainer of the kinds table fits and runs a model.
TRAINERS: dict[str, Learner] = {
    "torch": Learner(_fit_torch, _torch_logits),
    "transformer": Learner(transformers.fit_transformer, transformers.transformer_logits),
    "lr": Learner(classical.fit_lr, classical.lr_logits),
    "catboost": Learner(classical.fit_catboost, classical.catboost_logits),
}
LEARNERS: dict[str, Learner] = {name: TRAINERS[kind.trainer] for name, kind in KINDS.items()}


def _accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(logits, axis=1) == labels)) if len(labels) else float("nan")


# --- shards -----------------------------------------------------------------------------------


def train_models(
    dataset: Dataset,
    splits: Splits,
    model_ids: Sequence[str],
    arch_name: str,
    arch: Mapping[str, Any],
    seed: int,
    threads: int = 1,
) -> tuple[dict[str, Weights], list[ModelRecord]]:
    """Train each model on its keep-matrix row; held-out = the rest of its pool.

    Torch shards train as one vectorised ensemble (`miaflow.models.ensemble`) when the architecture
    allows it (`batched`, default on); otherwise, and for other kinds, one model after another."""
    learner = LEARNERS[arch["kind"]]
    members = {m: splits.members(m) for m in model_ids}
    heldout = {m: splits.pool_of(m) & ~members[m] for m in model_ids}
    seeds = {m: derive_seed(seed, "train", dataset.name, arch_name, m) for m in model_ids}
    weights = _fit_batched(dataset, members, heldout, seeds, arch)
    records = []
    one_by_one = len(model_ids) - len(weights)
    with Progress(one_by_one, f"train {dataset.name}/{arch_name} shard", "models") as progress:
        for model_id in model_ids:
            started = time.perf_counter()
            args = (
                dataset.features[members[model_id]],
                dataset.labels[members[model_id]],
                dataset.features[heldout[model_id]],
                dataset.labels[heldout[model_id]],
            )
            if model_id not in weights:
                extra = {}
                if defense_kind(arch) == "adversarial_regularization":
                    chosen = defense_reference(splits, model_id, seeds[model_id])
                    extra["reference"] = dataset.features[chosen], dataset.labels[chosen]
                weights[model_id] = learner.fit(
                    arch, *args, dataset.n_classes, seeds[model_id], threads, model_id, **extra
                )
                progress.advance()
            train_acc = _accuracy(
                learner.logits(arch, weights[model_id], args[0], dataset.n_classes), args[1]
            )
            test_acc = _accuracy(
                learner.logits(arch, weights[model_id], args[2], dataset.n_classes), args[3]
            )
            records.append(
                ModelRecord(
                    model_id,
                    role_of(model_id),
                    int(members[model_id].sum()),
                    int(heldout[model_id].sum()),
                    train_acc,
                    test_acc,
                )
            )
            log.info(
                "trained %s: train acc %.4f, test acc %.4f (%.1f s)",
                model_id,
                train_acc,
                test_acc,
                time.perf_counter() - started,
            )
    return weights, records


def defense_reference(splits: Splits, model_id: str, seed: int) -> np.ndarray:
    """Indices of the defender's reference set (adversarial regularization, MemGuard's
    classifier): as many samples as the model's members, drawn outside its pool, so that the
    non-members it is evaluated on (the rest of its pool) never shape its defense."""
    outside = np.flatnonzero(~splits.pool_of(model_id))
    size = min(int(splits.members(model_id).sum()), len(outside))
    if size == 0:
        raise ValueError(f"{model_id}: no samples outside its pool for the defense's reference set")
    return np.sort(
        np.random.default_rng(derive_seed(seed, "defense reference")).choice(
            outside, size, replace=False
        )
    )


def _fit_batched(
    dataset: Dataset,
    members: Mapping[str, np.ndarray],
    heldout: Mapping[str, np.ndarray],
    seeds: Mapping[str, int],
    arch: Mapping[str, Any],
) -> dict[str, Weights]:
    """Every model of the shard at once, or {} when the architecture does not batch."""
    if not KINDS[arch["kind"]].batched:
        return {}  # without importing torch (e.g. LR and CatBoost jobs)
    from miaflow.models.ensemble import fit_ensemble, wants_batched

    if not wants_batched(arch):
        return {}
    started = time.perf_counter()
    ids = list(members)
    fitted = fit_ensemble(
        arch,
        dataset.features,
        dataset.labels,
        [np.flatnonzero(members[m]) for m in ids],
        [np.flatnonzero(heldout[m]) for m in ids],
        dataset.n_classes,
        [seeds[m] for m in ids],
        ids,
        torch_device(),
    )
    if fitted is None:
        return {}
    log.info("trained %d models as one ensemble in %.1f s", len(ids), time.perf_counter() - started)
    return dict(zip(ids, fitted))
