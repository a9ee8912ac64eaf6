# Query-based attacks (ALGORITHMS.md 3.4): query inputs per dataset, the outputs of the targets and
# the shadow model (reference-0) on them, and HopSkipJump distances, per experiment.

QUERY_SHARDS = [i for i, ids in enumerate(SHARDS)
                if any(m.startswith("target-") or m == "reference-0" for m in ids)]


rule make_queries:
    """Neighbour and augmentation queries of one dataset's target pool."""
    input:
        data=rules.prepare_dataset.output.data,
        splits=rules.prepare_dataset.output.splits,
        code=package("data", "splits", "seeding", "queries"),
    output:
        "results/train/queries/{dataset}/queries.parquet",
    params:
        neighbour=wf.attack_options(config, "query-neighbor"),
        augment=wf.attack_options(config, "query-augment"),
        seed=config["seed"],
    log:
        "results/train/logs/make_queries/{dataset}.log",
    benchmark:
        "results/train/benchmarks/make_queries/{dataset}.tsv"
    script:
        "../scripts/make_queries.py"


rule query_signals:
    """Logits and signals of every target and the shadow model on every query."""
    input:
        data=rules.prepare_dataset.output.data,
        queries=rules.make_queries.output[0],
        models=lambda w: expand(rules.train_shard.output.models, shard=QUERY_SHARDS, **w),
        code=package("data", "models", "training", "signals", "queries", "gpu"),
    output:
        "results/train/queries/{dataset}/{arch}/outputs.parquet",
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(wf.uses_torch(config, w.arch)),
    log:
        "results/train/logs/query_signals/{dataset}/{arch}.log",
    benchmark:
        "results/train/benchmarks/query_signals/{dataset}/{arch}.tsv"
    script:
        "../scripts/query_signals.py"


rule hsj_distances:
    """HopSkipJump boundary distances of every target (Query-adv on images; empty otherwise)."""
    input:
        data=rules.prepare_dataset.output.data,
        splits=rules.prepare_dataset.output.splits,
        models=lambda w: expand(rules.train_shard.output.models, shard=QUERY_SHARDS, **w),
        code=package("data", "splits", "seeding", "models", "training", "queries", "hopskipjump", "gpu"),
    output:
        "results/train/queries/{dataset}/{arch}/hsj.parquet",
    params:
        options=wf.attack_options(config, "query-adv"),
        seed=config["seed"],
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(wf.uses_torch(config, w.arch) and wf.modality(w.dataset) == "image"),
    log:
        "results/train/logs/hsj_distances/{dataset}/{arch}.log",
    benchmark:
        "results/train/benchmarks/hsj_distances/{dataset}/{arch}.tsv"
    script:
        "../scripts/hsj_distances.py"


ATTACK_ARTIFACTS["query-neighbor"] = {"queries": rules.query_signals.output[0]}
ATTACK_ARTIFACTS["query-augment"] = {"queries": rules.query_signals.output[0]}
ATTACK_ARTIFACTS["query-adv"] = {"queries": rules.query_signals.output[0],
                                 "distances": rules.hsj_distances.output[0]}

# Benchmark files of the query jobs this run builds (the cost table reads them).
_QUERY_JOBS = {"query-neighbor": [rules.query_signals], "query-augment": [rules.query_signals],
               "query-adv": [rules.query_signals, rules.hsj_distances]}
_QUERIED = [(d, a, attack) for d, a in EXPERIMENTS for attack in wf.attacks_for(config, d, a)
            if attack in _QUERY_JOBS]
QUERY_BENCHMARKS = sorted({
    *[rules.make_queries.benchmark.format(dataset=d) for d, _, _ in _QUERIED],
    *[rule.benchmark.format(dataset=d, arch=a) for d, a, attack in _QUERIED for rule in _QUERY_JOBS[attack]],
})
