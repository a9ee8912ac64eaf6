"""Query-qrm's quantile regressors (docs/algorithms.md#query-qrm): per target model, a Gaussian
regressor of the target's score fitted on known non-members (the auxiliary pool A).

The attack fits these models itself, so they are trained by a job of the queries stage (rule
`query_regressors`), which writes their (mu, log sigma) on T (docs/algorithms.md#who-reads-what);
the score in `miaflow.attacks.query` only reads that table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from miaflow.compute import torch_device
from miaflow.models.architectures import trainable_batches
from miaflow.models.kinds import KINDS
from miaflow.models.optimizers import AdamW
from miaflow.models.training import predict
from miaflow.progress import tracked

log = logging.getLogger(__name__)

QRM_LR, QRM_WEIGHT_DECAY, QRM_GRAD_CLIP, QRM_VAL_RATIO = 1e-3, 1e-4, 1.0, 0.1


def quantile_regression(
    arch: Mapping[str, Any],
    x_train: np.ndarray,
    score: np.ndarray,
    x_eval: np.ndarray,
    epochs: int,
    catboost_iterations: int,
    seed: int,
    threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(mu, log sigma) on `x_eval` of a Gaussian regressor of `score` fitted on `x_train`.

    The regressor follows the reference architecture's kind: a 2-output network for torch kinds
    (`epochs`), the pretrained checkpoint with a 2-output head for transformers (`epochs`),
    CatBoost with RMSEWithUncertainty (`catboost_iterations`), or linear regression with one
    global variance (Query-qrm's options, `miaflow.attacks.options.QueryQrmOptions`).
    """
    regressor = KINDS[arch["kind"]].qrm
    if regressor == "network":
        return _regress_torch(arch, x_train, score, x_eval, epochs, seed, threads)
    if regressor == "transformer":
        return regress_text(arch, x_train, score, x_eval, epochs, seed)
    # GBDT/LR path: TDDBench regresses -phi; the predicted mean of phi is minus its prediction.
    if regressor == "catboost":
        mu, log_sigma = _regress_catboost(
            x_train, -score, x_eval, catboost_iterations, seed, threads
        )
        return -mu, log_sigma
    if regressor == "linear":
        from sklearn.linear_model import LinearRegression

        flat_train, flat_eval = x_train.reshape(len(x_train), -1), x_eval.reshape(len(x_eval), -1)
        model = LinearRegression().fit(flat_train, -score)
        # One variance over all of A, as docs/algorithms.md#query-qrm describes the linear path.
        log_sigma = 0.5 * np.log(np.var(-score))
        return -model.predict(flat_eval), np.full(len(x_eval), log_sigma)
    raise ValueError(f"no quantile regressor for architecture kind {arch['kind']!r}")


def gaussian_nll(output: Any, target: Any) -> Any:
    """Per-sample Gaussian NLL of `target` under (mu, log sigma) = output[:, 0], output[:, 1]."""
    mu, log_sigma = output[:, 0], output[:, 1]
    return log_sigma + 0.5 * (target - mu) ** 2 * (-2 * log_sigma).exp()


