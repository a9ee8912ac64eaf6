# Stage hparams: the hyperparameter study of Pradhan et al. (SaTML 2025) on linear heads over
# frozen features (miaflow.jobs.hparams, docs/algorithms.md#hyperparameter-study). Per setting
# (dataset, shots[, backbone, shadow_backbone]), ε and run: splits -> one job of HPO, grid and attacks; then the DP bound and
# the study's long tables (the contract files results/hparam_study.parquet and results/dp_bound.parquet).

# --- this stage's own paths and input functions: per setting, ε and run ----------------------
# (Input functions are named lambdas: `snakemake --lint` wants no `def` beside rules.)
STUDY = config["hparam_study"]
EPSILONS = plan.epsilon_tags(config)  # the {epsilon} of each budget
PRIVATE = [tag for tag in EPSILONS if tag != "inf"]
HPARAM_FEATURES = "results/hparams/features/{dataset}/{backbone}.parquet"
HPARAM_SPLITS = "results/hparams/splits/{setting}/run-{run}.parquet"
HPARAM_NOISE = "results/hparams/noise/{setting}/eps-{epsilon}.parquet"
HPARAM_TRIALS = "results/hparams/trials/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_GRID = "results/hparams/grid/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_METRICS = "results/hparams/metrics/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_ROC = "results/hparams/roc/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_SELECTION = "results/hparams/selection/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_BOUND = "results/hparams/bound/{setting}/eps-{epsilon}.parquet"
study_setting = lambda w: HPARAM_SETTINGS[w.setting]
# The prepared dataset, or its backbone features when the setting names a backbone.
study_data = lambda w: (
    HPARAM_FEATURES.format(
        dataset=study_setting(w)["dataset"], backbone=study_setting(w)["backbone"]
    )
    if study_setting(w).get("backbone")
    else DATA.format(dataset=study_setting(w)["dataset"])
)
# Black-box settings: the attacker's features (shadow_backbone; "pixels": the prepared dataset).
study_shadow_data = lambda w: (
    []
    if not study_setting(w).get("shadow_backbone")
    else (
        [DATA.format(dataset=study_setting(w)["dataset"])]
        if study_setting(w)["shadow_backbone"] == "pixels"
        else [
            HPARAM_FEATURES.format(
                dataset=study_setting(w)["dataset"], backbone=study_setting(w)["shadow_backbone"]
            )
        ]
    )
)
# The ε's noise-multiplier table; none when not private.
study_noise = lambda w: (
    [] if w.epsilon == "inf" else [HPARAM_NOISE.format(setting=w.setting, epsilon=w.epsilon)]
)
per_study_run = lambda pattern, epsilons=EPSILONS: expand(
    pattern, setting=list(HPARAM_SETTINGS), epsilon=epsilons, run=range(STUDY["runs"])
)


rule hparam_features:
    """Frozen features of a dataset's images from a pretrained backbone (e.g. ViT-B/16)."""
    input:
        data=DATA,
        code=code("hparams.hparam_features"),
    output:
        features=HPARAM_FEATURES,
    log:
        "records/hparams/logs/hparam_features/{dataset}/{backbone}.log",
    benchmark:
        "records/hparams/benchmarks/hparam_features/{dataset}/{backbone}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=1,
    params:
        backbone=lambda w: w.backbone,
        model=lambda w: plan.backbone_model(config, w.dataset, w.backbone),
    script:
        "../scripts/hparam_features.py"


rule hparam_splits:
    """One run's few-shot universes V, V^e and their M+1 Bernoulli halves (the membership)."""
    input:
        data=study_data,
        code=code("hparams.hparam_splits"),
    output:
        splits=HPARAM_SPLITS,
    log:
        "records/hparams/logs/hparam_splits/{setting}/run-{run}.log",
    benchmark:
        "records/hparams/benchmarks/hparam_splits/{setting}/run-{run}.tsv"
    conda:
        SOFTWARE
    params:
        setting=study_setting,
        n_shadow=STUDY["shadow_models"],
        run=lambda w: int(w.run),
        seed=config["seed"],
    script:
        "../scripts/hparam_splits.py"


