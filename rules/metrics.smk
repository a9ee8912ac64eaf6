rule collect_metrics:
    """The results/metrics.parquet contract (long format) and DVC's metrics summary."""
    input:
        metrics=per_experiment(rules.score_attacks.output.metrics),
        code=package("metrics"),
    output:
        metrics="results/metrics.parquet",
        summary="results/summary.json",
    log:
        "results/evaluate/logs/collect_metrics.log",
    benchmark:
        "results/evaluate/benchmarks/collect_metrics/all.tsv"
    script:
        "../scripts/collect_metrics.py"


rule collect_models:
    """Train/test accuracy of every trained model in one table."""
    input:
        records=per_shard(rules.train_shard.output.records),
        code=package(),
    output:
        "results/evaluate/models.parquet",
    log:
        "results/evaluate/logs/collect_models.log",
    benchmark:
        "results/evaluate/benchmarks/collect_models/all.tsv"
    script:
        "../scripts/collect_models.py"


rule scaling_sweep:
    """AUROC with 2, 4, … reference models and with 1, 2, 5, … queries (TDDBench Fig. 4)."""
    input:
        splits=rules.prepare_dataset.output.splits,
        signals=shard_signals(wf.target_arch),
        reference_signals=shard_signals(wf.reference_arch),
        artifacts=lambda w: [ATTACK_ARTIFACTS[a][name].format(**w)
                             for a, name in swept_artifacts(w)],
        code=package("splits", "signals", "queries", "attacks", "optimizers"),
    output:
        "results/evaluate/sweep/{dataset}/{arch}.parquet",
    params:
        reference_attacks=wf.swept_attacks(config),
        reference_counts=wf.reference_counts(config),
        query_attacks=lambda w: wf.swept_query_attacks(config, w.dataset, w.arch),
        artifact_names=swept_artifacts,
        options=config.get("attack_options", {}),
        seed=config["seed"],
    log:
        "results/evaluate/logs/scaling_sweep/{dataset}/{arch}.log",
    benchmark:
        "results/evaluate/benchmarks/scaling_sweep/{dataset}/{arch}.tsv"
    script:
        "../scripts/scaling_sweep.py"
