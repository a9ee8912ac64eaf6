"""The study's packaged image backbones (EfficientNet-Lite0/1/2): features of the right shape,
deterministic, and the checkpoint's own ImageNet classifier on top of them gives the package
network's logits (so the features are exactly its pre-classifier output); their principal
components are scikit-learn's PCA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from miaflow.hparams.features import (
    EFFICIENTNET_LITE,
    backbone_features,
    efficientnet_lite,
    lite_inputs,
)

SIZES = {"efficientnet-lite0": 224, "efficientnet-lite1": 240, "efficientnet-lite2": 260}


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, size=(3, 1, 28, 28)).astype(np.float32)


def test_lite_inputs_are_the_inception_normalisation():
    pixels = np.array([0.0, 127.0, 255.0])  # grey levels, stored as 2·p/255 − 1
    stored = torch.tensor(pixels / 255.0 * 2.0 - 1.0)
    np.testing.assert_allclose(lite_inputs(stored).numpy(), (pixels - 127.0) / 128.0, atol=1e-12)


@pytest.mark.parametrize("backbone", sorted(EFFICIENTNET_LITE))
def test_lite_features_shape_determinism_and_the_imagenet_head(backbone, images):
    network = efficientnet_lite(backbone)
    assert network.input_image_size == SIZES[backbone]
    features = backbone_features(images, backbone, batch_size=2)
    assert features.shape == (3, 1280) and features.dtype == np.float32
    assert np.isfinite(features).all() and features.std(0).max() > 0
    np.testing.assert_array_equal(features, backbone_features(images, backbone, batch_size=2))
    np.testing.assert_allclose(
        features, backbone_features(images, backbone, batch_size=3), rtol=1e-4, atol=1e-5
    )
    # grey repeated to RGB, resized bilinearly, normalised: the package network's own forward
    size = SIZES[backbone]
    rgb = torch.nn.functional.interpolate(
        torch.from_numpy(images).expand(-1, 3, -1, -1),
        size=(size, size),
        mode="bilinear",
        align_corners=False,
    )
    with torch.inference_mode():
        logits = network(lite_inputs(rgb)).numpy()
    head = features @ network._fc.weight.detach().numpy().T + network._fc.bias.detach().numpy()
    np.testing.assert_allclose(head, logits, rtol=1e-4, atol=1e-4)
    assert (head.argmax(1) == logits.argmax(1)).all()


def test_a_state_dict_file_stands_in_for_the_packaged_checkpoint(tmp_path, images):
    """`backbone_model` names a state-dict file for these backbones; every key must match."""
    network = efficientnet_lite("efficientnet-lite0")
    torch.save(network.state_dict(), tmp_path / "lite0.pt")
    np.testing.assert_array_equal(
        backbone_features(images, "efficientnet-lite0", str(tmp_path / "lite0.pt")),
        backbone_features(images, "efficientnet-lite0"),
    )
    torch.save({**network.state_dict(), "extra": torch.zeros(1)}, tmp_path / "bad.pt")
    with pytest.raises(RuntimeError, match="extra"):
        efficientnet_lite("efficientnet-lite0", str(tmp_path / "bad.pt"))


def test_the_features_job_stores_a_dataset_of_feature_vectors(tmp_path, images):
    from miaflow.data import Dataset, read_dataset, write_dataset
    from miaflow.jobs.hparams import hparam_features

    labels = np.arange(len(images), dtype=np.int64)
    write_dataset(tmp_path / "images.parquet", Dataset("tiny", "image", images, labels, 3))
    hparam_features(
        data=tmp_path / "images.parquet",
        features=tmp_path / "features.parquet",
        backbone="efficientnet-lite0",
        model=None,
        threads=1,
    )
    stored = read_dataset(tmp_path / "features.parquet")
    assert stored.features.shape == (3, 1280) and stored.labels.tolist() == [0, 1, 2]
    np.testing.assert_allclose(
        stored.features, backbone_features(images, "efficientnet-lite0"), atol=1e-6
    )


def test_principal_components_are_sklearns_pca_and_names_change_the_setting():
    from sklearn.decomposition import PCA

    from miaflow.hparams.features import principal_components
    from miaflow.plan import setting_name

    rng = np.random.default_rng(0)
    features = (rng.normal(size=(200, 40)) * np.linspace(5.0, 0.1, 40)).astype(np.float32)
    projected = principal_components(features, 8)
    assert projected.shape == (200, 8) and projected.dtype == np.float32
    expected = PCA(n_components=8, svd_solver="full").fit_transform(features)
    np.testing.assert_allclose(projected, expected, atol=1e-4)
    assert np.all(np.diff(projected.var(0)) <= 1e-6)  # by decreasing variance
    np.testing.assert_array_equal(projected, principal_components(features, 8))
    with pytest.raises(ValueError, match="at most 40"):
        principal_components(features, 41)
    setting = {"dataset": "mnist5k", "shots": 8, "backbone": "efficientnet-lite0"}
    assert setting_name({**setting, "components": 64}) == "mnist5k_s8_efficientnet_lite0_pc64"
    black = {**setting, "components": 64, "shadow_backbone": "efficientnet-lite2"}
    assert setting_name(black).endswith("_pc64_shadow_efficientnet_lite2")
