"""From Snakemake's `snakemake` object to a job call.

Every file in `scripts/` is `adapter.run("miaflow.jobs.<stage>.<job>", snakemake)`. The rule's
named input, output and params fields become the job's keyword arguments under the same names
(and `threads` when the job takes it), so a key that is misnamed on either side fails loudly with
the name in the message. Inputs named `code` are the library files the job runs, listed only so
that editing one reruns the job; they are not passed, but their digests go into the provenance
record every output under results/ gets (`miaflow.runtime.provenance`), beside those of the
inputs, each checked against its own record first: an artifact computed by code that has
changed since is stale to `make verify`. The job's log records its start-up (process start to
the job's first line), its whole time, wall and CPU, and its peak memory
(`miaflow.runtime.joblog`).

In a local run the job is forked from the run's warm process (`miaflow.runtime.forkclient`, the
server: `miaflow.runtime.forkserver`), which has imported the libraries once; without a
reachable server the script runs the job itself. This module imports only the standard library
at the top, so that a forked job's script starts in a tenth of a second.
"""

from __future__ import annotations

import errno
import inspect
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from miaflow.io import ExplainedError
from miaflow.runtime.forkclient import forked
from miaflow.runtime.joblog import (
    FORKED,
    OWN_PROCESS,
    PEAK_LINE,
    STARTUP_LINE,
    WHOLE_LINE,
    job_log,
    peak_memory_mib,
    process_start,
)
from miaflow.runtime.wire import named

log = logging.getLogger(__name__)
CODE_INPUT = "code"
# Libraries that take a second or more to import: a job module imports them only inside the job
# functions that use them (tests/unit/test_jobs.py), and each job's log names those it imported.
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
    return parts[1] if parts[0] == "records" and len(parts) > 2 else None


def job_function(job: str) -> Callable[..., None]:
    """The function a dotted name (`miaflow.jobs.<stage>.<job>`) names."""
    return named(job)


def run(job: str, snakemake: Any) -> None:
    """Run `job` (`miaflow.jobs.<stage>.<job>`) for this Snakemake job: forked from the run's
    warm process when one is reachable, else here (`call`); exits with the job's code if it
    failed."""
    code = forked(job, snakemake)
    if code is None:
        call(job_function(job), snakemake)
    elif code != 0:
        sys.exit(code)


def call(
    job: Callable[..., None], snakemake: Any, started: tuple[float, float] | None = None
) -> None:
    """Run `job` on the Snakemake job's named fields in this process, logging to the rule's log
    file; inputs are checked against their provenance records first, and the outputs recorded
    after. `started`: when the job's script started and the CPU seconds it spent before handing
    the job over (a forked job), else this process's start."""
    from miaflow.runtime import provenance

    since, cpu_before = started or process_start()

    def times() -> tuple[float, float]:
        cpu = os.times()
        spent = cpu.user + cpu.system + cpu.children_user + cpu.children_system
        return time.time() - since, cpu_before + spent

    log_file = snakemake.log[0] if snakemake.log else None
    try:
        with job_log(log_file):
            # the code files too: each output's record holds the digest of the code that ran
            inputs = provenance.check_inputs(named_files(snakemake.input))
            log.info(STARTUP_LINE, *times())
            job(**arguments(job, snakemake))
            if (stage := stage_of(snakemake)) is not None:
                outputs = named_files(snakemake.output)
                provenance.write_records(outputs, inputs, stage, snakemake.rule)
            imported = [name for name in HEAVY_MODULES if name in sys.modules]
            log.info(WHOLE_LINE, *times(), ", ".join(imported) or "none of the heavy ones")
            log.info(PEAK_LINE, peak_memory_mib(), FORKED if started else OWN_PROCESS)
    except Exception as error:
        if (reason := explained(error)) is None:
            raise
        where = f" (the traceback is in {log_file})" if log_file else ""
        print(f"miaflow: rule {snakemake.rule}: {reason}{where}", file=sys.stderr)
        raise SystemExit(1) from None


def explained(error: BaseException) -> str | None:
    """The line that tells a user why a job stopped, for an error whose cause is theirs to fix
    (a bad input file, a corrupt artifact, a full disk); None for anything else (a bug: its
    traceback says more)."""
    if isinstance(error, ExplainedError):
        return str(error)
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        writing = f" writing {error.filename}" if error.filename else ""
        return (
            f"no space left on device{writing}. Free space and run the same command again: "
            "no half-written file is left behind"
        )
    return None
