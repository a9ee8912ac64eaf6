# Shared by the stage files (prepare, train, queries, evaluate, hparams, llm, report): the plan
# derived from params.yaml, the paths of the artifacts one stage writes and another reads, and the input
# functions. A stage file reads only the names defined here, never another stage file's.

from miaflow.models.kinds import QUERY_OUTPUTS, DISTANCES, SURROGATES, REGRESSORS, CANARIES
from miaflow.attacks import llm as llm_attacks
from miaflow.llm import models as llm_models
from miaflow.evaluation import published
from miaflow.workflow import code as library
from miaflow.workflow.code import ADAPTER
from miaflow.workflow import plan


EXPERIMENTS = plan.experiments(config)  # what is attacked and reported
EXPERIMENT_BY_NAME = {e.name: e for e in EXPERIMENTS}  # "<dataset>/<label>": the path wildcards
TRAINED = plan.trained(config)  # (dataset, arch): whose models are trained
SHARDS = plan.shards(config)  # model ids of each training job
TABLE_FORMATS = (".csv", ".md", ".tex")

# --- artifacts that cross stages -------------------------------------------------------------
DATA = "results/prepare/data/{dataset}.parquet"
SPLITS = "results/prepare/splits/{dataset}.parquet"
MODELS = "results/train/models/{dataset}/{arch}/shard-{shard}.safetensors"
RECORDS = "results/train/models/{dataset}/{arch}/shard-{shard}.json"
SIGNALS = "results/train/signals/{dataset}/{arch}/shard-{shard}.parquet"
QUERY_SET = "results/queries/sets/{dataset}.parquet"
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
METRICS = "results/metrics.parquet"  # the contract: every metric, long format
# The hyperparameter study (stage hparams): per setting, ε and run, then the contract tables.
HPARAM_FEATURES = "results/hparams/features/{dataset}/{backbone}.parquet"
HPARAM_SPLITS = "results/hparams/splits/{setting}/run-{run}.parquet"
HPARAM_NOISE = "results/hparams/noise/{setting}/eps-{epsilon}.parquet"
HPARAM_TRIALS = "results/hparams/trials/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_GRID = "results/hparams/grid/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_METRICS = "results/hparams/metrics/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_ROC = "results/hparams/roc/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_SELECTION = "results/hparams/selection/{setting}/eps-{epsilon}/run-{run}.parquet"
HPARAM_BOUND = "results/hparams/bound/{setting}/eps-{epsilon}.parquet"
HPARAM_STUDY = "results/hparam_study.parquet"  # the contract: TPR at fixed FPR, long format
DP_BOUND = "results/dp_bound.parquet"  # the contract: the DP upper bound on any attack
HPARAM_ROC_ALL = "results/hparams/roc.parquet"
HPARAM_SELECTION_ALL = "results/hparams/selection.parquet"
MODEL_RECORDS = "results/report/models.parquet"
TESTS = "results/report/tests.parquet"
# The software every job runs: the pinned packages of `make setup`, as a conda environment for
# `snakemake --sdm conda` (relative to the stage files).
SOFTWARE = "../envs/miaflow.yaml"


def code(stage):
    """The library files the jobs of `stage` run (the import closures of miaflow.jobs.<stage> and
    of the adapter every script calls), listed as inputs so that editing one reruns exactly the
    jobs that use it."""
    return sorted({*library.files(f"miaflow.jobs.{stage}"), *library.files(ADAPTER)})


def experiment(wildcards):
    """The Experiment of a job's {dataset}/{experiment} wildcards."""
    return EXPERIMENT_BY_NAME[f"{wildcards.dataset}/{wildcards.experiment}"]


def per_experiment(pattern):
    """`pattern` for every experiment ({dataset}, {experiment}: its label)."""
    return [pattern.format(dataset=e.dataset, experiment=e.label) for e in EXPERIMENTS]


def experiment_files(prefix, suffix, directory, experiments=EXPERIMENTS):
    """One file per experiment, named by `Experiment.file_name` (the jobs find theirs by it)."""
    return [f"{directory}/{e.file_name(prefix, suffix)}" for e in experiments]


def per_shard(pattern):
    """`pattern` for every trained (dataset, arch) and training shard."""
    return [pattern.format(dataset=d, arch=a, shard=shard)
            for shard in range(len(SHARDS)) for d, a in TRAINED]


def shard_files(pattern, role):
    """Input function: `pattern` for every shard of an experiment's target models (role "arch")
    or reference models ("ref_arch")."""
    return lambda w: [pattern.format(dataset=w.dataset, arch=getattr(experiment(w), role), shard=k)
                      for k in range(len(SHARDS))]


def job_shards(pattern):
    """Input function: `pattern` for every shard of the job's {dataset} and {arch}."""
    return lambda w: [pattern.format(dataset=w.dataset, arch=w.arch, shard=k)
                      for k in range(len(SHARDS))]


