"""Benchmark: the embedded default end to end (`snakemake --cores all` on params.yaml).

Copies the workflow into a temporary directory, runs it once from scratch and once more (a no-op
rerun), and prints wall times and where the time went:

* job time: each job's wall seconds from its Snakemake benchmark file (`benchmark:`); jobs of
  rules without one (cost_table) are timed by the hook below;
* start-up floor: what a job pays before any work, a fresh interpreter importing the modules that
  job imported. A `sitecustomize` hook (put first on PYTHONPATH, for this run only) records, for
  every Snakemake script job, the modules in `sys.modules` at exit, its lifetime and CPU time;
  after the run, a fresh interpreter imports each distinct set of modules, fastest of
  `--floor-repeats` runs;
* payload: job time minus floor, per job, at least 0;
* shares of the machine's time (wall x cores) outside job payloads and in start-up floors, and the
  machine's idle core-seconds (wall x cores minus the CPU time of snakemake and all its jobs).

    .venv/bin/python bench/workflow_e2e.py [--cores N] [--models-per-job auto|N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ["Snakefile", "rules", "scripts", "miaflow", "profiles", "envs", "params.yaml"]
HOOK_DIR = ".bench-hook"  # in the copy: sitecustomize.py, one record per job, floor scripts
BENCHMARK_COLUMNS = {"s", "h:m:s", "cpu_time"}  # header of a Snakemake benchmark file

# Imported by Python at start-up (site) from the first PYTHONPATH entry. Records only processes
# whose __main__ holds Snakemake's `snakemake` object, i.e. the script jobs, not snakemake itself.
SITECUSTOMIZE = '''\
"""Written by bench/workflow_e2e.py: records what each Snakemake script job imported."""
import atexit, os, sys, time

_started = time.perf_counter()


def _record():
    job = getattr(sys.modules.get("__main__"), "snakemake", None)
    if job is None or not hasattr(job, "rule"):
        return
    import json
    lifetime = time.perf_counter() - _started
    t = os.times()
    skip = ("__main__", "__mp_main__", "sitecustomize")
    modules = [m for m in list(sys.modules) if m not in skip]
    record = {"rule": job.rule, "lifetime": lifetime, "modules": modules,
              "cpu": t.user + t.system + t.children_user + t.children_system}
    with open(os.path.join(os.path.dirname(__file__), f"job-{os.getpid()}.json"), "w") as f:
        json.dump(record, f)


atexit.register(_record)
'''

# Replays one job's imports in a fresh interpreter, in the job's order; modules that cannot be
# imported by name (made at run time, or gone by exit) are skipped.
FLOOR_SCRIPT = """\
import importlib
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except BaseException:
        pass
