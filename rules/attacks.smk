rule score_attacks:
    """Membership scores of every attack and target model of one experiment, their metrics and ROC."""
    input:
        splits=rules.prepare_dataset.output.splits,
        signals=shard_signals(wf.target_arch),
        reference_signals=shard_signals(wf.reference_arch),
        artifacts=lambda w: [ATTACK_ARTIFACTS[a][name].format(**w) for a, name in attack_artifact_names(w)],
        code=package("splits", "signals", "queries", "attacks", "optimizers", "metrics"),
    output:
        scores="results/evaluate/scores/{dataset}/{arch}.parquet",
        timings="results/evaluate/benchmarks/score_attacks/{dataset}/{arch}.attacks.tsv",
        metrics="results/evaluate/metrics/{dataset}/{arch}.parquet",  # with Clopper-Pearson intervals
        roc="results/evaluate/roc/{dataset}/{arch}.parquet",
    params:
        attacks=lambda w: wf.attacks_for(config, w.dataset, w.arch),
        options=config.get("attack_options", {}),
        seed=config["seed"],
        artifact_names=lambda w: attack_artifact_names(w),
        fpr_levels=config["metrics"]["fpr_levels"],
        confidence=config["metrics"]["confidence"],
    log:
        "results/evaluate/logs/score_attacks/{dataset}/{arch}.log",
    benchmark:
        "results/evaluate/benchmarks/score_attacks/{dataset}/{arch}.tsv"
    script:
        "../scripts/score_attacks.py"