def queried_shards(w):
    """Model shards holding a target or the shadow model (reference-0): those queried."""
    return [MODELS.format(dataset=w.dataset, arch=w.arch, shard=k) for k, ids in enumerate(SHARDS)
            if any(m.startswith("target-") or m == "reference-0" for m in ids)]


def attacks(wildcards):
    return plan.attacks_for(config, experiment(wildcards))


def query_artifacts(attacks_of):
    """Input function (for `unpack`): the queries stage's artifacts that the attacks
    `attacks_of(experiment)` read, by name."""
    def named(wildcards):
        chosen = experiment(wildcards)
        return {name: QUERY_ARTIFACTS[name].format(dataset=chosen.dataset, arch=chosen.arch)
                for name in plan.artifacts_for(config, chosen, attacks_of(chosen))}
    return named


def built_query_artifacts():
    """Every query artifact the configured attacks read, over all experiments, and the query
    sets of the datasets whose models are queried."""
    named = {(e, name) for e in EXPERIMENTS for name in plan.artifacts_for(config, e)}
    return sorted({QUERY_ARTIFACTS[name].format(dataset=e.dataset, arch=e.arch) for e, name in named}
                  | {QUERY_SET.format(dataset=e.dataset) for e, name in named if name == QUERY_OUTPUTS})


def benchmarks_of(targets, skip="cost_table"):
    """Benchmark files of every job the `targets` need: each target's producer, then the producers
    of that job's inputs, recursively (the cost table counts intermediate jobs too). `skip`: the
    rule that asks, whose own inputs are these files."""
    found, seen, todo = set(), set(), [str(t) for t in targets]
    while todo:
        target = todo.pop()
        if target in seen:
            continue
        seen.add(target)
        for producer in workflow.rules:
            if producer.name == skip or not producer.is_producer(target):
                continue
            wildcards = producer.get_wildcards(target)
            if producer.benchmark:
                found.add(str(producer.benchmark.apply_wildcards(wildcards)))
            todo.extend(str(path) for path in producer.expand_input(wildcards)[0])
    return sorted(found)


def stage_targets(*stages):
    """The files the target rules of `stages` request (for input functions: they run once every
    rule file is parsed)."""
    return [str(path) for stage in stages for path in workflow.get_rule(stage).input]


# --- audits of models trained elsewhere (stage audit) -----------------------------------------
# One audit per {dataset}/{audit}: the dataset its results name, then the audit's name.
AUDITS = {a["experiment"].name: a for a in plan.audits(config)}
AUDITED = [a["experiment"] for a in AUDITS.values()]  # reported like experiments
AUDIT_SPLITS = "results/audit/splits/{dataset}/{audit}.parquet"
AUDIT_SIGNALS = "results/audit/signals/{dataset}/{audit}.parquet"
AUDIT_RECORDS = "results/audit/records/{dataset}/{audit}.json"
AUDIT_SCORES = "results/audit/scores/{dataset}/{audit}.parquet"
AUDIT_TIMINGS = "records/audit/benchmarks/score_audit/{dataset}/{audit}.attacks.tsv"
AUDIT_METRICS = "results/audit/metrics/{dataset}/{audit}.parquet"
AUDIT_ROC = "results/audit/roc/{dataset}/{audit}.parquet"


def audit_entry(w):
    return AUDITS[f"{w.dataset}/{w.audit}"]


def per_audit(pattern, kind=None):
    """`pattern` for every audit (of `kind`, "outputs" or "checkpoint", when given)."""
    return [pattern.format(dataset=a["experiment"].dataset, audit=a["name"])
            for a in AUDITS.values() if kind in (None, a["kind"])]


def audit_reference_signals(w):
    """The signals of the audit's reference models: its own file, or for a checkpoint miaflow's
    shards of its dataset and architecture."""
    entry = audit_entry(w)
    if entry["kind"] == "outputs":
        return [AUDIT_SIGNALS.format(dataset=w.dataset, audit=w.audit)]
    return [SIGNALS.format(dataset=w.dataset, arch=entry["arch"], shard=k) for k in range(len(SHARDS))]


def names_of(kind):
    """Wildcard constraint matching exactly the names of the audits of `kind` (none: nothing)."""
    names = [a["name"] for a in AUDITS.values() if a["kind"] == kind]
    return "|".join(names) if names else "(?!)"


# --- the hyperparameter study (stage hparams) -------------------------------------------------
STUDY = config["hparam_study"]
HPARAM_SETTINGS = {s["name"]: s for s in plan.hparam_settings(config)}
EPSILONS = [plan.epsilon_tag(e) for e in STUDY["epsilons"]] if HPARAM_SETTINGS else []
PRIVATE = [tag for tag in EPSILONS if tag != "inf"]


def study_setting(w):
    return HPARAM_SETTINGS[w.setting]


def study_data(w):
    """The prepared dataset, or its backbone features when the setting names a backbone."""
    setting = study_setting(w)
    if setting.get("backbone"):
        return HPARAM_FEATURES.format(dataset=setting["dataset"], backbone=setting["backbone"])
    return DATA.format(dataset=setting["dataset"])


