"""From Snakemake's `snakemake` object to a job call: the one place that knows both.

Every file in `scripts/` is `adapter.run(<job>, snakemake)`. The rule's named input, output and
params fields become the job's keyword arguments under the same names (and `threads` when the job
takes it), so a key that is misnamed on either side fails loudly with the name in the message.
Inputs named `code` are the library files the job runs, listed only so that editing one reruns
the job; they are not passed. Around the call, every input is checked against its provenance
record and every output under results/ gets one (`miaflow.provenance`). The job's log records
its start-up (process start to the job's first line) and its whole time, wall and CPU, so that
`bench/startup_share.py` can say what share of job time start-up costs.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from miaflow import provenance
from miaflow.jobs.common import job_log

log = logging.getLogger(__name__)
CODE_INPUT = "code"
# The log lines bench/startup_share.py reads.
STARTUP_LINE = "start-up: %.3f s wall, %.3f s CPU before the job's first line"
WHOLE_LINE = "job: %.3f s wall, %.3f s CPU from process start to its end; imported: %s"
# Libraries that take a second or more to import: a job module imports them only inside the job
# functions that use them (tests/test_jobs.py), and each job's log names those it imported.
HEAVY_MODULES = (
    "torch",
    "transformers",
    "sklearn",
    "scipy.stats",
    "catboost",
    "optuna",
    "opacus",
    "matplotlib",
)


def arguments(job: Callable[..., None], snakemake: Any) -> dict[str, Any]:
    """The keyword arguments of `job` from the named fields of a Snakemake job."""
    named: dict[str, Any] = {}
    sections = {"input": snakemake.input, "output": snakemake.output, "params": snakemake.params}
    for section, fields in sections.items():
        for name, value in fields.items():
            if section == "input" and name == CODE_INPUT:
                continue
            if name in named:
                raise TypeError(
                    f"rule {snakemake.rule}: {section} key {name!r} is also the key of "
                    "another input, output or params entry; job arguments need "
                    "unique names"
                )
            named[name] = value
    if "threads" in inspect.signature(job).parameters:
        named["threads"] = snakemake.threads
    return named


def named_files(fields: Any, leave_out: str | None = None) -> list[str]:
    """The files of a job's named inputs or outputs (without the entry named `leave_out`)."""
    files = []
    for name, value in fields.items():
        if name != leave_out:
            files.extend([value] if isinstance(value, str) else value)
    return files


def stage_of(snakemake: Any) -> str | None:
    """The DVC stage a job belongs to, from its log file `records/<stage>/logs/...`."""
    if not snakemake.log:
        return None
    parts = Path(snakemake.log[0]).parts
    return parts[1] if parts[0] == provenance.RECORDS.name and len(parts) > 2 else None


def process_times() -> tuple[float, float]:
    """Wall seconds since this process started, and its CPU seconds so far (children included)."""
    cpu = os.times()
    return (
        time.time() - psutil.Process().create_time(),
        cpu.user + cpu.system + cpu.children_user + cpu.children_system,
    )


def run(job: Callable[..., None], snakemake: Any) -> None:
    """Run `job` on the Snakemake job's named fields, logging to the rule's log file; inputs are
    checked against their provenance records first, and the outputs recorded after."""
    with job_log(snakemake.log[0] if snakemake.log else None):
        inputs = provenance.check_inputs(named_files(snakemake.input, leave_out=CODE_INPUT))
        log.info(STARTUP_LINE, *process_times())
        job(**arguments(job, snakemake))
        if (stage := stage_of(snakemake)) is not None:
            provenance.write_records(named_files(snakemake.output), inputs, stage, snakemake.rule)
        imported = [name for name in HEAVY_MODULES if name in sys.modules]
        log.info(WHOLE_LINE, *process_times(), ", ".join(imported) or "none of the heavy ones")
