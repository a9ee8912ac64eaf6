# Stage privacy: the privacy audit (issue #44, docs/algorithms.md#privacy-audit). Audit
# experiments of their own train differentially private targets with canaries, each canary in
# with probability 1/2, and score every canary trial; their ε lower bounds, against each target's
# claimed ε, are the contract results/privacy/audit.parquet (miaflow.jobs.privacy). Per
# {dataset}/{audited}: the study's linear heads ("heads"), a model of an architecture recipe
# (its key) or an audit of a model trained elsewhere that claims an (ε, δ) (its name).

# --- this stage's own paths and input functions ----------------------------------------------
# (Input functions are named lambdas: `snakemake --lint` wants no `def` beside rules.)
PRIVACY = config.get("privacy", {})
PRIVACY_HEADS = {e["dataset"]: e for e in plan.privacy_heads(config)}
PRIVACY_MODELS = {f"{e['dataset']}/{e['label']}": e for e in plan.privacy_models(config)}
PRIVACY_CLAIMS = {f"{a['dataset']}/{a['label']}": a for a in plan.privacy_audits(config)}
PRIVACY_TRIALS = "results/privacy/trials/{dataset}/{audited}.parquet"
PRIVACY_CANARIES = "results/privacy/canaries/{dataset}/{audited}.parquet"
privacy_model = lambda w: PRIVACY_MODELS[f"{w.dataset}/{w.audited}"]
# Wildcard constraint matching exactly the labels of some audit experiments (none: nothing).
labels_of = lambda entries: "|".join(sorted({e["label"] for e in entries})) or "(?!)"
per_privacy_experiment = lambda pattern, entries: [
    pattern.format(dataset=e["dataset"], audited=e["label"]) for e in entries
]
PRIVACY_EXPERIMENTS = [
    *PRIVACY_HEADS.values(),
    *PRIVACY_MODELS.values(),
    *PRIVACY_CLAIMS.values(),
]


rule privacy_heads:
    """The study's linear heads (DP-Adam) on a dataset's features: per head target, independent
    runs with one canary each and one run with many; every canary trial's score."""
    input:
        data=DATA,
        code=code("privacy.privacy_heads"),
    output:
        canaries=PRIVACY_CANARIES,
        trials=PRIVACY_TRIALS,
    log:
        "records/privacy/logs/privacy_heads/{dataset}/{audited}.log",
    benchmark:
        "records/privacy/benchmarks/privacy_heads/{dataset}/{audited}.tsv"
    wildcard_constraints:
        audited=plan.HEADS_LABEL,
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=1,
    params:
        audit=lambda w: PRIVACY_HEADS[w.dataset],
        delta=PRIVACY.get("delta"),
        seed=config["seed"],
    script:
        "../scripts/privacy_heads.py"


rule privacy_model:
    """A model of an architecture recipe trained with canaries (DP-SGD through Opacus when the
    recipe has the dp_sgd defense); every canary scored by the audit's attacks."""
    input:
        data=DATA,
        code=code("privacy.privacy_model"),
    output:
        canaries=PRIVACY_CANARIES,
        trials=PRIVACY_TRIALS,
    log:
        "records/privacy/logs/privacy_model/{dataset}/{audited}.log",
    benchmark:
        "records/privacy/benchmarks/privacy_model/{dataset}/{audited}.tsv"
    wildcard_constraints:
        audited=labels_of(PRIVACY_MODELS.values()),
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=lambda w: int(plan.uses_torch(config, w.audited)),
    params:
        audit=privacy_model,
        arch=lambda w: privacy_model(w)["recipe"],
        attacks=PRIVACY.get("attacks"),
        options=config.get("attack_options", {}),
        delta=PRIVACY.get("delta"),
        seed=config["seed"],
    script:
        "../scripts/privacy_model.py"


rule privacy_claim:
    """An audit of a model trained elsewhere that claims an (ε, δ): its outputs on its
    canaries and their inclusion (docs/audit.md), every canary scored by the audit's attacks."""
    input:
        canaries=lambda w: PRIVACY_CLAIMS[f"{w.dataset}/{w.audited}"]["canaries"],
        code=code("privacy.privacy_claim"),
    output:
        trials=PRIVACY_TRIALS,
    log:
        "records/privacy/logs/privacy_claim/{dataset}/{audited}.log",
    benchmark:
        "records/privacy/benchmarks/privacy_claim/{dataset}/{audited}.tsv"
    wildcard_constraints:
        audited=labels_of(PRIVACY_CLAIMS.values()),
    conda:
        SOFTWARE
    params:
        audit=lambda w: PRIVACY_CLAIMS[f"{w.dataset}/{w.audited}"],
        attacks=PRIVACY.get("attacks"),
        options=config.get("attack_options", {}),
        seed=config["seed"],
    script:
        "../scripts/privacy_claim.py"


rule privacy_bounds:
    """Every estimator's ε lower bound per target, attack and canary kind, and whether each
    refutes the target's claim: the contract results/privacy/audit.parquet."""
    input:
        trials=per_privacy_experiment(PRIVACY_TRIALS, PRIVACY_EXPERIMENTS),
        code=code("privacy.privacy_bounds"),
    output:
        audit=PRIVACY_AUDIT,
    log:
        "records/privacy/logs/privacy_bounds.log",
    benchmark:
        "records/privacy/benchmarks/privacy_bounds/all.tsv"
    conda:
        SOFTWARE
    params:
        confidence=PRIVACY.get("confidence", 0.95),
        seed=config["seed"],
    script:
        "../scripts/privacy_bounds.py"


rule privacy:
    """Target of the privacy stage (DVC stage `privacy`)."""
    input:
        PRIVACY_AUDIT,
        per_privacy_experiment(PRIVACY_TRIALS, PRIVACY_EXPERIMENTS),
        per_privacy_experiment(
            PRIVACY_CANARIES, [*PRIVACY_HEADS.values(), *PRIVACY_MODELS.values()]
        ),
    localrule: True