def study_noise(w):
    """The ε's noise-multiplier table; none when not private."""
    return [] if w.epsilon == "inf" else [HPARAM_NOISE.format(setting=w.setting, epsilon=w.epsilon)]


def per_study_run(pattern, epsilons=EPSILONS):
    return expand(pattern, setting=list(HPARAM_SETTINGS), epsilon=epsilons, run=range(STUDY["runs"]))


# --- attacks on language models (stage llm) ---------------------------------------------------
# One experiment per {dataset}/{lm} (lm: the target recipe); {model} is target-<repeat> or the
# shared reference.
LLM = config["llm"]
LLM_EXPERIMENTS = {f"{e['dataset']}/{e['label']}": e for e in plan.llm_experiments(config)}
LLM_NEEDS = llm_attacks.needs(LLM["attacks"], LLM["attack_options"])
LLM_SPLITS = "results/llm/splits/{dataset}/{lm}.parquet"
LLM_TOKENIZER = "results/llm/tokenizers/{dataset}/{recipe}.json"
LLM_PACKAGED = "results/llm/pretrained/{packaged}"
LLM_CHECKPOINT = "results/llm/models/{dataset}/{lm}/{model}"
LLM_HISTORY = "results/llm/models/{dataset}/{lm}/{model}.json"
LLM_NEIGHBORS = "results/llm/neighbors/{dataset}/{lm}.parquet"
LLM_TOKENS = "results/llm/tokens/{dataset}/{lm}/{model}/{text_set}.parquet"
LLM_RECALL = "results/llm/recall/{dataset}/{lm}/target-{repeat}.parquet"
LLM_PAIRS = "results/llm/pairs/{dataset}/{lm}/target-{repeat}/shard-{shard}.parquet"
LLM_SCORES = "results/llm/scores/{dataset}/{lm}.parquet"
LLM_ITERATES = "results/llm/iterates/{dataset}/{lm}.parquet"
LLM_METRICS = "results/llm/metrics/{dataset}/{lm}.parquet"
LLM_ROC = "results/llm/roc/{dataset}/{lm}.parquet"


def llm_experiment(w):
    return LLM_EXPERIMENTS[f"{w.dataset}/{w.lm}"]


def llm_model(w):
    """The job's model id: its {model}, or target-{repeat} for the per-repeat jobs."""
    return w.model if "model" in w.keys() else f"target-{w.repeat}"


def llm_recipe(w):
    """The recipe of the job's model: the experiment's reference or target recipe."""
    return llm_experiment(w)["reference_recipe" if llm_model(w) == "reference" else "target_recipe"]


def llm_pretrained(name):
    """Where a pretrained model is read from: the converted packaged checkpoint, or `name` (a
    directory or hub name)."""
    return LLM_PACKAGED.format(packaged=name) if name in llm_models.PACKAGED else name


def llm_source(w):
    """The checkpoint a model's statistics come from: trained here, or pretrained."""
    recipe = llm_recipe(w)
    if recipe["kind"] == "pretrained":
        return llm_pretrained(recipe["model"])
    return LLM_CHECKPOINT.format(dataset=w.dataset, lm=w.lm, model=llm_model(w))


def llm_source_input(w):
    """The source as an input when the workflow makes it (trained or converted), else none."""
    source = llm_source(w)
    return [source] if source.startswith("results/") else []


def llm_pretrained_source(w):
    """The directory or hub name of a pretrained model the workflow does not make, else None."""
    return None if llm_source_input(w) else llm_source(w)


def llm_base(w):
    """The directory or hub name a fine-tuned model starts from, unless the workflow makes it."""
    recipe = llm_recipe(w)
    base = llm_pretrained(recipe["base"]) if recipe["kind"] == "finetune" else None
    return None if base is None or base.startswith("results/") else base


def llm_training_input(w):
    """A scratch model's tokenizer, or the converted checkpoint a fine-tuned model starts from."""
    recipe = llm_recipe(w)
    if recipe["kind"] == "scratch":
        name = llm_experiment(w)["reference" if w.model == "reference" else "target"]
        return {"tokenizer": LLM_TOKENIZER.format(dataset=w.dataset, recipe=name)}
    base = llm_pretrained(recipe["base"])
    return {"base_checkpoint": base} if base.startswith("results/") else {}


def llm_per_repeat(pattern, **fields):
    """Input function: `pattern` for every repeat's target model of the job's experiment."""
    return lambda w: [pattern.format(dataset=w.dataset, lm=w.lm, model=f"target-{r}", repeat=r,
                                     **fields) for r in range(LLM["repeats"])]


def llm_if(need, files):
    """`files` (an input function) when a configured attack needs `need`, else no input."""
    return files if need in LLM_NEEDS else []


def per_llm_experiment(pattern):
    return [pattern.format(dataset=e["dataset"], lm=e["label"]) for e in LLM_EXPERIMENTS.values()]
