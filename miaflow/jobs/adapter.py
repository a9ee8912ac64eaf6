"""From Snakemake's `snakemake` object to a job call: the one place that knows both.

Every file in `scripts/` is `adapter.run("miaflow.jobs.<stage>.<job>", snakemake)`. The rule's
named input, output and params fields become the job's keyword arguments under the same names
(and `threads` when the job takes it), so a key that is misnamed on either side fails loudly with
the name in the message. Inputs named `code` are the library files the job runs, listed only so
that editing one reruns the job; they are not passed. Around the call, every input is checked
against its provenance record and every output under results/ gets one (`miaflow.provenance`).
The job's log records its start-up (process start to the job's first line), its whole time, wall
and CPU, and its peak memory, so that `bench/startup_share.py` can say what share of job time
start-up costs and the cost table can count a forked job's own CPU and memory.

In a local run the job is forked from the run's warm process (`miaflow.jobs.forkserver`,
whose address is in `FORKSERVER`), which has imported the libraries once: this script then only
hands over its job's named fields, working directory, environment and standard streams, forwards
signals and exits with the job's code. Without a reachable server (none started, a cluster
node) the script runs the job itself. This module imports only the standard library at the top,
so that a forked job's script starts in a tenth of a second.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from miaflow.joblog import (
    FORKED,
    OWN_PROCESS,
    PEAK_LINE,
    STARTUP_LINE,
    WHOLE_LINE,
    peak_memory_mib,
)

log = logging.getLogger(__name__)
CODE_INPUT = "code"
# The environment variable that holds the warm process's socket address, set for a local run.
FORKSERVER = "MIAFLOW_FORKSERVER"
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
LENGTH = struct.Struct("!Q")  # a message's length, sent before the message
PID = struct.Struct("!q")  # the forked job's pid, the server's first answer
TUPLE = "__tuple__"  # how a job's fields carry a tuple through JSON (`to_plain`)


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


def process_start() -> tuple[float, float]:
    """When this process started (epoch seconds), and its CPU seconds so far."""
    import psutil

    cpu = os.times()
    return psutil.Process().create_time(), cpu.user + cpu.system


def job_function(job: str) -> Callable[..., None]:
    """The function a dotted name (`miaflow.jobs.<stage>.<job>`) names."""
    module, name = job.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


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
    from miaflow import provenance
    from miaflow.jobs.common import job_log

    since, cpu_before = started or process_start()

    def times() -> tuple[float, float]:
        cpu = os.times()
        spent = cpu.user + cpu.system + cpu.children_user + cpu.children_system
        return time.time() - since, cpu_before + spent

    with job_log(snakemake.log[0] if snakemake.log else None):
        inputs = provenance.check_inputs(named_files(snakemake.input, leave_out=CODE_INPUT))
        log.info(STARTUP_LINE, *times())
        job(**arguments(job, snakemake))
        if (stage := stage_of(snakemake)) is not None:
            provenance.write_records(named_files(snakemake.output), inputs, stage, snakemake.rule)
        imported = [name for name in HEAVY_MODULES if name in sys.modules]
        log.info(WHOLE_LINE, *times(), ", ".join(imported) or "none of the heavy ones")
        log.info(PEAK_LINE, peak_memory_mib(), FORKED if started else OWN_PROCESS)


# --- the script's side of a forked job (the server's side: miaflow.jobs.forkserver) ---------


def job_fields(snakemake: Any) -> dict[str, Any]:
    """What `call` reads of a Snakemake job, as plain data: the forked job gets these, not the
    `snakemake` object (nothing is unpickled)."""
    return {
        "rule": snakemake.rule,
        "threads": snakemake.threads,
        "log": list(snakemake.log),
        **{name: dict(getattr(snakemake, name).items()) for name in ("input", "output", "params")},
    }


def to_plain(value: Any) -> Any:
    """`value` with each tuple as `{"__tuple__": [its class, its items]}`, so that JSON keeps it
    a tuple: a named tuple of the package (`plan.Experiment`) by its class's dotted name, a plain
    tuple by null."""
    if isinstance(value, tuple):
        kind = type(value)
        name = None if kind is tuple else f"{kind.__module__}.{kind.__qualname__}"
        return {TUPLE: [name, [to_plain(item) for item in value]]}
    if isinstance(value, list):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    return value


def from_plain(value: Any) -> Any:
    """The inverse of `to_plain`; a tuple class is looked up only in the package."""
    if isinstance(value, list):
        return [from_plain(item) for item in value]
    if not isinstance(value, dict):
        return value
    if value.keys() != {TUPLE}:
        return {key: from_plain(item) for key, item in value.items()}
    name, items = value[TUPLE]
    items = [from_plain(item) for item in items]
    if name is None:
        return tuple(items)
    kind = job_function(name) if name.startswith("miaflow.") else None
    if not (isinstance(kind, type) and issubclass(kind, tuple)):
        raise ValueError(f"not a tuple class of the package: {name}")
    return kind(*items)


def send_message(connection: socket.socket, payload: bytes, fds: list[int] | None = None) -> None:
    """`payload` with its length first; `fds` (open files) travel with the length."""
    header = LENGTH.pack(len(payload))
    if fds:
        socket.send_fds(connection, [header], fds)
    else:
        connection.sendall(header)
    connection.sendall(payload)


def receive_exactly(connection: socket.socket, size: int) -> bytes:
    """`size` bytes, or fewer if the other side closed the connection first."""
    chunks, left = [], size
    while left and (chunk := connection.recv(left)):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def forked(job: str, snakemake: Any) -> int | None:
    """Have the run's warm process fork `job` with this script's streams, directory and
    environment, and wait for its exit code; None when no server is reachable."""
    address = os.environ.get(FORKSERVER)
    if not address:
        return None
    fields = job_fields(snakemake)
    request = {
        "job": job,
        "fields": to_plain(fields),
        "directory": os.getcwd(),
        "environment": dict(os.environ),
        "started": list(process_start()),
    }
    try:
        payload = json.dumps(request)
        same = from_plain(json.loads(payload)["fields"]) == fields
    except (TypeError, ValueError, ImportError, AttributeError):  # an object JSON cannot carry
        same = False
    if not same:  # not plain data (a path, a library's tuple): run it here
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(address)
    except OSError:  # not listening yet, gone, or on another machine
        connection.close()
        return None
    try:
        send_message(connection, payload.encode(), fds=[0, 1, 2])
        child = receive_exactly(connection, PID.size)
    except OSError:  # the server closed the connection while it was being sent
        child = b""
    if len(child) < PID.size:  # the server stopped (or its child failed) before the job began
        connection.close()
        return None
    (pid,) = PID.unpack(child)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda number, _frame: os.kill(pid, number))
    length = receive_exactly(connection, LENGTH.size)
    if len(length) < LENGTH.size:  # killed (a signal, out of memory) before it could answer
        print(f"miaflow: forked job {job} (pid {pid}) ended without a result", file=sys.stderr)
        return 1
    return int(json.loads(receive_exactly(connection, LENGTH.unpack(length)[0]))["code"])
