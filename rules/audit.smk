# Stage audit: models trained outside miaflow, brought as their outputs or as a checkpoint,
# checked, then attacked like an experiment (miaflow.jobs.audit).

# --- this stage's own paths and input functions ----------------------------------------------
# (Input functions are named lambdas: `snakemake --lint` wants no `def` beside rules.)
AUDIT_SPLITS = "results/audit/splits/{dataset}/{audit}.parquet"
AUDIT_SIGNALS = "results/audit/signals/{dataset}/{audit}.parquet"
AUDIT_TIMINGS = "records/audit/benchmarks/score_audit/{dataset}/{audit}.attacks.tsv"
audit_entry = lambda w: AUDITS[f"{w.dataset}/{w.audit}"]
# The signals of the audit's reference models: its own file, or for a checkpoint miaflow's
# shards of its dataset and architecture.
audit_reference_signals = lambda w: (
    [AUDIT_SIGNALS.format(dataset=w.dataset, audit=w.audit)]
    if audit_entry(w)["kind"] == "outputs"
    else [
        SIGNALS.format(dataset=w.dataset, arch=audit_entry(w)["arch"], shard=k)
        for k in range(len(SHARDS))
    ]
)
# Wildcard constraint matching exactly the names of the audits of `kind` (none: nothing).
names_of = lambda kind: "|".join(a["name"] for a in AUDITS.values() if a["kind"] == kind) or "(?!)"


rule audit_outputs:
    """Check a user's outputs and membership matrix; store them as a membership matrix and signals."""
    input:
        outputs=lambda w: audit_entry(w)["outputs"],
        membership=lambda w: audit_entry(w)["membership"],
        code=code("audit.audit_outputs"),
    output:
        splits=AUDIT_SPLITS,
        signals=AUDIT_SIGNALS,
        records=AUDIT_RECORDS,
    log:
        "records/audit/logs/audit_outputs/{dataset}/{audit}.log",
    benchmark:
        "records/audit/benchmarks/audit_outputs/{dataset}/{audit}.tsv"
    wildcard_constraints:
        audit=names_of("outputs"),
    conda:
        SOFTWARE
    params:
        audit=lambda w: audit_entry(w)["experiment"],
    script:
        "../scripts/audit_outputs.py"


rule audit_checkpoint:
    """Outputs of a user's checkpoint on every sample, beside miaflow's reference models."""
    input:
        checkpoint=lambda w: audit_entry(w)["checkpoint"],
        members=lambda w: audit_entry(w)["members"],
        data=DATA,
        base_splits=SPLITS,
        code=code("audit.audit_checkpoint"),
    output:
        splits=AUDIT_SPLITS,
        signals=AUDIT_SIGNALS,
        records=AUDIT_RECORDS,
    log:
        "records/audit/logs/audit_checkpoint/{dataset}/{audit}.log",
    benchmark:
        "records/audit/benchmarks/audit_checkpoint/{dataset}/{audit}.tsv"
    wildcard_constraints:
        audit=names_of("checkpoint"),
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=1,
    params:
        arch=lambda w: config["architectures"][audit_entry(w)["arch"]],
        audit=lambda w: audit_entry(w)["experiment"],
    script:
        "../scripts/audit_checkpoint.py"


rule score_audit:
    """Membership scores of every attack the audit's models allow, their metrics and ROC."""
    input:
        splits=AUDIT_SPLITS,
        signals=[AUDIT_SIGNALS],
        reference_signals=audit_reference_signals,
        code=code("audit.score_audit"),
    output:
        scores=AUDIT_SCORES,
        timings=AUDIT_TIMINGS,
        metrics=AUDIT_METRICS,  # with Clopper-Pearson intervals
        roc=AUDIT_ROC,
    log:
        "records/audit/logs/score_audit/{dataset}/{audit}.log",
    benchmark:
        "records/audit/benchmarks/score_audit/{dataset}/{audit}.tsv"
    conda:
        SOFTWARE
    params:
        audit=lambda w: audit_entry(w)["experiment"],
        attacks=lambda w: audit_entry(w).get("attacks", config["attacks"]),
        options=config.get("attack_options", {}),
        seed=config["seed"],
        fpr_levels=config["metrics"]["fpr_levels"],
        confidence=config["metrics"]["confidence"],
    script:
        "../scripts/score_audit.py"


rule audit:
    """Target of the audit stage (DVC stage `audit`): prints each audit's best attacks. It has no
    output, so it runs whenever it is asked for."""
    input:
        per_audit(AUDIT_SCORES),
        per_audit(AUDIT_ROC),
        per_audit(AUDIT_RECORDS),
        metrics=per_audit(AUDIT_METRICS),
    log:
        "records/audit/logs/audit.log",
    localrule: True
    conda:
        SOFTWARE
    script:
        "../scripts/audit.py"
