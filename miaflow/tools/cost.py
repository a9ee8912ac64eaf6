"""What a plan costs before it runs: CPU and wall seconds per stage, from benchmark records.

    python -m miaflow.tools.cost [--records DIR] [--records-config KEY=VALUE ...]
                                    [--config profile=NAME ...] [--rules] [--measured DIR]

The records are Snakemake benchmark files (`<stage>/benchmarks/<rule>/<job>.tsv`: the run's
`records/`, or a user's own) of a run whose config `--records-config` names (overrides of
params.yaml, as `--config`; none: params.yaml as it is). The plan's jobs are those of
`snakemake -n --forceall` for `--config`, each with the benchmark path its rule declares.

Each job gets a size where one is known from the config alone: a training shard's models times
its recipe's passes (epochs, CatBoost iterations), and for a job of one experiment (its path
starts with the dataset and architecture) the experiment's model count, which the signals,
queries and attacks of that experiment grow with. A study run (`hparam_run`) is sized by the
models it trains (HPO's trials on every split it tunes, the grid and the ED targets, per side)
at a rate per kind of model (head, cnn); epochs and feature width do not enter, as at the sizes
on record per-step and per-trial overheads, not arithmetic, set a head's cost. Backbone features
(`hparam_features`) are sized by the dataset's images (the registry's count) at a rate per
backbone. A rule's cost per unit of size is the records' seconds over their sizes (per kind or
backbone where the records have it; else the rule's, except for the study's rules, whose kinds
and backbones differ too much to share one); a planned job costs its size times that rate. Jobs
without a size cost the records' median job. Other data sizes are unknown before the data are
prepared, so a plan on larger data is underestimated by the ratio of the sizes; wall seconds
include the waits of a busy machine, CPU seconds do not. Rules without records are named, not
guessed. `--measured DIR` sets the prediction beside the CPU seconds a real run of the plan
recorded, job by job.
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
from miaflow import plan
from miaflow.plan import stages
from miaflow.progress import duration
from miaflow.tools import needs

TRAIN_RULE = "train_shard"
_SHARD = re.compile(r"^shard-(\d+)$")
_BENCHMARK = re.compile(r"^\s*benchmark: (\S+)$", re.MULTILINE)
SECONDS = {"cpu_s": "cpu_time", "wall_s": "s"}  # estimate column -> benchmark column
# Rules whose groups (a study model's kind, a backbone) differ too much to borrow the rule's rate.
OWN_RATE = ("hparam_run", "hparam_features")


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


def study_models(config: Mapping[str, Any], setting: Mapping[str, Any]) -> int:
    """Models one `hparam_run` job of `setting` trains: HPO's trials on the M+1 splits of each
    family it tunes, and the grid columns (miaflow.hparams.training.grid_columns)."""
    study = config["hparam_study"]
    splits, trials = study["shadow_models"] + 1, study["search"]["trials"]
    if setting.get("shadow_backbone"):  # targets: TD and ED HPO, diagonal and ED targets;
        return trials * 3 * splits + 2 * splits + splits**2  # attacker: TD HPO, the whole grid
    return trials * 2 * splits + splits**2 + splits


def _study_size(config: Mapping[str, Any], key: JobKey, parts: list[str]) -> tuple[float, str]:
    """`job_size` of the study's sized rules: models per kind, or images per backbone."""
    if key.rule == "hparam_features" and len(parts) == 2:
        from miaflow.data.registry import dataset_size

        size = dataset_size(parts[0], config.get("datasets", {}).get(parts[0], {}))
        return float(size.n_samples if size else "nan"), f"{key.rule}:{parts[1]}"
    setting = {s["name"]: s for s in plan.hparam_settings(config)}.get(parts[0])
    if key.rule == "hparam_run" and setting is not None:
        kind = setting.get("model") or "head"
        return float(study_models(config, setting)), f"{key.rule}:{kind}"
    return float("nan"), key.rule


def job_size(config: Mapping[str, Any], key: JobKey) -> tuple[float, str]:
    """A job's size and the group of jobs that share a cost rate (the rule, or for training the
    rule and the architecture's kind, for the study its model's kind or backbone); NaN where the
    config does not tell the size."""
    parts = key.job.split("/")
    if key.rule in OWN_RATE:
        return _study_size(config, key, parts)
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