def _regress_torch(
    arch: Mapping[str, Any],
    x_train: np.ndarray,
    score: np.ndarray,
    x_eval: np.ndarray,
    epochs: int,
    seed: int,
    threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Network of the reference architecture with outputs (mu, log sigma): AdamW, clipped
    gradients, 90/10 split, weights of the epoch with the lowest validation loss."""
    import torch

    from miaflow.models.recipe import build_module
    from miaflow.seeding import rng

    device = torch_device()
    torch.manual_seed(seed)
    model = build_module(arch, x_train.shape[1:], 2).to(device)
    optimizer = AdamW(model.parameters(), lr=QRM_LR, weight_decay=QRM_WEIGHT_DECAY)
    order = rng(seed, "validation").permutation(len(x_train))
    n_val = max(1, round(QRM_VAL_RATIO * len(x_train)))
    x = torch.from_numpy(x_train).to(device)
    s = torch.from_numpy(score.astype(np.float32)).to(device)
    val, train = (
        torch.from_numpy(order[:n_val]).to(device),
        torch.from_numpy(order[n_val:]).to(device),
    )
    shuffle = torch.Generator().manual_seed(seed)
    best_loss, best_state = float("inf"), None
    for epoch in tracked(range(1, epochs + 1), "quantile regressor training", "epochs"):
        model.train()
        for batch in trainable_batches(
            train[torch.randperm(len(train), generator=shuffle).to(device)],
            arch["batch_size"],
            model,
        ):
            loss = gaussian_nll(model(x[batch]), s[batch]).mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), QRM_GRAD_CLIP)
            optimizer.step()
        model.eval()
        with torch.no_grad():
            val_loss = gaussian_nll(model(x[val]), s[val]).mean().item()
        if val_loss < best_loss:
            best_loss = val_loss
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if epoch % max(1, epochs // 5) == 0 or epoch == epochs:
            log.info(
                "qrm epoch %d/%d validation NLL %.4f (best %.4f)",
                epoch,
                epochs,
                val_loss,
                best_loss,
            )
    if best_state is not None:  # None only if every validation loss was NaN
        model.load_state_dict(best_state)
    output = predict(model, x_eval).astype(np.float64)
    return output[:, 0], output[:, 1]


def regress_text(
    arch: Mapping[str, Any],
    texts: np.ndarray,
    score: np.ndarray,
    texts_eval: np.ndarray,
    epochs: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(mu, log sigma) of a sequence regressor: the recipe's checkpoint with outputs
    (mu, log sigma), fine-tuned with the Gaussian NLL on standardised scores (the new head starts
    near 0, whatever the scale of the score), mapped back to the score's scale."""
    from miaflow.models.transformers import fit_regressor

    centre, scale = float(np.mean(score)), float(np.std(score)) or 1.0
    output = fit_regressor(
        arch, texts, (score - centre) / scale, texts_eval, gaussian_nll, epochs, QRM_VAL_RATIO, seed
    ).astype(np.float64)
    return centre + scale * output[:, 0], output[:, 1] + np.log(scale)


def _regress_catboost(
    x_train: np.ndarray,
    target: np.ndarray,
    x_eval: np.ndarray,
    iterations: int,
    seed: int,
    threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    from catboost import CatBoostRegressor

    model = CatBoostRegressor(
        iterations=iterations,
        learning_rate=0.05,
        loss_function="RMSEWithUncertainty",
        posterior_sampling=True,
        random_seed=seed % 2**31,
        thread_count=threads,
        verbose=False,
        allow_writing_files=False,
    )
    model.fit(x_train.reshape(len(x_train), -1), target)
    mean, variance = model.predict(x_eval.reshape(len(x_eval), -1)).T  # columns: mean, variance
    return mean, 0.5 * np.log(variance)


def regressor_table(
    arch: Mapping[str, Any],
    features: np.ndarray,
    scores: Mapping[str, np.ndarray],
    evaluated: np.ndarray,
    sample_ids: np.ndarray,
    epochs: int,
    catboost_iterations: int,
    seed_of: Callable[[str], int],
    threads: int,
) -> pd.DataFrame:
    """Query-qrm's table: for each target (`scores`: its score on the known non-members whose
    `features` are given), the Gaussian regressor's (mu, log sigma) on the `evaluated` samples
    (`sample_ids`), seeded by `seed_of(target)`."""
    frames = []
    for target, score in tracked(scores.items(), "quantile regressors", "targets", len(scores)):
        mu, log_sigma = quantile_regression(
            arch,
            features,
            score,
            evaluated,
            epochs,
            catboost_iterations,
            seed_of(target),
            threads,
        )
        frames.append(
            pd.DataFrame(
                {
                    "model_id": target,
                    "sample_id": sample_ids,
                    "mu": mu.astype(np.float64),
                    "log_sigma": log_sigma.astype(np.float64),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)
