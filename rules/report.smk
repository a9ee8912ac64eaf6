# Stage report: the metrics contract, statistical tests, paper tables and figures, the cost of
# every stage (miaflow.jobs.report). The headline outputs live at the top of results/.

# --- this stage's own paths and input functions ----------------------------------------------
# (Input functions are named lambdas: `snakemake --lint` wants no `def` beside rules.)
from miaflow.evaluation import published

METRICS = "results/metrics.parquet"  # the contract: every metric, long format
MODEL_RECORDS = "results/report/models.parquet"
TESTS = "results/report/tests.parquet"
RANKINGS = "results/report/rankings.parquet"  # both rankings of every experiment, with the tests
VERDICTS = "results/report/verdicts.parquet"  # one row per experiment: what the summary says
TABLE_FORMATS = (".csv", ".md", ".tex")
AUDITED = [a["experiment"] for a in AUDITS.values()]  # audits, reported like experiments
# The significance level of dataset inference's reported rejection rates.
LLM_INFERENCE_ALPHA = config["llm"]["dataset_inference"]["alpha"]
# The experiments whose papers publish values to compare with (miaflow/evaluation/published.csv).
PUBLISHED = published.counterparts([(e.dataset, e.label) for e in EXPERIMENTS])


# One file per experiment, named by `Experiment.file_name` (the jobs find theirs by it).
experiment_files = lambda prefix, suffix, directory, experiments=EXPERIMENTS: [
    f"{directory}/{e.file_name(prefix, suffix)}" for e in experiments
]
# The files the target rules of `stages` request (for input functions: they run once every rule
# file is parsed).
stage_targets = lambda *stages: [
    str(path) for stage in stages for path in workflow.get_rule(stage).input
]

# `snakemake --report report.html`: outputs marked with `report(...)` below, each with a caption
# under report/ (the rules' settings filled in), in categories: "Headline", one per dataset
# ("Dataset <name>", a subcategory per target model; no colon: the report turns category names
# into reST link targets), one per family of attacks with its own outputs ("Song & Mittal",
# "Hyperparameter study", "Language models", "Dataset inference"), "Privacy audit" and "Cost".
# A table is marked by its csv file (its md and tex files stay outputs only); the label `result`
# names each entry in the report's lists.
CAPTION = "../report/{}.rst"  # relative to this file
# A file marked for the report (a figure, or a table's csv file). Snakemake's parser reads a line
# that starts with `report` as its directive `report:`, so no line here starts with the call.
REPORTED = lambda path, caption, category, subcategory, result: report(
    path,
    caption=CAPTION.format(caption),
    category=category,
    subcategory=subcategory,
    labels={"result": result},
)
# multiext(stem, *TABLE_FORMATS) with only the csv file marked for the report.
REPORT_TABLE = lambda stem, caption, category, subcategory, result: [
    REPORTED(path, caption, category, subcategory, result) if path.endswith(".csv") else path
    for path in multiext(stem, *TABLE_FORMATS)
]
# One file per experiment (`experiment_files`), each in the category of its dataset and the
# subcategory of its target model.
TARGET_MODELS = lambda e: (
    f"audit {e.label}"
    if e in AUDITED
    else f"{e.arch} targets" + (f", {e.ref_arch} references" if e.mixed else "")
)
REPORT_PER_EXPERIMENT = (
    lambda prefix, suffix, directory, caption, result, experiments=EXPERIMENTS: [
        REPORTED(path, caption, f"Dataset {e.dataset}", TARGET_MODELS(e), result)
        for e, path in zip(experiments, experiment_files(prefix, suffix, directory, experiments))
    ]
)


rule collect_metrics:
    """The results/metrics.parquet contract (long format), with the PPV of every operating point."""
    input:
        experiment_metrics=(
            per_experiment(EXPERIMENT_METRICS)
            + per_llm_experiment(LLM_METRICS)
            + per_llm_settings_experiment(LLM_SETTING_METRICS)
            + per_audit(AUDIT_METRICS)
        ),
        operating_points=OPERATING_POINTS,
        code=code("report.collect_metrics"),
    output:
        metrics=METRICS,
    log:
        "records/report/logs/collect_metrics.log",
    benchmark:
        "records/report/benchmarks/collect_metrics/all.tsv"
    conda:
        SOFTWARE
    params:
        priors=config["metrics"]["priors"],
    script:
        "../scripts/collect_metrics.py"


