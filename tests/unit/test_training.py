"""Every learner trains, stores as data (safetensors), reloads identically and is deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from miaflow.data import Dataset
from miaflow.models.shards import load_shard, save_shard, shard_logits
from miaflow.models.training import train_models
from miaflow.splits import Splits, make_splits

ARCHS = {
    "mlp": {
        "kind": "mlp",
        "hidden": [32],
        "activation": "tanh",
        "optimizer": "adam",
        "lr": 0.01,
        "weight_decay": 0.0,
        "epochs": 15,
        "batch_size": 32,
        "patience": 0,
    },
    "cnn": {
        "kind": "cnn",
        "channels": [4],
        "hidden": 16,
        "optimizer": "sgd",
        "lr": 0.05,
        "weight_decay": 0.0,
        "epochs": 5,
        "batch_size": 32,
        "patience": 2,
    },
    "lr": {"kind": "lr", "C": 1.0, "max_iter": 50},
    "catboost": {
        "kind": "catboost",
        "iterations": 30,
        "learning_rate": 0.3,
        "depth": 3,
        "early_stopping_rounds": 5,
    },
}


def toy_dataset(image: bool) -> Dataset:
    """Noisy labels on random inputs: only memorisation fits the training set."""
    generator = np.random.default_rng(0)
    labels = generator.integers(0, 3, 240)
    shape = (240, 1, 4, 4) if image else (240, 10)
    features = generator.normal(size=shape).astype(np.float32)
    features.reshape(240, -1)[:, 0] += labels  # a weak real signal
    return Dataset("toy", "image" if image else "tabular", features, labels.astype(np.int64), 3)


@pytest.mark.parametrize("arch_name", list(ARCHS))
def test_train_save_load_predict(tmp_path, arch_name):
    arch = ARCHS[arch_name]
    dataset = toy_dataset(image=arch_name == "cnn")
    splits = make_splits(240, seed=1, dataset="toy", repeats=1, n_reference=2, n_population=0)
    ids = ["target-0", "reference-1"]
    weights, records = train_models(dataset, splits, ids, arch_name, arch, seed=3)
    assert [r.model_id for r in records] == ids
    assert records[0].n_train == splits.members("target-0").sum()
    assert records[0].n_heldout == (splits.in_target_pool & ~splits.members("target-0")).sum()
    for record in records:
        assert 0.0 <= record.test_acc <= 1.0 and 0.0 <= record.train_acc <= 1.0

    save_shard(tmp_path / "a.safetensors", weights, {"arch": arch, "n_classes": 3})
    loaded, metadata = load_shard(tmp_path / "a.safetensors")
    assert metadata["model_ids"] == ids
    logits = shard_logits(loaded, metadata, dataset.features)
    assert logits.shape == (2, 240, 3) and logits.dtype == np.float32
    members = splits.members("target-0")
    train_acc = np.mean(np.argmax(logits[0][members], axis=1) == dataset.labels[members])
    assert train_acc == pytest.approx(records[0].train_acc)

    again, _ = train_models(dataset, splits, ids, arch_name, arch, seed=3)
    save_shard(tmp_path / "b.safetensors", again, {"arch": arch, "n_classes": 3})
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


def test_mlp_memorises_its_members():
    dataset = toy_dataset(image=False)
    splits = make_splits(240, seed=1, dataset="toy", repeats=1, n_reference=0, n_population=0)
    arch = dict(ARCHS["mlp"], hidden=[128], epochs=80)
    _, [record] = train_models(dataset, splits, ["target-0"], "mlp", arch, seed=3)
    assert record.train_acc > 0.95
    assert record.train_acc - record.test_acc > 0.2


def test_different_models_get_different_seeds():
    """Two models with the same training set still differ: each has its own named seed."""
    dataset = toy_dataset(image=False)
    members = make_splits(
        240, seed=1, dataset="toy", repeats=1, n_reference=0, n_population=0
    ).members("target-0")
    splits = Splits(("target-0", "target-1"), np.stack([members, members]), np.ones(240, bool))
    weights, _ = train_models(
        dataset, splits, ["target-0", "target-1"], "mlp", ARCHS["mlp"], seed=3
    )
    first, second = (weights[m]["net.1.weight"] for m in ("target-0", "target-1"))
    assert not np.array_equal(first, second)


def test_inference_runs_in_eval_mode(monkeypatch):
    """A dropout layer must be off when outputs are computed (the LiRA code's old bug)."""
    import torch

    from miaflow.models import architectures as models
    from miaflow.models import training

    def with_dropout(arch, input_shape, n_classes):
        return torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Dropout(0.9),
            torch.nn.Linear(int(np.prod(input_shape)), n_classes),
        )

    monkeypatch.setattr(models, "build_torch_model", with_dropout)
    module = with_dropout(None, (10,), 3)
    weights = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    features = np.ones((50, 10), dtype=np.float32)
    first = training._torch_logits(ARCHS["mlp"], weights, features, 3)
    second = training._torch_logits(ARCHS["mlp"], weights, features, 3)
    assert np.array_equal(first, second)
    assert np.allclose(first, first[0])


