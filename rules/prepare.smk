# Stage prepare: every dataset in canonical order, and its membership matrix (miaflow.jobs.prepare).


rule download_dataset:
    """Fetch one upstream file of a dataset (retries, sha256 check, atomic write). Runs only when
    prepare_dataset needs a data/raw file that is missing; `path` options bypass it."""
    input:
        code=code("prepare.download_dataset"),
    output:
        file="data/raw/{dataset}/{filename}",
    log:
        "records/prepare/logs/download_dataset/{dataset}/{filename}.log",
    wildcard_constraints:
        filename=".+",
    localrule: True
    conda:
        SOFTWARE
    params:
        dataset=lambda w: w.dataset,
        filename=lambda w: w.filename,
        options=lambda w: plan.dataset_options(config, w.dataset),
    script:
        "../scripts/download_dataset.py"


rule prepare_dataset:
    """A dataset in canonical order as Parquet, and its splits and membership matrix (TDDBench's
    protocol, or the dataset's own under splits.datasets)."""
    input:
        sources=lambda w: plan.local_inputs(config, w.dataset),
        code=code("prepare.prepare_dataset"),
    output:
        data=DATA,
        splits=SPLITS,
    log:
        "records/prepare/logs/prepare_dataset/{dataset}.log",
    benchmark:
        "records/prepare/benchmarks/prepare_dataset/{dataset}.tsv"
    conda:
        SOFTWARE
    params:
        dataset=lambda w: w.dataset,
        options=lambda w: plan.dataset_options(config, w.dataset),
        split_settings=lambda w: plan.split_settings(config, w.dataset),
        seed=config["seed"],
    script:
        "../scripts/prepare_dataset.py"


rule prepare:
    """Target of the prepare stage (DVC stage `prepare`)."""
    input:
        expand(DATA, dataset=plan.datasets(config)),
        expand(SPLITS, dataset=plan.datasets(config)),
    localrule: True
