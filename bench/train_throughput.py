"""Benchmark: training throughput of one shard, batched ensemble vs one model after another.

For each problem, in one process and side by side: the fp32 matmul peak of this process (2048^3,
same thread count), the achieved GFLOP/s of `miaflow.models.ensemble.fit_ensemble` on a shard and of
the per-model trainer (`miaflow.models.training._fit_torch`, the `batched: false` path) on the same
shard, each as a share of the peak, and the batched / loop speedup (wall time). Shares are given
twice: by wall time, and with training and peak both by process CPU time per thread ("cpu % peak"),
where the waits for a core of a shared machine drop out. FLOPs are counted by torch's
FlopCounterMode on one forward (matmuls and convolutions), times 3 for a training step, plus the
held-out forward passes both trainers make; data are random (speed does not depend on them).

    .venv/bin/python bench/train_throughput.py [--models 16] [--samples 4000] [--epochs 30]
                                               [--threads 1] [--problems purchase-mlp lr ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # benchmark this checkout's package, not an installed one

from miaflow.models import ensemble, recipe, training  # noqa: E402
from miaflow.plan import experiments  # noqa: E402
from miaflow.splits import make_splits  # noqa: E402

PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())
TDDBENCH_MLP = {
    "kind": "mlp",
    "hidden": [512, 256, 128, 64],
    "activation": "tanh",
    "optimizer": "adam",
    "lr": 0.001,
    "weight_decay": 0.0,
    "batch_size": 256,
    "patience": 0,
}
TORCH_LR = {
    "kind": "torch_lr",
    "optimizer": "adam",
    "lr": 0.01,
    "weight_decay": 0.0,
    "batch_size": 256,
    "patience": 0,
}


@dataclass(frozen=True)
class Problem:
    arch: dict[str, Any]
    input_shape: tuple[int, ...]
    n_classes: int


PROBLEMS = {
    "purchase-mlp": Problem(TDDBENCH_MLP, (600,), 100),  # TDDBench MLP on a Purchase-sized problem
    "lr": Problem(TORCH_LR, (600,), 100),
    "default-mlp": Problem(
        PARAMS["architectures"]["mlp"],
        (PARAMS["datasets"]["purchase"]["n_features"],),
        PARAMS["datasets"]["purchase"]["n_classes"],
    ),
    "default-cnn": Problem(PARAMS["architectures"]["cnn"], (1, 8, 8), 10),  # sklearn digits
}


def matmul_peak(size: int = 2048, repeats: int = 5) -> tuple[float, float]:
    """Best fp32 matmul GFLOP/s of this process, by wall time and by process CPU time per thread."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        a @ b
        best = min(best, time.perf_counter() - started)
        best_cpu = min(best_cpu, (time.process_time() - cpu_started) / torch.get_num_threads())
    return 2 * size**3 / best / 1e9, 2 * size**3 / best_cpu / 1e9


def forward_flops(problem: Problem) -> int:
    """FLOPs of one sample's forward pass."""
    from torch.utils.flop_counter import FlopCounterMode

    module = recipe.build_module(problem.arch, problem.input_shape, problem.n_classes)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        module(torch.zeros(1, *problem.input_shape))
    return counter.get_total_flops()


