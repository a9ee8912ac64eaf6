"""Benchmark: the embedded default end to end (`snakemake --cores all` on params.yaml).

Copies the workflow into a temporary directory, runs it once from scratch and once more (a no-op
rerun), and prints wall times and where the time went: the jobs' own time (Snakemake benchmark
files), the part of it that is only interpreter start-up and imports (measured here), and the
share of the machine's time spent outside job payloads.

    .venv/bin/python bench/workflow_e2e.py [--cores N] [--models-per-job auto|N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ["Snakefile", "rules", "scripts", "miaflow", "profiles", "params.yaml"]
# What a job imports before its payload starts: Snakemake's script preamble and the job glue;
# torch rules (training, signals) also load torch and scikit-learn.
LIGHT_IMPORTS = "import snakemake.script, miaflow.jobs, numpy, pandas, pyarrow"
TORCH_IMPORTS = LIGHT_IMPORTS + ", torch, sklearn, scipy.stats"
TORCH_RULES = ("train_shard", "compute_signals")


def environment(root: Path) -> dict[str, str]:
    """The venv's tools first; the copy's `miaflow` before any installed one."""
    bin_dir = str(Path(sys.executable).parent)
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(root))


def make_copy(root: Path, models_per_job: str | None) -> None:
    for name in WORKFLOW_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / name)
    if models_per_job:
        params = yaml.safe_load((root / "params.yaml").read_text())
        params["training"]["models_per_job"] = models_per_job if models_per_job == "auto" else int(models_per_job)
        (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def timed(args: list[str], root: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(args, cwd=root, env=environment(root), capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode:
        sys.exit(f"{' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return elapsed


def startup_floor(root: Path, imports: str, repeats: int = 3) -> float:
    """Fastest of a few fresh interpreters importing what a job imports."""
    return min(timed([sys.executable, "-c", imports], root) for _ in range(repeats))


def job_times(root: Path) -> pd.DataFrame:
    """One row per job: rule, wall and CPU seconds, from Snakemake's benchmark files."""
    rows = []
    for path in sorted(root.glob("results/*/benchmarks/**/*.tsv")):
        record = pd.read_csv(path, sep="\t").iloc[0]
        rows.append({"rule": path.relative_to(root).parts[3], "s": float(record["s"]),
                     "cpu_time": float(record["cpu_time"])})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default="all", help="snakemake --cores (default: all)")
    parser.add_argument("--models-per-job", help="override training.models_per_job (auto or N)")
    parser.add_argument("--keep", type=Path, help="run in this (new) directory and keep it")
    args = parser.parse_args()

    root = args.keep or Path(tempfile.mkdtemp(prefix="miaflow-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        make_copy(root, args.models_per_job)
        cores = os.cpu_count() if args.cores == "all" else int(args.cores)
        light, heavy = startup_floor(root, LIGHT_IMPORTS), startup_floor(root, TORCH_IMPORTS)
        wall = timed(["snakemake", "--cores", args.cores], root)
        noop = timed(["snakemake", "--cores", args.cores], root)
        jobs = job_times(root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    job_total = jobs["s"].sum()
    jobs["floor"] = np.where(jobs["rule"].isin(TORCH_RULES), heavy, light)
    jobs["payload"] = (jobs["s"] - jobs["floor"]).clip(lower=0)
    payload = jobs["payload"].sum()
    print(f"machine: {cores} cores; job start-up floor (fresh interpreter + imports): "
          f"{light:.2f} s, {heavy:.2f} s with torch ({', '.join(TORCH_RULES)})")
    print(f"first run: {wall:.1f} s wall, {len(jobs)} jobs, {job_total:.1f} s inside jobs "
          f"({jobs['cpu_time'].sum():.1f} s of it on a CPU; the rest waits for one on a busy machine)")
    print(jobs.groupby("rule").agg(jobs=("s", "count"), seconds=("s", "sum"), longest=("s", "max"),
                                   payload=("payload", "sum")).round(2).to_string())
    print(f"share of job time that is start-up:           {1 - payload / job_total:6.1%}")
    print(f"share of machine time outside job payloads:    {1 - payload / (wall * cores):6.1%}"
          f"  (machine time = wall x {cores} cores)")
    print(f"payload of the shortest / longest train_shard job: "
          f"{jobs.loc[jobs.rule == 'train_shard', 'payload'].min():.1f} s / "
          f"{jobs.loc[jobs.rule == 'train_shard', 'payload'].max():.1f} s")
    print(f"no-op rerun: {noop:.1f} s wall ({noop / wall:.1%} of the first run)")


if __name__ == "__main__":
    main()
