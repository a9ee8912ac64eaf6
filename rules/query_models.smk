# Query attacks that train models or optimise inputs (ALGORITHMS.md 3.4): one job per
# (dataset, arch) writes the outputs of its models on pool T under results/train/queries/,
# registered in ATTACK_ARTIFACTS for the attacks that read them.


rule query_transfer:
    """Query-transfer: a surrogate per target model, trained on T relabelled by the target."""
    input:
        data=rules.prepare_dataset.output.data,
        splits=rules.prepare_dataset.output.splits,
        signals=lambda w: expand(rules.train_shard.output.signals, shard=range(len(SHARDS)), **w),
        code=package("data", "splits", "seeding", "signals", "models", "training", "optimizers", "gpu", "query_models"),
    output:
        "results/train/queries/transfer/{dataset}/{arch}.parquet",
    params:
        arch=lambda w: config["architectures"][w.arch],
        options=wf.attack_options(config, "query-transfer"),
        seed=config["seed"],
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(wf.uses_torch(config, w.arch)),
    log:
        "results/train/logs/query_transfer/{dataset}/{arch}.log",
    benchmark:
        "results/train/benchmarks/query_transfer/{dataset}/{arch}.tsv"
    script:
        "../scripts/query_transfer.py"


rule query_qrm:
    """Query-qrm: a Gaussian quantile regressor per target model, fitted on the auxiliary pool."""
    input:
        data=rules.prepare_dataset.output.data,
        splits=rules.prepare_dataset.output.splits,
        signals=lambda w: expand(rules.train_shard.output.signals, shard=range(len(SHARDS)), **w),
        code=package("data", "splits", "seeding", "signals", "models", "training", "optimizers", "gpu", "query_models"),
    output:
        "results/train/queries/qrm/{dataset}/{arch}.parquet",
    params:
        arch=lambda w: config["architectures"][w.arch],
        options=wf.attack_options(config, "query-qrm"),
        seed=config["seed"],
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(wf.uses_torch(config, w.arch)),
    log:
        "results/train/logs/query_qrm/{dataset}/{arch}.log",
    benchmark:
        "results/train/benchmarks/query_qrm/{dataset}/{arch}.tsv"
    script:
        "../scripts/query_qrm.py"


rule query_ref:
    """Query-ref (images): canaries optimised on the reference models, phi under every model."""
    input:
        data=rules.prepare_dataset.output.data,
        splits=rules.prepare_dataset.output.splits,
        models=lambda w: expand(rules.train_shard.output.models, shard=range(len(SHARDS)), **w),
        code=package("data", "splits", "seeding", "signals", "models", "training", "optimizers", "gpu", "query_models"),
    output:
        "results/train/queries/ref/{dataset}/{arch}.parquet",
    params:
        options=wf.attack_options(config, "query-ref"),
        seed=config["seed"],
    threads: config["training"]["threads"]
    resources:
        gpu=1,
    log:
        "results/train/logs/query_ref/{dataset}/{arch}.log",
    benchmark:
        "results/train/benchmarks/query_ref/{dataset}/{arch}.tsv"
    script:
        "../scripts/query_ref.py"


ATTACK_ARTIFACTS["query-transfer"] = {"surrogates": rules.query_transfer.output[0]}
ATTACK_ARTIFACTS["query-qrm"] = {"regressors": rules.query_qrm.output[0]}
ATTACK_ARTIFACTS["query-ref"] = {"canaries": rules.query_ref.output[0]}


def query_model_benchmarks():
    """Benchmark files of the jobs above that the configured attacks need (for the cost table)."""
    jobs = {"query-transfer": rules.query_transfer, "query-qrm": rules.query_qrm,
            "query-ref": rules.query_ref}
    return [jobs[attack].benchmark.format(dataset=d, arch=a) for d, a in EXPERIMENTS
            for attack in wf.attacks_for(config, d, a) if attack in jobs]
