"""KL-LiRA's hyperparameter selection, Algorithm 2 (docs/algorithms.md#kl-lira-selection).

For each candidate η_j the attacker compares the target's statistic on the members of each shadow
set D_k with that of the shadow model G_{k,j} = train(D_k, η_j) on the same samples, both fitted
by a normal (mean, ddof-0 variance), and picks j* = argmin_j mean_k divergence(N_T ‖ N_G).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

VAR_EPS = 1e-30  # keeps a degenerate (constant) statistic from dividing by zero


def _kl(mu_p: np.ndarray, var_p: np.ndarray, mu_q: np.ndarray, var_q: np.ndarray) -> np.ndarray:
    """KL(N_p ‖ N_q) = ½[(μ_q − μ_p)²/σ_q² + σ_p²/σ_q² − ln(σ_p²/σ_q²) − 1]."""
    ratio = var_p / var_q
    return 0.5 * ((mu_q - mu_p) ** 2 / var_q + ratio - np.log(ratio) - 1.0)


def _hellinger(
    mu_p: np.ndarray, var_p: np.ndarray, mu_q: np.ndarray, var_q: np.ndarray
) -> np.ndarray:
    """Squared Hellinger distance between two normals."""
    total = var_p + var_q
    return 1.0 - np.sqrt(2.0 * np.sqrt(var_p * var_q) / total) * np.exp(
        -((mu_p - mu_q) ** 2) / (4.0 * total)
    )


# target (p) against shadow (q); the KL-LiRA code's alternatives besides the default forward KL,
# except that its Hellinger divergence, `sqrt(1 - base**exp)`, is a bug that is not copied:
# `_hellinger` is the squared Hellinger distance of the two normals.
DIVERGENCES: dict[str, Callable[..., np.ndarray]] = {
    "kl": _kl,
    "reverse-kl": lambda mp, vp, mq, vq: _kl(mq, vq, mp, vp),
    "jeffreys": lambda mp, vp, mq, vq: _kl(mp, vp, mq, vq) + _kl(mq, vq, mp, vp),
    "hellinger": _hellinger,
    "mean-std": lambda mp, vp, mq, vq: np.abs(mp - mq) / (np.sqrt(vp) + np.sqrt(vq)),
    "mean-abs": lambda mp, vp, mq, vq: np.abs(mp - mq),
}


def member_moments(values: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and ddof-0 variance of `values` (..., n) over each row of `members` (K, n): the
    shapes broadcast to (..., K)."""
    weights = members.astype(np.float64)
    counts = np.maximum(weights.sum(-1), 1.0)
    mean = values @ weights.T / counts
    second = (values**2) @ weights.T / counts
    return mean, np.maximum(second - mean**2, 0.0) + VAR_EPS


def grid_moments(stats: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and ddof-0 variance of every grid model (k, j) on the members of its own D_k:
    (rows, columns) each, from `stats` (rows, columns, n) and `members` (rows, n)."""
    weights = members.astype(np.float64)
    counts = np.maximum(weights.sum(-1), 1.0)[:, None]
    mean = np.einsum("kjn,kn->kj", stats, weights) / counts
    second = np.einsum("kjn,kn->kj", stats**2, weights) / counts
    return mean, np.maximum(second - mean**2, 0.0) + VAR_EPS


def select(
    target: np.ndarray,
    shadow_moments: tuple[np.ndarray, np.ndarray],
    members: np.ndarray,
    candidates: np.ndarray,
    rows: np.ndarray,
    divergence: str = "kl",
) -> tuple[int, np.ndarray]:
    """Algorithm 2 for one target: (j*, mean divergence of every grid column).

    `target` (n,) is the target's statistic on the universe; `shadow_moments` the (rows, columns)
    mean and variance of every grid model (k, j) on the members of D_k; `candidates` the columns
    allowed (others get +∞, the target's own among them); `rows[c]` the shadow rows k whose models
    judge candidate `candidates[c]`.
    """
    mu_t, var_t = member_moments(target, members)  # (rows,)
    mu_g, var_g = shadow_moments
    scores = np.full(mu_g.shape[1], np.inf)
    measure = DIVERGENCES[divergence]
    for column, judged_by in zip(candidates, rows):
        scores[column] = float(
            np.mean(
                measure(
                    mu_t[judged_by],
                    var_t[judged_by],
                    mu_g[judged_by, column],
                    var_g[judged_by, column],
                )
            )
        )
    return int(np.argmin(scores)), scores
