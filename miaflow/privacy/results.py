"""The privacy audit's results: ε lower bounds from the audit experiments' trials
(`miaflow.privacy.experiments`), one row per target, attack, canary kind and estimator; the
table of the issue's contract; and the figure of ε̂ against the accountant's ε.

Which estimators read which trials: one canary per independent run ("runs") gives
`clopper-pearson` and `gdp`, one run's canaries ("one-run") give `one-run` and `one-run-fdp`
(`miaflow.privacy.estimators`). `falsified` is decided per row from the first of each pair only,
Bonferroni-corrected over the target's deciding rows (`estimators.refuting`): a target is refuted
when any of its rows is, and an honest one is, at most with probability 1 − confidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from miaflow.privacy.estimators import (
    CLOPPER_PEARSON,
    GDP,
    ONE_RUN,
    ONE_RUN_FDP,
    RUNS,
    clopper_pearson,
    gdp,
    one_run,
    one_run_fdp,
    refuting,
)
from miaflow.seeding import derive_seed

# The table of results/tables/privacy_audit.* (the contract), in this order.
TABLE_COLUMNS = [
    "dataset",
    "target_model",
    "attack",
    "estimator",
    "canary_kind",
    "epsilon",
    "delta",
    "confidence",
    "canaries",
    "epsilon_lower",
    "epsilon_max",
    "epsilon_point",
    "falsified",
]
KEYS = ["dataset", "target_model", "attack", "setting", "canary_kind"]
ESTIMATORS = (CLOPPER_PEARSON, ONE_RUN, ONE_RUN_FDP, GDP)  # the figure's order
MARKERS = {CLOPPER_PEARSON: "o", ONE_RUN: "s", ONE_RUN_FDP: "^", GDP: "v"}
DIGITS = 4  # decimals of the table's numbers


def bounds(trials: pd.DataFrame, confidence: float, seed: int) -> pd.DataFrame:
    """Every estimator's record (`EpsilonBound`'s fields, `method` as `estimator`) per target,
    attack, setting and canary kind of `trials`, with the target's claim (epsilon, delta) and
    `falsified`. A threshold estimator's split is seeded by `seed` and the row's names."""
    rows, records = [], []
    for key, group in trials.groupby(KEYS, sort=False):
        identity = dict(zip(KEYS, key))
        epsilon, delta = float(group["epsilon"].iloc[0]), float(group["delta"].iloc[0])
        scores, included = group["score"].to_numpy(), group["included"].to_numpy(bool)
        if identity["setting"] == RUNS:
            split = derive_seed(seed, *key)
            runs = group["run"].to_numpy()
            found = [
                clopper_pearson(scores, included, delta, confidence, seed=split, runs=runs),
                gdp(scores, included, delta, confidence, seed=split, runs=runs),
            ]
        else:
            found = [
                one_run(scores, included, delta, confidence),
                one_run_fdp(scores, included, delta, confidence),
            ]
        for bound in found:
            records.append(bound)
            record = asdict(bound)
            rows.append(
                {
                    **identity,
                    "estimator": record.pop("method"),
                    "epsilon": epsilon,
                    "noise_multiplier": float(group["noise_multiplier"].iloc[0]),
                    **record,
                }
            )
    table = pd.DataFrame(rows)
    if table.empty:
        return pd.DataFrame(columns=[*KEYS, "estimator", "epsilon", "falsified"])
    verdicts = np.zeros(len(table), dtype=bool)
    for _, target in table.groupby(["dataset", "target_model"], sort=False):
        chosen = target.index.to_numpy()
        epsilon = float(target["epsilon"].iloc[0])
        verdicts[chosen] = refuting([records[i] for i in chosen], epsilon, confidence)
    return table.assign(falsified=verdicts)


def audit_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The contract's table of the audit's rows: TABLE_COLUMNS, the ε columns rounded to DIGITS
    (`inf` stays: a non-private target's ε, an error-free point estimate), its caption in
    `attrs`."""
    table = rows.reindex(columns=TABLE_COLUMNS).copy()
    numbers = ["epsilon", "epsilon_lower", "epsilon_max", "epsilon_point"]
    table[numbers] = table[numbers].astype(float).round(DIGITS)
    table["canaries"] = table["canaries"].astype("Int64")
    table["falsified"] = table["falsified"].astype(bool)
    refuted = sorted(set(rows.loc[rows["falsified"].astype(bool), "target_model"]))
    table.attrs["caption"] = (
        "Privacy audit: lower bounds on ε (epsilon_lower, at the stated confidence) from attack "
        "scores on canaries, against each target's claimed (accountant's) ε at δ; epsilon_max is "
        "the most the estimator can give with these canaries, epsilon_point the raw estimate. "
        "falsified: the claim is refuted (clopper-pearson and one-run rows only, "
        "Bonferroni-corrected over the target's rows); "
        + (f"refuted: {', '.join(refuted)}." if refuted else "no claim is refuted.")
    )
    return table.reset_index(drop=True)


