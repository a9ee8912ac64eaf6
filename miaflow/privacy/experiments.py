"""The privacy stage's audit experiments: targets trained with canaries drawn as data, and every
canary trial scored (higher = member). Canaries live here only: the experiments of
`experiments:`, their data and their metrics never see them.

Each experiment returns the trials, one row per canary trial (TRIALS: which target and attack,
`setting` "runs" for one canary per independent training run or "one-run" for one run's many
canaries, the canary's kind, the target's claim ε and δ, the run, the canary's sample id, whether
it was included and its score), which `miaflow.privacy.results` turns into ε lower bounds. Three
kinds:

- `head_trials`: the study's linear heads on a dataset's features (DP-Adam,
  `miaflow.privacy.trials`): per head target, `runs` independent runs with one canary of each
  kind of `run_kinds`, and one run with the `canaries`; an honest target trains with the
  accountant's σ for its claimed ε (`claimed_noise`), a miscalibrated control with `noise_scale`
  times that σ while claiming the same ε, a non-private one (ε = ∞) without clipping or noise.
- `model_trials`: one model of an architecture recipe (`miaflow.models.training.LEARNERS`),
  trained on `train_size` samples and the included canaries; its claim is the recipe's `dp_sgd`
  defense (Opacus), ε = ∞ without one. Its canaries are scored by target-only attacks
  (`miaflow.attacks.scoring.run_attack` on the model's signals on the canaries).
- `audit_trials`: a user's model, from its outputs on its canaries and their inclusion
  (docs/audit.md), scored like a trained model's.

Every experiment draws its base training set (`train_size` samples of the dataset) and its
canaries' pool (the rest) by seed; natural and mislabelled canaries come from that pool, so
they are not in the base set, whatever their bit. The trials cover every planned canary: one
with `included` false was drawn but left out of training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from miaflow.privacy.estimators import ONE_RUN_TRIALS, RUNS
from miaflow.seeding import derive_seed

if TYPE_CHECKING:
    from miaflow.privacy.canaries import CanarySet

TRIALS = [
    "dataset",
    "target_model",
    "attack",
    "setting",
    "canary_kind",
    "epsilon",
    "delta",
    "noise_multiplier",
    "run",
    "sample_id",
    "included",
    "score",
]
CANARIES = ["setting", "sample_id", "kind", "label", "included", "source", "features"]
HEAD_ATTACK = "metric-loss"  # the heads' trials score a canary by log p(label), as metric-loss
DIRAC = "dirac"  # the white-box canary of linear heads (`miaflow.privacy.canaries`)


def split(n_samples: int, train_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The base training set (`train_size` sample ids, sorted) and the canaries' pool (the other
    ids, in a seeded order), drawn by `seed`."""
    order = np.random.default_rng(seed).permutation(n_samples)
    return np.sort(order[:train_size]), order[train_size:]


def drawn_canaries(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    pool: np.ndarray,
    counts: Mapping[str, int],
    seed: int,
    first_id: int,
) -> CanarySet:
    """`make_canaries` on the pool's samples, with `source` the dataset's sample id of a natural
    or mislabelled canary (−1 for the others)."""
    from miaflow.privacy.canaries import CanarySet, make_canaries

    drawn = make_canaries(features[pool], labels[pool], n_classes, counts, seed, first_id)
    table = drawn.table.copy()
    source = table["source"].to_numpy(np.int64)
    table["source"] = np.where(source >= 0, pool[np.maximum(source, 0)], -1).astype(np.int64)
    return CanarySet(table, drawn.inputs)


def _padded(inputs: np.ndarray, width: int) -> np.ndarray:
    """Rows of `inputs` (m, d) with zero columns up to `width` (the Dirac canaries' axes)."""
    return np.concatenate([inputs, np.zeros((len(inputs), width - inputs.shape[1]))], axis=1)


