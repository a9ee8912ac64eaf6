"""Benchmark: the hyperparameter study's CNNs trained from scratch, batched against one at a time.

Side by side in one process, on random 28x28 single-channel images of 10 classes (MNIST's
shape), the paper's CNN (`miaflow.hparams.cnn.cnn_module`): for n_train 100 and 320, batch
sizes 10 and 64, without and with DP-Adam (clipping norm 1, noise multiplier 1), seconds per
model of

* `fit_cnns` training `--members` members at once (each its own training set and seed);
* `fit_cnns` training one member alone (the same kernels, no batching over members);
* a plain torch loop on one model: the module, torch.optim.Adam and cross-entropy on the same
  batches; under DP, Opacus' GradSampleModule + DPOptimizer (its per-sample clipping and noise).

One-at-a-time columns are averaged over `--probes` members. `--profile` prints where the time
of the batched n_train 320, batch 10, non-private run goes (torch.profiler, one epoch).
`--forms` times one gradient step of all members (batch 10 and 64) in three vectorised forms:
`torch.func` (functional_call + vmap of grad; per-sample grad under a second vmap with DP), a
grouped `conv2d` with autograd (mean only), and fit_cnns' batched products (`clipped_gradients`).

    .venv/bin/python bench/study_cnn.py            # --members 65 --epochs 40 --probes 3
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
import torch

from miaflow.hparams.cnn import clipped_gradients, cnn_module, fit_cnns, inner_layout
from miaflow.models.heads import HeadRecipe, batch_schedules, batches_per_epoch

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


def forms(members: int, repeats: int = 5) -> None:
    """Milliseconds per gradient step of `members` CNNs in each vectorised form."""
    from torch.func import functional_call, grad, vmap

    module = cnn_module(SHAPE, CLASSES)
    names = [name for name, _ in module.named_parameters()]
    stacked = [
        torch.stack(p)
        for p in zip(*(cnn_module(SHAPE, CLASSES).parameters() for _ in range(members)))
    ]
    stacked = [p.detach() for p in stacked]
    inner = inner_layout(stacked, SHAPE)
    clip = torch.ones(members)

    def mean_loss(params, x, y):
        return torch.nn.functional.cross_entropy(functional_call(module, params, (x,)), y)

    def sample_loss(params, x, y):
        return mean_loss(params, x[None], y[None])

    def func_clipped(params, x, y):
        grads = vmap(vmap(grad(sample_loss), in_dims=(None, 0, 0)))(params, x, y)
        norms = torch.sqrt(sum(g.flatten(2).square().sum(2) for g in grads.values()))
        scale = (1.0 / (norms + 1e-6)).clamp(max=1.0)
        return {n: torch.einsum("kb,kb...->k...", scale, g) for n, g in grads.items()}

    def grouped(x, y):
        leaves = [p.clone().requires_grad_() for p in stacked]
        conv_w, conv_b, dense_w, dense_b = leaves
        batch = x.shape[1]
        images = x.transpose(0, 1).reshape(batch, members * SHAPE[0], *SHAPE[1:])
        weight = conv_w.reshape(-1, *conv_w.shape[2:])
        h = torch.nn.functional.conv2d(images, weight, conv_b.reshape(-1), groups=members)
        h = torch.nn.functional.max_pool2d(torch.relu(h), 2).reshape(batch, members, -1)
        logits = torch.baddbmm(dense_b[:, None], h.transpose(0, 1), dense_w.transpose(1, 2))
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none")
        return torch.autograd.grad(loss.mean(1).sum(), leaves)

    for batch in (10, 64):
        x = torch.rand(members, batch, *SHAPE) * 2 - 1
        y = torch.randint(0, CLASSES, (members, batch))
        valid = torch.ones(members, batch, dtype=torch.bool)
        params = dict(zip(names, stacked))
        cases = {
            "torch.func mean": lambda: vmap(grad(mean_loss))(params, x, y),
            "grouped conv2d mean": lambda: grouped(x, y),
            "batched products mean": lambda: clipped_gradients(
                inner, x, y, valid, torch.full((members,), math.nan)
            ),
            "torch.func per-sample clipped": lambda: func_clipped(params, x, y),
            "batched products per-sample clipped": lambda: clipped_gradients(
                inner, x, y, valid, clip
            ),
        }
        for name, case in cases.items():
            case()
            seconds = min(timed(case) for _ in range(repeats))
            print(f"{members} members, batch {batch:>2}, {name}: {seconds * 1e3:.1f} ms per step")


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
    parser.add_argument("--forms", action="store_true", help="only the vectorised forms")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.forms:
        forms(args.members)
        return
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
