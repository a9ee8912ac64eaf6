# Stage queries: what query attacks read beside the signal store, on the target pool T
# (miaflow.jobs.queries): each dataset's query set and the models' outputs on it, HopSkipJump
# distances, and the outputs of the surrogates, regressors and canaries these attacks train.

# --- this stage's own paths and input functions ----------------------------------------------
# (Input functions are named lambdas: `snakemake --lint` wants no `def` beside rules.)
from miaflow.models.kinds import KINDS

QUERY_SET = "results/queries/sets/{dataset}.parquet"
# Whether a dataset's query set is raw text (masked-LM neighbours, torch): some experiment on it
# trains an architecture kind that reads raw strings.
raw_text_queries = lambda w: any(
    KINDS[config["architectures"][e.arch]["kind"]].raw_text
    for e in EXPERIMENTS
    if e.dataset == w.dataset
)
# Input function: `pattern` for every shard of the job's {dataset} and {arch}.
job_shards = lambda pattern: lambda w: [
    pattern.format(dataset=w.dataset, arch=w.arch, shard=k) for k in range(len(SHARDS))
]
# Model shards holding a target or the shadow model (reference-0): those queried.
queried_shards = lambda w: [
    MODELS.format(dataset=w.dataset, arch=w.arch, shard=k)
    for k, ids in enumerate(SHARDS)
    if any(m.startswith("target-") or m == "reference-0" for m in ids)
]
# Every query artifact the configured attacks read, over all experiments, and the query sets of
# the datasets whose models are queried.
QUERIED = plan.queried(config)
QUERY_TARGETS = sorted(
    {QUERY_ARTIFACTS[name].format(dataset=e.dataset, arch=e.arch) for e, name in QUERIED}
    | {QUERY_SET.format(dataset=e.dataset) for e, name in QUERIED if name == QUERY_OUTPUTS}
)


rule query_sets:
    """Neighbour and augmentation queries of one dataset's target pool (raw text: masked-LM
    substitutions)."""
    input:
        data=DATA,
        splits=SPLITS,
        code=code("queries.query_sets"),
    output:
        query_set=QUERY_SET,
    log:
        "records/queries/logs/query_sets/{dataset}.log",
    benchmark:
        "records/queries/benchmarks/query_sets/{dataset}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(raw_text_queries(w)),
    params:
        neighbour=plan.attack_options(config, "query-neighbor"),
        augment=plan.attack_options(config, "query-augment"),
        seed=config["seed"],
    script:
        "../scripts/query_sets.py"


rule query_outputs:
    """Logits and signals of every target and the shadow model on every query."""
    input:
        data=DATA,
        query_set=QUERY_SET,
        models=queried_shards,
        code=code("queries.query_outputs"),
    output:
        outputs=QUERY_ARTIFACTS[QUERY_OUTPUTS],
    log:
        "records/queries/logs/query_outputs/{dataset}/{arch}.log",
    benchmark:
        "records/queries/benchmarks/query_outputs/{dataset}/{arch}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(plan.uses_torch(config, w.arch)),
    script:
        "../scripts/query_outputs.py"


rule query_distances:
    """HopSkipJump boundary distances of every target (Query-adv on images; empty otherwise)."""
    input:
        data=DATA,
        splits=SPLITS,
        models=queried_shards,
        code=code("queries.query_distances"),
    output:
        distances=QUERY_ARTIFACTS[DISTANCES],
    log:
        "records/queries/logs/query_distances/{dataset}/{arch}.log",
    benchmark:
        "records/queries/benchmarks/query_distances/{dataset}/{arch}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(plan.uses_torch(config, w.arch) and plan.modality(w.dataset) == "image"),
    params:
        arch_name=lambda w: w.arch,
        options=plan.attack_options(config, "query-adv"),
        seed=config["seed"],
    script:
        "../scripts/query_distances.py"


rule query_surrogates:
    """Query-transfer: a surrogate per target model, trained on T relabelled by the target."""
    input:
        data=DATA,
        splits=SPLITS,
        signals=job_shards(SIGNALS),
        code=code("queries.query_surrogates"),
    output:
        surrogates=QUERY_ARTIFACTS[SURROGATES],
    log:
        "records/queries/logs/query_surrogates/{dataset}/{arch}.log",
    benchmark:
        "records/queries/benchmarks/query_surrogates/{dataset}/{arch}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(plan.uses_torch(config, w.arch)),
    params:
        arch_name=lambda w: w.arch,
        arch=lambda w: config["architectures"][w.arch],
        options=plan.attack_options(config, "query-transfer"),
        seed=config["seed"],
    script:
        "../scripts/query_surrogates.py"


rule query_regressors:
    """Query-qrm: a Gaussian quantile regressor per target model, fitted on the auxiliary pool."""
    input:
        data=DATA,
        splits=SPLITS,
        signals=job_shards(SIGNALS),
        code=code("queries.query_regressors"),
    output:
        regressors=QUERY_ARTIFACTS[REGRESSORS],
    log:
        "records/queries/logs/query_regressors/{dataset}/{arch}.log",
    benchmark:
        "records/queries/benchmarks/query_regressors/{dataset}/{arch}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(plan.uses_torch(config, w.arch)),
    params:
        arch_name=lambda w: w.arch,
        arch=lambda w: config["architectures"][w.arch],
        options=plan.attack_options(config, "query-qrm"),
        seed=config["seed"],
    script:
        "../scripts/query_regressors.py"


rule query_canaries:
    """Query-ref (images): canaries optimised on the reference models, phi under every model."""
    input:
        data=DATA,
        splits=SPLITS,
        models=job_shards(MODELS),
        code=code("queries.query_canaries"),
    output:
        canaries=QUERY_ARTIFACTS[CANARIES],
    log:
        "records/queries/logs/query_canaries/{dataset}/{arch}.log",
    benchmark:
        "records/queries/benchmarks/query_canaries/{dataset}/{arch}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=1,
    params:
        arch_name=lambda w: w.arch,
        options=plan.attack_options(config, "query-ref"),
        seed=config["seed"],
    script:
        "../scripts/query_canaries.py"


rule queries:
    """Target of the queries stage (DVC stage `queries`): the artifacts the configured attacks
    read."""
    input:
        QUERY_TARGETS,
    localrule: True
