"""CAMIA (Chang, Shamsabadi, Katevas, Haddadi and Shokri, EMNLP 2025, "Context-Aware Membership
Inference Attacks against Pre-trained Large Language Models"): membership signals from how the
per-token losses of a text evolve, each compared with a population of known non-members and
combined into one score.

A member's losses stay low from its first tokens, so its loss sequence is low, flat and
regular, and repeating it in the context (copies 2, 3, ...) changes little; a non-member's
losses are high and irregular until the model copies it from the context, which lowers them
sharply on the repeats. The signals follow the authors' code, changhongyan123/context_aware_mia
(util_features.py at c8f7f0c2: `collect_all_features`, `lempel_ziv_complexity`,
`approximate_entropy`; run_ours_train_lr.py at c8f7f0c2 for the repeat, slope, approximate
entropy and count-above-previous-mean signals; run_ours_different_agg.py at 3963cb25 for the
p-value aggregations); LeakPro's port (aidotse/LeakPro, branch camia_implementation at 168ab819,
leakpro/attacks/mia_attacks/camia.py) was read for its fixed per-signal directions. The authors'
code orients every signal by the true labels (it negates a signal when members' mean is higher);
here each signal has a direction fixed in advance from the paper's reasoning, in which a lower
value means a member (LeakPro's "lower" tail), so no label is read.

Differences from the code: the whole text where the code slices `[:-1]` (which drops the last
token); counts above the mean as a share of the tokens, not a number (which would mix in the
text's length); token diversity only as the calibration of the loss, not as a signal of its
own (it does not query the model); the text's copies repeated at the token level, so that
every copy scores the same tokens (`recent_inputs.repeated_logprobs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

CUTOFFS = {"all": None, "200": 200, "300": 300}  # the first T' scored tokens
LOSS_BELOW = (1.0, 2.0, 3.0)  # count-below thresholds on -l_t (the code: l_t >= -1, -2, -3)
SHORT = 200  # tokens of the count-below and Lempel-Ziv signals
LZ_BINS = (3, 4, 5)
REPEAT_CUTOFFS = (600, 800, 1000)  # tokens of the repeated text for the slope and ApEn
APEN_M, APEN_R = 8, 0.8  # approximate entropy: template length, tolerance in standard deviations
METHODS = ("edgington", "fisher", "pearson", "mudholkar_george")


def lempel_ziv_complexity(logprobs: np.ndarray, bins: int) -> float:
    """Distinct phrases of the Lempel-Ziv parse of the quantised sequence, per token.

    As the code: l_t is first digitised on 100 levels spanning [min l, 0], the levels then
    split into `bins` equal ranges; a sequence that keeps to few levels, as a memorised text's
    near-zero log-likelihoods do, parses into few phrases."""
    values = np.asarray(logprobs, dtype=np.float64)
    if not values.size:
        return np.nan
    levels = np.digitize(values, np.linspace(values.min(), 0.0, 100), right=True)
    symbols = np.searchsorted(np.linspace(levels.min(), levels.max(), bins + 1)[1:], levels)
    phrases: set[tuple[int, ...]] = set()
    start, width = 0, 1
    while start + width <= symbols.size:
        phrase = tuple(symbols[start : start + width])
        if phrase in phrases:
            width += 1
        else:
            phrases.add(phrase)
            start, width = start + width, 1
    return len(phrases) / symbols.size


def approximate_entropy(values: np.ndarray, m: int = APEN_M, r: float = APEN_R) -> float:
    """Approximate entropy (Pincus 1991) |phi_m - phi_(m+1)| with tolerance r * std(values), as
    the code; 0 when the sequence has at most m + 1 values. Low for a regular sequence."""
    values = np.asarray(values, dtype=np.float64)
    n = values.size
    if n <= m + 1:
        return 0.0
    tolerance = r * values.std()

    def phi(length: int) -> float:
        windows = n - length + 1
        distance = np.zeros((windows, windows))
        for k in range(length):  # Chebyshev distance between all pairs of templates
            column = values[k : k + windows]
            np.maximum(distance, np.abs(column[:, None] - column[None, :]), out=distance)
        share = (distance <= tolerance).sum(axis=0) / windows
        return float(np.log(share).sum() / windows)

    return abs(phi(m) - phi(m + 1))


def slope(values: np.ndarray) -> float:
    """Least-squares slope of the values against their positions, computed as
    scipy.stats.linregress does (biased covariance over the variance of the positions), without
    its per-call overhead; 0 for fewer than two values."""
    values = np.asarray(values, dtype=np.float64)
    if values.size < 2:
        return 0.0
    ssxm, ssxym, _, _ = np.cov(np.arange(values.size), values, bias=True).flat
    return float(ssxym / ssxm)


def share_above_previous_mean(logprobs: np.ndarray) -> float:
    """Share of the tokens t >= 2 (of the scored ones) whose l_t exceeds the mean l of the
    tokens before them; 0 with fewer than two tokens."""
    values = np.asarray(logprobs, dtype=np.float64)
    if values.size < 2:
        return 0.0
    previous = np.cumsum(values)[:-1] / np.arange(1, values.size)
    return float(np.mean(values[1:] > previous))


def _copy_signals(logprobs: np.ndarray, scored_ids: np.ndarray) -> dict[str, float]:
    """The signals computed on every copy of a text (lower = member): loss and perplexity over
    the first T' tokens, both also divided by the token diversity (distinct / all tokens, a
    repetitive text is easy), the share of losses above each threshold, the share of l_t
    below the text's mean l, and the Lempel-Ziv complexity of the first 200 l_t."""
    signals: dict[str, float] = {}
    for name, cut in CUTOFFS.items():
        part, ids = logprobs[:cut], scored_ids[:cut]
        loss = -part.mean()
        diversity = np.unique(ids).size / ids.size
        signals[f"loss_{name}"] = loss
        signals[f"ppl_{name}"] = np.exp(loss)
        signals[f"cal_loss_{name}"] = loss / diversity
        signals[f"cal_ppl_{name}"] = np.exp(loss) / diversity
        signals[f"above_mean_{name}"] = -np.mean(part > part.mean())
    for threshold in LOSS_BELOW:
        signals[f"below_{threshold:g}"] = -np.mean(logprobs[:SHORT] >= -threshold)
    for bins in LZ_BINS:
        signals[f"lz_{bins}"] = lempel_ziv_complexity(logprobs[:SHORT], bins)
    return signals


