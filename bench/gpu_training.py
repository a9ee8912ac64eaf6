"""Benchmark: training on a CUDA GPU, model-FLOPs utilisation (MFU) and batched vs loop.

Made for a GPU machine; without one it runs the same measurements on the CPU (a smoke test:
use small `--samples`). In one process, side by side:
1. the device's dense matmul peak (8192^3 products, median of CUDA-event timings after warm-up) in
   bf16 and in fp32, the reference for the shares below;
2. WRN28-2 (TDDBench recipe: SGD, batch 256, crop + flip augmentation) on CIFAR-sized random data
   through `miaflow.models.training._fit_torch`, the workflow's own per-model trainer, for each set
   of GPU-path options. Steady state: after an untimed warm-up run, a run of 1 + k epochs minus a
   run of 1 epoch, so compilation and warm-up drop out. MFU = model FLOPs (FlopCounterMode on the
   forward, x3 per training sample, plus the held-out forwards) / seconds / the bf16 peak;
3. the default's small models: a shard of 16 trained as one ensemble on the GPU vs one after
   another on the GPU (`bench/train_throughput.py`'s problems and its `run`).

    python bench/gpu_training.py [--samples 25600] [--epochs 4] [--skip-compile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # benchmark this checkout's package, not an installed one

import train_throughput  # noqa: E402
from train_throughput import PROBLEMS, Problem, forward_flops  # noqa: E402

from miaflow.compute import torch_device  # noqa: E402
from miaflow.models import training  # noqa: E402

WRN28_2 = {
    "kind": "wrn28_2",
    "optimizer": "sgd",
    "lr": 0.1,
    "weight_decay": 5e-4,
    "batch_size": 256,
    "patience": 0,
    "augment": True,
}
CIFAR = Problem(WRN28_2, (3, 32, 32), 10)
VARIANTS = {
    "fp32 (tf32 convs)": {},
    "bf16": {"precision": "bf16"},
    "bf16 + channels_last": {"precision": "bf16", "channels_last": True},
    "bf16 + cl + compile": {"precision": "bf16", "channels_last": True, "compile": True},
    "bf16 + cl + compile reduce-overhead": {
        "precision": "bf16",
        "channels_last": True,
        "compile": "reduce-overhead",
    },
}
HELDOUT = 1024  # held-out samples the trainer evaluates at report epochs (counted in the FLOPs)


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def matmul_peak(dtype: torch.dtype, size: int, repeats: int = 10) -> float:
    """Median dense matmul TFLOP/s on random data (never zeros: they run faster), after warm-up."""
    a, b = (torch.randn(size, size, device=torch_device(), dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        synchronize()
        started = time.perf_counter()
        a @ b
        synchronize()
        times.append(time.perf_counter() - started)
    return 2 * size**3 / statistics.median(times) / 1e12


def timed_fit(arch: dict[str, Any], x: np.ndarray, y: np.ndarray) -> float:
    synchronize()
    started = time.perf_counter()
    training._fit_torch(
        arch,
        x[:-HELDOUT],
        y[:-HELDOUT],
        x[-HELDOUT:],
        y[-HELDOUT:],
        CIFAR.n_classes,
        seed=0,
        threads=1,
        model_id="bench",
    )
    synchronize()
    return time.perf_counter() - started


def evaluations(epochs: int) -> int:
    every = max(1, epochs // 5)
    return sum(1 for e in range(1, epochs + 1) if e % every == 0 or e == epochs)


def wrn_rows(
    n_samples: int, extra_epochs: int, variants: dict[str, dict], peak: float
) -> list[str]:
    generator = np.random.default_rng(0)
    x = generator.random((n_samples + HELDOUT, *CIFAR.input_shape), dtype=np.float32)
    y = generator.integers(0, CIFAR.n_classes, n_samples + HELDOUT)
    flops = forward_flops(CIFAR)
    rows = []
    for name, options in variants.items():
        # An untimed first run per option set: torch.compile compiles (and its cache then stays
        # warm) and cuDNN picks its kernels, so neither lands in one timed run but not the other.
        timed_fit(dict(WRN28_2, epochs=1, **options), x, y)
        one = timed_fit(dict(WRN28_2, epochs=1, **options), x, y)
        more = timed_fit(dict(WRN28_2, epochs=1 + extra_epochs, **options), x, y)
        work = flops * (
            3 * extra_epochs * n_samples + (evaluations(1 + extra_epochs) - 1) * HELDOUT
        )
        seconds = more - one
        rows.append(
            f"{name:<36} {one:8.1f} {seconds / extra_epochs:9.2f} "
            f"{n_samples * extra_epochs / seconds:10.0f} "
            f"{work / seconds / 1e12:8.1f} {work / seconds / 1e12 / peak:6.1%}"
        )
        print(rows[-1], flush=True)
    return rows


def small_model_rows(n_models: int, n_samples: int, epochs: int) -> list[str]:
    rows = []
    for name, problem in [
        ("warm-up", PROBLEMS["lr"]),
        *PROBLEMS.items(),
    ]:  # CUDA/cuBLAS set-up first
        r = train_throughput.run(problem, n_models, n_samples, epochs, device=torch_device())
        if name == "warm-up":
            continue
        note = "  (ensemble refused the architecture)" if r["refused"] else ""
        rows.append(
            f"{name:<13} {r['batched'] / 1e3:10.3f} {r['loop'] / 1e3:10.3f} "
            f"{r['batched'] / r['loop']:7.1f}x {r['batched_s']:9.2f} {r['loop_s']:7.2f}{note}"
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--samples", type=int, default=25600, help="WRN28-2 training samples per epoch"
    )
    parser.add_argument("--epochs", type=int, default=4, help="epochs timed beyond the first")
    parser.add_argument(
        "--skip-compile", action="store_true", help="leave out the torch.compile variants"
    )
    parser.add_argument("--models", type=int, default=16, help="models in a small-model shard")
    parser.add_argument(
        "--small-samples", type=int, default=4000, help="dataset size of the small-model shards"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    variants = {k: v for k, v in VARIANTS.items() if not (args.skip_compile and "compile" in v)}

    size = 8192 if torch.cuda.is_available() else 1024
    bf16, fp32 = matmul_peak(torch.bfloat16, size), matmul_peak(torch.float32, size)
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else "CPU (no CUDA device: smoke run)"
    )
    print(
        f"{device}, torch {torch.__version__}; dense matmul peak "
        f"bf16 {bf16:.0f} TFLOP/s, fp32 {fp32:.0f} TFLOP/s"
    )
    print(
        f"WRN28-2, {forward_flops(CIFAR) / 1e9:.3f} GFLOP per forward, batch 256, "
        f"{args.samples} samples "
        f"per epoch; MFU against the bf16 peak (fp32 on a CPU)"
    )
    header = (
        f"{'options':<36} {'1 epoch s':>8} {'epoch s':>9} {'samples/s':>10} "
        f"{'TFLOP/s':>8} {'MFU':>6}"
    )
    print(header, flush=True)
    wrn = wrn_rows(args.samples, args.epochs, variants, bf16 if torch.cuda.is_available() else fp32)
    print(
        f"\nsmall models, {args.models} per shard, {args.small_samples} samples, 3 epochs, fp32: "
        "ensemble vs one model after another, both on the device"
    )
    small_header = (
        f"{'problem':<13} {'batched TF/s':>10} {'loop TF/s':>10} {'speedup':>8} "
        f"{'batched s':>9} {'loop s':>7}"
    )
    print(small_header, flush=True)
    small = small_model_rows(args.models, args.small_samples, 3)
    print("\n" + "\n".join([header, *wrn, "", small_header, *small]))


if __name__ == "__main__":
    main()
