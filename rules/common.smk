# The contract between the stage files: the plan derived from params.yaml that several stages
# share, the paths of the artifacts one stage writes and another reads, and the helpers more than
# one stage file calls. A stage file reads only the names defined here or in itself, never
# another stage file's; what one stage file alone uses sits at its top (tests/unit/test_architecture.py).

from pathlib import Path

from miaflow.models.kinds import QUERY_OUTPUTS, DISTANCES, SURROGATES, REGRESSORS, CANARIES
from miaflow.plan import code as library
from miaflow.plan.code import ADAPTER
from miaflow import plan

EXPERIMENTS = plan.experiments(config)  # what is attacked and reported
TRAINED = plan.trained(config)  # (dataset, arch): whose models are trained
SHARDS = plan.shards(config)  # model ids of each training job
# One audit of a model trained elsewhere per {dataset}/{audit} (its dataset, then its name).
AUDITS = {a["experiment"].name: a for a in plan.audits(config)}
HPARAM_SETTINGS = {s["name"]: s for s in plan.hparam_settings(config)}  # by {setting}
# One language-model experiment per {dataset}/{lm} (lm: the target recipe) attacked on its scored
# texts; those with copyright traps, attacked on the traps alone (docs/language-models.md#traps).
LLM_EXPERIMENTS = {f"{e['dataset']}/{e['label']}": e for e in plan.llm_scored_experiments(config)}
LLM_TRAP_EXPERIMENTS = {
    f"{e['dataset']}/{e['label']}": e for e in plan.llm_trap_experiments(config)
}
# Those also scored on EM-MIA's benchmark settings (docs/language-models.md#benchmark-settings),
# and those that dataset inference tests (docs/language-models.md#dataset-inference).
LLM_SETTINGS_EXPERIMENTS = plan.llm_settings_experiments(config)
LLM_INFERENCE_EXPERIMENTS = plan.llm_inference_experiments(config)

# --- artifacts that cross stages -------------------------------------------------------------
DATA = "results/prepare/data/{dataset}.parquet"
SPLITS = "results/prepare/splits/{dataset}.parquet"
MODELS = "results/train/models/{dataset}/{arch}/shard-{shard}.safetensors"
RECORDS = "results/train/models/{dataset}/{arch}/shard-{shard}.json"
SIGNALS = "results/train/signals/{dataset}/{arch}/shard-{shard}.parquet"
# What query attacks read beside the signal store, by the names of `Attack.reads`.
QUERY_ARTIFACTS = {
    QUERY_OUTPUTS: "results/queries/outputs/{dataset}/{arch}.parquet",
    DISTANCES: "results/queries/distances/{dataset}/{arch}.parquet",
    SURROGATES: "results/queries/surrogates/{dataset}/{arch}.parquet",
    REGRESSORS: "results/queries/regressors/{dataset}/{arch}.parquet",
    CANARIES: "results/queries/canaries/{dataset}/{arch}.parquet",
}
SCORES = "results/evaluate/scores/{dataset}/{experiment}.parquet"
ATTACK_TIMINGS = "records/evaluate/benchmarks/score_attacks/{dataset}/{experiment}.attacks.tsv"
EXPERIMENT_METRICS = "results/evaluate/metrics/{dataset}/{experiment}.parquet"
ROC = "results/evaluate/roc/{dataset}/{experiment}.parquet"
SWEEP = "results/evaluate/sweep/{dataset}/{experiment}.parquet"
# The point behind every TPR of every stage's scores: realized FPR, threshold, non-members.
OPERATING_POINTS = "results/evaluate/operating_points.parquet"
# The hyperparameter study's contract tables and what its figures draw.
HPARAM_STUDY = "results/hparam_study.parquet"  # the contract: TPR at fixed FPR, long format
DP_BOUND = "results/dp_bound.parquet"  # the contract: the DP upper bound on any attack
HPARAM_ROC_ALL = "results/hparams/roc.parquet"
HPARAM_SELECTION_ALL = "results/hparams/selection.parquet"
LLM_ITERATES = "results/llm/iterates/{dataset}/{lm}.parquet"
LLM_SCORES = "results/llm/scores/{dataset}/{lm}.parquet"
LLM_METRICS = "results/llm/metrics/{dataset}/{lm}.parquet"
LLM_PREFIX_FIT = "results/llm/prefix_fit/{dataset}/{lm}.parquet"
LLM_SETTING_SCORES = "results/llm/settings/scores/{dataset}/{lm}.parquet"
LLM_SETTING_METRICS = "results/llm/settings/metrics/{dataset}/{lm}.parquet"
LLM_TRAP_SCORES = "results/llm/traps/scores/{dataset}/{lm}.parquet"
LLM_TRAP_METRICS = "results/llm/traps/metrics/{dataset}/{lm}.parquet"
LLM_DATASET_INFERENCE = "results/llm/dataset_inference/{dataset}/{lm}.parquet"
# What the selection alone gives: a labelled model-free classifier's out-of-fold scores of the
# texts of every scored set (the eval sets and the benchmark settings).
LLM_SEPARABILITY = "results/llm/separability/{dataset}/{lm}.parquet"
AUDIT_RECORDS = "results/audit/records/{dataset}/{audit}.json"
AUDIT_SCORES = "results/audit/scores/{dataset}/{audit}.parquet"
AUDIT_METRICS = "results/audit/metrics/{dataset}/{audit}.parquet"
AUDIT_ROC = "results/audit/roc/{dataset}/{audit}.parquet"
# The privacy audit's contract: every ε lower bound against its target's claim.
PRIVACY_AUDIT = "results/privacy/audit.parquet"
# The software every job runs: the pinned packages of `make setup`, as a conda environment for
# `snakemake --sdm conda` (relative to the stage files).
SOFTWARE = "../envs/miaflow.yaml"
# Priority of the jobs that start the run's longest chains (the language models' training, the
# study's noise table, the models' training): started first, they do not end the run alone.
LONG_CHAIN = 1


