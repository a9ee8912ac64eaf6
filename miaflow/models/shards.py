"""A shard's storage and its models rebuilt from it: one safetensors file whose keys are
`<model_id>/<tensor name>`, with the shard's metadata and a hash of its weights (safetensors has
no checksum of its own); each model's outputs, and frozen torch modules, from stored weights.

CatBoost models are kept in CatBoost's own `cbm` format, stored as a byte tensor. Nothing is ever
unpickled: safetensors is plain data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from miaflow import io
from miaflow.models.training import LEARNERS, Weights


def save_shard(
    path: str | Path, weights: Mapping[str, Weights], metadata: Mapping[str, Any]
) -> None:
    from safetensors.numpy import save

    tensors = {
        f"{model_id}/{name}": np.ascontiguousarray(array)
        for model_id, model in weights.items()
        for name, array in model.items()
    }
    # One metadata entry: safetensors orders several entries arbitrarily, which breaks byte
    # identity.
    header = json.dumps(
        {**metadata, "model_ids": list(weights), "tensors_sha256": _tensors_sha256(tensors)},
        sort_keys=True,
    )
    io.write_bytes(path, save(tensors, metadata={"miaflow": header}))


def _tensors_sha256(tensors: Mapping[str, np.ndarray]) -> str:
    """Content hash of a shard's tensors: safetensors has no checksum of its own, so a flipped bit
    in the weights would otherwise be read as a valid model."""
    digest = hashlib.sha256()
    for key in sorted(tensors):
        digest.update(f"{key}:{tensors[key].dtype.str}:{tensors[key].shape}".encode())
        digest.update(np.ascontiguousarray(tensors[key]).tobytes())
    return digest.hexdigest()


def load_shard(path: str | Path) -> tuple[dict[str, Weights], dict[str, Any]]:
    """Weights per model and the shard's metadata (no unpickling: safetensors is plain data),
    checked against the content hash written with them (io.CorruptArtifact if they differ)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            metadata = json.loads(handle.metadata()["miaflow"])
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except FileNotFoundError:
        raise
    except Exception as error:  # safetensors' own errors: truncated file, garbled header
        raise io.corrupt(path, f"{type(error).__name__}: {error}") from None
    if _tensors_sha256(tensors) != metadata.get("tensors_sha256"):
        raise io.corrupt(path, "its weights differ from the hash written with them")
    weights: dict[str, Weights] = {m: {} for m in metadata["model_ids"]}
    for key, array in tensors.items():
        model_id, name = key.split("/", 1)
        weights[model_id][name] = array
    return weights, metadata


def shard_logits(
    weights: Mapping[str, Weights], metadata: Mapping[str, Any], features: np.ndarray
) -> np.ndarray:
    """(n_models, n_samples, n_classes) float32 outputs of every model of a shard."""
    arch = metadata["arch"]
    learner = LEARNERS[arch["kind"]]
    return np.stack(
        [
            learner.logits(arch, weights[m], features, metadata["n_classes"])
            for m in metadata["model_ids"]
        ]
    ).astype(np.float32)


def torch_modules(
    weights: Mapping[str, Weights],
    arch: Mapping[str, Any],
    input_shape: Sequence[int],
    n_classes: int,
) -> dict[str, Any]:
    """Frozen eval-mode torch modules from stored weights, by model id, on the job's device."""
    import torch

    from miaflow.compute import torch_device
    from miaflow.models.recipe import build_module

    models = {}
    for model_id, model_weights in weights.items():
        model = build_module(arch, input_shape, n_classes)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in model_weights.items()})
        models[model_id] = model.to(torch_device()).eval().requires_grad_(False)
    return models


def classifier(
    metadata: Mapping[str, Any], weights: Weights, feature_shape: tuple[int, ...]
) -> Callable[[Any], Any]:
    """A function from a torch batch to logits, for a model of any kind (torch modules built
    once)."""
    import torch

    from miaflow.models.kinds import KINDS

    arch, n_classes = metadata["arch"], metadata["n_classes"]
    if not KINDS[arch["kind"]].torch:
        learner = LEARNERS[arch["kind"]]
        return lambda x: torch.from_numpy(learner.logits(arch, weights, x.numpy(), n_classes))
    model = torch_modules({"model": weights}, arch, feature_shape, n_classes)["model"]
    return lambda x: model(x.to(next(model.parameters()).device)).float().cpu()
