"""miaflow: a reproducible membership-inference benchmark.

data -> splits -> training (target, reference, population models) -> signals (per-sample outputs)
-> attacks -> metrics -> statistical tests -> tables and figures. params.yaml is the config; it is
validated here, before any job starts. Logic lives in the `miaflow` package; rules stay thin.
"""

from pathlib import Path

from snakemake.exceptions import WorkflowError

from miaflow import workflow as wf
from miaflow.config import ConfigError, validate


configfile: "params.yaml"


try:
    effective = validate(config)  # the selected profile applied (`--config profile=NAME` works too)
except ConfigError as error:
    raise WorkflowError(str(error)) from None
config.clear()
config.update(effective)

EXPERIMENTS = wf.experiments(config)  # (dataset, label): what is attacked and reported
TRAINED = wf.trained(config)  # (dataset, arch): whose models are trained
SHARDS = wf.shards(config)
# Artifacts an attack reads beside the signal store, by attack id: {name: path pattern with
# {dataset} and {arch}}. The rule files of attack-specific stages (e.g. queries) add to it.
ATTACK_ARTIFACTS = {}


def package(*modules):
    """Library modules (or subpackages) a rule runs, always with the job glue (`jobs`, `io`):
    listed as inputs so that editing one reruns the rule (Snakemake compares their checksums)."""
    return [str(path) for module in ("jobs", "io", *modules)
            for path in (sorted(Path("miaflow", module).glob("*.py"))
                         if Path("miaflow", module).is_dir() else [Path(f"miaflow/{module}.py")])]


def per_experiment(pattern, **extra):
    """`pattern` filled in for every (dataset, label) experiment."""
    return [pattern.format(dataset=d, arch=a, **extra) for d, a in EXPERIMENTS]


def attack_artifacts(prefix):
    """Artifacts under `prefix` read by the configured attacks, for every experiment they apply to."""
    return sorted({pattern.format(dataset=d, arch=a) for d, a in EXPERIMENTS
                   for attack in wf.attacks_for(config, d, a)
                   for pattern in ATTACK_ARTIFACTS.get(attack, {}).values() if pattern.startswith(prefix)})


def artifact_names(attacks):
    """(attack, artifact name) pairs of the extra files `attacks` read."""
    return [(a, name) for a in attacks for name in ATTACK_ARTIFACTS.get(a, {})]


def attack_artifact_names(w):
    """The extra files an experiment's attacks read, as (attack, artifact name) pairs."""
    return artifact_names(wf.attacks_for(config, w.dataset, w.arch))


def swept_artifacts(w):
    """The extra files of the query attacks an experiment's scaling sweep runs."""
    return artifact_names(wf.swept_query_attacks(config, w.dataset, w.arch))


def per_shard(pattern):
    """`pattern` filled in for every trained (dataset, arch) and training shard."""
    return [pattern.format(dataset=d, arch=a, shard=shard)
            for shard in range(len(SHARDS)) for d, a in TRAINED]


def shard_signals(which):
    """Input function: the signal shards of an experiment's target (`which` = wf.target_arch) or
    reference (wf.reference_arch) models."""
    return lambda w: expand(rules.train_shard.output.signals, shard=range(len(SHARDS)),
                            dataset=w.dataset, arch=which(w.arch))


wildcard_constraints:
    dataset="[a-z0-9_]+",
    arch="[a-z0-9_]+",
    shard=r"\d+",


include: "rules/data.smk"
include: "rules/training.smk"
include: "rules/query_models.smk"
include: "rules/queries.smk"
include: "rules/attacks.smk"
include: "rules/metrics.smk"
include: "rules/stats.smk"
include: "rules/tables.smk"


rule all:
    """Everything: the paper tables, figures and the metrics contract."""
    input:
        rules.collect_metrics.output,
        rules.tables.output,
        rules.study_tables.output,
        rules.cost_table.output,
        SONG_MITTAL_OUTPUTS,  # Song & Mittal tables and risk figures, when their attacks run


rule prepare:
    """DVC stage `prepare`: datasets and membership matrices."""
    input:
        expand(rules.prepare_dataset.output, dataset=wf.datasets(config)),


rule train:
    """DVC stage `train`: every model shard, its per-sample outputs and the attacks' own models."""
    input:
        per_shard(rules.train_shard.output.models),
        per_shard(rules.train_shard.output.signals),
        attack_artifacts("results/train/"),