rule verdicts:
    """Per experiment and setting: the best attack by AUROC and by TPR at the low FPR, the attacks
    not separated from each, flags, and a language-model selection's separability beside them
    (results/summary.json; one file per experiment in results/headline for `dvc metrics show`)."""
    input:
        metrics=METRICS,
        scores=EVERY_SCORES,
        selection=per_llm_experiment(LLM_SEPARABILITY),
        code=code("report.verdicts"),
    output:
        rankings=RANKINGS,
        verdicts=VERDICTS,
        summary="results/summary.json",
        headline=directory("results/headline"),
        verdicts_table=REPORT_TABLE(
            "results/tables/verdicts",
            "verdicts",
            "Headline",
            "Verdicts",
            "The best attacks by AUROC and at a low FPR, what they are not separated from",
        ),
    log:
        "records/report/logs/verdicts.log",
    benchmark:
        "records/report/benchmarks/verdicts/all.tsv"
    conda:
        SOFTWARE
    params:
        low_fpr=config["stats"]["low_fpr"],
        alpha=config["stats"]["alpha"],
        n_resamples=config["stats"]["n_resamples"],
        seed=config["seed"],
    script:
        "../scripts/verdicts.py"


rule stability_table:
    """How consistently each attack flags the same members across the target models (MIAE)."""
    input:
        scores=EVERY_SCORES,
        code=code("report.stability_table"),
    output:
        stability=REPORT_TABLE(
            "results/tables/stability",
            "stability",
            "Headline",
            "Stability",
            "Coverage and stability of the members flagged at the low FPR",
        ),
    log:
        "records/report/logs/stability_table.log",
    benchmark:
        "records/report/benchmarks/stability_table/all.tsv"
    conda:
        SOFTWARE
    params:
        low_fpr=config["stats"]["low_fpr"],
    script:
        "../scripts/stability_table.py"


rule collect_models:
    """Train/test accuracy of every trained model in one table."""
    input:
        records=per_shard(RECORDS) + per_audit(AUDIT_RECORDS),
        code=code("report.collect_models"),
    output:
        models=MODEL_RECORDS,
    log:
        "records/report/logs/collect_models.log",
    benchmark:
        "records/report/benchmarks/collect_models/all.tsv"
    conda:
        SOFTWARE
    script:
        "../scripts/collect_models.py"


rule paired_tests:
    """One-sided tests of each experiment's best attack against the others and of the attack
    families' bests: over target models (t-test) and over samples (permutation, DeLong)."""
    input:
        metrics=METRICS,
        scores=EVERY_SCORES,
        code=code("report.paired_tests"),
    output:
        tests=TESTS,
    log:
        "records/report/logs/paired_tests.log",
    benchmark:
        "records/report/benchmarks/paired_tests/all.tsv"
    conda:
        SOFTWARE
    params:
        tested_metrics=config["stats"]["metrics"],
        alpha=config["stats"]["alpha"],
        n_resamples=config["stats"]["n_resamples"],
        seed=config["seed"],
    script:
        "../scripts/paired_tests.py"


rule tables:
    """Headline tables (csv, md, tex) and log-log ROC figures."""
    input:
        metrics=METRICS,
        tests=TESTS,
        models=MODEL_RECORDS,
        roc=per_experiment(ROC) + per_audit(AUDIT_ROC),
        code=code("report.tables"),
    output:
        auroc_table=REPORT_TABLE(
            "results/tables/auroc",
            "auroc",
            "Headline",
            "AUROC",
            "AUROC per attack and experiment (TDDBench Table 4)",
        ),
        accuracy_table=REPORT_TABLE(
            "results/tables/accuracy",
            "accuracy",
            "Headline",
            "Target models",
            "Train and test accuracy of the models",
        ),
        tests_table=REPORT_TABLE(
            "results/tables/tests",
            "tests",
            "Headline",
            "Paired tests",
            "Attack comparisons by question: the best attack and the families' bests (BY per family)",
        ),
        roc_figures=REPORT_PER_EXPERIMENT(
            "roc", ".png", "results/figures", "roc", "ROC curves of every attack (log-log)"
        )
        # audits of models trained elsewhere (stage audit), reported beside experiments
        + REPORT_PER_EXPERIMENT(
            "roc",
            ".png",
            "results/figures",
            "roc_audit",
            "ROC curves of every attack (log-log)",
            AUDITED,
        ),
    log:
        "records/report/logs/tables.log",
    benchmark:
        "records/report/benchmarks/tables/all.tsv"
    conda:
        SOFTWARE
    params:
        experiments=EXPERIMENTS + AUDITED,
    script:
        "../scripts/tables.py"


