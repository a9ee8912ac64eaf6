# Stage report: the metrics contract, statistical tests, paper tables and figures, the cost of
# every stage (miaflow.jobs.report). The headline outputs live at the top of results/.

SONG_MITTAL_TABLE = [a for a in config["attacks"] if a.startswith("sm-") and a != "sm-risk"]
RISK_REPORT = "sm-risk" in config["attacks"]


rule collect_metrics:
    """The results/metrics.parquet contract (long format) and DVC's metrics summary."""
    input:
        experiment_metrics=per_experiment(EXPERIMENT_METRICS) + per_llm_experiment(LLM_METRICS),
        code=code("report"),
    output:
        metrics=METRICS,
        summary="results/summary.json",
    conda:
        SOFTWARE
    log:
        "records/report/logs/collect_metrics.log",
    benchmark:
        "records/report/benchmarks/collect_metrics/all.tsv"
    script:
        "../scripts/collect_metrics.py"


rule collect_models:
    """Train/test accuracy of every trained model in one table."""
    input:
        records=per_shard(RECORDS),
        code=code("report"),
    output:
        models=MODEL_RECORDS,
    conda:
        SOFTWARE
    log:
        "records/report/logs/collect_models.log",
    benchmark:
        "records/report/benchmarks/collect_models/all.tsv"
    script:
        "../scripts/collect_models.py"


rule paired_tests:
    """Paired one-sided t- and permutation tests between attacks, Benjamini-Yekutieli adjusted."""
    input:
        metrics=METRICS,
        code=code("report"),
    output:
        tests=TESTS,
    params:
        tested_metrics=config["stats"]["metrics"],
        alpha=config["stats"]["alpha"],
    conda:
        SOFTWARE
    log:
        "records/report/logs/paired_tests.log",
    benchmark:
        "records/report/benchmarks/paired_tests/all.tsv"
    script:
        "../scripts/paired_tests.py"


rule tables:
    """Headline tables (csv, md, tex) and log-log ROC figures."""
    input:
        metrics=METRICS,
        tests=TESTS,
        models=MODEL_RECORDS,
        roc=per_experiment(ROC),
        code=code("report"),
    output:
        auroc_table=multiext("results/tables/auroc", *TABLE_FORMATS),
        accuracy_table=multiext("results/tables/accuracy", *TABLE_FORMATS),
        tests_table=multiext("results/tables/tests", *TABLE_FORMATS),
        roc_figures=experiment_files("roc", ".png", "results/figures"),
    params:
        experiments=EXPERIMENTS,
    conda:
        SOFTWARE
    log:
        "records/report/logs/tables.log",
    benchmark:
        "records/report/benchmarks/tables/all.tsv"
    script:
        "../scripts/tables.py"


rule study_tables:
    """TDDBench Tables 5, 6, 7, 14–16 and Figures 2 and 4 (AUROC vs gap, vs number of references)."""
    input:
        metrics=METRICS,
        models=MODEL_RECORDS,
        sweeps=per_experiment(SWEEP),
        timings=per_experiment(ATTACK_TIMINGS),
        code=code("report"),
    output:
        by_architecture=multiext("results/tables/by_architecture", *TABLE_FORMATS),
        families=multiext("records/report/families", *TABLE_FORMATS),
        reference_mismatch=multiext("results/tables/reference_mismatch", *TABLE_FORMATS),
        metric_tables=[path for suffix in TABLE_FORMATS
                       for path in experiment_files("metrics", suffix, "results/tables")],
        gap_figure="results/figures/auroc-vs-gap.png",
        scaling_figures=experiment_files("scaling", ".png", "results/figures"),
    params:
        experiments=EXPERIMENTS,
    conda:
        SOFTWARE
    log:
        "records/report/logs/study_tables.log",
    benchmark:
        "records/report/benchmarks/study_tables/all.tsv"
    script:
        "../scripts/study_tables.py"


rule song_mittal_table:
    """Song & Mittal attack accuracy at learned thresholds: class-dependent vs global."""
    input:
        scores=per_experiment(SCORES),
        code=code("report"),
    output:
        song_mittal=multiext("results/tables/song_mittal", *TABLE_FORMATS),
    conda:
        SOFTWARE
    log:
        "records/report/logs/song_mittal_table.log",
    benchmark:
        "records/report/benchmarks/song_mittal_table/all.tsv"
    script:
        "../scripts/song_mittal_table.py"


