"""Frozen image features for the study's linear heads: a pretrained backbone's pooled output.

The paper trains heads on ViT-B/16 (ImageNet-21k) features. `vit-b16` loads
`google/vit-base-patch16-224-in21k` through transformers (from the local Hugging Face cache, or
any checkpoint directory given as `backbone_model`), resizes each image to the model's input size
and keeps the [CLS] token of the last layer. Images are stored in [-1, 1], which is the
normalisation these ViT checkpoints expect (mean 0.5, std 0.5 on [0, 1] pixels).
"""

from __future__ import annotations

import numpy as np

from miaflow.progress import Progress

BACKBONES = {"vit-b16": "google/vit-base-patch16-224-in21k"}


def backbone_features(
    images: np.ndarray,
    backbone: str,
    model: str | None = None,
    batch_size: int = 64,
    device: str = "cpu",
) -> np.ndarray:
    """Features (n, hidden) of images (n, channels, height, width) in [-1, 1]."""
    import torch
    from transformers import ViTModel

    from miaflow.pretrained import quiet_transformers

    if backbone not in BACKBONES:
        raise ValueError(f"unknown backbone {backbone!r} (known: {', '.join(BACKBONES)})")
    quiet_transformers()
    network = (
        ViTModel.from_pretrained(model or BACKBONES[backbone], add_pooling_layer=False)
        .to(device)
        .eval()
    )
    size = network.config.image_size
    outputs = []
    with (
        torch.inference_mode(),
        Progress(len(images), f"{backbone} features", "images") as progress,
    ):
        for start in range(0, len(images), batch_size):
            batch = torch.as_tensor(
                np.asarray(images[start : start + batch_size], dtype=np.float32), device=device
            )
            if batch.shape[1] == 1:
                batch = batch.expand(-1, network.config.num_channels, -1, -1)
            batch = torch.nn.functional.interpolate(
                batch, size=(size, size), mode="bilinear", align_corners=False
            )
            outputs.append(
                network(pixel_values=batch).last_hidden_state[:, 0].float().cpu().numpy()
            )
            progress.advance(len(batch))
    return np.concatenate(outputs)
