"""Paper-scale image architectures and the train-time augmentation."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from miaflow.models.architectures import augment_images, build_torch_model

# Parameter counts at 32x32x3 and 10 classes: torchvision's mobilenet_v2(num_classes=10) has
# 2,236,682; kuangliu's CIFAR ResNet18 11,173,962; VGG11-bn (conv biases, one linear layer)
# 9,231,114; WRN-28-2 1,467,610 (Zagoruyko & Komodakis report 1.5M).
PARAMETER_COUNTS = {
    "wrn28_2": 1_467_610,
    "resnet18": 11_173_962,
    "vgg11": 9_231_114,
    "mobilenetv2": 2_236_682,
}
KINDS = list(PARAMETER_COUNTS)


def n_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("kind", KINDS)
def test_parameter_count_at_cifar_size(kind):
    assert (
        n_parameters(build_torch_model({"kind": kind}, (3, 32, 32), 10)) == PARAMETER_COUNTS[kind]
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape, n_classes", [((3, 32, 32), 10), ((1, 8, 8), 3), ((2, 9, 14), 101)])
def test_output_shape_for_any_image_size_and_class_count(kind, shape, n_classes):
    model = build_torch_model({"kind": kind}, shape, n_classes).eval()
    with torch.no_grad():
        assert model(torch.zeros(2, *shape)).shape == (2, n_classes)


@pytest.mark.parametrize("kind", KINDS)
def test_rejects_non_images_and_tiny_images(kind):
    with pytest.raises(ValueError, match="image inputs"):
        build_torch_model({"kind": kind}, (30,), 2)
    with pytest.raises(ValueError, match="at least 8x8"):
        build_torch_model({"kind": kind}, (1, 4, 4), 2)


@pytest.mark.parametrize("kind", KINDS)
def test_sgd_steps_reduce_loss_and_eval_is_deterministic(kind):
    torch.manual_seed(0)
    model = build_torch_model({"kind": kind}, (3, 8, 8), 4)
    x, y = torch.randn(8, 3, 8, 8), torch.arange(8) % 4
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    model.eval()
    with torch.no_grad():
        full = model(x)
        assert torch.equal(full, model(x))
        assert torch.allclose(full[:3], model(x[:3]), atol=1e-5)  # no batch statistics in eval mode


def test_augmentation_crops_and_flips_each_image_with_its_own_draws():
    x = torch.arange(64 * 3 * 8 * 8, dtype=torch.float32).reshape(64, 3, 8, 8)
    out = augment_images(x, torch.Generator().manual_seed(1))
    assert out.shape == x.shape and out.dtype == x.dtype
    padded = torch.nn.functional.pad(x, (4,) * 4, value=-1.0)
    kinds = set()
    for image, result in zip(padded, out):
        matches = [
            (dy, dx, flip)
            for dy in range(9)
            for dx in range(9)
            for flip in (False, True)
            if torch.equal(
                result, (lambda c: c.flip(-1) if flip else c)(image[:, dy : dy + 8, dx : dx + 8])
            )
        ]
        assert len(matches) == 1, "each output is exactly one crop of its own padded image"
        kinds.add(matches[0])
    assert len(kinds) > 20  # per-image offsets, not one draw for the batch
    assert {flip for *_, flip in kinds} == {False, True}


def test_augmentation_is_seeded():
    x = torch.randn(16, 1, 8, 8)
    first = augment_images(x, torch.Generator().manual_seed(7))
    assert torch.equal(first, augment_images(x, torch.Generator().manual_seed(7)))
    assert not torch.equal(first, augment_images(x, torch.Generator().manual_seed(8)))


def test_training_with_augmentation_is_deterministic_and_differs_from_plain(
    tmp_path, job_torch_session
):
    from miaflow.models.shards import load_shard, save_shard, shard_logits
    from miaflow.models.training import LEARNERS

    generator = np.random.default_rng(0)
    x = generator.normal(size=(32, 3, 8, 8)).astype(np.float32)
    y = generator.integers(0, 3, 32).astype(np.int64)
    arch = {
        "kind": "wrn28_2",
        "optimizer": "sgd",
        "lr": 0.05,
        "weight_decay": 5e-4,
        "epochs": 1,
        "batch_size": 16,
        "patience": 0,
        "augment": True,
    }
    fit = LEARNERS["wrn28_2"].fit
    first = fit(arch, x, y, x[:8], y[:8], 3, 11, 1, "m")
    second = fit(arch, x, y, x[:8], y[:8], 3, 11, 1, "m")
    plain = fit(dict(arch, augment=False), x, y, x[:8], y[:8], 3, 11, 1, "m")
    name = "layers.0.weight"
    assert np.array_equal(first[name], second[name])
    assert not np.array_equal(first[name], plain[name])

    save_shard(tmp_path / "shard.safetensors", {"m": first}, {"arch": arch, "n_classes": 3})
    [logits] = shard_logits(*load_shard(tmp_path / "shard.safetensors"), x)
    assert logits.shape == (32, 3)
    assert np.array_equal(logits, LEARNERS["wrn28_2"].logits(arch, first, x, 3))


# --- params.yaml: the new kinds are validated like the others --------------------------------


def shipped_params(repo) -> dict:
    import yaml

    return yaml.safe_load((repo / "params.yaml").read_text())


def commented_architectures(repo) -> dict:
    """The example entries that params.yaml ships commented out under `architectures`."""
    import re

    import yaml

    text = (repo / "params.yaml").read_text()
    section = text[text.index("\narchitectures:") : text.index("\ntraining:")]
    lines = [match[1] for match in re.finditer(r"^  # ((?:\w+: \{|\s+).*)$", section, re.MULTILINE)]
    return yaml.safe_load("\n".join(lines))


def test_commented_examples_in_params_yaml_are_valid(repo):
    from miaflow import config

    examples = commented_architectures(repo)
    assert {arch["kind"] for arch in examples.values()} == {*KINDS, "transformer"}
    assert examples["wrn28_2"]["lr"] == 0.1 and examples["minilm"]["lr"] == 2e-5
    params = shipped_params(repo)
    params["architectures"].update(examples)
    assert config.validate(params)["architectures"]["resnet18"]["augment"] is True


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"dropout": 0.5}, "architectures.wrn28_2.dropout: unknown key"),
        ({"augment": "yes"}, "architectures.wrn28_2.augment: 'yes' is not of type 'boolean'"),
        ({"optimizer": "lamb"}, "architectures.wrn28_2.optimizer: 'lamb' is not one of"),
    ],
)
def test_bad_image_architecture_options_name_the_key(repo, change, expected):
    from miaflow import config

    params = shipped_params(repo)
    params["architectures"]["wrn28_2"] = {**commented_architectures(repo)["wrn28_2"], **change}
    with pytest.raises(config.ConfigError, match=re.escape(expected)):
        config.validate(params)


@pytest.mark.parametrize("kind", KINDS)
def test_image_kinds_need_image_data(repo, kind):
    from miaflow import config
    from miaflow import plan as workflow

    params = shipped_params(repo)
    params["architectures"]["big"] = commented_architectures(repo)[kind]
    params["experiments"].append({"dataset": "purchase", "arch": "big"})
    with pytest.raises(
        config.ConfigError, match=f"architecture 'big' \\({kind}\\) needs image data"
    ):
        config.validate(params)
    assert workflow.uses_torch(params, "big")


def test_glorot_uniform_init_is_keras_default():
    """`init: glorot_uniform`: weights within Keras' bound sqrt(6 / (fan_in + fan_out)), zero
    biases (torch's default draws biases too)."""
    import math

    import torch

    from miaflow.models.recipe import build_module

    arch = {"kind": "mlp", "hidden": [32, 16], "activation": "relu", "init": "glorot_uniform"}
    torch.manual_seed(0)
    module = build_module(arch, (10,), 3)
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    for layer in linears:
        fan_out, fan_in = layer.weight.shape
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert layer.weight.abs().max() <= bound and layer.weight.abs().max() > 0.8 * bound
        assert not layer.bias.any()
    torch.manual_seed(0)
    default = build_module({**arch, "init": "default"}, (10,), 3)
    assert default.net[1].bias.any()
