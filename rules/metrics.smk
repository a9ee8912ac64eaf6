rule compute_metrics:
    """All metrics per attack and target model, with Clopper-Pearson intervals and ROC curves."""
    input:
        scores=lambda w: expand(rules.score_attack.output[0], attack=wf.attacks_for(config, w.dataset, w.arch), **w),
        code=package("metrics"),
    output:
        metrics="results/evaluate/metrics/{dataset}/{arch}.parquet",
        roc="results/evaluate/roc/{dataset}/{arch}.parquet",
    params:
        fpr_levels=config["metrics"]["fpr_levels"],
        confidence=config["metrics"]["confidence"],
    log:
        "results/evaluate/logs/compute_metrics/{dataset}/{arch}.log",
    benchmark:
        "results/evaluate/benchmarks/compute_metrics/{dataset}/{arch}.tsv"
    script:
        "../scripts/compute_metrics.py"


rule collect_metrics:
    """The results/metrics.parquet contract (long format) and DVC's metrics summary."""
    input:
        metrics=per_experiment(rules.compute_metrics.output.metrics),
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


rule reference_sweep:
    """AUROC of the reference-based attacks with 2, 4, … up to all reference models."""
    input:
        splits=rules.make_splits.output[0],
        signals=shard_signals(wf.target_arch),
        reference_signals=shard_signals(wf.reference_arch),
        code=package("splits", "signals", "attacks"),
    output:
        "results/evaluate/sweep/{dataset}/{arch}.parquet",
    params:
        attacks=wf.swept_attacks(config),
        counts=wf.reference_counts(config),
        options=config.get("attack_options", {}),
        seed=config["seed"],
    log:
        "results/evaluate/logs/reference_sweep/{dataset}/{arch}.log",
    benchmark:
        "results/evaluate/benchmarks/reference_sweep/{dataset}/{arch}.tsv"
    script:
        "../scripts/reference_sweep.py"
