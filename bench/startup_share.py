"""Benchmark: what share of job time a finished run's jobs spent on start-up.

Every script job logs two lines through `miaflow.runtime.adapter`: its start-up (process start to
the job's first line: interpreter, Snakemake's script preamble, the imports of the adapter and the
stage's jobs module, the provenance check of its inputs) and its whole time, each as wall and CPU
seconds. This script reads them from `records/<stage>/logs/` of a run (after `make run`) and prints
per stage and rule: jobs, start-up and whole seconds, and the start-up share of job time.

    .venv/bin/python bench/startup_share.py [RUN_DIRECTORY]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from miaflow.runtime.joblog import STARTUP_LINE, WHOLE_LINE, log_pattern


def job_times(run: Path) -> pd.DataFrame:
    """One row per job log that holds both timing lines: stage, rule and the four times."""
    startup, whole = re.compile(log_pattern(STARTUP_LINE)), re.compile(log_pattern(WHOLE_LINE))
    rows = []
    for path in sorted((run / "records").glob("*/logs/**/*.log")):
        text = path.read_text(errors="replace")
        first, last = startup.search(text), whole.search(text)
        if first and last:
            stage, _, rule = path.relative_to(run / "records").parts[:3]
            rows.append(
                {
                    "stage": stage,
                    "rule": rule.removesuffix(".log"),
                    "startup_wall_s": float(first[1]),
                    "startup_cpu_s": float(first[2]),
                    "job_wall_s": float(last[1]),
                    "job_cpu_s": float(last[2]),
                }
            )
    return pd.DataFrame(rows)


def share_table(times: pd.DataFrame) -> pd.DataFrame:
    """Per stage and rule, and in total: jobs, summed times and the start-up shares."""
    by_rule = times.groupby(["stage", "rule"], sort=False).agg(
        jobs=("rule", "size"),
        startup_wall_s=("startup_wall_s", "sum"),
        job_wall_s=("job_wall_s", "sum"),
        startup_cpu_s=("startup_cpu_s", "sum"),
        job_cpu_s=("job_cpu_s", "sum"),
    )
    total = by_rule.sum().to_frame(("total", "")).T
    table = pd.concat([by_rule, total]).reset_index(names=["stage", "rule"])
    table["startup_wall_share"] = table["startup_wall_s"] / table["job_wall_s"]
    table["startup_cpu_share"] = table["startup_cpu_s"] / table["job_cpu_s"]
    return table.round(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", nargs="?", type=Path, default=Path("."))
    times = job_times(parser.parse_args().run)
    if times.empty:
        raise SystemExit("no job log holds the adapter's timing lines: run `make run` first")
    print(share_table(times).to_markdown(index=False))


if __name__ == "__main__":
    main()
