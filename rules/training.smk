rule train_shard:
    """Train one shard of models of one experiment and cache their outputs on all samples (signals)."""
    input:
        data=rules.prepare_dataset.output.data,
        splits=rules.prepare_dataset.output.splits,
        code=package("data", "splits", "seeding", "models", "ensemble", "training", "optimizers",
                     "text", "signals", "gpu"),
    output:
        models="results/train/models/{dataset}/{arch}/shard-{shard}.safetensors",
        records="results/train/models/{dataset}/{arch}/shard-{shard}.json",
        signals="results/train/signals/{dataset}/{arch}/shard-{shard}.parquet",
    params:
        model_ids=lambda w: SHARDS[int(w.shard)],
        arch=lambda w: config["architectures"][w.arch],
        seed=config["seed"],
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(wf.uses_torch(config, w.arch)),
    log:
        "results/train/logs/train_shard/{dataset}/{arch}/shard-{shard}.log",
    benchmark:
        "results/train/benchmarks/train_shard/{dataset}/{arch}/shard-{shard}.tsv"
    script:
        "../scripts/train_shard.py"
