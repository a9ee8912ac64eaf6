"""What a plan costs before it runs: CPU and wall seconds per stage, from benchmark records.

    python -m miaflow.workflow.cost [--records DIR] [--records-config KEY=VALUE ...]
                                    [--config profile=NAME ...] [--rules]

The records are Snakemake benchmark files (`<stage>/benchmarks/<rule>/<job>.tsv`: the run's
`records/`, or a user's own) of a run whose config `--records-config` names (overrides of
params.yaml, as `--config`; none: params.yaml as it is). The plan's jobs are those of
`snakemake -n --forceall` for `--config`, each with the benchmark path its rule declares.

Each job gets a size where one is known from the config alone: a training shard's models times
its recipe's passes (epochs, CatBoost iterations), and for a job of one experiment (its path
starts with the dataset and architecture) the experiment's model count, which the signals,
queries and attacks of that experiment grow with. A rule's cost per unit of size is the
records' seconds over their sizes (for training, per architecture kind where the records have
that kind); a planned job costs its size times that rate. Jobs without a size cost the records'
median job. Dataset sizes are unknown before the data are prepared, so a plan on larger data is
underestimated by the ratio of the sizes; wall seconds include the waits of a busy machine, CPU
seconds do not. Rules without records are named, not guessed.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow import config as params
from miaflow.progress import duration
from miaflow.workflow import needs, plan, stages

TRAIN_RULE = "train_shard"
_SHARD = re.compile(r"^shard-(\d+)$")
_BENCHMARK = re.compile(r"^\s*benchmark: (\S+)$", re.MULTILINE)
SECONDS = {"cpu_s": "cpu_time", "wall_s": "s"}  # estimate column -> benchmark column


@dataclass(frozen=True)
class JobKey:
    """A job as its benchmark path names it: `<stage>/benchmarks/<rule>/<job>.tsv`."""

    stage: str
    rule: str
    job: str

    @classmethod
    def of(cls, path: str | Path) -> JobKey | None:
        parts = Path(path).with_suffix("").parts
        if "benchmarks" not in parts:
            return None
        at = len(parts) - 1 - parts[::-1].index("benchmarks")
        if at == 0 or at + 1 >= len(parts):
            return None
        return cls(parts[at - 1], parts[at + 1], "/".join(parts[at + 2 :]))


def passes(arch: Mapping[str, Any]) -> int:
    """How many passes over its data one model of a recipe makes: epochs (torch kinds),
    iterations (CatBoost), else 1."""
    return int(arch.get("epochs") or arch.get("iterations") or 1)


def job_size(config: Mapping[str, Any], key: JobKey) -> tuple[float, str]:
    """A job's size and the group of jobs that share a cost rate (the rule, or for training the
    rule and the architecture's kind); NaN where the config does not tell the size."""
    parts = key.job.split("/")
    archs = config["architectures"]
    if key.rule == TRAIN_RULE and len(parts) == 3 and parts[1] in archs:
        shard = _SHARD.match(parts[2])
        shards = plan.shards(config)
        if shard and int(shard[1]) < len(shards):
            arch = archs[parts[1]]
            return len(shards[int(shard[1])]) * passes(arch), f"{key.rule}:{arch['kind']}"
    experiment = parts[1].split(plan.REFERENCE_SEPARATOR)[0].split(".")[0] if len(parts) > 1 else ""
    if experiment in archs and parts[0] in plan.datasets(config):
        return float(len(plan.model_ids(config))), key.rule
    return float("nan"), key.rule


def sized(jobs: pd.DataFrame, config: Mapping[str, Any]) -> pd.DataFrame:
    """`jobs` (columns stage, rule, job) with each job's size and rate group."""
    found = [job_size(config, JobKey(r.stage, r.rule, r.job)) for r in jobs.itertuples()]
    out = jobs.copy()
    out["size"] = [size for size, _ in found]
    out["group"] = [group for _, group in found]
    return out


