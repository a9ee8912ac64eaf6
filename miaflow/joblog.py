"""What a job's log says about its cost, written by `miaflow.jobs.adapter` and read back.

Three lines close every job's log: its start-up (process start to the job's first line), its
whole time, wall and CPU seconds, and its peak memory, with whether it was forked from the run's
warm process (miaflow.jobs.forkserver). `bench/startup_share.py` reads the first two; the
cost table (miaflow.evaluation.tables.read_benchmarks) takes a job's CPU seconds from here, and a
forked job's peak memory, which Snakemake's benchmark file cannot see.
"""

from __future__ import annotations

import re
import resource

STARTUP_LINE = "start-up: %.3f s wall, %.3f s CPU before the job's first line"
WHOLE_LINE = "job: %.3f s wall, %.3f s CPU from process start to its end; imported: %s"
PEAK_LINE = "peak memory: %.1f MiB resident (%s)"
FORKED = "forked"  # PEAK_LINE's last value for a forked job
OWN_PROCESS = "own process"  # PEAK_LINE's last value for a job in its own interpreter


def peak_memory_mib() -> float:
    """This process's peak resident memory (MiB), or that of a child it waited for if larger."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


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
