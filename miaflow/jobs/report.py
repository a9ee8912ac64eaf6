"""Jobs of the report stage: the metrics contract, statistical tests, paper tables and figures.

Per-experiment files (ROC, scaling and risk figures, per-experiment metric tables) are named by
`Experiment.file_name` in the rules, and found here among a rule's outputs by that name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from miaflow import io
from miaflow.attacks.registry import ATTACKS
from miaflow.evaluation import tables as build
from miaflow.evaluation.metrics import METRICS_COLUMNS, RUN_KEYS, SCORES_COLUMNS, summary
from miaflow.evaluation.tables import write_outputs
from miaflow.jobs.common import experiment_file, experiment_table, rows_of
from miaflow.plan import Experiment
from miaflow.rule_io import Paths, concat_parquet, table_stem


def _classifier_metrics(metrics: str | Path) -> pd.DataFrame:
    """The metrics contract without the language-model attacks, which `llm_report` tabulates."""
    long = io.read_parquet(metrics)
    return long[[ATTACKS[a].family != "llm" for a in long["attack"]]].reset_index(drop=True)


def collect_metrics(
    *,
    experiment_metrics: Paths,
    operating_points: str | Path,
    metrics: str | Path,
    priors: Sequence[float],
) -> None:
    """The `results/metrics.parquet` contract: every stage's metrics and the precision (PPV) of
    each operating point at the membership priors (`ppv_*`, target calibration), for the
    experiments those metrics cover (the trap experiments' points are traced, not collected)."""
    from miaflow.evaluation.operating_points import ppv_metrics

    stages = concat_parquet(experiment_metrics, METRICS_COLUMNS)
    points = io.read_parquet(operating_points).merge(
        stages[["dataset", "target_model"]].drop_duplicates(), on=["dataset", "target_model"]
    )
    long = pd.concat([stages, ppv_metrics(points, priors)], ignore_index=True)
    io.write_parquet(metrics, long.sort_values(RUN_KEYS, kind="stable", ignore_index=True))


def verdicts(**files_and_settings: Any) -> None:
    """Both rankings of every experiment and setting, their verdicts and the files that say them
    (`miaflow.evaluation.headline.write_verdicts`)."""
    from miaflow.evaluation.headline import write_verdicts

    write_verdicts(**files_and_settings)


def stability_table(*, scores: Paths, stability: Paths, low_fpr: float) -> None:
    """Coverage, stability and Jaccard overlap of the members each attack flags at `low_fpr`
    across the target models of every experiment (miaflow.evaluation.stability)."""
    from miaflow.evaluation.stability import stability_table as build

    write_outputs(build(concat_parquet(scores, SCORES_COLUMNS), low_fpr), stability)


def collect_models(*, records: Paths, models: str | Path) -> None:
    """Train/test accuracy of every trained model in one table."""
    io.write_parquet(models, pd.DataFrame([row for path in records for row in io.read_json(path)]))


def paired_tests(
    *,
    metrics: str | Path,
    scores: Paths,
    tests: str | Path,
    tested_metrics: Sequence[str],
    alpha: float,
    n_resamples: int,
    seed: int,
) -> None:
    """Each experiment's best attack against the others and the attack families' bests against
    each other, tested over target models and over samples (miaflow.evaluation.stats)."""
    from miaflow.evaluation.stats import paired_tests as run_tests

    family_of = {name: attack.family for name, attack in ATTACKS.items()}
    io.write_parquet(
        tests,
        run_tests(
            io.read_parquet(metrics),
            concat_parquet(scores),
            family_of,
            tuple(tested_metrics),
            alpha,
            n_resamples,
            seed,
        ),
    )


def tables(
    *,
    metrics: str | Path,
    tests: str | Path,
    models: str | Path,
    roc: Paths,
    auroc_table: Paths,
    accuracy_table: Paths,
    tests_table: Paths,
    roc_figures: Paths,
    experiments: Sequence[Experiment],
) -> None:
    """Headline tables (csv, md, tex; each AUROC column's best and the attacks not separated
    from it marked) and one log-log ROC figure per experiment."""
    from miaflow.evaluation.plots import plot_roc_loglog

    means, tested = summary(_classifier_metrics(metrics)), io.read_parquet(tests)
    write_outputs(build.auroc_table(means, tested), auroc_table)
    write_outputs(build.accuracy_table(io.read_parquet(models)), accuracy_table)
    build.write_tests_table(tested, table_stem(tests_table))
    curves = concat_parquet(roc)
    auroc = means[means["metric"] == "auroc"]
    families = {name: attack.family for name, attack in ATTACKS.items()}
    for experiment in experiments:
        chosen = rows_of(auroc, experiment)
        plot_roc_loglog(
            rows_of(curves, experiment),
            experiment_file(roc_figures, experiment, "roc", ".png"),
            f"{experiment.dataset} / {experiment.label}",
            auroc=dict(zip(chosen["attack"], chosen["mean"])),
            families=families,
        )


def study_tables(
    *,
    metrics: str | Path,
    models: str | Path,
    sweeps: Paths,
    timings: Paths,
    by_architecture: Paths,
    families: Paths,
    reference_mismatch: Paths,
    metric_tables: Paths,
    gap_figure: str | Path,
    scaling_figures: Paths,
    experiments: Sequence[Experiment],
) -> None:
    """TDDBench's further tables and figures: AUROC across architectures (Table 5), with
    references of another architecture (Table 6), attack families with cost (Table 7), all
    metrics per experiment (Tables 14–16), AUROC against the generalisation gap (Fig. 2) and
    against the number of reference models and queries (Fig. 4)."""
    from miaflow.evaluation.plots import plot_auroc_vs_gap, plot_scaling_sweep

    long = _classifier_metrics(metrics)
    studied = {(e.dataset, e.label) for e in experiments}  # audits are reported, not studied
    long = long[[key in studied for key in zip(long["dataset"], long["target_model"])]]
    means = summary(long)
    family_of = {name: attack.family for name, attack in ATTACKS.items()}
    spent = pd.concat([pd.read_csv(p, sep="\t") for p in timings], ignore_index=True)
    write_outputs(build.auroc_by_architecture(means), by_architecture)
    write_outputs(build.family_table(means, spent, family_of), families)
    architectures = {(e.dataset, e.label): (e.arch, e.ref_arch) for e in experiments}
    write_outputs(build.reference_mismatch_table(means, architectures), reference_mismatch)
    plot_auroc_vs_gap(long, io.read_parquet(models), family_of, gap_figure)
    swept = concat_parquet(sweeps)
    for experiment in experiments:
        table = build.all_metrics_table(means, experiment.dataset, experiment.label)
        write_outputs(table, experiment_table(metric_tables, experiment, "metrics"))
        plot_scaling_sweep(
            rows_of(swept, experiment),
            experiment_file(scaling_figures, experiment, "scaling", ".png"),
            f"{experiment.dataset} / {experiment.label}",
        )


def cost_table(*, benchmarks: Paths, cost: Paths) -> None:
    """Time and peak memory per stage and rule, from every job's benchmark file."""
    from miaflow.runtime.joblog import read_benchmarks

    write_outputs(build.cost_table(read_benchmarks([Path(p) for p in benchmarks])), cost)


def song_mittal_table(*, scores: Paths, song_mittal: Paths) -> None:
    """Song & Mittal's threshold attacks: class-dependent vs global thresholds."""
    from miaflow.attacks.song_mittal import DECISION_THRESHOLDS
    from miaflow.evaluation.song_mittal_tables import song_mittal_table as build

    write_outputs(
        build(concat_parquet(scores, filters=[("attack", "in", sorted(DECISION_THRESHOLDS))])),
        song_mittal,
    )


def defense_report(
    *,
    models: str | Path,
    metrics: str | Path,
    scores: Paths,
    defenses: Paths,
    tradeoff: str | Path,
    risk: str | Path,
    recipes: Sequence[tuple[str, str, str]],
    architectures: Mapping[str, Any],
) -> None:
    """Song & Mittal's defense tables, the utility/privacy trade-off figure and the members'
    privacy risk per defense; `recipes` holds (dataset, target model, architecture) per
    experiment."""
    from miaflow.evaluation.plots import plot_defense_risk_cdfs, plot_defense_tradeoff
    from miaflow.evaluation.song_mittal_tables import DEFENSE_ATTACKS, defense_table

    wanted = sorted({*(a for a in DEFENSE_ATTACKS if a.startswith("sm-")), "sm-risk"})
    read = concat_parquet(scores, filters=[("attack", "in", wanted)])
    table = defense_table(
        io.read_parquet(models),
        _classifier_metrics(metrics),
        read,
        {(d, t): (a, architectures[a]) for d, t, a in recipes},
    )
    write_outputs(table, defenses)
    plot_defense_tradeoff(table, tradeoff)
    plot_defense_risk_cdfs(read[read["attack"] == "sm-risk"], table, risk)


def published_table(*, models: str | Path, metrics: str | Path, table: Paths, profile: str) -> None:
    """This run's target models beside the values their papers publish."""
    from miaflow.evaluation.published import PUBLISHED
    from miaflow.evaluation.published import published_table as build

    write_outputs(
        build(
            pd.read_csv(PUBLISHED), io.read_parquet(models), _classifier_metrics(metrics), profile
        ),
        table,
    )


def risk_score_report(
    *, scores: Paths, risk_precision: Paths, risk_figures: Paths, experiments: Sequence[Experiment]
) -> None:
    """Privacy risk score: precision/recall of r ≥ τ, and one CDF figure per experiment."""
    from miaflow.evaluation.plots import plot_risk_cdf
    from miaflow.evaluation.song_mittal_tables import risk_precision_table

    risk = concat_parquet(scores, filters=[("attack", "==", "sm-risk")])
    write_outputs(risk_precision_table(risk), risk_precision)
    for experiment in experiments:
        plot_risk_cdf(
            rows_of(risk, experiment),
            experiment_file(risk_figures, experiment, "risk-cdf", ".png"),
            f"Privacy risk: {experiment.dataset} / {experiment.label}",
        )


def hparam_report(**files_and_settings: Any) -> None:
    """Tables and figures of the hyperparameter study (`miaflow.hparams.report.write_report`)."""
    from miaflow.hparams.report import write_report

    write_report(**files_and_settings)


def llm_report(**files_and_settings: Any) -> None:
    """The language-model attacks' tables and figures
    (`miaflow.evaluation.llm_outputs.write_report`)."""
    from miaflow.evaluation.llm_outputs import write_report

    write_report(**files_and_settings)


def privacy_report(*, audit: str | Path, table: Paths, figure: str | Path) -> None:
    """The privacy audit's table (its contract's columns) and ε̂ against the claimed ε."""
    from miaflow.privacy.results import audit_table, plot_audit

    rows = io.read_parquet(audit)
    write_outputs(audit_table(rows), table)
    plot_audit(rows, figure)