def head_canaries(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    base: np.ndarray,
    pool: np.ndarray,
    counts: Mapping[str, int],
    seed: int,
    first_id: int,
) -> tuple[np.ndarray, CanarySet]:
    """One run's canaries for linear heads on flat `features` (n, d): natural, mislabelled and
    ood ones from the pool, then `counts["dirac"]` Dirac canaries on axes of their own, with ids
    from `first_id` on. Returns the base set's features padded with those axes, and the
    canaries."""
    from miaflow.privacy.canaries import CanarySet, dirac_canaries

    ordinary = {kind: n for kind, n in counts.items() if kind != DIRAC and n}
    drawn = drawn_canaries(features, labels, n_classes, pool, ordinary, seed, first_id)
    padded, dirac = dirac_canaries(
        features[base],
        n_classes,
        counts.get(DIRAC, 0),
        derive_seed(seed, DIRAC),
        first_id=first_id + len(drawn.table),
    )
    width = padded.shape[1]
    return padded, CanarySet(
        pd.concat([drawn.table, dirac.table], ignore_index=True),
        np.concatenate([_padded(drawn.inputs, width), dirac.inputs]),
    )


def run_canary(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    base: np.ndarray,
    pool: np.ndarray,
    kind: str,
    seed: int,
    sample_id: int,
) -> tuple[np.ndarray, CanarySet]:
    """The one canary of kind `kind` that independent runs put in or leave out (its `included`
    is meaningless: each run draws its own bit), with the base set's features (padded by its axis
    for a Dirac canary)."""
    return head_canaries(features, labels, n_classes, base, pool, {kind: 1}, seed, sample_id)


def canary_table(canaries: CanarySet, setting: str) -> pd.DataFrame:
    """The canaries as data (CANARIES): their table, their flattened inputs, and `included` only
    for one run's canaries (null for the canary of independent runs, whose bits are the runs')."""
    table = canaries.table.copy()
    flat = np.asarray(canaries.inputs, np.float32).reshape(len(table), -1) if len(table) else []
    included = table["included"].astype("boolean")
    table["included"] = (
        included if setting == ONE_RUN_TRIALS else pd.array([pd.NA] * len(table), "boolean")
    )
    table["setting"] = setting
    table["features"] = list(flat)
    return table[CANARIES]


def _trials(
    frame: pd.DataFrame, identity: Mapping[str, Any], setting: str, kinds: Sequence[str] | str
) -> pd.DataFrame:
    """Trial rows (TRIALS) from scored trials (sample_id, included, score[, run])."""
    rows = pd.DataFrame(
        {
            **identity,
            "setting": setting,
            "canary_kind": kinds if isinstance(kinds, str) else np.asarray(kinds),
            "run": frame["run"].to_numpy() if "run" in frame else 0,
            "sample_id": frame["sample_id"].to_numpy(),
            "included": frame["included"].to_numpy(dtype=bool),
            "score": frame["score"].to_numpy(dtype=np.float64),
        },
        index=range(len(frame)),
    )
    return rows[TRIALS]


