"""Attack registry and the score-based attacks (ALGORITHMS.md 3.1, 3.3, 4.1).

An attack is a function from `AttackInputs` (signals of the target and of reference/population
models, never the models themselves) to one score per evaluated sample, **higher = more likely a
member** (ALGORITHMS.md 1.2). Attacks register themselves with `register`; the workflow runs them
by name through `run_attack`, which checks their needs and sanitises their scores.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from miaflow.signals import SignalStore
from miaflow.splits import Splits

log = logging.getLogger(__name__)

NEEDS = frozenset({"reference", "population"})
LOADED_SIGNALS = ("loss", "confidence", "phi", "correct", "entropy", "mentr")
STD_EPS = 1e-30  # added to every Gaussian standard deviation, as the reference code does


@dataclass(frozen=True)
class AttackInputs:
    """Everything an attack may read for one target model: signals, never models."""

    target: Mapping[str, np.ndarray]  # signal -> (n,) target model on evaluated samples (pool T)
    reference: Mapping[str, np.ndarray]  # signal -> (M, n) reference models on the same samples
    reference_keep: np.ndarray  # bool (M, n): reference m trained on sample i
    target_on_population: Mapping[str, np.ndarray]  # signal -> (n_aux,) target on auxiliary pool A
    population: Mapping[str, np.ndarray]  # signal -> (Mp, n_aux) population models on A
    population_keep: np.ndarray  # bool (Mp, n_aux)
    options: Mapping[str, Any]  # this attack's options from params.yaml (may be empty)


ScoreFn = Callable[[AttackInputs], np.ndarray]


@dataclass(frozen=True)
class Attack:
    name: str
    family: str
    needs: frozenset[str]  # subset of NEEDS: model sets that must be non-empty
    score: ScoreFn

    @property
    def doc(self) -> str:
        """First line of the score function's docstring: the one-line description in reports."""
        lines = (self.score.__doc__ or "").strip().splitlines()
        return lines[0] if lines else ""


ATTACKS: dict[str, Attack] = {}


def register(name: str, family: str, needs: tuple[str, ...] = ()) -> Callable[[ScoreFn], ScoreFn]:
    """Decorator adding a score function to ATTACKS under `name`."""
    if not NEEDS.issuperset(needs):
        raise ValueError(f"attack {name!r}: unknown needs {set(needs) - NEEDS}")

    def decorate(score: ScoreFn) -> ScoreFn:
        if name in ATTACKS:
            raise ValueError(f"attack {name!r} is registered twice")
        ATTACKS[name] = Attack(name, family, frozenset(needs), score)
        return score

    return decorate


def run_attack(name: str, inputs: AttackInputs) -> np.ndarray:
    """Scores of attack `name` as float64, with ±inf and NaN replaced (ALGORITHMS.md 1.4)."""
    attack = ATTACKS[name]
    n_models = {"reference": inputs.reference_keep.shape[0],
                "population": inputs.population_keep.shape[0]}
    missing = sorted(need for need in attack.needs if n_models[need] == 0)
    if missing:
        lacking = ", ".join(f"no {need} models" for need in missing)
        raise ValueError(f"attack {name!r} cannot run: its inputs have {lacking}")
    scores = np.array(attack.score(inputs), dtype=np.float64)
    bad = ~np.isfinite(scores)
    if bad.any():
        finite = scores[~bad]
        high, low = (finite.max(), finite.min()) if finite.size else (0.0, 0.0)
        scores[np.isposinf(scores)] = high + 1e-6
        scores[np.isneginf(scores)] = low - 1e-6
        scores[np.isnan(scores)] = 0.0
        log.warning("attack %s: replaced %d non-finite scores of %d", name, bad.sum(), scores.size)
    return scores


