rule make_splits:
    """Target/auxiliary pools and the membership matrix of every model (TDDBench protocol)."""
    input:
        data=rules.prepare_dataset.output[0],
        code=package("data", "splits", "seeding"),
    output:
        "results/prepare/splits/{dataset}.parquet",
    params:
        splits=config["splits"],
        seed=config["seed"],
    log:
        "results/prepare/logs/make_splits/{dataset}.log",
    benchmark:
        "results/prepare/benchmarks/make_splits/{dataset}.tsv"
    script:
        "../scripts/make_splits.py"