def shard_flops(
    problem: Problem, arch: dict[str, Any], train: list[np.ndarray], heldout: list[np.ndarray]
) -> float:
    """Training steps (3 forwards) over every epoch, plus the held-out forwards at report epochs."""
    epochs = arch["epochs"]
    every = max(1, epochs // 5)
    evaluations = sum(
        1 for e in range(1, epochs + 1) if arch["patience"] or e % every == 0 or e == epochs
    )
    samples = 3 * epochs * sum(map(len, train)) + evaluations * sum(map(len, heldout))
    return forward_flops(problem) * samples


def shard_indices(
    n_samples: int, n_models: int
) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    """Each model's training and held-out sample indices (the workflow's splits) and its id."""
    splits = make_splits(
        n_samples, seed=0, dataset="bench", repeats=n_models, n_reference=0, n_population=0
    )
    train = [np.flatnonzero(splits.members(m)) for m in splits.model_ids]
    heldout = [np.flatnonzero(splits.in_target_pool & ~splits.members(m)) for m in splits.model_ids]
    return train, heldout, list(splits.model_ids)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run(
    problem: Problem, n_models: int, n_samples: int, epochs: int, device: str = "cpu"
) -> dict[str, Any]:
    """The shard trained as one ensemble and one model after another, both on `device` (the
    per-model trainer uses `torch_device()`, so pass that). GFLOP/s by wall time and by
    the process's CPU time (divided by the thread count: a shared machine's waits drop out);
    `peak` / `peak_cpu` are this process's fp32 matmul GFLOP/s, the same two ways, before and
    after (best); NaN off the CPU."""
    generator = np.random.default_rng(0)
    features = generator.random((n_samples, *problem.input_shape), dtype=np.float32)
    labels = generator.integers(0, problem.n_classes, n_samples)
    train, heldout, model_ids = shard_indices(n_samples, n_models)
    arch = dict(problem.arch, epochs=epochs)
    seeds = list(range(n_models))
    threads = torch.get_num_threads()

    peak_before = matmul_peak() if device == "cpu" else (float("nan"),) * 2
    synchronize(device)
    started, cpu_started = time.perf_counter(), time.process_time()
    fitted = ensemble.fit_ensemble(
        arch, features, labels, train, heldout, problem.n_classes, seeds, model_ids, device=device
    )
    synchronize(device)
    batched, batched_cpu = (
        time.perf_counter() - started,
        (time.process_time() - cpu_started) / threads,
    )
    started, cpu_started = time.perf_counter(), time.process_time()
    for m, model_id in enumerate(model_ids):
        training._fit_torch(
            arch,
            features[train[m]],
            labels[train[m]],
            features[heldout[m]],
            labels[heldout[m]],
            problem.n_classes,
            seeds[m],
            1,
            model_id,
        )
    synchronize(device)
    loop, loop_cpu = time.perf_counter() - started, (time.process_time() - cpu_started) / threads
    peak_after = matmul_peak() if device == "cpu" else peak_before
    peak, peak_cpu = max(peak_before[0], peak_after[0]), max(peak_before[1], peak_after[1])
    flops = shard_flops(problem, arch, train, heldout)
    return {
        "peak": peak,
        "peak_cpu": peak_cpu,
        "batched": flops / batched / 1e9,
        "loop": flops / loop / 1e9,
        "batched_cpu": flops / batched_cpu / 1e9,
        "loop_cpu": flops / loop_cpu / 1e9,
        "batched_s": batched,
        "loop_s": loop,
        "refused": fitted is None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=16, help="models in the shard")
    parser.add_argument(
        "--samples", type=int, default=4000, help="dataset size (each model trains on ~1/4)"
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=30,
        help="epochs per model: the default's MLP and torch_lr recipes (its CNN's: 40); "
        "a shard's fixed set-up weighs on short runs (3 epochs measured 5-10 points of peak lower)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (the workflow's training.threads)"
    )
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    print(
        f"{args.models} models, {args.samples} samples, {args.epochs} epochs, "
        f"{args.threads} thread(s); "
        f"default experiments: {experiments(PARAMS)}"
    )
    print(
        "% peak: by wall time; cpu % peak: training and peak by process CPU time / threads "
        "(waits for a shared CPU drop out)"
    )
    print(
        f"{'problem':<13} {'peak GF/s':>9} {'batched GF/s':>12} {'% peak':>7} {'cpu % peak':>10} "
        f"{'loop GF/s':>9} {'% peak':>7} {'cpu % peak':>10} {'speedup':>7} "
        f"{'batched s':>9} {'loop s':>7}"
    )
    for name in args.problems:
        r = run(PROBLEMS[name], args.models, args.samples, args.epochs)
        print(
            f"{name:<13} {r['peak']:9.1f} {r['batched']:12.1f} {r['batched'] / r['peak']:7.1%} "
            f"{r['batched_cpu'] / r['peak_cpu']:10.1%} {r['loop']:9.1f} "
            f"{r['loop'] / r['peak']:7.1%} "
            f"{r['loop_cpu'] / r['peak_cpu']:10.1%} {r['batched'] / r['loop']:6.1f}x "
            f"{r['batched_s']:9.2f} {r['loop_s']:7.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
