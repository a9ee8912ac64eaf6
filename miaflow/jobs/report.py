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
from miaflow.jobs.common import Paths
from miaflow.plan import Experiment


def _file_named(paths: Paths, name: str) -> Path:
    """The one path among `paths` whose file name is `name`."""
    matches = [Path(p) for p in paths if Path(p).name == name]
    if len(matches) != 1:
        raise ValueError(f"expected one output named {name!r} among {sorted(map(str, paths))}")
    return matches[0]


def _stem(paths: Paths) -> Path:
    """The common stem of a table's files (`multiext(stem, ".csv", ".md", ".tex")` outputs)."""
    stems = {Path(p).with_suffix("") for p in paths}
    if len(stems) != 1:
        raise ValueError(f"the files of one table must share a stem, got {sorted(map(str, paths))}")
    return stems.pop()


def _write(table: pd.DataFrame, paths: Paths) -> None:
    from miaflow.evaluation.tables import write_table

    write_table(table, _stem(paths), table.attrs["caption"])


def _concat(paths: Paths, **read: Any) -> pd.DataFrame:
    return pd.concat([io.read_parquet(p, **read) for p in paths], ignore_index=True)


def _rows_of(frame: pd.DataFrame, experiment: Experiment) -> pd.DataFrame:
    """The rows of `frame` (columns dataset and target_model) that belong to `experiment`."""
    return frame[
        (frame["dataset"] == experiment.dataset) & (frame["target_model"] == experiment.label)
    ]


def _classifier_metrics(metrics: str | Path) -> pd.DataFrame:
    """The metrics contract without the language-model attacks, which `llm_report` tabulates."""
    from miaflow.attacks.registry import ATTACKS

    long = io.read_parquet(metrics)
    return long[[ATTACKS[a].family != "llm" for a in long["attack"]]].reset_index(drop=True)


def collect_metrics(*, experiment_metrics: Paths, metrics: str | Path, summary: str | Path) -> None:
    """The `results/metrics.parquet` contract and DVC's metrics file, a headline that `dvc
    metrics show` prints in a few lines: per experiment, the attack of the highest mean AUROC
    (`miaflow.tools.summary.best_attacks`), its AUROC (mean, std), its TPR at 1% FPR (or the
    lowest FPR measured) and the number of target models. Every metric stays in `metrics`."""
    from miaflow.tools.summary import best_attacks

    long = _concat(experiment_metrics)
    io.write_parquet(metrics, long)
    headline = {}
    for row in best_attacks(long).itertuples(index=False):
        headline[f"{row.dataset}/{row.target_model}"] = {
            "best_attack": row.attack,
            "auroc": _rounded(row.auroc),
            "auroc_std": _rounded(row.auroc_std),
            "target_models": int(row.target_models),
            **({} if row.tpr_metric is None else {row.tpr_metric: _rounded(row.tpr)}),
        }
    io.write_json(summary, headline)


