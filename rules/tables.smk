TABLE_FORMATS = (".csv", ".md", ".tex")


rule tables:
    """Paper tables (csv, md, tex) and log-log ROC figures."""
    input:
        metrics=rules.collect_metrics.output.metrics,
        tests=rules.paired_tests.output[0],
        models=rules.collect_models.output[0],
        roc=per_experiment(rules.score_attacks.output.roc),
        code=package("metrics", "tables"),
    output:
        auroc=multiext("results/tables/auroc", *TABLE_FORMATS),
        accuracy=multiext("results/tables/accuracy", *TABLE_FORMATS),
        tests=multiext("results/tables/tests", *TABLE_FORMATS),
        figures=per_experiment("results/figures/roc-{dataset}-{arch}.png"),
    params:
        experiments=EXPERIMENTS,
    log:
        "results/evaluate/logs/tables.log",
    benchmark:
        "results/evaluate/benchmarks/tables/all.tsv"
    script:
        "../scripts/make_tables.py"


rule study_tables:
    """TDDBench Tables 5, 6, 7, 14–16 and Figures 2 and 4 (AUROC vs gap, vs number of references)."""
    input:
        metrics=rules.collect_metrics.output.metrics,
        models=rules.collect_models.output[0],
        sweeps=per_experiment(rules.scaling_sweep.output[0]),
        scoring=per_experiment(rules.score_attacks.output.timings),
        code=package("metrics", "tables", "attacks"),
    output:
        by_architecture=multiext("results/tables/by_architecture", *TABLE_FORMATS),
        families=multiext("results/tables/families", *TABLE_FORMATS),
        reference_mismatch=multiext("results/tables/reference_mismatch", *TABLE_FORMATS),
        per_experiment=[f for suffix in TABLE_FORMATS for f in per_experiment(f"results/tables/metrics-{{dataset}}-{{arch}}{suffix}")],
        gap="results/figures/auroc-vs-gap.png",
        sweeps=per_experiment("results/figures/scaling-{dataset}-{arch}.png"),
    params:
        experiments=EXPERIMENTS,
    log:
        "results/evaluate/logs/study_tables.log",
    benchmark:
        "results/evaluate/benchmarks/study_tables/all.tsv"
    script:
        "../scripts/study_tables.py"


rule cost_table:
    """Time and peak memory per stage and rule, from every job's benchmark file."""
    input:
        benchmarks=[
            *expand(rules.prepare_dataset.benchmark, dataset=wf.datasets(config)),
            *per_shard(rules.train_shard.benchmark),
            *query_model_benchmarks(),
            *QUERY_BENCHMARKS,
            *per_experiment(rules.score_attacks.benchmark),
            *per_experiment(rules.scaling_sweep.benchmark),
            rules.study_tables.benchmark,
            rules.collect_metrics.benchmark,
            rules.collect_models.benchmark,
            rules.paired_tests.benchmark,
            rules.tables.benchmark,
        ],
        code=package("tables"),
    output:
        multiext("results/tables/cost", *TABLE_FORMATS),
    log:
        "results/evaluate/logs/cost_table.log",
    script:
        "../scripts/cost_table.py"


# Song & Mittal analyses (ALGORITHMS.md 5), built only when their attacks are configured.
SONG_MITTAL_THRESHOLD_ATTACKS = [a for a in config["attacks"] if a.startswith("sm-") and a != "sm-risk"]


rule song_mittal_table:
    """Song & Mittal attack accuracy at learned thresholds: class-dependent vs global."""
    input:
        scores=per_experiment(rules.score_attacks.output.scores),
        code=package("tables", "attacks"),
    output:
        multiext("results/tables/song_mittal", *TABLE_FORMATS),
    log:
        "results/evaluate/logs/song_mittal_table.log",
    benchmark:
        "results/evaluate/benchmarks/song_mittal_table/all.tsv"
    script:
        "../scripts/song_mittal_table.py"


rule risk_score_report:
    """Privacy risk score: precision/recall of r ≥ τ and risk CDFs of members vs non-members."""
    input:
        scores=per_experiment(rules.score_attacks.output.scores),
        code=package("tables", "attacks"),
    output:
        table=multiext("results/tables/risk_precision", *TABLE_FORMATS),
        figures=per_experiment("results/figures/risk-cdf-{dataset}-{arch}.png"),
    params:
        experiments=EXPERIMENTS,
    log:
        "results/evaluate/logs/risk_score_report.log",
    benchmark:
        "results/evaluate/benchmarks/risk_score_report/all.tsv"
    script:
        "../scripts/risk_score_report.py"


# Targets of rule `all`.
SONG_MITTAL_OUTPUTS = [
    *(rules.song_mittal_table.output if SONG_MITTAL_THRESHOLD_ATTACKS else []),
    *(rules.risk_score_report.output if "sm-risk" in config["attacks"] else []),
]
