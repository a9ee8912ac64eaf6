# Stage evaluate: membership scores of every attack per experiment, their metrics and ROC curves,
# and the scaling study (miaflow.jobs.evaluate).

# --- this stage's own input functions ---------------------------------------------------------
# (Input functions are named lambdas: `snakemake --lint` wants no `def` beside rules.)
EXPERIMENT_BY_NAME = {e.name: e for e in EXPERIMENTS}  # "<dataset>/<label>": the path wildcards
# The FPRs of the operating points: the metrics' levels, the language models' and the ranking's.
OPERATING_FPRS = sorted(
    {*config["metrics"]["fpr_levels"], *config["llm"]["fpr_levels"], config["stats"]["low_fpr"]}
)
# The Experiment of a job's {dataset}/{experiment} wildcards, and the attacks that apply to it.
experiment = lambda w: EXPERIMENT_BY_NAME[f"{w.dataset}/{w.experiment}"]
attacks = lambda w: plan.attacks_for(config, experiment(w))
# Input function: `pattern` for every shard of an experiment's target models (role "arch") or
# reference models ("ref_arch").
shard_files = lambda pattern, role: lambda w: [
    pattern.format(dataset=w.dataset, arch=getattr(experiment(w), role), shard=k)
    for k in range(len(SHARDS))
]
# Input function (for `unpack`): the queries stage's artifacts that the attacks
# `attacks_of(experiment)` read, by name.
query_artifacts = lambda attacks_of: lambda w: {
    name: QUERY_ARTIFACTS[name].format(dataset=w.dataset, arch=experiment(w).arch)
    for name in plan.artifacts_for(config, experiment(w), attacks_of(experiment(w)))
}


rule score_attacks:
    """Membership scores of every attack and target model of one experiment, their metrics and ROC."""
    input:
        unpack(query_artifacts(lambda e: plan.attacks_for(config, e))),
        splits=SPLITS,
        signals=shard_files(SIGNALS, "arch"),
        reference_signals=shard_files(SIGNALS, "ref_arch"),
        code=code("evaluate.score_attacks"),
    output:
        scores=SCORES,
        timings=ATTACK_TIMINGS,
        metrics=EXPERIMENT_METRICS,  # with Clopper-Pearson intervals
        roc=ROC,
    log:
        "records/evaluate/logs/score_attacks/{dataset}/{experiment}.log",
    benchmark:
        "records/evaluate/benchmarks/score_attacks/{dataset}/{experiment}.tsv"
    conda:
        SOFTWARE
    params:
        experiment=experiment,
        attacks=attacks,
        options=config.get("attack_options", {}),
        seed=config["seed"],
        fpr_levels=config["metrics"]["fpr_levels"],
        confidence=config["metrics"]["confidence"],
    script:
        "../scripts/score_attacks.py"


rule scaling_sweep:
    """AUROC with 2, 4, … reference models and with 1, 2, 5, … queries (TDDBench Fig. 4)."""
    input:
        unpack(query_artifacts(lambda e: list(plan.swept_query_attacks(config, e)))),
        splits=SPLITS,
        signals=shard_files(SIGNALS, "arch"),
        reference_signals=shard_files(SIGNALS, "ref_arch"),
        code=code("evaluate.scaling_sweep"),
    output:
        sweep=SWEEP,
    log:
        "records/evaluate/logs/scaling_sweep/{dataset}/{experiment}.log",
    benchmark:
        "records/evaluate/benchmarks/scaling_sweep/{dataset}/{experiment}.tsv"
    conda:
        SOFTWARE
    params:
        experiment=experiment,
        reference_attacks=plan.swept_attacks(config),
        reference_counts=plan.reference_counts(config),
        query_attacks=lambda w: plan.swept_query_attacks(config, experiment(w)),
        options=config.get("attack_options", {}),
        seed=config["seed"],
    script:
        "../scripts/scaling_sweep.py"


rule operating_points:
    """The operating point behind each TPR of every stage's scores, under the oracle calibration
    (the target's own labels) and the attacker's (another target of the rotation), with PPVs."""
    input:
        scores=EVERY_SCORES,
        code=code("evaluate.operating_points"),
    output:
        operating_points=OPERATING_POINTS,
    log:
        "records/evaluate/logs/operating_points.log",
    benchmark:
        "records/evaluate/benchmarks/operating_points/all.tsv"
    conda:
        SOFTWARE
    params:
        fpr_levels=OPERATING_FPRS,
        priors=config["metrics"]["priors"],
    script:
        "../scripts/operating_points.py"


rule evaluate:
    """Target of the evaluate stage (DVC stage `evaluate`)."""
    input:
        OPERATING_POINTS,
        per_experiment(SCORES),
        per_experiment(EXPERIMENT_METRICS),
        per_experiment(ROC),
        per_experiment(SWEEP),
    localrule: True