rule study_tables:
    """TDDBench Tables 5, 6, 7, 14–16 and Figures 2 and 4 (AUROC vs gap, vs number of references)."""
    input:
        metrics=METRICS,
        models=MODEL_RECORDS,
        sweeps=per_experiment(SWEEP),
        timings=per_experiment(ATTACK_TIMINGS),
        code=code("report.study_tables"),
    output:
        by_architecture=REPORT_TABLE(
            "results/tables/by_architecture",
            "by_architecture",
            "Headline",
            "AUROC",
            "AUROC per target architecture (TDDBench Table 5)",
        ),
        families=REPORT_TABLE(
            "records/report/families",
            "families",
            "Cost",
            "Attack families",
            "AUROC and cost per attack family (TDDBench Table 7)",
        ),
        reference_mismatch=REPORT_TABLE(
            "results/tables/reference_mismatch",
            "reference_mismatch",
            "Headline",
            "AUROC",
            "References of another architecture (TDDBench Table 6)",
        ),
        metric_tables=[
            *REPORT_PER_EXPERIMENT(
                "metrics",
                ".csv",
                "results/tables",
                "metrics",
                "Every metric of every attack " "(TDDBench Tables 14-16)",
            ),
            *[
                path
                for suffix in TABLE_FORMATS
                if suffix != ".csv"
                for path in experiment_files("metrics", suffix, "results/tables")
            ],
        ],
        gap_figure=REPORTED(
            "results/figures/auroc-vs-gap.png",
            "gap",
            "Headline",
            "Target models",
            "AUROC against the train-test gap (TDDBench Fig. 2)",
        ),
        scaling_figures=REPORT_PER_EXPERIMENT(
            "scaling",
            ".png",
            "results/figures",
            "scaling",
            "AUROC against the number of reference models and " "of queries (TDDBench Fig. 4)",
        ),
    log:
        "records/report/logs/study_tables.log",
    benchmark:
        "records/report/benchmarks/study_tables/all.tsv"
    conda:
        SOFTWARE
    params:
        experiments=EXPERIMENTS,
    script:
        "../scripts/study_tables.py"


rule song_mittal_table:
    """Song & Mittal attack accuracy at learned thresholds: class-dependent vs global."""
    input:
        scores=per_experiment(SCORES) + per_audit(AUDIT_SCORES),
        code=code("report.song_mittal_table"),
    output:
        song_mittal=REPORT_TABLE(
            "results/tables/song_mittal",
            "song_mittal",
            "Song & Mittal",
            "Learned thresholds",
            "Class-dependent against global thresholds",
        ),
    log:
        "records/report/logs/song_mittal_table.log",
    benchmark:
        "records/report/benchmarks/song_mittal_table/all.tsv"
    conda:
        SOFTWARE
    script:
        "../scripts/song_mittal_table.py"


rule published_table:
    """The run's target models beside the values their papers publish (train/test accuracy,
    attacks' AUROC; miaflow/evaluation/published.csv, among the code inputs), the difference in
    units of the run's standard deviation."""
    input:
        models=MODEL_RECORDS,
        metrics=METRICS,
        code=code("report.published_table"),
    output:
        table=REPORT_TABLE(
            "results/tables/published",
            "published",
            "Headline",
            "Fidelity",
            "Published against reproduced",
        ),
    log:
        "records/report/logs/published_table.log",
    benchmark:
        "records/report/benchmarks/published_table/all.tsv"
    conda:
        SOFTWARE
    params:
        profile=config["profile"],
    script:
        "../scripts/published_table.py"


