"""From Snakemake's `snakemake` object to a job call: the one place that knows both.

Every file in `scripts/` is `adapter.run(<job>, snakemake)`. The rule's named input, output and
params fields become the job's keyword arguments under the same names (and `threads` when the job
takes it), so a key that is misnamed on either side fails loudly with the name in the message.
Inputs named `code` are the library files the job runs, listed only so that editing one reruns
the job; they are not passed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from miaflow.jobs.common import job_log

CODE_INPUT = "code"


def arguments(job: Callable[..., None], snakemake: Any) -> dict[str, Any]:
    """The keyword arguments of `job` from the named fields of a Snakemake job."""
    named: dict[str, Any] = {}
    sections = {"input": snakemake.input, "output": snakemake.output, "params": snakemake.params}
    for section, fields in sections.items():
        for name, value in fields.items():
            if section == "input" and name == CODE_INPUT:
                continue
            if name in named:
                raise TypeError(f"rule {snakemake.rule}: {section} key {name!r} is also the key of "
                                "another input, output or params entry; job arguments need "
                                "unique names")
            named[name] = value
    if "threads" in inspect.signature(job).parameters:
        named["threads"] = snakemake.threads
    return named


def run(job: Callable[..., None], snakemake: Any) -> None:
    """Run `job` on the Snakemake job's named fields, logging to the rule's log file."""
    with job_log(snakemake.log[0] if snakemake.log else None):
        job(**arguments(job, snakemake))