def attack_inputs(store: SignalStore, splits: Splits, repeat: int,
                  options: Mapping[str, Any]) -> tuple[AttackInputs, np.ndarray]:
    """Inputs for target model `target-<repeat>` and the ground truth `is_member` over pool T.

    References are evaluated on the target pool T, population models (and the target, for RMIA's
    population side) on the auxiliary pool A. Missing model sets give (0, n) arrays.
    """
    target = f"target-{repeat}"
    evaluated, auxiliary = splits.target_samples, splits.auxiliary_samples
    references, population = splits.models("reference"), splits.models("population")

    def signals(models: list[str], samples: np.ndarray) -> dict[str, np.ndarray]:
        return {s: store.matrix(models, s, samples) for s in LOADED_SIGNALS}

    def keep(models: list[str], samples: np.ndarray) -> np.ndarray:
        rows = np.array([splits.model_ids.index(m) for m in models], dtype=np.intp)
        return splits.keep[rows][:, samples]

    inputs = AttackInputs(
        target={s: v[0] for s, v in signals([target], evaluated).items()},
        reference=signals(references, evaluated),
        reference_keep=keep(references, evaluated),
        target_on_population={s: v[0] for s, v in signals([target], auxiliary).items()},
        population=signals(population, auxiliary),
        population_keep=keep(population, auxiliary),
        options=dict(options),
    )
    return inputs, splits.members(target)[evaluated]


# --- IN/OUT statistics over the reference-model axis (ALGORITHMS.md 1.5, 4.1) -----------------

@dataclass(frozen=True)
class SideStats:
    """Statistics of one side (IN or OUT) of reference values, per sample and pooled."""

    median: np.ndarray  # (n,)
    mean: np.ndarray  # (n,)
    std: np.ndarray  # (n,), ddof 0
    pooled_std: float  # std of all values of this side over samples and models (uncentred)
    residual_std: float  # std of (value - its sample's median), pooled over samples and models


def in_out_stats(values: np.ndarray, keep: np.ndarray) -> tuple[SideStats, SideStats]:
    """IN and OUT statistics of (M, n) reference values, using all models of each side.

    A sample with no model on one side gets that side's mean over samples (the nanmedian /
    nanstd rule of TF-Privacy and KL-LiRA), so Bernoulli designs need no special case.
    """
    return _side(np.where(keep, values, np.nan)), _side(np.where(keep, np.nan, values))


def _side(values: np.ndarray) -> SideStats:
    def fill(stat: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(stat), np.nanmean(stat), stat)

    with warnings.catch_warnings():  # all-NaN columns are expected: `fill` replaces them
        warnings.simplefilter("ignore", RuntimeWarning)
        median = fill(np.nanmedian(values, axis=0))
        return SideStats(median=median,
                         mean=fill(np.nanmean(values, axis=0)),
                         std=fill(np.nanstd(values, axis=0)),
                         pooled_std=float(np.nanstd(values)),
                         residual_std=float(np.nanstd(values - median)))


def _norm():
    """scipy.stats.norm, imported on first use: params validation imports this registry cheaply."""
    from scipy.stats import norm

    return norm


def _log_likelihood_ratio(x: np.ndarray, mu_in: np.ndarray, sd_in: np.ndarray | float,
                          mu_out: np.ndarray, sd_out: np.ndarray | float) -> np.ndarray:
    """log N(x; IN) − log N(x; OUT): LiRA's online score, positive for members."""
    return (_norm().logpdf(x, mu_in, np.add(sd_in, STD_EPS))
            - _norm().logpdf(x, mu_out, np.add(sd_out, STD_EPS)))


# --- Metric family: target model only (ALGORITHMS.md 3.1) -------------------------------------

@register("metric-loss", "metric")
def metric_loss(inputs: AttackInputs) -> np.ndarray:
    """Negative cross-entropy loss of the target model."""
    return -inputs.target["loss"]


@register("metric-conf", "metric")
def metric_conf(inputs: AttackInputs) -> np.ndarray:
    """Target model's true-label probability p_y."""
    return inputs.target["confidence"]


@register("metric-corr", "metric")
def metric_corr(inputs: AttackInputs) -> np.ndarray:
    """1 if the target model classifies the sample correctly, else 0."""
    return inputs.target["correct"]


@register("metric-ent", "metric")
def metric_ent(inputs: AttackInputs) -> np.ndarray:
    """Negative prediction entropy (base 2) of the target model."""
    return -inputs.target["entropy"]


@register("metric-ment", "metric")
def metric_ment(inputs: AttackInputs) -> np.ndarray:
    """Negative modified entropy (Song & Mittal) of the target model."""
    return -inputs.target["mentr"]


# --- Model family: target calibrated by reference models (ALGORITHMS.md 3.3) ------------------

@register("model-loss", "model", needs=("reference",))
def model_loss(inputs: AttackInputs) -> np.ndarray:
    """Sablayrolles: midpoint of IN and OUT median reference losses minus the target loss."""
    loss_in, loss_out = in_out_stats(inputs.reference["loss"], inputs.reference_keep)
    return 0.5 * (loss_in.median + loss_out.median) - inputs.target["loss"]