# The import closure of every job function, cached under .snakemake/ by the package's sources.
JOB_FILES = library.job_files(Path(".snakemake/miaflow-code.json"))


def code(job):
    """The library files job `<stage>.<job>` runs (the import closures of the job function
    miaflow.jobs.<stage>.<job> and of the adapter every script calls), listed as inputs so
    that editing one reruns exactly the jobs that use it."""
    return sorted({*JOB_FILES[f"miaflow.jobs.{job}"], *JOB_FILES[ADAPTER]})


def per_experiment(pattern):
    """`pattern` for every experiment ({dataset}, {experiment}: its label)."""
    return [pattern.format(dataset=e.dataset, experiment=e.label) for e in EXPERIMENTS]


def per_shard(pattern):
    """`pattern` for every trained (dataset, arch) and training shard."""
    return [
        pattern.format(dataset=d, arch=a, shard=shard)
        for shard in range(len(SHARDS))
        for d, a in TRAINED
    ]


def per_audit(pattern, kind=None):
    """`pattern` for every audit (of `kind`, "outputs" or "checkpoint", when given)."""
    return [
        pattern.format(dataset=a["experiment"].dataset, audit=a["name"])
        for a in AUDITS.values()
        if kind in (None, a["kind"])
    ]


def per_llm_experiment(pattern):
    return [pattern.format(dataset=e["dataset"], lm=e["label"]) for e in LLM_EXPERIMENTS.values()]


def per_llm_settings_experiment(pattern):
    """`pattern` for every language-model experiment scored on the benchmark settings."""
    return [pattern.format(dataset=e["dataset"], lm=e["label"]) for e in LLM_SETTINGS_EXPERIMENTS]


def per_llm_trap_experiment(pattern):
    """`pattern` for every language-model experiment with copyright traps."""
    return [
        pattern.format(dataset=e["dataset"], lm=e["label"]) for e in LLM_TRAP_EXPERIMENTS.values()
    ]


def per_llm_inference_experiment(pattern):
    """`pattern` for every language-model experiment that dataset inference tests."""
    return [pattern.format(dataset=e["dataset"], lm=e["label"]) for e in LLM_INFERENCE_EXPERIMENTS]


# Every stage's per-sample scores: the experiments', the language models' (their own split,
# EM-MIA's benchmark settings and the copyright traps) and the audits'.
EVERY_SCORES = (
    per_experiment(SCORES)
    + per_llm_experiment(LLM_SCORES)
    + per_llm_settings_experiment(LLM_SETTING_SCORES)
    + per_llm_trap_experiment(LLM_TRAP_SCORES)
    + per_audit(AUDIT_SCORES)
)