rule defense_report:
    """Song & Mittal's defense tables (train/test accuracy, NN and metric attacks' accuracy per
    defense, matched early stopping), the utility/privacy trade-off figure and the members'
    privacy-risk CDF per defense."""
    input:
        models=MODEL_RECORDS,
        metrics=METRICS,
        scores=per_experiment(SCORES),
        code=code("report.defense_report"),
    output:
        defenses=REPORT_TABLE(
            "results/tables/defenses",
            "defenses",
            "Song & Mittal",
            "Defenses",
            "Defended against undefended targets (Song & Mittal Tables 2-4)",
        ),
        tradeoff=REPORTED(
            "results/figures/defense-tradeoff.png",
            "defense_tradeoff",
            "Song & Mittal",
            "Defenses",
            "Utility against privacy",
        ),
        risk=REPORTED(
            "results/figures/defense-risk-cdf.png",
            "defense_risk_cdf",
            "Song & Mittal",
            "Defenses",
            "Members' privacy risk per defense",
        ),
    log:
        "records/report/logs/defense_report.log",
    benchmark:
        "records/report/benchmarks/defense_report/all.tsv"
    conda:
        SOFTWARE
    params:
        recipes=[(e.dataset, e.label, e.arch) for e in EXPERIMENTS],
        architectures=config["architectures"],
    script:
        "../scripts/defense_report.py"


rule risk_score_report:
    """Privacy risk score: precision/recall of r ≥ τ and risk CDFs of members vs non-members."""
    input:
        scores=per_experiment(SCORES),
        code=code("report.risk_score_report"),
    output:
        risk_precision=REPORT_TABLE(
            "results/tables/risk_precision",
            "risk_precision",
            "Song & Mittal",
            "Privacy risk score",
            "Precision and recall of risk thresholds",
        ),
        risk_figures=[
            REPORTED(
                path,
                "risk_cdf",
                "Song & Mittal",
                "Privacy risk score",
                f"Risk CDF: {e.dataset}, {TARGET_MODELS(e)}",
            )
            for e, path in zip(
                EXPERIMENTS, experiment_files("risk-cdf", ".png", "results/figures")
            )
        ],
    log:
        "records/report/logs/risk_score_report.log",
    benchmark:
        "records/report/benchmarks/risk_score_report/all.tsv"
    conda:
        SOFTWARE
    params:
        experiments=EXPERIMENTS,
    script:
        "../scripts/risk_score_report.py"


