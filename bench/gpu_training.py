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
3. a WRN28-2 shard of `--shard-models` members trained as one widened ensemble
   (`miaflow.models.ensemble.fit_ensemble`) vs one after another (`_fit_torch`, timed on
   `--loop-models` members and scaled to the shard), each member on its split of `--samples`
   (about a quarter), for the option sets of ENSEMBLE_VARIANTS: steady-state samples/s over all
   members, MFU against the bf16 peak, and the loop/ensemble time ratio;
4. the default's small models: a shard of 16 trained as one ensemble on the GPU vs one after
   another on the GPU (`bench/train_throughput.py`'s problems and its `run`).

    python bench/gpu_training.py [--samples 25600] [--epochs 4] [--variants all|eager|compiled]
                                 [--shard-models 8] [--loop-models 2]

On a CPU it runs as a smoke test, e.g. `--samples 512 --epochs 1 --shard-models 2 --loop-models 1
--small-samples 400 --variants eager`.
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
from miaflow.models import ensemble, training  # noqa: E402

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
ENSEMBLE_VARIANTS = {
    k: VARIANTS[k]
    for k in ("fp32 (tf32 convs)", "bf16 + channels_last", "bf16 + cl + compile reduce-overhead")
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


def wrn_shard_rows(
    n_models: int,
    loop_models: int,
    n_samples: int,
    extra_epochs: int,
    variants: dict[str, dict],
    peak: float,
) -> list[str]:
    """WRN28-2 shard: one widened ensemble vs the per-model loop, steady state per epoch."""
    generator = np.random.default_rng(0)
    x = generator.random((n_samples, *CIFAR.input_shape), dtype=np.float32)
    y = generator.integers(0, CIFAR.n_classes, n_samples)
    train, heldout, ids = train_throughput.shard_indices(n_samples, n_models)
    seeds = list(range(n_models))
    device = torch_device()

    def ensemble_s(arch: dict[str, Any]) -> float:
        synchronize()
        started = time.perf_counter()
        fitted = ensemble.fit_ensemble(
            arch, x, y, train, heldout, CIFAR.n_classes, seeds, ids, device=device
        )
        synchronize()
        if fitted is None:
            raise RuntimeError("the ensemble refused WRN28-2")
        return time.perf_counter() - started

    def loop_s(arch: dict[str, Any]) -> float:
        synchronize()
        started = time.perf_counter()
        for m in range(loop_models):
            training._fit_torch(
                arch,
                x[train[m]],
                y[train[m]],
                x[heldout[m]],
                y[heldout[m]],
                CIFAR.n_classes,
                seeds[m],
                1,
                ids[m],
            )
        synchronize()
        return (time.perf_counter() - started) * n_models / loop_models

    samples = sum(map(len, train)) * extra_epochs
    rows = []
    for name, options in variants.items():
        one, more = (dict(WRN28_2, epochs=e, **options) for e in (1, 1 + extra_epochs))
        work = train_throughput.shard_flops(CIFAR, more, train, heldout) - (
            train_throughput.shard_flops(CIFAR, one, train, heldout)
        )
        seconds = {}
        for trainer, timed in (("ensemble", ensemble_s), ("loop", loop_s)):
            timed(one)  # warm-up: compilation, cuDNN's choice of kernels
            seconds[trainer] = timed(more) - timed(one)
        rows.append(
            f"{name:<36} "
            + " ".join(
                f"{samples / seconds[t]:10.0f} {work / seconds[t] / 1e12 / peak:6.1%}"
                for t in ("ensemble", "loop")
            )
            + f" {seconds['loop'] / seconds['ensemble']:7.2f}x"
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


def chosen(variants: dict[str, dict], which: str) -> dict[str, dict]:
    """The option sets of `variants` that `--variants` names."""
    return {
        k: v
        for k, v in variants.items()
        if which == "all" or ("compile" in v) == (which == "compiled")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--samples", type=int, default=25600, help="WRN28-2 training samples per epoch"
    )
    parser.add_argument("--epochs", type=int, default=4, help="epochs timed beyond the first")
    parser.add_argument(
        "--variants",
        choices=["all", "eager", "compiled"],
        default="all",
        help="option sets timed: all, those without torch.compile, or only those with it",
    )
    parser.add_argument(
        "--skip-small", action="store_true", help="leave out the small-model shards"
    )
    parser.add_argument(
        "--shard-models", type=int, default=8, help="members of the WRN28-2 ensemble"
    )
    parser.add_argument(
        "--loop-models",
        type=int,
        default=2,
        help="WRN28-2 members timed one after another (scaled to the shard)",
    )
    parser.add_argument("--models", type=int, default=16, help="models in a small-model shard")
    parser.add_argument(
        "--small-samples", type=int, default=4000, help="dataset size of the small-model shards"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    variants = chosen(VARIANTS, args.variants)

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
    ensemble_variants = chosen(ENSEMBLE_VARIANTS, args.variants)
    print(
        f"\nWRN28-2 shard of {args.shard_models}, each on about a quarter of {args.samples} "
        f"samples: one widened ensemble vs one after another ({args.loop_models} timed, "
        "scaled); samples/s of all members together, MFU against the same peak"
    )
    shard_header = (
        f"{'options':<36} {'ens. smp/s':>10} {'MFU':>6} {'loop smp/s':>10} {'MFU':>6} "
        f"{'loop/ens':>8}"
    )
    print(shard_header, flush=True)
    shard = wrn_shard_rows(
        args.shard_models,
        args.loop_models,
        args.samples,
        args.epochs,
        ensemble_variants,
        bf16 if torch.cuda.is_available() else fp32,
    )
    if args.skip_small:
        print("\n" + "\n".join([header, *wrn, "", shard_header, *shard]))
        return
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
    print("\n" + "\n".join([header, *wrn, "", shard_header, *shard, "", small_header, *small]))


if __name__ == "__main__":
    main()