def rates(records: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per group and per rule: seconds per unit of size (or NaN), the median job's seconds and
    how many records they rest on. `records`: sized benchmark rows."""
    fitted: dict[str, dict[str, Any]] = {}
    for column in ("group", "rule"):
        for name, rows in records.groupby(column):
            entry = {"records": len(rows)}
            known = rows.dropna(subset=["size"])
            for estimate, measured in SECONDS.items():
                entry[f"{estimate}_per_unit"] = (
                    known[measured].sum() / known["size"].sum() if len(known) else np.nan
                )
                entry[f"{estimate}_median"] = rows[measured].median()
            fitted.setdefault(str(name), entry)
    return fitted


def estimate(planned: pd.DataFrame, fitted: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Per planned rule: jobs, predicted CPU and wall seconds, the records used ("group:count"),
    and the basis (per unit of size, median job, or none). `planned`: sized planned jobs."""
    rows = []
    for (stage, rule), jobs in planned.groupby(["stage", "rule"], sort=False):
        totals = {estimate: 0.0 for estimate in SECONDS}
        used, bases = {}, set()
        for job in jobs.itertuples():
            entry = fitted.get(job.group) or fitted.get(job.rule)
            if entry is None:
                totals = {estimate: np.nan for estimate in SECONDS}
                bases.add("no records")
                continue
            used[job.group if job.group in fitted else job.rule] = entry["records"]
            per_unit = not np.isnan(job.size) and not np.isnan(entry["cpu_s_per_unit"])
            bases.add("per unit of size" if per_unit else "median job")
            for estimate in SECONDS:
                totals[estimate] += (
                    entry[f"{estimate}_per_unit"] * job.size
                    if per_unit
                    else entry[f"{estimate}_median"]
                )
        rows.append(
            {
                "stage": stage,
                "rule": rule,
                "jobs": len(jobs),
                **totals,
                "records": ", ".join(f"{g}:{n}" for g, n in sorted(used.items())),
                "basis": ", ".join(sorted(bases)),
            }
        )
    table = pd.DataFrame(
        rows, columns=["stage", "rule", "jobs", *SECONDS, "records", "basis"]
    ).astype({"jobs": int})
    order = {stage: k for k, stage in enumerate(stages.STAGES)}
    table["order"] = table["stage"].map(order).fillna(len(order))
    return table.sort_values(["order", "rule"]).drop(columns="order").reset_index(drop=True)


def by_stage(table: pd.DataFrame) -> pd.DataFrame:
    """Per stage and in total: jobs and predicted seconds (of the jobs with records; NaN for a
    stage without any), and `unknown`, the jobs of rules without records."""
    unknown = table["cpu_s"].isna() * table["jobs"]
    grouped = (
        table.assign(unknown=unknown)
        .groupby("stage", sort=False)[["jobs", "cpu_s", "wall_s", "unknown"]]
        .sum(min_count=1)
    )
    grouped.loc["total"] = grouped.sum()
    return grouped.reset_index()


def planned_keys(dry_run: str) -> pd.DataFrame:
    """The jobs of `snakemake -n` output that declare a benchmark file, as stage, rule, job."""
    keys = [JobKey.of(path) for path in _BENCHMARK.findall(dry_run)]
    return pd.DataFrame(
        [(k.stage, k.rule, k.job) for k in keys if k is not None], columns=["stage", "rule", "job"]
    )


def recorded(records: Path) -> pd.DataFrame:
    """The benchmark rows under `records` (miaflow.evaluation.tables.read_benchmarks)."""
    from miaflow.evaluation.tables import read_benchmarks
    from miaflow.workflow.cluster import benchmark_files

    return read_benchmarks(benchmark_files(records))


def report(table: pd.DataFrame, records: Path, rules: bool) -> list[str]:
    """The printed lines: per stage (and per rule with `rules`), with the records each rests on."""
    lines = [
        f"Predicted cost per stage (records: {records}/; CPU seconds as measured there, wall "
        "seconds as that machine's load made them; jobs in parallel add up)",
        f"  {'stage':<10} {'jobs':>5} {'CPU':>12} {'wall':>12}",
    ]
    for row in by_stage(table).itertuples():
        note = f"  ({int(row.unknown)} jobs without records)" if row.unknown else ""
        lines.append(
            f"  {row.stage:<10} {int(row.jobs):>5} {duration(row.cpu_s):>12} "
            f"{duration(row.wall_s):>12}{note}"
        )
    lines.append("Per rule: predicted CPU / wall seconds, basis, records used (group:count)")
    for row in table.itertuples():
        if rules or row.basis == "no records":
            lines.append(
                f"  {row.stage}/{row.rule}: {row.jobs} jobs, {row.cpu_s:.1f} / {row.wall_s:.1f} s"
                f", {row.basis}" + (f", {row.records}" if row.records else "")
            )
    return lines


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m miaflow.workflow.cost",
        description="Predicted CPU and wall seconds of a plan, per stage, from run records.",
    )
    parser.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument("--records", type=Path, default=needs.RECORDS, help="benchmark records")
    parser.add_argument(
        "--records-config",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="the config of the run that wrote the records (default: params.yaml as it is)",
    )
    parser.add_argument("--rules", action="store_true", help="print every rule's estimate")
    options = parser.parse_args(argv)
    try:
        config = needs.effective_config(options.config)
        records_config = needs.effective_config(options.records_config)
        planned = planned_keys(needs.dry_run(options.config, everything=True))
    except (params.ConfigError, RuntimeError) as error:
        print(error, file=sys.stderr)
        return 1
    history = recorded(options.records)
    if history.empty:
        print(f"no benchmark records under {options.records}/", file=sys.stderr)
        return 1
    table = estimate(sized(planned, config), rates(sized(history, records_config)))
    print("\n".join(report(table, options.records, options.rules)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