rule hparam_report:
    """The hyperparameter study's tables and figures: TPR per attack, setting and epsilon; KL-LiRA's
    budget; the TD-HPO vs ED-HPO tests (BY-adjusted); ROC with the DP bound; KL-LiRA's choices;
    LiRA beside the attacks without shadow calibration (the paper's Fig. 5); the black-box setting
    against its white-box twin (Fig. 6)."""
    input:
        study=HPARAM_STUDY,
        bound=DP_BOUND,
        roc=HPARAM_ROC_ALL,
        selection=HPARAM_SELECTION_ALL,
        code=code("report.hparam_report"),
    output:
        headline=REPORT_TABLE(
            "results/tables/hparam_tpr",
            "hparam_tpr",
            "Hyperparameter study",
            "TPR at fixed FPR",
            "TPR of LiRA, ACC-LiRA and KL-LiRA",
        ),
        relative=REPORT_TABLE(
            "results/tables/hparam_relative_tpr",
            "hparam_relative_tpr",
            "Hyperparameter study",
            "TPR at fixed FPR",
            "TPR relative to LiRA",
        ),
        budget=REPORT_TABLE(
            "results/tables/hparam_kl_budget",
            "hparam_kl_budget",
            "Hyperparameter study",
            "KL-LiRA",
            "KL-LiRA's TPR per budget",
        ),
        td_vs_ed=REPORT_TABLE(
            "results/tables/hparam_td_vs_ed",
            "hparam_td_vs_ed",
            "Hyperparameter study",
            "TD-HPO against ED-HPO",
            "Tests: does TD-HPO leak more than ED-HPO?",
        ),
        choices=REPORT_TABLE(
            "results/tables/hparam_selection",
            "hparam_selection",
            "Hyperparameter study",
            "KL-LiRA",
            "Hyperparameters KL-LiRA selected against the target's",
        ),
        baselines=REPORT_TABLE(
            "results/tables/hparam_baselines",
            "hparam_baselines",
            "Hyperparameter study",
            "TPR at fixed FPR",
            "TPR of LiRA and of attacks without shadow calibration",
        ),
        blackbox=REPORT_TABLE(
            "results/tables/hparam_blackbox",
            "hparam_blackbox",
            "Hyperparameter study",
            "Black-box setting",
            "TPR with shadows on another backbone (black box) against the targets' own",
        ),
        roc_figures=[
            REPORTED(
                path,
                "hparam_roc",
                "Hyperparameter study",
                "TPR at fixed FPR",
                f"ROC curves with the DP bound: {setting}",
            )
            for setting, path in zip(
                HPARAM_SETTINGS,
                expand("results/figures/hparam-roc-{setting}.png", setting=list(HPARAM_SETTINGS)),
            )
        ],
        figures=[
            REPORTED(
                f"results/figures/hparam-{name}.png",
                "hparam_{}_figure".format(name.replace("-", "_")),
                "Hyperparameter study",
                subcategory,
                result,
            )
            for name, subcategory, result in [
                ("relative-tpr", "TPR at fixed FPR", "TPR relative to LiRA (figure)"),
                ("kl-budget", "KL-LiRA", "KL-LiRA's TPR per budget (figure)"),
                ("td-vs-ed", "TD-HPO against ED-HPO", "TPR of TD-HPO against ED-HPO targets"),
                ("pvalues", "TD-HPO against ED-HPO", "p-values of the TD-HPO vs ED-HPO tests"),
                ("selection", "KL-LiRA", "Learning rate selected against the target's"),
                (
                    "baselines",
                    "TPR at fixed FPR",
                    "TPR of LiRA and of attacks without shadow calibration (figure)",
                ),
                (
                    "blackbox",
                    "Black-box setting",
                    "TPR with shadows on another backbone (figure)",
                ),
            ]
        ],
    log:
        "records/report/logs/hparam_report.log",
    benchmark:
        "records/report/benchmarks/hparam_report/all.tsv"
    conda:
        SOFTWARE
    params:
        alpha=config["stats"]["alpha"],
        resamples=config["hparam_study"]["permutation_resamples"],
        confidence=config["metrics"]["confidence"],
        seed=config["seed"],
    script:
        "../scripts/hparam_report.py"


rule llm_report:
    """Language-model attacks: EM-MIA's table shape (AUROC, TPR at 1% and 5% FPR; label-using
    attacks marked), the Min-K% k sweep, EM-MIA's per-iteration AUROC (diagnostic, uses labels),
    the attacks on EM-MIA's benchmark settings and on copyright traps (tables and figures), and
    dataset inference's tests (table and figure)."""
    input:
        metrics=per_llm_experiment(LLM_METRICS),
        iterates=per_llm_experiment(LLM_ITERATES),
        prefix_fit=per_llm_experiment(LLM_PREFIX_FIT),
        setting_metrics=per_llm_settings_experiment(LLM_SETTING_METRICS),
        trap_metrics=per_llm_trap_experiment(LLM_TRAP_METRICS),
        inference=per_llm_inference_experiment(LLM_DATASET_INFERENCE),
        selection=per_llm_experiment(LLM_SEPARABILITY),
        code=code("report.llm_report"),
    output:
        llm_table=REPORT_TABLE(
            "results/tables/llm",
            "llm",
            "Language models",
            "Attacks",
            "AUROC and TPR at 1% and 5% FPR per attack",
        ),
        mink_sweep_table=REPORT_TABLE(
            "results/tables/llm_mink_sweep",
            "llm_mink_sweep",
            "Language models",
            "Min-K% and Min-K%++",
            "AUROC against k (table)",
        ),
        settings_table=REPORT_TABLE(
            "results/tables/llm_settings",
            "llm_settings",
            "Language models",
            "Benchmark settings",
            "AUROC and TPR at 1% FPR per attack and setting (table)",
        ),
        em_figure=REPORTED(
            "results/figures/llm-em-iterations.png",
            "llm_em_iterations",
            "Language models",
            "EM-MIA",
            "AUROC after each EM-MIA iteration",
        ),
        mink_figure=REPORTED(
            "results/figures/llm-mink-sweep.png",
            "llm_mink_sweep_figure",
            "Language models",
            "Min-K% and Min-K%++",
            "AUROC against k (figure)",
        ),
        settings_figure=REPORTED(
            "results/figures/llm-settings.png",
            "llm_settings_figure",
            "Language models",
            "Benchmark settings",
            "AUROC per attack and setting (figure)",
        ),
        traps_table=REPORT_TABLE(
            "results/tables/llm_traps",
            "llm_traps",
            "Language models",
            "Copyright traps",
            "AUROC and TPR at 1% FPR per attack and repetition count (table)",
        ),
        traps_figure=REPORTED(
            "results/figures/llm-traps.png",
            "llm_traps_figure",
            "Language models",
            "Copyright traps",
            "AUROC against the traps' repetitions (figure)",
        ),
        inference_table=REPORT_TABLE(
            "results/tables/llm_dataset_inference",
            "llm_dataset_inference",
            "Dataset inference",
            "Suspect sets",
            "p-value of every test of a suspect set (table)",
        ),
        inference_figure=REPORTED(
            "results/figures/llm-dataset-inference.png",
            "llm_dataset_inference_figure",
            "Dataset inference",
            "Suspect sets",
            "Share of suspect sets rejected per size (figure)",
        ),
    log:
        "records/report/logs/llm_report.log",
    benchmark:
        "records/report/benchmarks/llm_report/all.tsv"
    conda:
        SOFTWARE
    params:
        alpha=LLM_INFERENCE_ALPHA,
    script:
        "../scripts/llm_report.py"


