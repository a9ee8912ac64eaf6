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
from miaflow.attacks.registry import ATTACKS, LLM
from miaflow.evaluation import tables as build
from miaflow.evaluation.metrics import METRICS_COLUMNS, RUN_KEYS, SCORES_COLUMNS, summary
from miaflow.evaluation.tables import write_table
from miaflow.jobs.common import (
    Paths,
    concat_parquet,
    experiment_file,
    experiment_table,
    file_named,
    rows_of,
    table_stem,
)
from miaflow.plan import Experiment


def _write(table: pd.DataFrame, paths: Paths) -> None:
    """A table builder's table (its caption in `attrs`) to the files of one table output."""
    write_table(table, table_stem(paths), table.attrs["caption"])


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
    each operating point at the membership priors (`ppv_*`, target calibration)."""
    from miaflow.evaluation.operating_points import ppv_metrics

    points = io.read_parquet(operating_points)
    long = pd.concat(
        [concat_parquet(experiment_metrics, METRICS_COLUMNS), ppv_metrics(points, priors)],
        ignore_index=True,
    )
    io.write_parquet(metrics, long.sort_values(RUN_KEYS, kind="stable", ignore_index=True))


def verdicts(
    *,
    metrics: str | Path,
    scores: Paths,
    selection: Paths,
    rankings: str | Path,
    verdicts: str | Path,
    summary: str | Path,
    headline: str | Path,
    verdicts_table: Paths,
    low_fpr: float,
    alpha: float,
    n_resamples: int,
    seed: int,
) -> None:
    """Both rankings of every experiment and setting (AUROC, TPR at `low_fpr`) with the attacks
    not separated from each best, the flags, and a language-model selection's separability
    beside them: results/summary.json, one DVC metrics file per experiment (`headline`), the
    verdicts table the summary lines are printed from and its display (csv, md, tex)."""
    from miaflow.evaluation import headline as say
    from miaflow.evaluation import verdicts as judge
    from miaflow.llm.separability import selection_table

    read = concat_parquet(scores, SCORES_COLUMNS)
    ranked = judge.rankings(io.read_parquet(metrics), read, low_fpr, alpha, n_resamples, seed)
    table = judge.verdicts(ranked)
    best = dict(zip(zip(table["dataset"], table["target_model"]), table["best_attack"]))
    separable = concat_parquet(selection) if selection else None
    chosen = None if separable is None else selection_table(separable, read, best, seed=seed)
    table = say.with_selection(table, chosen)
    io.write_parquet(rankings, ranked)
    io.write_parquet(verdicts, table)
    io.write_json(summary, say.summary_json(table))
    _write(say.verdict_table(table), verdicts_table)
    with io.atomic_directory(headline) as folder:
        for name, entry in say.headline_files(table).items():
            io.write_json(folder / name, entry)


def stability_table(*, scores: Paths, stability: Paths, low_fpr: float) -> None:
    """Coverage, stability and Jaccard overlap of the members each attack flags at `low_fpr`
    across the target models of every experiment (miaflow.evaluation.stability)."""
    from miaflow.evaluation.stability import stability_table as build

    _write(build(concat_parquet(scores, SCORES_COLUMNS), low_fpr), stability)


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
    _write(build.auroc_table(means, tested), auroc_table)
    _write(build.accuracy_table(io.read_parquet(models)), accuracy_table)
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
    _write(build.auroc_by_architecture(means), by_architecture)
    _write(build.family_table(means, spent, family_of), families)
    architectures = {(e.dataset, e.label): (e.arch, e.ref_arch) for e in experiments}
    _write(build.reference_mismatch_table(means, architectures), reference_mismatch)
    plot_auroc_vs_gap(long, io.read_parquet(models), family_of, gap_figure)
    swept = concat_parquet(sweeps)
    for experiment in experiments:
        table = build.all_metrics_table(means, experiment.dataset, experiment.label)
        _write(table, experiment_table(metric_tables, experiment, "metrics"))
        plot_scaling_sweep(
            rows_of(swept, experiment),
            experiment_file(scaling_figures, experiment, "scaling", ".png"),
            f"{experiment.dataset} / {experiment.label}",
        )


def cost_table(*, benchmarks: Paths, cost: Paths) -> None:
    """Time and peak memory per stage and rule, from every job's benchmark file."""
    from miaflow.runtime.joblog import read_benchmarks

    _write(build.cost_table(read_benchmarks([Path(p) for p in benchmarks])), cost)


