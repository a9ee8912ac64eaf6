rule score_attack:
    """Membership scores of one attack for every target model (higher = member)."""
    input:
        splits=rules.make_splits.output[0],
        signals=shard_signals(wf.target_arch),
        reference_signals=shard_signals(wf.reference_arch),
        artifacts=lambda w: [pattern.format(**w) for pattern in ATTACK_ARTIFACTS.get(w.attack, {}).values()],
        code=package("splits", "signals", "queries", "attacks"),
    output:
        "results/evaluate/scores/{dataset}/{arch}/{attack}.parquet",
    params:
        options=lambda w: wf.attack_options(config, w.attack),
        seed=config["seed"],
        artifact_names=lambda w: list(ATTACK_ARTIFACTS.get(w.attack, {})),
    log:
        "results/evaluate/logs/score_attack/{dataset}/{arch}/{attack}.log",
    benchmark:
        "results/evaluate/benchmarks/score_attack/{dataset}/{arch}/{attack}.tsv"
    script:
        "../scripts/score_attack.py"