def _rounded(value: float) -> float | None:
    """Six decimals; None (JSON null) for NaN, e.g. the std of one target model."""
    return None if pd.isna(value) else round(float(value), 6)


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
    from miaflow.attacks.registry import ATTACKS
    from miaflow.evaluation.stats import paired_tests as run_tests

    family_of = {name: attack.family for name, attack in ATTACKS.items()}
    io.write_parquet(
        tests,
        run_tests(
            io.read_parquet(metrics),
            _concat(scores),
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
    """Headline tables (csv, md, tex) and one log-log ROC figure per experiment."""
    from miaflow.attacks.registry import ATTACKS
    from miaflow.evaluation import tables as build
    from miaflow.evaluation.metrics import summary
    from miaflow.evaluation.plots import plot_roc_loglog

    means = summary(_classifier_metrics(metrics))
    _write(build.auroc_table(means), auroc_table)
    _write(build.accuracy_table(io.read_parquet(models)), accuracy_table)
    build.write_tests_table(io.read_parquet(tests), _stem(tests_table))
    curves = _concat(roc)
    auroc = means[means["metric"] == "auroc"]
    for experiment in experiments:
        chosen = _rows_of(auroc, experiment)
        plot_roc_loglog(
            _rows_of(curves, experiment),
            _file_named(roc_figures, experiment.file_name("roc", ".png")),
            f"{experiment.dataset} / {experiment.label}",
            auroc=dict(zip(chosen["attack"], chosen["mean"])),
            families={name: attack.family for name, attack in ATTACKS.items()},
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
    from miaflow.attacks.registry import ATTACKS
    from miaflow.evaluation import tables as build
    from miaflow.evaluation.metrics import summary
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
    for experiment in experiments:
        table = build.all_metrics_table(means, experiment.dataset, experiment.label)
        stem = experiment.file_name("metrics", "")
        _write(table, [p for p in metric_tables if Path(p).with_suffix("").name == stem])
    plot_auroc_vs_gap(long, io.read_parquet(models), family_of, gap_figure)
    swept = _concat(sweeps)
    for experiment in experiments:
        plot_scaling_sweep(
            _rows_of(swept, experiment),
            _file_named(scaling_figures, experiment.file_name("scaling", ".png")),
            f"{experiment.dataset} / {experiment.label}",
        )


def cost_table(*, benchmarks: Paths, cost: Paths) -> None:
    """Time and peak memory per stage and rule, from every job's benchmark file."""
    from miaflow.evaluation import tables as build
    from miaflow.runtime.joblog import read_benchmarks

    _write(build.cost_table(read_benchmarks([Path(p) for p in benchmarks])), cost)


def song_mittal_table(*, scores: Paths, song_mittal: Paths) -> None:
    """Song & Mittal's threshold attacks: class-dependent vs global thresholds."""
    from miaflow.attacks.song_mittal import DECISION_THRESHOLDS
    from miaflow.evaluation.song_mittal_tables import song_mittal_table as build

    _write(
        build(_concat(scores, filters=[("attack", "in", sorted(DECISION_THRESHOLDS))])), song_mittal
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
    read = _concat(scores, filters=[("attack", "in", wanted)])
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

    risk = _concat(scores, filters=[("attack", "==", "sm-risk")])
    _write(risk_precision_table(risk), risk_precision)
    for experiment in experiments:
        plot_risk_cdf(
            _rows_of(risk, experiment),
            _file_named(risk_figures, experiment.file_name("risk-cdf", ".png")),
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
    from miaflow.evaluation import hparam_figures as draw
    from miaflow.evaluation import hparam_tables as build
    from miaflow.evaluation.hparam_baselines import plot_baselines
    from miaflow.evaluation.hparam_blackbox import blackbox_table, plot_blackbox
    from miaflow.seeding import derive_seed

    results = io.read_parquet(study)
    curves, limits, chosen = (io.read_parquet(path) for path in (roc, bound, selection))
    tests = build.td_vs_ed_tests(results, alpha, resamples, derive_seed(seed, "td-vs-ed"))
    for table, paths in (
        (build.headline_table(results), headline),
        (build.relative_tpr_table(results), relative),
        (build.kl_budget_table(results), budget),
        (tests, td_vs_ed),
        (build.selection_table(chosen), choices),
        (build.baselines_table(results), baselines),
        (blackbox_table(results), blackbox),
    ):
        _write(table, paths)
    for setting, part in curves.groupby("setting"):
        draw.plot_study_roc(
            part,
            limits,
            _file_named(roc_figures, f"hparam-roc-{setting}.png"),
            f"LiRA, ACC-LiRA and KL-LiRA: {setting}",
            draw.lowest_measured_fpr(results[results["setting"] == setting]),
        )
    named = {Path(p).stem.removeprefix("hparam-"): p for p in figures}
    draw.plot_relative_tpr(results, named["relative-tpr"], "TPR relative to LiRA")
    draw.plot_kl_budget(
        results[results["hpo"] == "td"], named["kl-budget"], "KL-LiRA with reduced budgets"
    )
    draw.plot_td_vs_ed(results, named["td-vs-ed"], "TD-HPO vs ED-HPO", confidence)
    draw.plot_pvalues(tests, named["pvalues"], "TD-HPO vs ED-HPO: p-values", alpha)
    draw.plot_selection(chosen, named["selection"], "KL-LiRA's choice against the target's")
    plot_baselines(results, named["baselines"], "LiRA and attacks without shadow calibration")
    plot_blackbox(results, named["blackbox"], "Shadows on the targets' backbone or another")


def llm_report(
    *,
    metrics: Paths,
    iterates: Paths,
    prefix_fit: Paths,
    setting_metrics: Paths,
    llm_table: Paths,
    mink_sweep_table: Paths,
    settings_table: Paths,
    em_figure: str | Path,
    mink_figure: str | Path,
    settings_figure: str | Path,
) -> None:
    """The language-model attacks' table in EM-MIA's shape (label-using attacks marked, the
    share of ReCaLL targets with a cut prefix beside them), the Min-K% / Min-K%++ k sweep, and
    EM-MIA's per-iteration AUROC (a diagnostic using labels); the attacks on EM-MIA's benchmark
    settings (`setting_metrics`) in a table and figure."""
    from miaflow.attacks.registry import ATTACKS, LLM
    from miaflow.evaluation import llm_report as build
    from miaflow.evaluation import llm_settings_report as on_settings
    from miaflow.evaluation.metrics import METRICS_COLUMNS
    from miaflow.evaluation.tables import write_table

    knowledge = {name: attack.knowledge for name, attack in ATTACKS.items() if attack.family == LLM}
    long = _concat(metrics) if metrics else pd.DataFrame(columns=METRICS_COLUMNS)
    settings = (
        _concat(setting_metrics) if setting_metrics else pd.DataFrame(columns=METRICS_COLUMNS)
    )
    table = on_settings.settings_table(settings, knowledge)
    write_table(
        table, _stem(settings_table), table.attrs["caption"], on_settings.settings_markdown(table)
    )
    on_settings.plot_settings(table, settings_figure)
    fits = _concat(prefix_fit) if prefix_fit else None
    _write(build.llm_table(long, knowledge, prefix_fit=fits), llm_table)
    _write(build.mink_sweep_table(long, knowledge), mink_sweep_table)
    build.plot_em_iterations(
        _concat(iterates)
        if iterates
        else pd.DataFrame(
            columns=["dataset", "target_model", "repeat", "attack", "iteration", "auroc"]
        ),
        em_figure,
    )
    build.plot_mink_sweep(long, mink_figure)
