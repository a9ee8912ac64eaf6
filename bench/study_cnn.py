"""Benchmark: the hyperparameter study's CNNs trained from scratch, batched against one at a time.

Side by side in one process, on random 28x28 single-channel images of 10 classes (MNIST's
shape), the paper's CNN (`miaflow.models.study_cnn.cnn_module`): for n_train 100 and 320, batch
sizes 10 and 64, without and with DP-Adam (clipping norm 1, noise multiplier 1), seconds per
model of

* `fit_cnns` training `--members` members at once (each its own training set and seed);
* `fit_cnns` training one member alone (the same kernels, no batching over members);
* a plain torch loop on one model: the module, torch.optim.Adam and cross-entropy on the same
  batches; under DP, Opacus' GradSampleModule + DPOptimizer (its per-sample clipping and noise).

One-at-a-time columns are averaged over `--probes` members. `--profile` prints where the time
of the batched n_train 320, batch 10, non-private run goes (torch.profiler, one epoch).

    .venv/bin/python bench/study_cnn.py            # --members 65 --epochs 40 --probes 3
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

from miaflow.models.heads import HeadRecipe, batch_schedules, batches_per_epoch
from miaflow.models.study_cnn import cnn_module, fit_cnns

SHAPE, CLASSES = (1, 28, 28), 10


def plain_loop(
    x: np.ndarray, y: np.ndarray, train: np.ndarray, recipe: HeadRecipe, epochs: int, seed: int
) -> None:
    """One model trained by a plain torch loop (Opacus' DP-Adam under DP) on fit_cnns' batches."""
    torch.manual_seed(seed)
    model = cnn_module(SHAPE, CLASSES)
    optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    if recipe.private:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        model = GradSampleModule(model)
        expected = len(train) / batches_per_epoch(len(train), recipe.batch_size)
        optimizer = DPOptimizer(
            optimizer,
            noise_multiplier=recipe.noise_multiplier,
            max_grad_norm=recipe.clip_norm,
            expected_batch_size=round(expected),
        )
    images, labels = torch.from_numpy(x), torch.from_numpy(y)
    for batch in batch_schedules([train], [recipe], epochs, [seed])[0]:
        if len(batch) == 0:
            continue
        rows = torch.from_numpy(batch)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images[rows]), labels[rows])
        loss.backward()
        optimizer.step()


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=65)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--probes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # Opacus' notes on secure RNG and hooks
    rng = np.random.default_rng(0)

    def problem(n_train: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        x = rng.uniform(-1, 1, size=(2 * n_train, *SHAPE)).astype(np.float32)
        y = rng.integers(0, CLASSES, 2 * n_train)
        pool = 2 * n_train
        sets = [np.sort(rng.choice(pool, n_train, replace=False)) for _ in range(args.members)]
        return x, y, sets

    # Warm-ups outside the timings: torch.optim's first optimizer imports torch._dynamo.
    x, y, sets = problem(20)
    for recipe in (HeadRecipe(10, 1e-3), HeadRecipe(10, 1e-3, 1.0, 1.0)):
        plain_loop(x, y, sets[0], recipe, 1, 0)
        fit_cnns(x, y, CLASSES, sets[:2], [recipe] * 2, 1, [0, 1])

    print(
        f"{args.members} members, {args.epochs} epochs, {args.threads} thread(s); seconds per model"
    )
    header = ("n_train", "batch", "DP", "batched", "alone", "plain loop", "plain/batched")
    print(" | ".join(f"{h:>13}" for h in header))
    seeds = list(range(args.members))
    for n_train in (100, 320):
        x, y, sets = problem(n_train)
        for batch in (10, 64):
            for private in (False, True):
                recipe = HeadRecipe(batch, 1e-3, 1.0 if private else None, 1.0 if private else 0)
                batched = timed(
                    lambda: fit_cnns(
                        x, y, CLASSES, sets, [recipe] * args.members, args.epochs, seeds
                    )
                )
                batched /= args.members
                probes = range(args.probes)
                alone = sum(
                    timed(lambda: fit_cnns(x, y, CLASSES, [sets[k]], [recipe], args.epochs, [k]))
                    for k in probes
                ) / len(probes)
                plain = sum(
                    timed(lambda: plain_loop(x, y, sets[k], recipe, args.epochs, k)) for k in probes
                ) / len(probes)
                row = (n_train, batch, "yes" if private else "no")
                numbers = (batched, alone, plain)
                print(
                    " | ".join(f"{v:>13}" for v in row),
                    "|",
                    " | ".join(f"{v:>13.3f}" for v in numbers),
                    "|",
                    f"{plain / batched:>12.1f}x",
                    flush=True,
                )
    if args.profile:
        from torch.profiler import profile

        x, y, sets = problem(320)
        with profile() as trace:
            fit_cnns(x, y, CLASSES, sets, [HeadRecipe(10, 1e-3)] * args.members, 1, seeds)
        print(trace.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
