rule compute_signals:
    """Cache every model's outputs on all samples (logits and derived signals) as Parquet."""
    input:
        data=rules.prepare_dataset.output[0],
        models=rules.train_shard.output.models,
        code=package("data", "models", "ensemble", "training", "text", "signals", "gpu"),
    output:
        "results/train/signals/{dataset}/{arch}/shard-{shard}.parquet",
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(wf.uses_torch(config, w.arch)),
    log:
        "results/train/logs/compute_signals/{dataset}/{arch}/shard-{shard}.log",
    benchmark:
        "results/train/benchmarks/compute_signals/{dataset}/{arch}/shard-{shard}.tsv"
    script:
        "../scripts/compute_signals.py"