rule hparam_noise:
    """DP-Adam's noise multiplier for each batches-per-epoch count (Opacus' PRV accountant)."""
    input:
        splits=lambda w: expand(HPARAM_SPLITS, setting=w.setting, run=range(STUDY["runs"])),
        code=code("hparams.hparam_noise"),
    output:
        noise=HPARAM_NOISE,
    log:
        "records/hparams/logs/hparam_noise/{setting}/eps-{epsilon}.log",
    benchmark:
        "records/hparams/benchmarks/hparam_noise/{setting}/eps-{epsilon}.tsv"
    priority: LONG_CHAIN
    conda:
        SOFTWARE
    params:
        epsilon=lambda w: float(w.epsilon),
        delta=STUDY["delta"],
        epochs=STUDY["epochs"],
        batch_size=STUDY["search"]["batch_size"],
    script:
        "../scripts/hparam_noise.py"


rule hparam_run:
    """One run at one ε: HPO (Optuna) of every split of both families, trials batched across
    splits; the (M+1)^2 grid train(D_i, eta_j) and the ED targets; LiRA, ACC-LiRA and KL-LiRA
    with leave-one-out target rotation, and ML-Leaks, Attack-P and QMIA on the same targets
    (pooled metrics and ROC). One job, five artifacts. In a black-box setting the shadows are
    heads on shadow_data, tuned and trained in the same job."""
    input:
        data=study_data,
        shadow_data=study_shadow_data,
        splits=HPARAM_SPLITS,
        noise=study_noise,
        code=code("hparams.hparam_run"),
    output:
        trials=HPARAM_TRIALS,
        grid=HPARAM_GRID,
        metrics=HPARAM_METRICS,
        roc=HPARAM_ROC,
        selection=HPARAM_SELECTION,
    log:
        "records/hparams/logs/hparam_run/{setting}/eps-{epsilon}/run-{run}.log",
    benchmark:
        "records/hparams/benchmarks/hparam_run/{setting}/eps-{epsilon}/run-{run}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=1,
    params:
        setting=study_setting,
        epsilon=lambda w: float(w.epsilon),
        run=lambda w: int(w.run),
        n_shadow=STUDY["shadow_models"],
        search=STUDY["search"],
        epochs=STUDY["epochs"],
        budgets=STUDY["budgets"],
        divergence=STUDY["divergence"],
        fpr_levels=config["metrics"]["fpr_levels"],
        seed=config["seed"],
    script:
        "../scripts/hparam_run.py"


rule hparam_bound:
    """The TPR no attack can exceed under the targets' (epsilon(delta), delta) guarantees."""
    input:
        grids=lambda w: expand(
            HPARAM_GRID, setting=w.setting, epsilon=w.epsilon, run=range(STUDY["runs"])
        ),
        code=code("hparams.hparam_bound"),
    output:
        bound=HPARAM_BOUND,
    log:
        "records/hparams/logs/hparam_bound/{setting}/eps-{epsilon}.log",
    benchmark:
        "records/hparams/benchmarks/hparam_bound/{setting}/eps-{epsilon}.tsv"
    conda:
        SOFTWARE
    params:
        setting=study_setting,
        epsilon=lambda w: float(w.epsilon),
        delta=STUDY["delta"],
        deltas=STUDY["bound_deltas"],
        epochs=STUDY["epochs"],
    script:
        "../scripts/hparam_bound.py"


rule hparam_collect:
    """The study's contract tables and the ROC curves and choices its figures draw."""
    input:
        metrics=per_study_run(HPARAM_METRICS),
        rocs=per_study_run(HPARAM_ROC),
        selections=per_study_run(HPARAM_SELECTION),
        bounds=expand(HPARAM_BOUND, setting=list(HPARAM_SETTINGS), epsilon=PRIVATE),
        code=code("hparams.hparam_collect"),
    output:
        study=HPARAM_STUDY,
        roc=HPARAM_ROC_ALL,
        selection=HPARAM_SELECTION_ALL,
        bound=DP_BOUND,
    log:
        "records/hparams/logs/hparam_collect.log",
    benchmark:
        "records/hparams/benchmarks/hparam_collect/all.tsv"
    conda:
        SOFTWARE
    script:
        "../scripts/hparam_collect.py"


rule hparams:
    """Target of the hparams stage (DVC stage `hparams`); with no setting its tables are empty."""
    input:
        HPARAM_STUDY,
        DP_BOUND,
        HPARAM_ROC_ALL,
        HPARAM_SELECTION_ALL,
    localrule: True
