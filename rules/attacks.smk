rule score_attacks:
    """Membership scores (higher = member) of every attack and target model of one experiment."""
    input:
        splits=rules.make_splits.output[0],
        signals=shard_signals(wf.target_arch),
        reference_signals=shard_signals(wf.reference_arch),
        artifacts=lambda w: [ATTACK_ARTIFACTS[a][name].format(**w) for a, name in attack_artifact_names(w)],
        code=package("splits", "signals", "queries", "attacks"),
    output:
        scores="results/evaluate/scores/{dataset}/{arch}.parquet",
        timings="results/evaluate/benchmarks/score_attacks/{dataset}/{arch}.attacks.tsv",
    params:
        attacks=lambda w: wf.attacks_for(config, w.dataset, w.arch),
        options=config.get("attack_options", {}),
        seed=config["seed"],
        artifact_names=lambda w: attack_artifact_names(w),
    log:
        "results/evaluate/logs/score_attacks/{dataset}/{arch}.log",
    benchmark:
        "results/evaluate/benchmarks/score_attacks/{dataset}/{arch}.tsv"
    script:
        "../scripts/score_attacks.py"