rule privacy_report:
    """The privacy audit's table (ε lower bounds against each target's claimed ε) and its figure
    of ε̂ against ε per target and estimator."""
    input:
        audit=PRIVACY_AUDIT,
        code=code("report.privacy_report"),
    output:
        table=REPORT_TABLE(
            "results/tables/privacy_audit",
            "privacy_audit",
            "Privacy audit",
            "Lower bounds on epsilon",
            "Empirical lower bounds on epsilon against each target's claim",
        ),
        figure=REPORTED(
            "results/figures/privacy-audit.png",
            "privacy_audit_figure",
            "Privacy audit",
            "Lower bounds on epsilon",
            "Empirical epsilon against the claimed epsilon (figure)",
        ),
    log:
        "records/report/logs/privacy_report.log",
    benchmark:
        "records/report/benchmarks/privacy_report/all.tsv"
    conda:
        SOFTWARE
    script:
        "../scripts/privacy_report.py"


rule cost_table:
    """Time and peak memory per stage and rule, from the benchmark file of every job of the run."""
    input:
        benchmarks=lambda w: library.remembered(
            Path(".snakemake/miaflow-benchmarks.json"),
            library.workflow_digest(config),
            lambda: plan.benchmarks_of(
                workflow.rules,
                stage_targets(
                    "prepare",
                    "train",
                    "queries",
                    "evaluate",
                    "hparams",
                    "llm",
                    "audit",
                    "privacy",
                    "report",
                ),
                skip="cost_table",
            ),
        ),
        code=code("report.cost_table"),
    output:
        cost=REPORT_TABLE(
            "records/report/cost",
            "cost",
            "Cost",
            "Time and memory",
            "Time and peak memory per stage and rule",
        ),
    log:
        "records/report/logs/cost_table.log",
    conda:
        SOFTWARE
    script:
        "../scripts/cost_table.py"


rule report:
    """Target of the report stage (DVC stage `report`): the metrics contract, tables, figures."""
    input:
        rules.collect_metrics.output,
        rules.verdicts.output,
        rules.stability_table.output,
        rules.collect_models.output,
        rules.paired_tests.output,
        rules.tables.output,
        rules.study_tables.output,
        rules.song_mittal_table.output if plan.song_mittal_thresholds(config) else [],
        rules.risk_score_report.output if plan.risk_scored(config) else [],
        rules.defense_report.output if plan.defended(config) else [],
        rules.published_table.output if PUBLISHED else [],
        rules.hparam_report.output if HPARAM_SETTINGS else [],
        rules.llm_report.output if LLM_EXPERIMENTS or LLM_TRAP_EXPERIMENTS else [],
        rules.privacy_report.output if plan.privacy_audited(config) else [],
        rules.cost_table.output,
    localrule: True
