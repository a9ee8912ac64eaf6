"""Sequence classifiers fine-tuned through Hugging Face `transformers` (architecture kind
`transformer`): training, and logits of a classifier rebuilt from its stored weights.

Text datasets carry their samples as a numpy object array of `str` (N,); `model` names a
pretrained checkpoint as `miaflow.pretrained.resolve_model` understands it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from math import ceil
from typing import Any

import numpy as np

from miaflow.compute import torch_device
from miaflow.pretrained import load_tokenizer, quiet_transformers, resolve_model, tokenize
from miaflow.progress import Progress

log = logging.getLogger(__name__)

Weights = dict[str, np.ndarray]

# HF Trainer defaults that TDDBench's text recipe inherits (docs/algorithms.md#model-training).
MAX_GRAD_NORM = 1.0
INFERENCE_BATCH_SIZE = 256


def _classifier(model_name: str, n_classes: int, pretrained: bool) -> Any:
    """A sequence classifier: the pretrained backbone with a new head, or an empty shell to load
    weights into."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    quiet_transformers()
    path = resolve_model(model_name)
    if pretrained:
        return AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=n_classes, dtype=torch.float32
        )
    config = AutoConfig.from_pretrained(path, num_labels=n_classes)
    return AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)


def _parameter_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """HF Trainer's split: no weight decay on biases and layer-norm weights."""
    norms = {
        id(p)
        for m in model.modules()
        if "Norm" in type(m).__name__  # LayerNorm, T5LayerNorm, ...
        for p in m.parameters(recurse=False)
    }
    decayed, plain = [], []
    for name, parameter in model.named_parameters():
        (plain if name.endswith("bias") or id(parameter) in norms else decayed).append(parameter)
    return [
        {"params": decayed, "weight_decay": weight_decay},
        {"params": plain, "weight_decay": 0.0},
    ]


def _predict(model: Any, tokenizer: Any, texts: np.ndarray, max_length: int) -> np.ndarray:
    """Logits in eval mode (no dropout), batch by batch."""
    import torch

    device = next(model.parameters()).device
    model.eval()
    outputs = [np.zeros((0, model.config.num_labels), np.float32)]
    with torch.no_grad():
        for start in range(0, len(texts), INFERENCE_BATCH_SIZE):
            inputs = tokenize(
                tokenizer, texts[start : start + INFERENCE_BATCH_SIZE], max_length, str(device)
            )
            outputs.append(model(**inputs).logits.float().cpu().numpy())
    return np.concatenate(outputs)


def fit_transformer(
    arch: Mapping[str, Any],
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_heldout: np.ndarray,
    y_heldout: np.ndarray,
    n_classes: int,
    seed: int,
    threads: int,
    model_id: str,
) -> Weights:
    """Full fine-tuning (TDDBench's HF Trainer recipe): AdamW, linear decay to 0, gradient clipping
    at 1.

    With patience > 0 the held-out accuracy is checked every epoch, the best weights are kept and
    training stops after `patience` epochs without a strict improvement (HF EarlyStoppingCallback).
    """
    import torch
    import torch.nn.functional as F
    from transformers import get_linear_schedule_with_warmup

    device = torch_device()
    torch.manual_seed(seed)  # the new classification head and dropout
    model = _classifier(arch["model"], n_classes, pretrained=True).to(device)
    tokenizer = load_tokenizer(resolve_model(arch["model"]))
    epochs, batch_size, patience = arch["epochs"], arch["batch_size"], arch["patience"]
    # fused: the same AdamW update in one kernel per step, several times faster on CPU and GPU
    optimizer = torch.optim.AdamW(
        _parameter_groups(model, arch["weight_decay"]), lr=arch["lr"], fused=True
    )
    schedule = get_linear_schedule_with_warmup(
        optimizer, 0, epochs * ceil(len(x_train) / batch_size)
    )
    labels = torch.from_numpy(y_train).to(device)
    shuffle = torch.Generator().manual_seed(seed)
    best_acc, best_state, stale = -1.0, None, 0

    with Progress(epochs, f"{model_id} fine-tuning", "epochs") as progress:
        for epoch in range(1, epochs + 1):
            model.train()
            total = 0.0
            batches = torch.randperm(len(x_train), generator=shuffle).split(batch_size)
            for batch in batches:
                inputs = tokenize(tokenizer, x_train[batch.numpy()], arch["max_length"], device)
                loss = F.cross_entropy(model(**inputs).logits, labels[batch.to(device)])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
                optimizer.step()
                schedule.step()
                total += loss.item() * len(batch)
                progress.advance(1 / len(batches))
            message = f"{model_id} epoch {epoch}/{epochs} loss {total / len(x_train):.4f}"
            if patience:
                acc = float(
                    np.mean(
                        _predict(model, tokenizer, x_heldout, arch["max_length"]).argmax(1)
                        == y_heldout
                    )
                )
                log.info("%s held-out acc %.4f", message, acc)
                if acc > best_acc:
                    best_acc, stale = acc, 0
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                else:
                    stale += 1
                    if stale >= patience:
                        log.info("%s early stop at epoch %d", model_id, epoch)
                        break
            else:
                log.info(message)
    if best_state is not None:
        model.load_state_dict(best_state)
    return {k: v.detach().cpu().contiguous().numpy() for k, v in model.state_dict().items()}


