rule download_dataset:
    """Fetch one upstream file of a dataset (retries, sha256 check, atomic write). Runs only when
    prepare_dataset needs a data/raw file that is missing; `path` options bypass it."""
    output:
        "data/raw/{dataset}/{filename}",
    wildcard_constraints:
        filename=".+",
    params:
        options=lambda w: wf.dataset_options(config, w.dataset),
    log:
        "results/prepare/logs/download_dataset/{dataset}/{filename}.log",
    localrule: True
    script:
        "../scripts/download_dataset.py"


rule prepare_dataset:
    """A dataset in canonical order as Parquet, and its splits and membership matrix (TDDBench)."""
    input:
        local=lambda w: wf.local_inputs(config, w.dataset),
        code=package("data", "seeding", "text", "splits"),
    output:
        data="results/prepare/data/{dataset}.parquet",
        splits="results/prepare/splits/{dataset}.parquet",
    params:
        options=lambda w: wf.dataset_options(config, w.dataset),
        splits=config["splits"],
        seed=config["seed"],
    log:
        "results/prepare/logs/prepare_dataset/{dataset}.log",
    benchmark:
        "results/prepare/benchmarks/prepare_dataset/{dataset}.tsv"
    script:
        "../scripts/prepare_dataset.py"