def head_trials(
    dataset: str,
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    spec: Mapping[str, Any],
    delta: float,
    seed: int,
    device: str = "cpu",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The head audit `spec` (an entry of `privacy.heads`) on a dataset's features: canaries and
    trials of every head target, trained on `device`. One σ per claimed ε (`claimed_noise`),
    shared by the targets that claim it; the canaries are the same for every target, each
    training with its own seeds."""
    from miaflow.models.heads import HeadRecipe
    from miaflow.privacy.trials import claimed_noise, one_run_trials, repeated_trials

    flat = np.asarray(features, np.float64).reshape(len(labels), -1)
    base, pool = split(len(labels), spec["train_size"], derive_seed(seed, dataset, "heads"))
    padded, canaries = head_canaries(
        flat,
        labels,
        n_classes,
        base,
        pool,
        spec["canaries"],
        derive_seed(seed, dataset, ONE_RUN_TRIALS),
        len(labels),
    )
    after = len(labels) + len(canaries.table)  # the runs' canaries' ids follow one run's
    per_kind = {
        kind: run_canary(
            flat, labels, n_classes, base, pool, kind, derive_seed(seed, dataset, kind), after + j
        )
        for j, kind in enumerate(spec["run_kinds"])
    }
    tables = [canary_table(canaries, ONE_RUN_TRIALS)]
    tables += [canary_table(canary, RUNS) for _, canary in per_kind.values()]
    sigmas: dict[float, float] = {}
    trials = []
    for target in spec["targets"]:
        epsilon, name = float(target["epsilon"]), target["name"]
        if math.isinf(epsilon):
            recipe = HeadRecipe(spec["batch_size"], spec["lr"])
        else:
            if epsilon not in sigmas:
                sigmas[epsilon] = claimed_noise(
                    epsilon, delta, spec["train_size"], spec["batch_size"], spec["epochs"]
                )
            noise = sigmas[epsilon] * target.get("noise_scale", 1.0)
            recipe = HeadRecipe(spec["batch_size"], spec["lr"], spec["clip_norm"], noise)
        identity = {
            "dataset": dataset,
            "target_model": name,
            "attack": HEAD_ATTACK,
            "epsilon": epsilon,
            "delta": delta,
            "noise_multiplier": recipe.noise_multiplier,
        }
        one = one_run_trials(
            padded,
            labels[base],
            n_classes,
            canaries,
            recipe,
            spec["epochs"],
            derive_seed(seed, dataset, name, ONE_RUN_TRIALS),
            device,
        )
        trials.append(_trials(one, identity, ONE_RUN_TRIALS, one["kind"].to_numpy()))
        for kind, (kind_features, canary) in per_kind.items():
            runs = repeated_trials(
                kind_features,
                labels[base],
                n_classes,
                canary.inputs[0],
                int(canary.table["label"].iloc[0]),
                recipe,
                spec["epochs"],
                spec["runs"],
                derive_seed(seed, dataset, name, kind),
                device,
            )
            runs["sample_id"] = int(canary.table["sample_id"].iloc[0])
            trials.append(_trials(runs, identity, RUNS, kind))
    return pd.concat(tables, ignore_index=True), pd.concat(trials, ignore_index=True)


def claim(arch: Mapping[str, Any], delta: float) -> tuple[float, float]:
    """The (ε, δ) a recipe claims: its `dp_sgd` defense's, (∞, `delta`) without one."""
    defense = arch.get("defense") or {}
    if defense.get("kind") == "dp_sgd":
        return float(defense["epsilon"]), float(defense["delta"])
    return math.inf, delta


def canary_scores(
    logits: np.ndarray,
    labels: np.ndarray,
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
) -> dict[str, np.ndarray]:
    """Each target-only attack's scores of the canaries from the target's logits on them (m, C):
    its signals (`miaflow.signals`) as the target's inputs, no reference or population model."""
    from miaflow.attacks.inputs import AttackInputs
    from miaflow.attacks.registry import attack_options
    from miaflow.attacks.scoring import run_attack
    from miaflow.signals import signals_from_logits

    target = {**signals_from_logits(logits, labels), "logits": logits, "label": labels}
    m = len(labels)
    scores = {}
    for attack in attacks:
        inputs = AttackInputs(
            target=target,
            reference={},
            reference_keep=np.zeros((0, m), bool),
            target_on_population={},
            population={},
            population_keep=np.zeros((0, 0), bool),
            options=attack_options(attack, options.get(attack, {})),
            seed=derive_seed(seed, attack),
            sample_ids=np.arange(m),
        )
        scores[attack] = run_attack(attack, inputs)
    return scores


def _scored_trials(
    identity: Mapping[str, Any], table: pd.DataFrame, scores: Mapping[str, np.ndarray]
) -> pd.DataFrame:
    """One-run trial rows of every attack's scores of the canaries of `table`."""
    return pd.concat(
        [
            _trials(
                table.assign(score=score),
                {**identity, "attack": attack},
                ONE_RUN_TRIALS,
                table["kind"],
            )
            for attack, score in scores.items()
        ],
        ignore_index=True,
    )


def model_trials(
    dataset: str,
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    spec: Mapping[str, Any],
    arch: Mapping[str, Any],
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    delta: float,
    seed: int,
    threads: int,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """The model audit `spec` (an entry of `privacy.models`): one model of recipe `arch` trained
    on the base set and the included canaries (its `dp_sgd` defense, if any, through Opacus),
    its canaries scored by `attacks`. Returns the canaries, the trials and the model's accuracy
    on its training set and on the pool's held-out samples (the pool minus the canaries)."""
    from miaflow.models.training import LEARNERS

    label = spec["arch"]
    base, pool = split(len(labels), spec["train_size"], derive_seed(seed, dataset, label))
    canaries = drawn_canaries(
        features,
        labels,
        n_classes,
        pool,
        spec["canaries"],
        derive_seed(seed, dataset, label, ONE_RUN_TRIALS),
        len(labels),
    )
    heldout = np.setdiff1d(pool, canaries.table["source"].to_numpy())
    x, y = canaries.training_set(features[base], labels[base])
    learner = LEARNERS[arch["kind"]]
    weights = learner.fit(
        arch,
        x,
        y,
        features[heldout],
        labels[heldout],
        n_classes,
        derive_seed(seed, dataset, label, "train"),
        threads,
        f"{label} (privacy audit)",
    )
    inputs = canaries.inputs.astype(features.dtype)
    logits = learner.logits(arch, weights, inputs, n_classes)
    accuracy = {
        "train_acc": float(np.mean(learner.logits(arch, weights, x, n_classes).argmax(1) == y)),
        "test_acc": float(
            np.mean(
                learner.logits(arch, weights, features[heldout], n_classes).argmax(1)
                == labels[heldout]
            )
        ),
    }
    epsilon, claimed_delta = claim(arch, delta)
    table = canaries.table
    scores = canary_scores(
        logits, table["label"].to_numpy(), attacks, options, derive_seed(seed, dataset, label)
    )
    identity = {
        "dataset": dataset,
        "target_model": label,
        "epsilon": epsilon,
        "delta": claimed_delta,
        "noise_multiplier": math.nan,
    }
    return canary_table(canaries, ONE_RUN_TRIALS), _scored_trials(identity, table, scores), accuracy


def audit_trials(
    path: str,
    audit: Mapping[str, Any],
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
) -> pd.DataFrame:
    """Trials of a user's audit that claims `epsilon` and `delta` for its target models, from
    their outputs on the canaries and the canaries' inclusion (`read_canaries`): one run per
    target model, named the audit's name (with `/<model id>` when the file has several)."""
    outputs, table = read_canaries(path)
    frames = []
    for k, model in enumerate(outputs.model_ids):
        rows = table[table["model_id"] == model].sort_values("sample_id")
        name = audit["name"] if len(outputs.model_ids) == 1 else f"{audit['name']}/{model}"
        scores = canary_scores(
            outputs.logits[k].astype(np.float64),
            outputs.labels,
            attacks,
            options,
            derive_seed(seed, audit["dataset"], name),
        )
        identity = {
            "dataset": audit["dataset"],
            "target_model": name,
            "epsilon": float(audit["epsilon"]),
            "delta": float(audit["delta"]),
            "noise_multiplier": math.nan,
        }
        frames.append(_scored_trials(identity, rows.reset_index(drop=True), scores))
    return pd.concat(frames, ignore_index=True)


def read_canaries(path: str) -> tuple[Any, pd.DataFrame]:
    """A user's canaries: their target models' outputs on them in the format of an audit's
    `outputs` (`miaflow.audit.read_outputs`: model_id target-<i>, sample_id 0 … m−1, label,
    logit_<c> or prob_<c>; every model covers every canary), with `included` (boolean: the model
    trained on the canary) and an optional `kind` (default "given"). Returns the outputs and a
    table of model_id, sample_id, kind and included. AuditInputError names the file and the
    problem: reference or population models, a bit that is not boolean, a target with every
    canary in or every canary out."""
    from miaflow.audit import AuditInputError, normalised_model_ids, read_outputs, read_user_table
    from miaflow.splits import role_of

    outputs = read_outputs(path)
    others = [m for m in outputs.model_ids if role_of(m) != "target"]
    if others:
        raise AuditInputError(path, f"canaries are audited on target models only, not {others}")
    frame = read_user_table(path)
    if "included" not in frame.columns:
        raise AuditInputError(path, "missing column 'included' (whether the model trained on it)")
    bits = frame["included"]
    if bits.isna().any() or not (
        pd.api.types.is_bool_dtype(bits) or set(pd.unique(bits)) <= {0, 1}
    ):
        raise AuditInputError(path, "column 'included' must be boolean (or 0/1), without gaps")
    table = pd.DataFrame(
        {
            "model_id": normalised_model_ids(frame["model_id"], path).to_numpy(),
            "sample_id": frame["sample_id"].to_numpy(np.int64),
            "kind": frame["kind"].astype(str).to_numpy() if "kind" in frame else "given",
            "included": bits.to_numpy().astype(bool),
        }
    )
    for model, rows in table.groupby("model_id"):
        if rows["included"].all() or not rows["included"].any():
            raise AuditInputError(
                path, f"model {model}: needs canaries both in and out of its training set"
            )
    return outputs, table
