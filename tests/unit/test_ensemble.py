"""The batched ensemble trains each member as the per-model loop would, and falls back safely."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from sklearn.metrics import roc_auc_score
from test_training import ARCHS, toy_dataset

from miaflow import io
from miaflow import plan as workflow
from miaflow.config import ConfigError, validate
from miaflow.data import Dataset
from miaflow.models import architectures as models
from miaflow.models import ensemble, grouped, recipe
from miaflow.models.shards import load_shard, save_shard, shard_logits
from miaflow.models.training import train_models
from miaflow.splits import make_splits

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TORCH_LR = {
    "kind": "torch_lr",
    "optimizer": "adam",
    "lr": 0.05,
    "weight_decay": 0.001,
    "epochs": 10,
    "batch_size": 32,
    "patience": 0,
}


SHARD = ("target-0", "target-1", "reference-0", "reference-1", "population-0", "population-1")


def toy_splits():
    """Six models with different training-set sizes, drawn from two different pools."""
    splits = make_splits(240, seed=1, dataset="toy", repeats=2, n_reference=2, n_population=2)
    assert len({int(splits.members(m).sum()) for m in SHARD}) > 1
    return splits


def max_difference(first, second) -> float:
    return max(float(np.abs(first[m][k] - second[m][k]).max()) for m in first for k in first[m])


@pytest.mark.parametrize(
    "arch_name,optimizer",
    [("mlp", "adam"), ("mlp", "sgd"), ("cnn", "adam"), ("cnn", "sgd"), ("torch_lr", "adam")],
)
def test_batched_weights_equal_the_loop(arch_name, optimizer, caplog):
    """Same seeds, same batches, same masked optimizer steps and early stops: only rounding
    differs."""
    arch = dict(
        TORCH_LR if arch_name == "torch_lr" else ARCHS[arch_name],
        optimizer=optimizer,
        epochs=8,
        patience=1,
        weight_decay=0.001,
    )
    dataset = toy_dataset(image=arch_name == "cnn")
    with caplog.at_level("INFO", logger="miaflow"):
        batched, batched_records = train_models(
            dataset, toy_splits(), SHARD, arch_name, arch, seed=3
        )
    assert "as one ensemble" in caplog.text
    looped, looped_records = train_models(
        dataset, toy_splits(), SHARD, arch_name, dict(arch, batched=False), seed=3
    )
    assert max_difference(batched, looped) < 1e-4
    assert [r.test_acc for r in batched_records] == pytest.approx(
        [r.test_acc for r in looped_records]
    )


def test_members_stop_early_on_their_own(caplog):
    arch = dict(ARCHS["mlp"], epochs=30, patience=1)
    with caplog.at_level("INFO", logger="miaflow.models.ensemble"):
        train_models(toy_dataset(image=False), toy_splits(), SHARD, "mlp", arch, seed=3)
    stop_epochs = [int(line.split()[-1]) for line in caplog.messages if "early stop" in line]
    assert len(stop_epochs) >= 2 and len(set(stop_epochs)) >= 2  # members stop at their own epochs


def attack_auroc(dataset, splits, weights, arch) -> float:
    """Loss attack on the target models (score = -loss), pooled AUROC over the target pool."""
    ids = splits.models("target")
    logits = shard_logits(
        weights, {"arch": arch, "n_classes": dataset.n_classes, "model_ids": ids}, dataset.features
    )
    pool = splits.in_target_pool
    scores, labels = [], []
    for k, model in enumerate(ids):
        loss = torch.nn.functional.cross_entropy(
            torch.from_numpy(logits[k][pool]),
            torch.from_numpy(dataset.labels[pool]),
            reduction="none",
        )
        scores.append(-loss.numpy())
        labels.append(splits.members(model)[pool])
    return roc_auc_score(np.concatenate(labels), np.concatenate(scores))


def noisy_dataset(seed: int, n: int = 400) -> Dataset:
    """Four classes, one weakly informative feature among 20: generalises a little, memorises a
    lot."""
    generator = np.random.default_rng(seed)
    labels = generator.integers(0, 4, n)
    features = generator.normal(size=(n, 20)).astype(np.float32)
    features[:, 0] += labels
    return Dataset("noisy", "tabular", features, labels.astype(np.int64), 4)


def test_batched_and_looped_training_agree_statistically():
    """Over several seeds, accuracy and the membership signal agree (means within tolerance)."""
    arch = dict(ARCHS["mlp"], hidden=[64], epochs=20, lr=0.01)
    summary = {True: [], False: []}
    for seed in (11, 12, 13):
        dataset = noisy_dataset(seed)
        splits = make_splits(
            400, seed=seed, dataset="noisy", repeats=4, n_reference=0, n_population=0
        )
        for batched in (True, False):
            weights, records = train_models(
                dataset, splits, splits.model_ids, "mlp", dict(arch, batched=batched), seed=seed
            )
            summary[batched].append(
                [
                    np.mean([r.train_acc for r in records]),
                    np.mean([r.test_acc for r in records]),
                    attack_auroc(dataset, splits, weights, arch),
                ]
            )
    batched, looped = np.array(summary[True]), np.array(summary[False])
    assert looped[:, 0].mean() > looped[:, 1].mean() + 0.2  # the models memorise
    assert looped[:, 2].mean() > 0.6  # and leak membership
    assert np.abs(batched.mean(0) - looped.mean(0)).max() < 0.02


@pytest.mark.parametrize("arch_name", ["mlp", "cnn", "torch_lr"])
def test_saved_weights_load_into_torch_modules(tmp_path, arch_name):
    arch = TORCH_LR if arch_name == "torch_lr" else ARCHS[arch_name]
    dataset = toy_dataset(image=arch_name == "cnn")
    weights, _ = train_models(dataset, toy_splits(), SHARD[:3], arch_name, arch, seed=3)
    save_shard(tmp_path / "shard.safetensors", weights, {"arch": arch, "n_classes": 3})
    loaded, _ = load_shard(tmp_path / "shard.safetensors")
    module = models.build_torch_model(recipe.module_arch(arch), dataset.features.shape[1:], 3)
    module.load_state_dict(
        {k: torch.from_numpy(v) for k, v in loaded["target-0"].items()}, strict=True
    )
    assert all(v.dtype == np.float32 for v in loaded["target-0"].values())


def test_gpu_path_options_train_on_cpu():
    """bf16 autocast keeps accuracy; channels_last only changes memory layout."""
    dataset = toy_dataset(image=True)
    arch = dict(ARCHS["cnn"], epochs=4, patience=0)
    base, base_records = train_models(dataset, toy_splits(), SHARD, "cnn", arch, seed=3)
    nhwc, _ = train_models(
        dataset, toy_splits(), SHARD, "cnn", dict(arch, channels_last=True), seed=3
    )
    assert max_difference(base, nhwc) < 1e-4
    half, half_records = train_models(
        dataset, toy_splits(), SHARD, "cnn", dict(arch, precision="bf16"), seed=3
    )
    assert max_difference(base, half) > 0  # it did run in lower precision
    assert np.mean([r.train_acc for r in half_records]) == pytest.approx(
        np.mean([r.train_acc for r in base_records]), abs=0.1
    )
    assert all(v.dtype == np.float32 for v in half["target-0"].values())


def test_unsupported_layers_train_one_by_one(monkeypatch, caplog):
    """Dropout can be neither grouped nor widened: the shard falls back to the loop."""

    def with_dropout(arch, input_shape, n_classes):
        return torch.nn.Sequential(
            torch.nn.Dropout(0.1), torch.nn.Linear(input_shape[0], n_classes)
        )

    dataset = toy_dataset(image=False)
    monkeypatch.setattr(models, "build_torch_model", with_dropout)
    assert (
        ensemble.fit_ensemble(
            ARCHS["mlp"],
            dataset.features,
            dataset.labels,
            [np.arange(50)],
            [np.arange(50, 80)],
            3,
            [1],
            ["m"],
        )
        is None
    )
    with caplog.at_level("INFO", logger="miaflow"):
        weights, records = train_models(
            dataset, toy_splits(), SHARD[:2], "mlp", ARCHS["mlp"], seed=3
        )
    assert "as one ensemble" not in caplog.text and len(weights) == 2


def test_a_skip_connection_trains_widened_as_the_loop(monkeypatch, caplog):
    """The grouped forward's check catches the skip connection; the widened module runs the
    module's own forward, so the shard still trains as one ensemble, with the loop's weights."""

    class Residual(torch.nn.Module):
        def __init__(self, width: int, n_classes: int) -> None:
            super().__init__()
            self.inner = torch.nn.Linear(width, width)
            self.out = torch.nn.Linear(width, n_classes)

        def forward(self, x):
            return self.out(x + torch.tanh(self.inner(x)))

    monkeypatch.setattr(models, "build_torch_model", lambda arch, shape, n: Residual(shape[0], n))
    dataset = toy_dataset(image=False)
    arch = dict(ARCHS["mlp"], epochs=4)
    with caplog.at_level("INFO", logger="miaflow"):
        batched, _ = train_models(dataset, toy_splits(), SHARD, "mlp", arch, seed=3)
    assert "as one ensemble" in caplog.text
    looped, _ = train_models(dataset, toy_splits(), SHARD, "mlp", dict(arch, batched=False), seed=3)
    assert max_difference(batched, looped) < 1e-4


def test_sgd_learning_rates_follow_torch_cosine_schedule():
    rates = recipe.learning_rates({"optimizer": "sgd", "lr": 0.1, "epochs": 4})
    assert rates[0] == 0.1 and rates == sorted(rates, reverse=True) and rates[-1] > 0
    assert recipe.learning_rates({"optimizer": "adam", "lr": 0.1, "epochs": 3}) == [0.1] * 3


def test_learning_rate_schedules_equal_torch_schedulers():
    """`lr_schedule`: constant, cosine (CosineAnnealingLR) and {step_size, gamma} (StepLR), for
    either optimizer; the defaults stay cosine for SGD and constant for Adam."""
    arch = {"optimizer": "sgd", "lr": 0.01, "epochs": 8}
    optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.01)
    step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.1)
    expected = []
    for _ in range(8):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        step.step()
    stepped = recipe.learning_rates(dict(arch, lr_schedule={"step_size": 3, "gamma": 0.1}))
    assert stepped == pytest.approx(expected, rel=1e-12)
    assert recipe.learning_rates(dict(arch, lr_schedule="constant")) == [0.01] * 8
    cosine = recipe.learning_rates(arch)
    assert recipe.learning_rates(dict(arch, optimizer="adam", lr_schedule="cosine")) == cosine


def test_sgd_momentum_and_step_schedule_reach_both_trainers():
    """Keras' SGD recipe (MemGuard's Location30 target: no momentum, lr x0.1 after a step): the
    batched ensemble and the per-model loop train the same models, unlike the default momentum."""
    dataset = toy_dataset(image=False)
    arch = dict(
        ARCHS["mlp"],
        optimizer="sgd",
        lr=0.05,
        epochs=6,
        patience=0,
        momentum=0.0,
        lr_schedule={"step_size": 3, "gamma": 0.1},
    )
    batched, _ = train_models(dataset, toy_splits(), SHARD, "mlp", arch, seed=3)
    looped, _ = train_models(dataset, toy_splits(), SHARD, "mlp", dict(arch, batched=False), seed=3)
    assert max_difference(batched, looped) < 1e-4
    with_momentum, _ = train_models(
        dataset, toy_splits(), SHARD, "mlp", dict(arch, momentum=0.9), seed=3
    )
    assert max_difference(batched, with_momentum) > 1e-3


def test_compiled_training_matches_eager():
    pytest.importorskip("torch._inductor")
    dataset = toy_dataset(image=False)
    # One batch per epoch: one shape to compile (a last, partial batch would compile it again).
    arch = dict(ARCHS["mlp"], epochs=2, batch_size=128)
    eager, _ = train_models(dataset, toy_splits(), SHARD[:2], "mlp", arch, seed=3)
    compiled, _ = train_models(
        dataset, toy_splits(), SHARD[:2], "mlp", dict(arch, compile=True), seed=3
    )
    assert max_difference(eager, compiled) < 1e-4


def test_auto_shards_are_balanced_and_capped(repo):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["training"]["models_per_job"] = "auto"
    for n_reference, sizes in ((8, [21]), (64, [26, 26, 25]), (2, [15])):
        params["splits"].update(repeats=5, n_reference=n_reference, n_population=8)
        shards = workflow.shards(params)
        assert [len(s) for s in shards] == sizes
        assert sum(shards, []) == workflow.model_ids(params)
        assert max(sizes) <= workflow.AUTO_MODELS_PER_JOB


def test_schema_accepts_gpu_options_on_torch_kinds_only(repo):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["architectures"]["cnn"].update(precision="bf16", compile=True, channels_last=True)
    params["architectures"]["mlp"].update(batched=False, precision="bf16")
    params["architectures"]["wrn28_2"] = {
        "kind": "wrn28_2",
        "optimizer": "sgd",
        "lr": 0.1,
        "weight_decay": 5e-4,
        "epochs": 2,
        "batch_size": 256,
        "patience": 0,
        "augment": True,
        "precision": "bf16",
        "channels_last": True,
        "compile": "reduce-overhead",
    }
    validate(params)
    params["architectures"]["torch_lr"]["channels_last"] = True
    params["architectures"]["lr"]["precision"] = "bf16"
    params["architectures"]["mlp"]["compile"] = "fastest"
    with pytest.raises(ConfigError) as error:
        validate(params)
    assert "architectures.torch_lr.channels_last: unknown key" in str(error.value)
    assert "architectures.lr.precision: unknown key" in str(error.value)
    assert "architectures.mlp.compile" in str(error.value)


def test_non_torch_shards_do_not_import_torch(repo):
    """LR and CatBoost jobs skip the ensemble before it imports torch (seconds per job)."""
    code = (
        "import sys; from tests.unit.test_training import toy_dataset, ARCHS; "
        "from miaflow.splits import make_splits; from miaflow.models.training import train_models; "
        "splits = make_splits(240, seed=1, dataset='toy', repeats=1, n_reference=0, "
        "n_population=0); "
        "train_models(toy_dataset(False), splits, ['target-0'], 'lr', ARCHS['lr'], 3); "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
        check=True,
    )
    assert result.stdout.strip() == "False"


def test_runs_group_neighbouring_active_members_with_equal_step_counts():
    active = np.array([True, True, False, True, True, True, True])
    steps = np.array([4, 4, 4, 4, 5, 5, 4])
    assert ensemble._runs(active, steps) == [(0, 2), (3, 4), (4, 6), (6, 7)]
    assert ensemble._runs(np.ones(3, bool), np.zeros(3, int)) == [(0, 3)]
    assert ensemble._runs(np.zeros(3, bool), np.zeros(3, int)) == []


def test_members_come_back_in_the_given_order():
    """Members train sorted by training-set size; each keeps its own data, seed and id."""
    dataset = toy_dataset(image=False)
    arch = dict(ARCHS["mlp"], epochs=3)
    train = [np.arange(0, 90), np.arange(90, 130), np.arange(130, 200)]  # sizes 90, 40, 70
    heldout = [np.arange(200, 240)] * 3
    seeds, ids = [5, 6, 7], ["a", "b", "c"]
    together = ensemble.fit_ensemble(
        arch, dataset.features, dataset.labels, train, heldout, 3, seeds, ids
    )
    for m in range(3):
        alone = ensemble.fit_ensemble(
            arch,
            dataset.features,
            dataset.labels,
            train[m : m + 1],
            heldout[:1],
            3,
            seeds[m : m + 1],
            ids[m : m + 1],
        )[0]
        assert max(float(np.abs(together[m][k] - alone[k]).max()) for k in alone) < 1e-5


@pytest.mark.parametrize(
    "arch,shape,order",
    [
        (
            {"kind": "cnn", "channels": [4, 8], "hidden": 16},
            (1, 8, 8),
            ["Conv2d", "MaxPool2d", "ReLU"],
        ),
        (
            {"kind": "mlp", "hidden": [16, 8], "activation": "tanh"},
            (12,),
            ["Flatten", "Linear", "_SigmoidTanh"],
        ),
    ],
)
def test_cpu_layout_gives_the_modules_outputs_and_gradients(arch, shape, order):
    """On the CPU: NHWC grouped convolutions, max-pool before ReLU, tanh by sigmoid; the modules'
    function."""
    modules = []
    for seed in range(3):
        torch.manual_seed(seed)
        modules.append(recipe.build_module(arch, shape, 5))
    stacked_modules = grouped.GroupedEnsemble(modules, grouped.grouped_layers(modules[0]), "cpu")
    assert [type(layer.module).__name__ for layer in stacked_modules.layers][
        :3
    ] == order and stacked_modules.channels_last
    x = torch.randn(3, 7, *shape)
    got = stacked_modules.forward(x)
    expected = torch.stack([m(x[i]) for i, m in enumerate(modules)])
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5)
    got.square().sum().backward()
    expected.square().sum().backward()
    for key, stacked in stacked_modules.params.items():
        reference = torch.stack([dict(m.named_parameters())[key].grad for m in modules])
        assert torch.allclose(
            stacked_modules._stored(stacked.grad, key), reference, rtol=1e-4, atol=1e-5
        ), key
    elsewhere = grouped.GroupedEnsemble(modules, grouped.grouped_layers(modules[0]), "meta")
    assert elsewhere.layers == grouped.grouped_layers(modules[0])  # off the CPU: as registered,
    assert not elsewhere.channels_last  # NCHW unless configured


def test_a_flipped_or_truncated_shard_is_named_and_removed(tmp_path, monkeypatch):
    """safetensors has no checksum: the shard carries its tensors' hash, and loading checks it."""
    monkeypatch.chdir(tmp_path)
    weights = {"m0": {"w": np.arange(64, dtype=np.float32)}, "m1": {"w": np.ones(64, np.float32)}}
    shard = tmp_path / "results" / "shard-0.safetensors"
    shard.parent.mkdir()
    save_shard(shard, weights, {"arch": {"kind": "mlp"}, "n_classes": 2})
    good = shard.read_bytes()
    assert load_shard(shard)[0]["m0"]["w"].tolist() == list(range(64))
    data = bytearray(good)
    data[-5] ^= 0x10  # inside the last tensor's bytes
    shard.write_bytes(bytes(data))
    with pytest.raises(io.CorruptArtifact, match="shard-0.safetensors is corrupt.*differ"):
        load_shard(shard)
    assert not shard.exists()  # removed: the next run rebuilds it
    shard.write_bytes(good[: len(good) // 2])
    with pytest.raises(io.CorruptArtifact, match="shard-0.safetensors is corrupt"):
        load_shard(shard)