def song_mittal_table(*, scores: Paths, song_mittal: Paths) -> None:
    """Song & Mittal's threshold attacks: class-dependent vs global thresholds."""
    from miaflow.attacks.song_mittal import DECISION_THRESHOLDS
    from miaflow.evaluation.song_mittal_tables import song_mittal_table as build

    _write(
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
    _write(table, defenses)
    plot_defense_tradeoff(table, tradeoff)
    plot_defense_risk_cdfs(read[read["attack"] == "sm-risk"], table, risk)


def published_table(*, models: str | Path, metrics: str | Path, table: Paths, profile: str) -> None:
    """This run's target models beside the values their papers publish."""
    from miaflow.evaluation.published import PUBLISHED
    from miaflow.evaluation.published import published_table as build

    _write(
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
    _write(risk_precision_table(risk), risk_precision)
    for experiment in experiments:
        plot_risk_cdf(
            rows_of(risk, experiment),
            experiment_file(risk_figures, experiment, "risk-cdf", ".png"),
            f"Privacy risk: {experiment.dataset} / {experiment.label}",
        )


def hparam_report(
    *,
    study: str | Path,
    bound: str | Path,
    roc: str | Path,
    selection: str | Path,
    headline: Paths,
    relative: Paths,
    budget: Paths,
    td_vs_ed: Paths,
    choices: Paths,
    baselines: Paths,
    blackbox: Paths,
    roc_figures: Paths,
    figures: Paths,
    alpha: float,
    resamples: int | None,
    confidence: float,
    seed: int,
) -> None:
    """Tables and figures of the hyperparameter study (docs/algorithms.md#hyperparameter-study)."""
    from miaflow.hparams.report import draw_study, study_tables
    from miaflow.hparams.tables import td_vs_ed_tests
    from miaflow.seeding import derive_seed

    results = io.read_parquet(study)
    curves, limits, chosen = (io.read_parquet(path) for path in (roc, bound, selection))
    tests = td_vs_ed_tests(results, alpha, resamples, derive_seed(seed, "td-vs-ed"))
    paths = {
        "headline": headline,
        "relative": relative,
        "budget": budget,
        "td_vs_ed": td_vs_ed,
        "choices": choices,
        "baselines": baselines,
        "blackbox": blackbox,
    }
    for name, table in study_tables(results, chosen, tests).items():
        _write(table, paths[name])
    draw_study(
        results,
        curves,
        limits,
        chosen,
        tests,
        lambda setting: file_named(roc_figures, f"hparam-roc-{setting}.png"),
        {Path(p).stem.removeprefix("hparam-"): p for p in figures},
        alpha,
        confidence,
    )


def llm_report(
    *,
    metrics: Paths,
    iterates: Paths,
    prefix_fit: Paths,
    setting_metrics: Paths,
    trap_metrics: Paths,
    inference: Paths,
    selection: Paths,
    llm_table: Paths,
    mink_sweep_table: Paths,
    settings_table: Paths,
    traps_table: Paths,
    inference_table: Paths,
    em_figure: str | Path,
    mink_figure: str | Path,
    settings_figure: str | Path,
    traps_figure: str | Path,
    inference_figure: str | Path,
    alpha: float,
) -> None:
    """The language-model attacks' table in EM-MIA's shape (label-using attacks marked, the
    share of ReCaLL targets with a cut prefix beside them), the Min-K% / Min-K%++ k sweep, and
    EM-MIA's per-iteration AUROC (a diagnostic using labels); the attacks on EM-MIA's benchmark
    settings (`setting_metrics`) and on copyright traps (`trap_metrics`) in a table and figure
    each, beside the attacks the AUROC of the selection alone (`selection`,
    miaflow.llm.separability); dataset inference's tests and their rejection rates at `alpha`."""
    from miaflow.attacks.llm_inputs import ITERATE_COLUMNS
    from miaflow.evaluation import llm_inference_report as on_inference
    from miaflow.evaluation import llm_report as build
    from miaflow.evaluation import llm_settings_report as on_settings
    from miaflow.evaluation import llm_traps_report as on_traps
    from miaflow.llm.separability import SELECTION

    knowledge = {name: attack.knowledge for name, attack in ATTACKS.items() if attack.family == LLM}
    knowledge[SELECTION] = "selection"
    long, on_sets = on_settings.beside_attacks(
        concat_parquet(metrics, METRICS_COLUMNS),
        concat_parquet(setting_metrics, METRICS_COLUMNS),
        on_settings.selection_metrics(concat_parquet(selection)) if selection else None,
    )
    table = on_settings.settings_table(on_sets, knowledge)
    markdown = on_settings.settings_markdown(table)
    write_table(table, table_stem(settings_table), table.attrs["caption"], markdown)
    on_settings.plot_settings(table, settings_figure)
    fits = concat_parquet(prefix_fit) if prefix_fit else None
    _write(build.llm_table(long, knowledge, prefix_fit=fits), llm_table)
    _write(build.mink_sweep_table(long, knowledge), mink_sweep_table)
    build.plot_em_iterations(concat_parquet(iterates, ITERATE_COLUMNS), em_figure)
    build.plot_mink_sweep(long, mink_figure)
    traps = concat_parquet(trap_metrics, METRICS_COLUMNS)
    on_traps.write_traps(traps, knowledge, table_stem(traps_table), traps_figure)
    tests = concat_parquet(inference, on_inference.COLUMNS)
    on_inference.write_inference(tests, alpha, table_stem(inference_table), inference_figure)


def privacy_report(*, audit: str | Path, table: Paths, figure: str | Path) -> None:
    """The privacy audit's table (its contract's columns) and ε̂ against the claimed ε."""
    from miaflow.privacy.results import audit_table, plot_audit

    rows = io.read_parquet(audit)
    _write(audit_table(rows), table)
    plot_audit(rows, figure)