def transformer_logits(
    arch: Mapping[str, Any], weights: Weights, features: np.ndarray, n_classes: int
) -> np.ndarray:
    """Logits of a fine-tuned classifier rebuilt from its stored weights."""
    import torch

    model = _classifier(arch["model"], n_classes, pretrained=False)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    tokenizer = load_tokenizer(resolve_model(arch["model"]))
    return _predict(model.to(torch_device()), tokenizer, features, arch["max_length"])


def fit_regressor(
    arch: Mapping[str, Any],
    x_train: np.ndarray,
    target: np.ndarray,
    x_eval: np.ndarray,
    loss: Callable[[Any, Any], Any],
    epochs: int,
    val_ratio: float,
    seed: int,
) -> np.ndarray:
    """(len(x_eval), 2) outputs of the recipe's pretrained checkpoint with a new 2-output head,
    fine-tuned on (texts, real targets) with the per-sample `loss(outputs, targets)`.

    The recipe's optimiser (AdamW at its lr and weight decay, gradients clipped at 1), no
    schedule; `epochs` epochs on a seeded train/validation split, keeping the weights of the
    epoch with the lowest validation loss (Query-qrm, docs/algorithms.md#query-qrm).
    """
    import torch

    from miaflow.seeding import rng

    device = torch_device()
    torch.manual_seed(seed)  # the new head and dropout
    model = _classifier(arch["model"], 2, pretrained=True).to(device)
    tokenizer = load_tokenizer(resolve_model(arch["model"]))
    optimizer = torch.optim.AdamW(_parameter_groups(model, arch["weight_decay"]), lr=arch["lr"])
    order = rng(seed, "validation").permutation(len(x_train))
    n_val = max(1, round(val_ratio * len(x_train)))
    heldout, train = order[:n_val], order[n_val:]
    targets = torch.from_numpy(np.asarray(target, np.float32)).to(device)
    shuffle = torch.Generator().manual_seed(seed)
    best_loss, best_state = float("inf"), None
    with Progress(epochs, "regressor fine-tuning", "epochs") as progress:
        for epoch in range(1, epochs + 1):
            model.train()
            for batch in torch.from_numpy(train)[
                torch.randperm(len(train), generator=shuffle)
            ].split(arch["batch_size"]):
                inputs = tokenize(tokenizer, x_train[batch.numpy()], arch["max_length"], device)
                value = loss(model(**inputs).logits, targets[batch.to(device)]).mean()
                optimizer.zero_grad(set_to_none=True)
                value.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
                optimizer.step()
            outputs = torch.from_numpy(
                _predict(model, tokenizer, x_train[heldout], arch["max_length"])
            ).to(device)
            val_loss = loss(outputs, targets[torch.from_numpy(heldout).to(device)]).mean().item()
            if val_loss < best_loss:
                best_loss = val_loss
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            log.info("regressor epoch %d/%d validation loss %.4f", epoch, epochs, val_loss)
            progress.advance(1)
    if best_state is not None:  # None only if every validation loss was NaN
        model.load_state_dict(best_state)
    return _predict(model, tokenizer, x_eval, arch["max_length"])
