# Stage train: target, reference and population models in shards, and their per-sample outputs
# on every sample, the signal store that attacks read (miaflow.jobs.train).


rule train_shard:
    """Train one shard of models of one architecture on one dataset and cache their outputs on
    all samples (signals)."""
    input:
        data=DATA,
        splits=SPLITS,
        code=code("train.train_shard"),
    output:
        models=MODELS,
        records=RECORDS,
        signals=SIGNALS,
    log:
        "records/train/logs/train_shard/{dataset}/{arch}/shard-{shard}.log",
    benchmark:
        "records/train/benchmarks/train_shard/{dataset}/{arch}/shard-{shard}.tsv"
    priority: LONG_CHAIN
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(plan.uses_torch(config, w.arch)),
    params:
        model_ids=lambda w: SHARDS[int(w.shard)],
        arch_name=lambda w: w.arch,
        arch=lambda w: config["architectures"][w.arch],
        seed=config["seed"],
    script:
        "../scripts/train_shard.py"


rule train:
    """Target of the train stage (DVC stage `train`)."""
    input:
        per_shard(MODELS),
        per_shard(RECORDS),
        per_shard(SIGNALS),
    localrule: True
