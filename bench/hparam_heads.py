"""Benchmark: the hyperparameter study's batched linear heads against one head at a time.

Side by side in one process, on random features shaped like the study-cpu setting (MiniLM's 384
dimensions, 4 classes, a universe of 256 samples, Bernoulli halves):

* one grid column: `--heads` heads sharing η, trained as one batch vs one `fit_heads` call each;
* the same column under DP-Adam (closed-form per-sample clipping) vs Opacus' DP-Adam
  (`PrivacyEngine.make_private`, Poisson sampling) on one head, per head;
* HPO: `--splits` Optuna studies of `--trials` trials with trials batched across splits
  (`miaflow.hparams.search.tune`) vs one split at a time.

    .venv/bin/python bench/hparam_heads.py            # --heads 65 --splits 16 --trials 20
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

from miaflow.hparams.search import tune
from miaflow.models.heads import HeadRecipe, batches_per_epoch, fit_heads


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def opacus_head(x: np.ndarray, y: np.ndarray, recipe: HeadRecipe, epochs: int, seed: int) -> None:
    """One zero-initialised head trained by Opacus' DP-Adam with the recipe's noise and clipping."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    head = torch.nn.Linear(x.shape[1], int(y.max()) + 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
        batch_size=recipe.batch_size,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module, optimizer, loader = PrivacyEngine().make_private(
            module=head,
            optimizer=torch.optim.Adam(head.parameters(), lr=recipe.lr),
            data_loader=loader,
            noise_multiplier=recipe.noise_multiplier,
            max_grad_norm=recipe.clip_norm,
            poisson_sampling=True,
        )
        for _ in range(epochs):
            for features, labels in loader:
                if len(labels) == 0:
                    continue
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(module(features), labels).backward()
                optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--heads", type=int, default=65)
    parser.add_argument("--splits", type=int, default=16)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    rng = np.random.default_rng(0)
    n, d, classes = 256, 384, 4
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ rng.normal(size=(d, classes))).argmax(1)
    sets = [np.flatnonzero(rng.random(n) < 0.5) for _ in range(args.heads)]
    seeds = list(range(args.heads))

    plain = HeadRecipe(batch_size=32, lr=1e-3)
    batched = timed(
        lambda: fit_heads(x, y, classes, sets, [plain] * args.heads, args.epochs, seeds)
    )
    alone = timed(
        lambda: [
            fit_heads(x, y, classes, [s], [plain], args.epochs, [k]) for k, s in enumerate(sets)
        ]
    )
    print(
        f"grid column, {args.heads} heads, {args.epochs} epochs: "
        f"batched {batched:.2f} s, one by one "
        f"{alone:.2f} s, speedup {alone / batched:.1f}x"
    )

    private = HeadRecipe(batch_size=32, lr=1e-3, clip_norm=1.0, noise_multiplier=1.5)
    dp_batched = timed(
        lambda: fit_heads(x, y, classes, sets, [private] * args.heads, args.epochs, seeds)
    )
    probes = min(4, args.heads)
    dp_opacus = (
        timed(
            lambda: [
                opacus_head(x[s], y[s], private, args.epochs, k)
                for k, s in enumerate(sets[:probes])
            ]
        )
        / probes
    )
    per_head = dp_batched / args.heads
    print(
        f"DP-Adam ({batches_per_epoch(len(sets[0]), 32)} batches per epoch): "
        f"batched {per_head:.3f} s per head (column {dp_batched:.2f} s), "
        f"Opacus {dp_opacus:.3f} s per head, speedup {dp_opacus / per_head:.1f}x"
    )

    space = {
        "trials": args.trials,
        "epochs": args.epochs,
        "sampler": "tpe",
        "val_ratio": 0.3,
        "batch_size": [10, 1000],
        "lr": [1e-7, 1e-2],
        "clip_norm": [0.2, 10.0],
    }
    splits = sets[: args.splits]
    together = timed(lambda: tune(x, y, classes, splits, space, list(range(len(splits)))))
    apart = timed(lambda: [tune(x, y, classes, [s], space, [k]) for k, s in enumerate(splits)])
    print(
        f"HPO, {len(splits)} splits x {args.trials} trials: "
        f"batched {together:.2f} s, one split at a time "
        f"{apart:.2f} s, speedup {apart / together:.1f}x"
    )


if __name__ == "__main__":
    main()
