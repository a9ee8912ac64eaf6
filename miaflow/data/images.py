"""Real image datasets, read from their publishers' archives, normalised as TDDBench does."""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from miaflow.data.dataset import Dataset
from miaflow.data.sources import Sources


def normalised_images(pixels: np.ndarray) -> np.ndarray:
    """uint8 (N, C, H, W) -> float32 in [-1, 1]: ToTensor then Normalize(mean=std=0.5), as
    TDDBench does for every image dataset."""
    return (pixels.astype(np.float32) / np.float32(255.0) - np.float32(0.5)) / np.float32(0.5)


def _cifar_records(
    data: bytes, label_bytes: int, label_index: int
) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR binary records: `label_bytes` label bytes, then 3072 pixel bytes (R, G, B planes of
    32x32, row-major) -> uint8 (N, 3, 32, 32) and the label at `label_index`."""
    record = label_bytes + 3 * 32 * 32
    if len(data) % record:
        raise ValueError(
            f"CIFAR binary batch of {len(data)} bytes is not a whole number of "
            f"{record}-byte records"
        )
    rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, record)
    return rows[:, label_bytes:].reshape(-1, 3, 32, 32), rows[:, label_index].astype(np.int64)


def _load_cifar(
    name: str,
    members: Sequence[str],
    label_bytes: int,
    label_index: int,
    n_classes: int,
    sources: Sources,
) -> Dataset:
    """Train then test batches of the official binary tarball, concatenated as TDDBench does."""
    [path] = sources()
    with tarfile.open(path, "r:gz") as archive:
        parts = [
            _cifar_records(archive.extractfile(member).read(), label_bytes, label_index)
            for member in members
        ]
    return Dataset(
        name,
        "image",
        normalised_images(np.concatenate([p for p, _ in parts])),
        np.concatenate([labels for _, labels in parts]),
        n_classes,
    )


def load_cifar10(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """CIFAR-10 (60,000 32x32 colour images, 10 classes) from cifar-10-binary.tar.gz."""
    members = [
        f"cifar-10-batches-bin/{batch}.bin"
        for batch in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
    ]
    return _load_cifar("cifar10", members, 1, 0, 10, sources)


def load_cifar100(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """CIFAR-100 (60,000 images) from cifar-100-binary.tar.gz, fine labels (100 classes)."""
    members = ["cifar-100-binary/train.bin", "cifar-100-binary/test.bin"]
    return _load_cifar("cifar100", members, 2, 1, 100, sources)


def load_bloodmnist(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """MedMNIST v2 BloodMNIST (28x28 RGB, 8 classes): train, val and test of bloodmnist.npz
    concatenated, as TDDBench does."""
    [path] = sources()
    with np.load(path, allow_pickle=False) as archive:
        images = np.concatenate([archive[f"{split}_images"] for split in ("train", "val", "test")])
        labels = np.concatenate(
            [archive[f"{split}_labels"].reshape(-1) for split in ("train", "val", "test")]
        )
    return Dataset(
        "bloodmnist",
        "image",
        normalised_images(images.transpose(0, 3, 1, 2)),
        labels.astype(np.int64),
        8,
    )


def load_celeba(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """CelebA aligned faces (all 202,599, split 'all' as TDDBench), label = attribute `Male`
    (-1 -> 0, 1 -> 1); each JPEG resized to 32x32 with bilinear filtering as TDDBench's
    Resize((32, 32)) does, then normalised."""
    from PIL import Image

    archive_path, attributes_path = sources()
    # list_attr_celeba.txt: count, then the 40 attribute names, then `file v1 ... v40` (v = +-1)
    lines = attributes_path.read_text().splitlines()
    male = lines[1].split().index("Male")
    rows = [line.split() for line in lines[2:] if line.strip()]
    pixels = np.empty((len(rows), 3, 32, 32), dtype=np.uint8)
    with zipfile.ZipFile(archive_path) as archive:
        for i, row in enumerate(rows):
            with archive.open(f"img_align_celeba/{row[0]}") as handle:
                image = Image.open(handle).convert("RGB").resize((32, 32), Image.BILINEAR)
            pixels[i] = np.asarray(image).transpose(2, 0, 1)
    labels = np.array([(int(row[1 + male]) + 1) // 2 for row in rows], dtype=np.int64)
    return Dataset("celeba", "image", normalised_images(pixels), labels, 2)