def _positions(epsilons: Sequence[float]) -> tuple[dict[float, float], float]:
    """x position of each claimed ε (its value; ∞ one step beyond the largest finite ε), and
    the end of the finite range the line ε̂ = ε is drawn over."""
    finite = sorted({e for e in epsilons if not math.isinf(e)})
    top = max(finite, default=1.0)
    where = {e: e for e in finite}
    if any(math.isinf(e) for e in epsilons):
        where[math.inf] = top * 1.5 + 0.5
    return where, top * 1.15 + 0.1


# The figure's panels: the estimators that refute (ε, δ)-DP, and those that assume a Gaussian
# trade-off curve (their ε̂ run much higher; one axis would flatten the others).
PANELS = (
    ((CLOPPER_PEARSON, ONE_RUN), "refute (ε, δ)-DP"),
    ((ONE_RUN_FDP, GDP), "assume a Gaussian trade-off curve"),
)


def plot_audit(rows: pd.DataFrame, path: str | Path) -> None:
    """ε̂ (the largest epsilon_lower over a target's attacks and canary kinds) against the
    claimed ε, per target (colour) and estimator (marker), in two panels (PANELS), each with the
    line ε̂ = ε; non-private targets at "∞"; a point ringed in red where a row of it refutes the
    claim. An audit without rows draws a note."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from miaflow.evaluation.plots import save_png

    figure = Figure(figsize=(9.5, 4.2))
    grid = figure.add_gridspec(1, 3, width_ratios=[3, 3, 1.7])
    key = figure.add_subplot(grid[0, 2])
    key.set_axis_off()
    if rows.empty:
        key.text(0.0, 0.5, "no privacy audit configured", va="center")
        save_png(figure, path)
        return
    best = (
        rows.assign(refuted=rows["falsified"].astype(bool))
        .groupby(["dataset", "target_model", "estimator"], sort=False)
        .agg(
            epsilon=("epsilon", "first"), lower=("epsilon_lower", "max"), refuted=("refuted", "any")
        )
        .reset_index()
    )
    where, top = _positions(best["epsilon"].tolist())
    targets = list(dict.fromkeys(zip(best["dataset"], best["target_model"])))
    colours = {t: f"C{k % 10}" for k, t in enumerate(targets)}
    claimed = dict(zip(zip(best["dataset"], best["target_model"]), best["epsilon"]))
    width = 0.08 * max(where.values())  # the targets of one ε side by side, 2 estimators each
    group = {t: [u for u in targets if claimed[u] == claimed[t]] for t in targets}
    for column, (estimators, title) in enumerate(PANELS):
        axes = figure.add_subplot(grid[0, column])
        for row in best[best["estimator"].isin(estimators)].itertuples(index=False):
            target = (row.dataset, row.target_model)
            peers = group[target]
            slot = 2 * peers.index(target) + estimators.index(row.estimator)
            axes.scatter(
                where[row.epsilon] + ((slot + 0.5) / (2 * len(peers)) - 0.5) * width,
                row.lower,
                marker=MARKERS[row.estimator],
                s=30,
                color=colours[target],
                edgecolors="red" if row.refuted else colours[target],
                linewidths=1.5 if row.refuted else 0.5,
                zorder=3,
            )
        axes.plot([0, top], [0, top], color="0.5", linestyle="--", linewidth=1, zorder=1)
        ticks = sorted(where)
        axes.set_xticks(
            [where[e] for e in ticks], labels=["∞" if math.isinf(e) else f"{e:g}" for e in ticks]
        )
        axes.set_xlim(0, max(where.values()) + width)
        high = max(axes.get_ylim()[1], top)
        axes.set_ylim(-0.04 * high, high)  # a point at 0 whole, above the axis
        axes.set_xlabel("claimed ε (∞: non-private)")
        axes.set_title(f"{' and '.join(estimators)}:\n{title}", fontsize="small")
        if column == 0:
            axes.set_ylabel("ε̂, the lower bound on ε")
    handles = [
        Line2D([], [], marker="o", linestyle="", color=colours[t], label="/".join(t))
        for t in targets
    ]
    handles += [
        Line2D([], [], marker=MARKERS[e], linestyle="", color="0.3", label=e) for e in ESTIMATORS
    ]
    handles += [
        Line2D(
            [], [], marker="o", linestyle="", color="0.8", markeredgecolor="red", label="refuted"
        ),
        Line2D([], [], linestyle="--", color="0.5", label="ε̂ = ε"),
    ]
    key.legend(handles=handles, fontsize="x-small", loc="upper left", frameon=False)
    save_png(figure, path)


def empty_rows() -> pd.DataFrame:
    """The rows of an audit with nothing to audit."""
    return pd.DataFrame(columns=[*KEYS, "estimator", *TABLE_COLUMNS[5:]]).astype(
        {"falsified": bool}
    )


def concat_rows(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The rows of every audit experiment, in the given order (empty without any)."""
    frames = [frame for frame in frames if len(frame)]
    return pd.concat(frames, ignore_index=True) if frames else empty_rows()