def job_costs(planned: pd.DataFrame, fitted: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Per planned job (`planned`: sized): predicted CPU and wall seconds (NaN without records),
    the group whose records it rests on, their count, and the basis (per unit of size, median
    job, or no records)."""
    rows = []
    for job in planned.itertuples():
        own = job.group if job.group in fitted else None
        used = own or (None if job.rule in OWN_RATE or job.rule not in fitted else job.rule)
        if used is None:
            rows.append({e: np.nan for e in SECONDS} | {"used": "", "basis": "no records"})
            continue
        entry = fitted[used]
        per_unit = not np.isnan(job.size) and not np.isnan(entry["cpu_s_per_unit"])
        seconds = {
            e: entry[f"{e}_per_unit"] * job.size if per_unit else entry[f"{e}_median"]
            for e in SECONDS
        }
        basis = "per unit of size" if per_unit else "median job"
        rows.append(seconds | {"used": f"{used}:{entry['records']}", "basis": basis})
    found = pd.DataFrame(rows, columns=[*SECONDS, "used", "basis"], index=planned.index)
    return pd.concat([planned[["stage", "rule", "job"]], found], axis=1)


def estimate(planned: pd.DataFrame, fitted: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Per planned rule: jobs, predicted CPU and wall seconds (NaN when a job has no records),
    the records used ("group:count"), and the basis. `planned`: sized planned jobs."""
    rows = []
    for (stage, rule), jobs in job_costs(planned, fitted).groupby(["stage", "rule"], sort=False):
        rows.append(
            {
                "stage": stage,
                "rule": rule,
                "jobs": len(jobs),
                **{e: jobs[e].sum(skipna=False) for e in SECONDS},
                "records": ", ".join(sorted(set(jobs["used"]) - {""})),
                "basis": ", ".join(sorted(set(jobs["basis"]))),
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


def against(costs: pd.DataFrame, run: pd.DataFrame) -> pd.DataFrame:
    """Predicted vs measured CPU seconds of the planned jobs a real run measured (`costs`:
    `job_costs`; `run`: that run's benchmark rows, of which stale records of other plans do not
    count), per rule, and per stage (rule "(stage)") and in total over the jobs with records, with
    the error in % of measured."""
    both = costs.merge(run[["stage", "rule", "job", "cpu_time"]], on=["stage", "rule", "job"])
    sums = {
        "jobs": ("job", "count"),
        "cpu_s": ("cpu_s", lambda seconds: seconds.sum(skipna=False)),  # NaN: without records
        "measured_cpu_s": ("cpu_time", "sum"),
    }
    rules = both.groupby(["stage", "rule"], sort=False).agg(**sums).reset_index()
    known = both.dropna(subset=["cpu_s"])
    per_stage = known.groupby("stage").agg(**sums).reset_index().assign(rule="(stage)")
    total = known.assign(stage="total", rule="(all)").groupby(["stage", "rule"]).agg(**sums)
    order = per_stage["stage"].map({stage: k for k, stage in enumerate(stages.STAGES)})
    per_stage = per_stage.iloc[order.fillna(len(stages.STAGES)).argsort()]
    out = pd.concat([rules, per_stage, total.reset_index()], ignore_index=True)
    return out.assign(error_pct=100 * (out["cpu_s"] / out["measured_cpu_s"] - 1))


def planned_keys(dry_run: str) -> pd.DataFrame:
    """The jobs of `snakemake -n` output that declare a benchmark file, as stage, rule, job."""
    keys = [JobKey.of(path) for path in _BENCHMARK.findall(dry_run)]
    return pd.DataFrame(
        [(k.stage, k.rule, k.job) for k in keys if k is not None], columns=["stage", "rule", "job"]
    )


def recorded(records: Path) -> pd.DataFrame:
    """The benchmark rows under `records` (miaflow.runtime.joblog.read_benchmarks)."""
    from miaflow.runtime.joblog import benchmark_files, read_benchmarks

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
        prog="python -m miaflow.tools.cost",
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
    parser.add_argument(
        "--measured",
        type=Path,
        metavar="DIR",
        help="records of a real run of the plan: print predicted vs measured CPU-s per rule",
    )
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
    jobs, fitted = sized(planned, config), rates(sized(history, records_config))
    print("\n".join(report(estimate(jobs, fitted), options.records, options.rules)))
    if options.measured:
        compared = against(job_costs(jobs, fitted), recorded(options.measured))
        print(f"Predicted vs measured CPU seconds (measured: {options.measured}/, planned jobs)")
        print(compared.to_string(index=False, float_format="{:.1f}".format))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
