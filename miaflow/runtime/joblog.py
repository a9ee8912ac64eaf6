"""A job's run records: its log, the lines that close it, and reading them back with Snakemake's
benchmark files.

Every job logs to its rule's log file (`job_log`). Three lines close the log (written by
`miaflow.runtime.adapter`): its start-up (process start to the job's first line), its whole time,
wall and CPU seconds, and its peak memory, with whether it was forked from the run's warm process
(miaflow.runtime.forkserver). `bench/startup_share.py` reads the first two. `read_benchmarks`
reads Snakemake's benchmark files (`records/<stage>/benchmarks/<rule>/<job>.tsv`) with these
lines: a forked job's benchmark measures only its script, so its CPU seconds and peak memory come
from its log. The cost table, the cluster resources and the tools that price a plan read them.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

STARTUP_LINE = "start-up: %.3f s wall, %.3f s CPU before the job's first line"
WHOLE_LINE = "job: %.3f s wall, %.3f s CPU from process start to its end; imported: %s"
PEAK_LINE = "peak memory: %.1f MiB resident (%s)"
FORKED = "forked"  # PEAK_LINE's last value for a forked job
OWN_PROCESS = "own process"  # PEAK_LINE's last value for a job in its own interpreter
# The numeric columns of a Snakemake benchmark file; a file with at least BENCHMARK_HEADER's is one.
BENCHMARK_COLUMNS = (
    "s",
    "max_rss",
    "max_vms",
    "max_uss",
    "max_pss",
    "io_in",
    "io_out",
    "mean_load",
    "cpu_time",
)
BENCHMARK_HEADER = {"s", "max_rss", "cpu_time"}


@contextmanager
def job_log(path: str | Path | None) -> Iterator[None]:
    """Send this job's log records (and warnings) to the rule's log file."""
    handler: logging.Handler = (
        logging.FileHandler(path, mode="w") if path else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield
    except Exception:
        log.exception("job failed")
        raise
    finally:
        root.removeHandler(handler)
        handler.close()


def peak_memory_mib() -> float:
    """This process's peak resident memory (MiB), or that of a child it waited for if larger."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def process_start() -> tuple[float, float]:
    """When this process started (epoch seconds), and its CPU seconds so far."""
    import psutil

    cpu = os.times()
    return psutil.Process().create_time(), cpu.user + cpu.system


def logged_usage(log_text: str) -> tuple[float, float | None] | None:
    """A finished job's own CPU seconds and, if it was forked, its peak memory (MiB), read back
    from its log; None for a log without them (a failed job, or one of an older version)."""
    whole = re.search(log_pattern(WHOLE_LINE), log_text)
    peak = re.search(log_pattern(PEAK_LINE), log_text)
    if whole is None:
        return None
    forked = peak is not None and peak[2] == FORKED
    return float(whole[2]), float(peak[1]) if forked else None


def log_pattern(line: str) -> str:
    """A regular expression matching one of this module's log lines, its values captured."""
    escaped = re.escape(line).replace(re.escape("%.3f"), r"([0-9.]+)")
    escaped = escaped.replace(re.escape("%.1f"), r"([0-9.]+)")
    return escaped.replace(re.escape("%s"), r"(.*)")


def benchmark_files(records: Path) -> list[Path]:
    """The Snakemake benchmark files under `records` (`<stage>/benchmarks/<rule>/...tsv`)."""
    found = []
    for path in sorted(records.glob("*/benchmarks/**/*.tsv")):
        with path.open() as handle:
            header = set(handle.readline().rstrip("\n").split("\t"))
        if BENCHMARK_HEADER <= header:
            found.append(path)
    return found


def read_benchmarks(paths: list[Path]) -> pd.DataFrame:
    """Parse Snakemake `benchmark:` TSV files laid out as `<stage>/benchmarks/<rule>/<job...>.tsv`.

    Returns one row per benchmark record with columns stage, rule, job (the rest of the path
    without ".tsv", "" when absent) and the numeric columns of `BENCHMARK_COLUMNS`; "-" and "NA"
    (values Snakemake could not measure) become NaN. max_rss is in MiB, as Snakemake writes it.
    Where the job's log (`<stage>/logs/<rule>/<job...>.log`, or `<stage>/logs/<rule>.log` for a
    rule without wildcards, whose benchmark is `all.tsv`) has the job's own CPU seconds, they
    replace the benchmark's: Snakemake samples a job's processes, every 30 s after its first 15,
    and a job forked from the run's warm process is not among the processes it samples, so for
    such a job the log's peak memory replaces max_rss too. (pandas is imported here: a job's
    script imports this module, and starts in a tenth of a second on the standard library.)
    """
    import numpy as np
    import pandas as pd

    frames = []
    for path in sorted(map(Path, paths)):
        parts = path.with_suffix("").parts
        at = max((k for k, part in enumerate(parts) if part == "benchmarks"), default=0)
        if at == 0 or at + 1 >= len(parts):
            raise ValueError(f"{path}: expected <stage>/benchmarks/<rule>/<job>.tsv")
        frame = pd.read_csv(path, sep="\t", na_values=["-", "NA"])
        frame = frame.reindex(columns=list(BENCHMARK_COLUMNS)).astype(np.float64)
        job_log_file = Path(*parts[:at], "logs", *parts[at + 1 : -1], f"{parts[-1]}.log")
        if parts[at + 2 :] == ("all",):  # a rule without wildcards logs to logs/<rule>.log
            job_log_file = job_log_file.parent.with_suffix(".log")
        if job_log_file.is_file() and (
            usage := logged_usage(job_log_file.read_text(errors="replace"))
        ):
            cpu, peak = usage
            frame["cpu_time"] = cpu
            if peak is not None:
                frame["max_rss"] = peak
        frame.insert(0, "stage", parts[at - 1])
        frame.insert(1, "rule", parts[at + 1])
        frame.insert(2, "job", "/".join(parts[at + 2 :]))
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["stage", "rule", "job", *BENCHMARK_COLUMNS])
    return pd.concat(frames, ignore_index=True)
