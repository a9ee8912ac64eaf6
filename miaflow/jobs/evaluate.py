"""Jobs of the evaluate stage: every attack's membership scores per experiment, their metrics and
ROC curves, and the scaling study (AUROC against the number of reference models and queries)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.jobs.common import Paths, read_splits
from miaflow.plan import Experiment
from miaflow.progress import tracked
from miaflow.rule_io import concat_parquet
from miaflow.signals import SignalStore
from miaflow.splits import Splits

log = logging.getLogger(__name__)
Artifact = str | Path | None


def _signal_stores(
    splits: str | Path, signals: Paths, reference_signals: Paths
) -> tuple[Splits, SignalStore, SignalStore]:
    """The splits, the target models' signal store and the reference models' one (the same
    store unless the references have another architecture), after checking that every shard
    was computed on the data the splits were drawn from."""
    expected = io.read_parquet_metadata(splits)["data_hash"]
    for path in [*signals, *reference_signals]:
        if io.read_parquet_metadata(path)["data_hash"] != expected:
            raise ValueError(f"{path} was computed on other data than the splits {splits}")
    store = SignalStore.read(list(signals))
    same = sorted(map(str, signals)) == sorted(map(str, reference_signals))
    return read_splits(splits), store, store if same else SignalStore.read(list(reference_signals))


def _artifacts(attacks: Sequence[str], given: Mapping[str, Artifact]) -> dict[str, dict[str, str]]:
    """{attack: {artifact name: path}} of what each attack reads; a missing one is an error."""
    from miaflow.attacks.registry import ATTACKS

    chosen = {}
    for attack in attacks:
        missing = [name for name in ATTACKS[attack].reads if given.get(name) is None]
        if missing:
            raise ValueError(f"attack {attack!r} reads {missing}, which the rule does not give")
        chosen[attack] = {name: str(given[name]) for name in ATTACKS[attack].reads}
    return chosen


def _attack_frame(
    attack: str,
    keep: Splits,
    store: SignalStore,
    reference_store: SignalStore,
    options: Any,
    experiment: Experiment,
    seed: int,
    artifacts: Mapping[str, str],
) -> pd.DataFrame:
    """Scores of one attack (with its `options`) against every target model (repeat) of one
    experiment. Samples a `subset` attack did not evaluate (NaN scores) are left out."""
    from miaflow.attacks.inputs import attack_inputs
    from miaflow.attacks.registry import ATTACKS
    from miaflow.attacks.scoring import run_attack
    from miaflow.seeding import derive_seed

    frames = []
    for repeat in range(len(keep.models("target"))):
        inputs, is_member = attack_inputs(
            store,
            keep,
            repeat,
            options,
            seed=derive_seed(seed, "attack", experiment.dataset, experiment.label, attack, repeat),
            extra=artifacts,
            reference_store=reference_store,
        )
        scores = run_attack(attack, inputs)
        evaluated = ~np.isnan(scores) if ATTACKS[attack].subset else np.ones(len(scores), bool)
        frames.append(
            pd.DataFrame(
                {
                    "dataset": experiment.dataset,
                    "target_model": experiment.label,
                    "attack": attack,
                    "repeat": repeat,
                    "sample_id": keep.target_samples[evaluated],
                    "score": scores[evaluated],
                    "is_member": is_member[evaluated],
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def score_attacks(
    *,
    splits: str | Path,
    signals: Paths,
    reference_signals: Paths,
    scores: str | Path,
    timings: str | Path,
    metrics: str | Path,
    roc: str | Path,
    experiment: Experiment,
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
    fpr_levels: Sequence[float],
    confidence: float,
    outputs: Artifact = None,
    distances: Artifact = None,
    surrogates: Artifact = None,
    regressors: Artifact = None,
    canaries: Artifact = None,
) -> None:
    """Scores of every attack of one experiment, their metrics (at `fpr_levels`, with
    `confidence` intervals) and ROC curves, in one job: the signal stores are read once and one
    interpreter start serves all attacks (per-job start-up dominated one job per attack).

    `signals` are the shards of the target models' architecture, `reference_signals` those of
    the reference models' one (the same files unless the experiment sets `ref_arch`); `outputs`
    … `canaries` are the queries stage's artifacts, which the attacks that read them need;
    `options` is params.yaml's `attack_options` (overrides of the attacks' defaults). Each
    attack's wall and CPU seconds go to `timings` (a run record, like Snakemake's benchmark
    files), so that costs can still be compared per attack.
    """
    from miaflow.attacks.registry import attack_options

    keep, store, reference_store = _signal_stores(splits, signals, reference_signals)
    artifacts = _artifacts(
        attacks,
        {
            "outputs": outputs,
            "distances": distances,
            "surrogates": surrogates,
            "regressors": regressors,
            "canaries": canaries,
        },
    )
    frames, spent = [], []
    for attack in tracked(attacks, f"{experiment.dataset}/{experiment.label} attacks", "attacks"):
        wall, cpu = time.perf_counter(), time.process_time()
        frames.append(
            _attack_frame(
                attack,
                keep,
                store,
                reference_store,
                attack_options(attack, options),
                experiment,
                seed,
                artifacts[attack],
            )
        )
        spent.append(
            {
                "attack": attack,
                "s": time.perf_counter() - wall,
                "cpu_time": time.process_time() - cpu,
            }
        )
        log.info("%s: %.1f s", attack, spent[-1]["s"])
    io.write_parquet(scores, pd.concat(frames, ignore_index=True))
    io.write_text(timings, pd.DataFrame(spent).to_csv(sep="\t", index=False))
    compute_metrics(
        scores=scores, fpr_levels=fpr_levels, confidence=confidence, metrics=metrics, roc=roc
    )


def compute_metrics(
    *,
    scores: str | Path,
    fpr_levels: Sequence[float],
    confidence: float,
    metrics: str | Path,
    roc: str | Path,
) -> None:
    """Metrics and ROC curves of every attack and target model of one experiment's score table
    (read back from its file, so they are those of the scores as stored)."""
    from miaflow.evaluation.metrics import roc_table, score_metrics

    table = io.read_parquet(scores)
    io.write_parquet(metrics, score_metrics(table, tuple(fpr_levels), confidence))
    io.write_parquet(roc, roc_table(table))


def scaling_sweep(
    *,
    splits: str | Path,
    signals: Paths,
    reference_signals: Paths,
    sweep: str | Path,
    experiment: Experiment,
    reference_attacks: Sequence[str],
    reference_counts: Sequence[int],
    query_attacks: Mapping[str, Sequence[int]],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
    outputs: Artifact = None,
    distances: Artifact = None,
) -> None:
    """TDDBench Fig. 4: AUROC per target model when attacks use only the first k reference models
    (`axis` "reference models") or only the first k of their extra queries ("queries").

    `query_attacks` maps each swept query attack to its counts (its option `queries_used`); they
    read `outputs` (and `distances`, Query-adv's, unused by the sweep off images).
    """
    from sklearn.metrics import roc_auc_score

    from miaflow.attacks.inputs import attack_inputs
    from miaflow.attacks.registry import attack_options
    from miaflow.attacks.scoring import run_attack
    from miaflow.seeding import derive_seed

    keep, store, reference_store = _signal_stores(splits, signals, reference_signals)
    artifacts = _artifacts(
        [*reference_attacks, *query_attacks], {"outputs": outputs, "distances": distances}
    )
    plan = [
        ("reference models", attack, count, {"n_reference": count}, {})
        for count in reference_counts
        for attack in reference_attacks
    ]
    plan += [
        ("queries", attack, count, {}, {"queries_used": count})
        for attack, counts in query_attacks.items()
        for count in counts
    ]
    rows = []
    for repeat in tracked(range(len(keep.models("target"))), "scaling sweep", "target models"):
        for axis, attack, count, subset, option in plan:
            configured = attack_options(attack, options)
            inputs, is_member = attack_inputs(
                store,
                keep,
                repeat,
                dataclasses.replace(configured, **option) if option else configured,
                seed=derive_seed(
                    seed, "attack", experiment.dataset, experiment.label, attack, repeat
                ),
                extra=artifacts[attack],
                reference_store=reference_store,
                **subset,
            )
            scores = run_attack(attack, inputs)
            evaluated = ~np.isnan(scores)
            auroc = roc_auc_score(is_member[evaluated], scores[evaluated])
            rows.append(
                (experiment.dataset, experiment.label, attack, repeat, axis, count, float(auroc))
            )
    io.write_parquet(
        sweep,
        pd.DataFrame(
            rows, columns=["dataset", "target_model", "attack", "repeat", "axis", "count", "auroc"]
        ),
    )


def operating_points(
    *,
    scores: Paths,
    operating_points: str | Path,
    fpr_levels: Sequence[float],
    priors: Sequence[float],
) -> None:
    """The operating point behind each TPR of every scores table (any stage's), under the
    target's and the attacker's calibration (miaflow.evaluation.operating_points)."""
    from miaflow.evaluation.metrics import SCORES_COLUMNS
    from miaflow.evaluation.operating_points import operating_point_table

    table = operating_point_table(concat_parquet(scores, SCORES_COLUMNS), fpr_levels, priors)
    io.write_parquet(operating_points, table)