@register("model-calibration", "model", needs=("reference",))
def model_calibration(inputs: AttackInputs) -> np.ndarray:
    """Watson: median OUT reference loss minus the target loss."""
    _, loss_out = in_out_stats(inputs.reference["loss"], inputs.reference_keep)
    return loss_out.median - inputs.target["loss"]


@register("model-lira", "model", needs=("reference",))
def model_lira(inputs: AttackInputs) -> np.ndarray:
    """TDDBench LiRA on phi: median locations, global IN and OUT spreads ("tdd" fixed variance)."""
    phi_in, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return _log_likelihood_ratio(inputs.target["phi"], phi_in.median, phi_in.pooled_std,
                                 phi_out.median, phi_out.pooled_std)


@register("model-robust", "model", needs=("reference", "population"))
def model_robust(inputs: AttackInputs) -> np.ndarray:
    """RMIA (online): share of population points z with r(x)/r(z) > gamma, r = p_y / mean ref p_y.

    Reference means are ½(mean IN + mean OUT), on the target pool for x and on A for z.
    """
    gamma = float(inputs.options.get("gamma", 2.0))

    def ratio(target: np.ndarray, values: np.ndarray, keep: np.ndarray) -> np.ndarray:
        conf_in, conf_out = in_out_stats(values, keep)
        return target / (0.5 * (conf_in.mean + conf_out.mean))

    r_x = ratio(inputs.target["confidence"], inputs.reference["confidence"], inputs.reference_keep)
    r_z = ratio(inputs.target_on_population["confidence"], inputs.population["confidence"],
                inputs.population_keep)
    # r(z) > 0, so #{z : r(x)/r(z) > gamma} = #{z : r(z) < r(x)/gamma}.
    return np.searchsorted(np.sort(r_z), r_x / gamma, side="left") / r_z.size


# --- LiRA family on phi, Q = 1 (ALGORITHMS.md 4.1) --------------------------------------------

@register("lira-online", "lira", needs=("reference",))
def lira_online(inputs: AttackInputs) -> np.ndarray:
    """Online LiRA: Gaussian likelihood ratio of IN vs OUT phi, per-example variance."""
    phi_in, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return _log_likelihood_ratio(inputs.target["phi"], phi_in.median, phi_in.std,
                                 phi_out.median, phi_out.std)


@register("lira-online-fixvar", "lira", needs=("reference",))
def lira_online_fixvar(inputs: AttackInputs) -> np.ndarray:
    """Online LiRA with Carlini's fixed variance: both spreads are the std of all IN phi values."""
    phi_in, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return _log_likelihood_ratio(inputs.target["phi"], phi_in.median, phi_in.pooled_std,
                                 phi_out.median, phi_in.pooled_std)


@register("lira-online-residual", "lira", needs=("reference",))
def lira_online_residual(inputs: AttackInputs) -> np.ndarray:
    """Online LiRA with TF-Privacy's fixed variance: spreads of phi around each sample's median."""
    phi_in, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return _log_likelihood_ratio(inputs.target["phi"], phi_in.median, phi_in.residual_std,
                                 phi_out.median, phi_out.residual_std)


@register("lira-offline", "lira", needs=("reference",))
def lira_offline(inputs: AttackInputs) -> np.ndarray:
    """Offline LiRA (two-sided pdf form): −log N(phi; OUT median, per-example OUT std)."""
    _, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return -_norm().logpdf(inputs.target["phi"], phi_out.median, phi_out.std + STD_EPS)


@register("lira-offline-fixvar", "lira", needs=("reference",))
def lira_offline_fixvar(inputs: AttackInputs) -> np.ndarray:
    """Offline LiRA (two-sided pdf form) with one global OUT std."""
    _, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return -_norm().logpdf(inputs.target["phi"], phi_out.median, phi_out.pooled_std + STD_EPS)


@register("lira-offline-onesided", "lira", needs=("reference",))
def lira_offline_onesided(inputs: AttackInputs) -> np.ndarray:
    """Offline LiRA, one-sided test of the paper: Phi((phi − OUT median) / per-example OUT std)."""
    _, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return _norm().cdf(inputs.target["phi"], phi_out.median, phi_out.std + STD_EPS)
