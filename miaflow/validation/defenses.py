"""Defenses set on `architectures`: training defenses train one model at a time in fp32 eager
mode (`miaflow.defenses.TRAINING`), and DP-SGD cannot clip per sample through batch norm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from miaflow.defenses import TRAINING, defense_kind

# Kinds with batch norm: it mixes a batch's samples, so per-sample clipping bounds nothing.
BATCH_NORM_KINDS = ("wrn28_2", "resnet18", "vgg11", "mobilenetv2")


def problems(config: Mapping[str, Any]) -> list[str]:
    """Defended architectures that ask for fast training modes, or DP-SGD through batch norm."""
    problems = []
    for name, arch in config["architectures"].items():
        if defense_kind(arch) not in TRAINING:
            continue
        defense, where = arch["defense"], f"architectures.{name}.defense"
        fast = [
            key
            for key, off in (("precision", "fp32"), ("compile", False), ("channels_last", False))
            if arch.get(key, off) != off
        ]
        if fast:
            problems.append(
                f"{where}: a defended model trains in plain fp32 eager mode; remove "
                f"{', '.join(fast)}"
            )
        if defense["kind"] == "dp_sgd" and arch["kind"] in BATCH_NORM_KINDS:
            problems.append(
                f"{where}: DP-SGD cannot bound one sample's influence through the "
                f"batch norm of {arch['kind']}; use mlp, cnn or torch_lr"
            )
    return problems