"""


def environment(root: Path, hook: bool = False) -> dict[str, str]:
    """The venv's tools first; the copy's `miaflow` before any installed one; with `hook`, the
    recording sitecustomize before both."""
    bin_dir = str(Path(sys.executable).parent)
    path = [str(root / HOOK_DIR)] if hook else []
    return dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=os.pathsep.join([*path, str(root)]),
    )


def make_copy(root: Path, models_per_job: str | None, params: Path | None) -> None:
    for name in WORKFLOW_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / name)
    if params:
        shutil.copy(params, root / "params.yaml")
    if models_per_job:
        config = yaml.safe_load((root / "params.yaml").read_text())
        config["training"]["models_per_job"] = (
            models_per_job if models_per_job == "auto" else int(models_per_job)
        )
        (root / "params.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (root / HOOK_DIR).mkdir()
    (root / HOOK_DIR / "sitecustomize.py").write_text(SITECUSTOMIZE)


def timed(args: list[str], root: Path, hook: bool = False) -> tuple[float, float]:
    """Run a command in `root`; return its wall seconds and the CPU seconds of it and every
    process it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        args, cwd=root, env=environment(root, hook), capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode:
        sys.exit(f"{' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def fastest(args: list[str], root: Path, repeats: int) -> float:
    return min(timed(args, root)[0] for _ in range(repeats))


def benchmark_jobs(root: Path) -> pd.DataFrame:
    """One row per Snakemake benchmark file (rule, wall and CPU seconds). Other TSV files under
    benchmarks/ (score_attacks' per-attack timings, *.attacks.tsv) are outputs, not jobs."""
    rows = []
    for path in sorted(root.glob("records/*/benchmarks/**/*.tsv")):
        table = pd.read_csv(path, sep="\t")
        if not BENCHMARK_COLUMNS <= set(table.columns):
            continue
        rows.append(
            {
                "rule": path.relative_to(root).parts[3],
                "s": float(table["s"].iloc[0]),
                "cpu_time": float(table["cpu_time"].iloc[0]),
            }
        )
    return pd.DataFrame(rows, columns=["rule", "s", "cpu_time"])


def hook_records(root: Path) -> pd.DataFrame:
    records = [json.loads(p.read_text()) for p in sorted((root / HOOK_DIR).glob("job-*.json"))]
    return pd.DataFrame(records, columns=["rule", "lifetime", "cpu", "modules"])


def measure_floors(root: Path, records: pd.DataFrame, repeats: int) -> pd.Series:
    """Start-up floor (seconds) of every job record: fastest of `repeats` fresh interpreters that
    import the job's modules, measured once per distinct set of modules (in the order the first
    job with that set imported them)."""
    first: dict[frozenset[str], list[str]] = {}
    for modules in records["modules"]:
        first.setdefault(frozenset(modules), modules)
    floors = {}
    for k, (key, modules) in enumerate(first.items()):
        script = root / HOOK_DIR / f"floor-{k}.py"
        script.write_text(FLOOR_SCRIPT.format(modules=list(modules)))
        floors[key] = fastest([sys.executable, str(script)], root, repeats)
    return pd.Series(
        [floors[frozenset(m)] for m in records["modules"]], index=records.index, dtype=float
    )


def packages(modules: list[str]) -> set[str]:
    """Top-level packages outside the standard library among `modules`."""
    return {m.split(".")[0] for m in modules if not m.startswith("_")} - set(
        sys.stdlib_module_names
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default="all", help="snakemake --cores (default: all)")
    parser.add_argument("--models-per-job", help="override training.models_per_job (auto or N)")
    parser.add_argument("--params", type=Path, help="use this params file instead of params.yaml")
    parser.add_argument(
        "--floor-repeats",
        type=int,
        default=3,
        help="fresh interpreters per distinct set of imported modules; "
        "the fastest counts (default: 3)",
    )
    parser.add_argument("--keep", type=Path, help="run in this (new) directory and keep it")
    args = parser.parse_args()

    root = args.keep or Path(tempfile.mkdtemp(prefix="miaflow-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        make_copy(root, args.models_per_job, args.params)
        cores = os.cpu_count() if args.cores == "all" else int(args.cores)
        wall, cpu = timed(["snakemake", "--cores", args.cores], root, hook=True)
        noop, _ = timed(["snakemake", "--cores", args.cores], root)
        jobs = benchmark_jobs(root)
        records = hook_records(root)
        records["floor"] = measure_floors(root, records, args.floor_repeats)
        bare = fastest([sys.executable, "-c", "pass"], root, args.floor_repeats)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report(
        jobs,
        records,
        cores=cores,
        wall=wall,
        cpu=cpu,
        noop=noop,
        bare=bare,
        repeats=args.floor_repeats,
    )


def report(
    jobs: pd.DataFrame,
    records: pd.DataFrame,
    *,
    cores: int,
    wall: float,
    cpu: float,
    noop: float,
    bare: float,
    repeats: int,
) -> None:
    """Print the run's accounting from `benchmark_jobs` rows and `hook_records` rows with their
    measured "floor"; `cpu` is the CPU seconds of snakemake and all its jobs."""
    # Rules whose jobs have no benchmark file: their job time is the hook's process lifetime.
    unbenchmarked = records[~records["rule"].isin(jobs["rule"])]
    jobs = pd.concat(
        [
            jobs,
            pd.DataFrame(
                {
                    "rule": unbenchmarked["rule"],
                    "s": unbenchmarked["lifetime"],
                    "cpu_time": unbenchmarked["cpu"],
                }
            ),
        ],
        ignore_index=True,
    )
    # A rule's jobs share its mean floor (records and benchmark files are matched by rule only).
    per_rule = records.groupby("rule").agg(
        floor=("floor", "mean"), packages=("modules", lambda m: set().union(*map(packages, m)))
    )
    common = set.intersection(*per_rule["packages"]) if len(per_rule) else set()
    jobs = jobs.join(per_rule, on="rule")
    unrecorded = sorted(set(jobs.loc[jobs["floor"].isna(), "rule"]))
    jobs["floor"] = jobs["floor"].fillna(0.0)
    jobs["payload"] = (jobs["s"] - jobs["floor"]).clip(lower=0)

    job_total, floor_total, payload = jobs["s"].sum(), jobs["floor"].sum(), jobs["payload"].sum()
    machine = wall * cores
    print(
        f"machine: {cores} cores; bare interpreter start (python -c pass): {bare:.2f} s; "
        f"start-up floor per job: fresh interpreter importing that job's modules, fastest of "
        f"{repeats}, measured for {records['modules'].map(frozenset).nunique()} distinct "
        f"sets of modules"
    )
    print(
        f"first run: {wall:.1f} s wall, {len(jobs)} jobs ({len(unbenchmarked)} without a benchmark "
        f"file, timed by the hook), {job_total:.1f} s inside jobs"
    )
    print(
        f"CPU time: {jobs['cpu_time'].sum():.1f} s in jobs by their benchmark files, "
        f"{records['cpu'].sum():.1f} s by the hook; snakemake and all its jobs: {cpu:.1f} s"
    )
    print(f"packages every job imports: {', '.join(sorted(common))}")
    table = jobs.groupby("rule").agg(
        jobs=("s", "size"),
        seconds=("s", "sum"),
        longest=("s", "max"),
        floor_each=("floor", "mean"),
        payload=("payload", "sum"),
    )
    table["further packages"] = (
        per_rule["packages"]
        .reindex(table.index)
        .map(lambda p: ", ".join(sorted(p - common)) if isinstance(p, set) else "?")
    )
    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        print(table.round(2).to_string())
    if unrecorded:
        print(f"no hook record (floor counted as 0): {', '.join(unrecorded)}")
    print(f"start-up floors, all jobs:                   {floor_total:7.1f} s")
    print(f"share of job time that is start-up floor:    {floor_total / job_total:7.1%}")
    print(
        f"share of machine time in start-up floors:    {floor_total / machine:7.1%}"
        f"  (machine time = wall x {cores} cores = {machine:.1f} s)"
    )
    print(f"share of machine time outside job payloads:  {1 - payload / machine:7.1%}")
    print(
        f"idle core-seconds: {max(machine - cpu, 0.0):.1f} of {machine:.1f} "
        f"({max(1 - cpu / machine, 0.0):.1%}; wall x cores minus the CPU s of snakemake and its "
        f"jobs, so on a shared machine also the time other users' processes took)"
    )
    shards = jobs.loc[jobs["rule"] == "train_shard", "payload"]
    if len(shards):
        print(
            "payload of the shortest / longest train_shard job: "
            f"{shards.min():.1f} s / {shards.max():.1f} s"
        )
    print(f"no-op rerun: {noop:.1f} s wall ({noop / wall:.1%} of the first run)")


if __name__ == "__main__":
    main()
