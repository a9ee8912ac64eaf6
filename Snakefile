"""miaflow: a reproducible membership-inference benchmark.

Nine stages, each one rule file (rules/<stage>.smk), one jobs module (miaflow/jobs/<stage>.py),
one results folder (results/<stage>/) and its run records (records/<stage>/: logs, timings):

  prepare   datasets in canonical order and their membership matrices
  train     target, reference and population models, and their outputs on every sample
  queries   what query attacks read beside those outputs (query sets, surrogates, canaries, ...)
  evaluate  every attack's membership scores, their metrics and ROC curves
  hparams   the hyperparameter study: MIA-Grid, HPO, LiRA / ACC-LiRA / KL-LiRA, DP, TD vs ED
  llm       attacks on language models: targets trained here or pretrained, Loss ... EM-MIA
  audit     models trained elsewhere, brought as outputs or checkpoints, attacked the same way
  privacy   the privacy audit: ε lower bounds from canaries against each DP target's claimed ε
  report    the metrics contract (results/metrics.parquet), tests, tables and figures

params.yaml is the config; it is validated here, before any job starts. Logic lives in the
`miaflow` package; rules stay thin.
"""

import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from miaflow.config import ConfigError, checked_yaml, validate
from miaflow.runtime import forkserver, orphans, profiles
from miaflow.runtime.start import RunAlive, runs_jobs, start


configfile: checked_yaml("params.yaml")  # names the line of a YAML error


# A profile chosen on the command line (`--config profile=NAME`, not the one params.yaml selects)
# runs in runs/NAME/, beside the selected profile's results/ and records/, which it leaves as they
# are (miaflow.runtime.profiles), unless `--directory` names the working directory.
PROJECT = Path(workflow.main_snakefile).resolve().parent
if (
    workflow.overwrite_workdir is None
    and (elsewhere := profiles.working_directory(config, PROJECT)) is not None
):

    workdir: profiles.link_project(PROJECT, elsewhere)

    if workflow.is_main_process:
        print(f"profile {config['profile']} runs in {elsewhere}/", file=sys.stderr)
    config.update(profiles.relocated(config, len(elsewhere.relative_to(PROJECT).parts)))


# `snakemake --report report.html`: this description heads the report (results: rules/report.smk).
report: "report/workflow.rst"


# After a crash, the same command resumes: stale locks and temp files of dead runs are removed,
# by the run's main process only (a cluster job parses this file again, beside the live run).
# Artifacts that differ from their provenance records (bit rot, a truncated copy) are removed
# too, so that this run rebuilds them and what was computed from them. A command that runs no
# jobs (-n, --summary, --dag, --report, ...) changes nothing: it only names the damage
# (miaflow.runtime.start).
if workflow.is_main_process:
    try:
        for said in start(runs_jobs(workflow)):
            print(said, file=sys.stderr)
    except RunAlive as error:
        raise WorkflowError(str(error)) from None


# The selected profile applied (`--config profile=NAME` works too). A config validated before, with
# the same package, is checked again only by the checks that read files (miaflow.config.validate).
try:
    effective = validate(
        config,
        cache=Path(".snakemake/miaflow-params.json"),
        command_line=workflow.config_settings.overwrite_config,
    )
except ConfigError as error:
    raise WorkflowError(str(error)) from None
config.clear()
config.update(effective)


wildcard_constraints:
    dataset="[a-z0-9_]+",
    arch="[a-z0-9_]+",
    experiment="[a-z0-9_]+",
    shard=r"\d+",
    setting="[a-z0-9_]+",
    epsilon=r"inf|\d+(\.\d+)?",
    run=r"\d+",
    backbone="[a-z0-9-]+",
    lm="[a-z0-9_]+",
    model=r"target-\d+|reference",
    scored_set="eval|settings|traps",
    text_set="(eval|settings|traps)(-lowercase|-neighbors|-augmented|-population)?|inference",
    recipe="[a-z0-9_]+",
    packaged="[a-z0-9-]+",
    repeat=r"\d+",
    audit="[a-z0-9_]+",
    audited="[a-z0-9_]+",


# A run of the whole workflow removes the files no rule writes any more (a removed audit or
# experiment: miaflow.runtime.orphans). A local run forks its jobs from one process that has
# imported the libraries once (miaflow.runtime.forkserver); MIAFLOW_FORKSERVER=off gives each job
# its own interpreter.
onstart:
    for said in orphans.remove_orphans(workflow):
        print(said, file=sys.stderr)
    forkserver.start(workflow)


include: "rules/common.smk"
include: "rules/prepare.smk"
include: "rules/train.smk"
include: "rules/queries.smk"
include: "rules/evaluate.smk"
include: "rules/hparams.smk"
include: "rules/llm.smk"
include: "rules/audit.smk"
include: "rules/privacy.smk"
include: "rules/report.smk"


rule all:
    """Everything: every stage's target (the report stage's outputs need the other stages'),
    so that a run of `all` knows every file the workflow writes (miaflow.runtime.orphans)."""
    default_target: True
    input:
        rules.prepare.input,
        rules.train.input,
        rules.queries.input,
        rules.evaluate.input,
        rules.hparams.input,
        rules.llm.input,
        rules.audit.input,
        rules.privacy.input,
        rules.report.input,
    localrule: True
