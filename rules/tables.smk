TABLE_FORMATS = (".csv", ".md", ".tex")


rule tables:
    """Paper tables (csv, md, tex) and log-log ROC figures."""
    input:
        metrics=rules.collect_metrics.output.metrics,
        tests=rules.paired_tests.output[0],
        models=rules.collect_models.output[0],
        roc=per_experiment(rules.compute_metrics.output.roc),
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


rule cost_table:
    """Time and peak memory per stage and rule, from every job's benchmark file."""
    input:
        benchmarks=[
            *expand(rules.prepare_dataset.benchmark, dataset=wf.datasets(config)),
            *expand(rules.make_splits.benchmark, dataset=wf.datasets(config)),
            *per_shard(rules.train_shard.benchmark),
            *per_shard(rules.compute_signals.benchmark),
            *QUERY_BENCHMARKS,
            *[f for a in config["attacks"] for f in per_experiment(rules.score_attack.benchmark, attack=a)],
            *per_experiment(rules.compute_metrics.benchmark),
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
