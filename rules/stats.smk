rule paired_tests:
    """Paired one-sided t- and permutation tests between attacks, Benjamini-Yekutieli adjusted."""
    input:
        metrics=rules.collect_metrics.output.metrics,
        code=package("stats"),
    output:
        "results/evaluate/tests.parquet",
    params:
        metrics=config["stats"]["metrics"],
        alpha=config["stats"]["alpha"],
    log:
        "results/evaluate/logs/paired_tests.log",
    benchmark:
        "results/evaluate/benchmarks/paired_tests/all.tsv"
    script:
        "../scripts/paired_tests.py"