rule risk_score_report:
    """Privacy risk score: precision/recall of r ≥ τ and risk CDFs of members vs non-members."""
    input:
        scores=per_experiment(SCORES),
        code=code("report"),
    output:
        risk_precision=multiext("results/tables/risk_precision", *TABLE_FORMATS),
        risk_figures=experiment_files("risk-cdf", ".png", "results/figures"),
    params:
        experiments=EXPERIMENTS,
    conda:
        SOFTWARE
    log:
        "records/report/logs/risk_score_report.log",
    benchmark:
        "records/report/benchmarks/risk_score_report/all.tsv"
    script:
        "../scripts/risk_score_report.py"


rule hparam_report:
    """The hyperparameter study's tables and figures: TPR per attack, setting and epsilon; KL-LiRA's
    budget; the TD-HPO vs ED-HPO tests (BY-adjusted); ROC with the DP bound; KL-LiRA's choices."""
    input:
        study=HPARAM_STUDY,
        bound=DP_BOUND,
        roc=HPARAM_ROC_ALL,
        selection=HPARAM_SELECTION_ALL,
        code=code("report"),
    output:
        headline=multiext("results/tables/hparam_tpr", *TABLE_FORMATS),
        relative=multiext("results/tables/hparam_relative_tpr", *TABLE_FORMATS),
        budget=multiext("results/tables/hparam_kl_budget", *TABLE_FORMATS),
        td_vs_ed=multiext("results/tables/hparam_td_vs_ed", *TABLE_FORMATS),
        choices=multiext("results/tables/hparam_selection", *TABLE_FORMATS),
        roc_figures=expand("results/figures/hparam-roc-{setting}.png", setting=list(HPARAM_SETTINGS)),
        figures=expand("results/figures/hparam-{name}.png",
                       name=["relative-tpr", "kl-budget", "td-vs-ed", "pvalues", "selection"]),
    params:
        alpha=config["stats"]["alpha"],
        resamples=config["hparam_study"]["permutation_resamples"],
        confidence=config["metrics"]["confidence"],
        seed=config["seed"],
    conda:
        SOFTWARE
    log:
        "records/report/logs/hparam_report.log",
    benchmark:
        "records/report/benchmarks/hparam_report/all.tsv"
    script:
        "../scripts/hparam_report.py"


rule llm_report:
    """Language-model attacks: EM-MIA's table shape (AUROC, TPR at 1% and 5% FPR; label-using
    attacks marked), the Min-K% k sweep, EM-MIA's per-iteration AUROC (diagnostic, uses labels)."""
    input:
        metrics=per_llm_experiment(LLM_METRICS),
        iterates=per_llm_experiment(LLM_ITERATES),
        code=code("report"),
    output:
        llm_table=multiext("results/tables/llm", *TABLE_FORMATS),
        mink_sweep_table=multiext("results/tables/llm_mink_sweep", *TABLE_FORMATS),
        em_figure="results/figures/llm-em-iterations.png",
        mink_figure="results/figures/llm-mink-sweep.png",
    conda:
        SOFTWARE
    log:
        "records/report/logs/llm_report.log",
    benchmark:
        "records/report/benchmarks/llm_report/all.tsv"
    script:
        "../scripts/llm_report.py"


rule cost_table:
    """Time and peak memory per stage and rule, from the benchmark file of every job of the run."""
    input:
        benchmarks=lambda w: benchmarks_of(stage_targets("prepare", "train", "queries", "evaluate",
                                                         "hparams", "llm", "report")),
        code=code("report"),
    output:
        cost=multiext("records/report/cost", *TABLE_FORMATS),
    conda:
        SOFTWARE
    log:
        "records/report/logs/cost_table.log",
    script:
        "../scripts/cost_table.py"


rule report:
    """Target of the report stage (DVC stage `report`): the metrics contract, tables, figures."""
    input:
        rules.collect_metrics.output,
        rules.collect_models.output,
        rules.paired_tests.output,
        rules.tables.output,
        rules.study_tables.output,
        rules.song_mittal_table.output if SONG_MITTAL_TABLE else [],
        rules.risk_score_report.output if RISK_REPORT else [],
        rules.hparam_report.output if HPARAM_SETTINGS else [],
        rules.llm_report.output if LLM_EXPERIMENTS else [],
        rules.cost_table.output,
    localrule: True