@pytest.fixture
def one_torch_thread():
    """As in a workflow job (training.threads: 1): two spinning threads crawl on a busy machine."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_gpu_path_options_apply_to_models_trained_one_by_one(job_torch_session):
    """Batch-norm residual networks train per model: channels_last only changes the memory layout,
    bf16 autocast changes the rounding but not what is learnt, and weights come back fp32 NCHW.

    On a GPU channels_last also picks other cuDNN kernels (TF32 convolutions), whose rounding two
    epochs of SGD amplify far beyond 2e-3 (measured on an H200: 0.67 in the largest weight), so
    there only what is learnt is compared."""
    import torch

    generator = np.random.default_rng(0)
    labels = generator.integers(0, 3, 64)
    features = generator.normal(size=(64, 3, 8, 8)).astype(np.float32)
    features[:, 0] += labels[:, None, None]
    dataset = Dataset("toy-images", "image", features, labels.astype(np.int64), 3)
    splits = make_splits(64, seed=1, dataset="toy", repeats=1, n_reference=0, n_population=0)
    arch = {
        "kind": "wrn28_2",
        "optimizer": "sgd",
        "lr": 0.05,
        "weight_decay": 5e-4,
        "epochs": 2,
        "batch_size": 16,
        "patience": 0,
        "augment": True,
    }
    base, base_records = train_models(dataset, splits, ["target-0"], "wrn28_2", arch, seed=3)
    nhwc, nhwc_records = train_models(
        dataset, splits, ["target-0"], "wrn28_2", dict(arch, channels_last=True), seed=3
    )
    half, half_records = train_models(
        dataset, splits, ["target-0"], "wrn28_2", dict(arch, precision="bf16"), seed=3
    )

    def difference(weights):
        return max(np.abs(weights["target-0"][k] - v).max() for k, v in base["target-0"].items())

    assert all(
        v.flags.c_contiguous and v.dtype == base["target-0"][k].dtype
        for k, v in nhwc["target-0"].items()
    )
    if torch.cuda.is_available():
        assert nhwc_records[0].train_acc == pytest.approx(base_records[0].train_acc, abs=0.2)
    else:
        assert difference(nhwc) < 2e-3  # another convolution algorithm's summation order only
    assert difference(half) > 0
    assert all(v.dtype == base["target-0"][k].dtype for k, v in half["target-0"].items())
    assert half_records[0].train_acc == pytest.approx(base_records[0].train_acc, abs=0.2)


def test_compiled_per_model_training_matches_eager(one_torch_thread):
    pytest.importorskip("torch._inductor")
    dataset = toy_dataset(image=False)
    splits = make_splits(240, seed=1, dataset="toy", repeats=1, n_reference=0, n_population=0)
    # One batch per epoch: one shape to compile (a last, partial batch would compile it again).
    arch = dict(ARCHS["mlp"], epochs=2, batched=False, batch_size=256)
    eager, _ = train_models(dataset, splits, ["target-0"], "mlp", arch, seed=3)
    compiled, _ = train_models(
        dataset, splits, ["target-0"], "mlp", dict(arch, compile=True), seed=3
    )
    assert (
        max(np.abs(compiled["target-0"][k] - v).max() for k, v in eager["target-0"].items()) < 1e-4
    )