def _text_signals(
    logprobs: np.ndarray, scored_ids: np.ndarray, repeated: np.ndarray | None
) -> dict[str, float]:
    signals = _copy_signals(logprobs, scored_ids)
    for name, cut in CUTOFFS.items():
        signals[f"above_prev_{name}"] = -share_above_previous_mean(logprobs[:cut])
    if repeated is None:
        return signals
    repeated = np.asarray(repeated, dtype=np.float64)
    if repeated.ndim != 2 or repeated.shape[0] < 3 or not 0 < repeated.shape[1] <= logprobs.size:
        raise ValueError(
            f"repeated log-probabilities of shape {repeated.shape}; expected (copies >= 3, "
            f"at most {logprobs.size}), one row per copy"
        )
    copies = [_copy_signals(row, scored_ids[: row.size]) for row in repeated[:3]]
    for name in copies[0]:
        signals[f"repeat1_{name}"] = copies[0][name] - copies[1][name]
        signals[f"repeat2_{name}"] = copies[0][name] - copies[2][name]
    stream = repeated.ravel()
    for cut in REPEAT_CUTOFFS:
        signals[f"slope_{cut}"] = slope(stream[:cut])
        signals[f"apen_{cut}"] = -approximate_entropy(stream[:cut])
    return signals


def camia_signals(
    logprobs: Sequence[np.ndarray],
    token_ids: Sequence[Sequence[int]],
    repeated: Sequence[np.ndarray] | None = None,
) -> pd.DataFrame:
    """CAMIA's signals, one row per text and one column per signal, each oriented so that a
    lower value means a member.

    From the text's own l_t (the `tokens` cache): `loss_*`, `ppl_*`, `cal_loss_*`, `cal_ppl_*`
    (T' = all, 200, 300 tokens), `below_<tau>` (share of the first 200 losses at most 1, 2, 3,
    negated), `above_mean_*` and `above_prev_*` (share of l_t above the text's mean and above
    the mean of the tokens before, negated), `lz_<bins>` (3, 4, 5 bins).

    With `repeated` (per text an array (copies >= 3, n): the l_t of each copy of its first n
    scored tokens when the text is repeated, `recent_inputs.repeated_logprobs`), also
    `repeat1_*` and `repeat2_*` (a copy signal of the first copy minus that of the second or
    third: a non-member, copied from the context, gains most), `slope_<T'>` (slope of l over
    the repeated text's first 600, 800, 1000 tokens, which rises as a non-member is copied) and
    `apen_<T'>` (its approximate entropy, negated: a member's near-constant losses are
    irregular at their own small scale, a non-member's high first copy and copied repeats are
    two regular regimes). NaN for a text with no token.
    """
    repeats = [None] * len(logprobs) if repeated is None else repeated
    rows = []
    for lp, ids, copies in zip(logprobs, token_ids, repeats, strict=True):
        lp = np.asarray(lp, dtype=np.float64)
        scored = np.asarray(ids, dtype=np.int64)[1:]
        if scored.size != lp.size:
            raise ValueError(f"{lp.size} log-probabilities for {scored.size} scored tokens")
        rows.append(_text_signals(lp, scored, copies) if lp.size else {})
    return pd.DataFrame(rows)


def camia(signals: pd.DataFrame, population: pd.DataFrame, method: str = "edgington") -> np.ndarray:
    """CAMIA's score of each text from its signals (`camia_signals`) and those of a population
    of known non-members (texts never scored, e.g. ReCaLL's shots; the code holds out 30 % of
    the non-members).

    Per signal, the empirical p-value of the text under the population, P(population <= value)
    (scipy.stats.percentileofscore, kind "rank", as the code); members, low on every signal,
    get small p-values. "edgington" (default, the code's label-free "Average"): minus the mean
    p-value. "fisher", "pearson", "mudholkar_george": the statistic of
    scipy.stats.combine_pvalues over the p-values clipped to [1e-10, 1 - 1e-10], as the code
    (higher statistic = smaller combined p-value); the statistic, not the combined p-value,
    so that strong members do not tie at p = 0. Higher = member.
    """
    from scipy.stats import combine_pvalues, percentileofscore

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    missing = set(signals.columns) - set(population.columns)
    if missing:
        raise ValueError(f"the population lacks signals {sorted(missing)}")
    p = np.column_stack(
        [
            percentileofscore(population[name].dropna(), signals[name], kind="rank") / 100
            for name in signals.columns
        ]
    )
    if method == "edgington":
        return -p.mean(axis=1)
    return np.asarray(
        combine_pvalues(np.clip(p, 1e-10, 1 - 1e-10), method=method, axis=1).statistic
    )
