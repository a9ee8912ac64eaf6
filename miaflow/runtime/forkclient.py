"""The script's side of a forked job: hand the job to the run's warm process and wait for it.

A job's script (`miaflow.runtime.adapter.run`) connects to the fork server whose socket the run
names in `FORKSERVER` and hands over its job's named fields (as plain data, `miaflow.runtime.wire`),
working directory, environment and standard streams; the server forks the job and answers with
its pid, which the script forwards SIGTERM, SIGINT and SIGHUP to, and then with its exit code.
Without a reachable server (none started, a cluster node, a server that has ended) the script
runs the job itself. This module imports only the standard library, so that a forked job's
script starts in a tenth of a second.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from typing import Any

from miaflow.runtime.joblog import process_start
from miaflow.runtime.wire import LENGTH, PID, from_plain, receive_exactly, send_message, to_plain

# The environment variable that holds the warm process's socket address, set for a local run.
FORKSERVER = "MIAFLOW_FORKSERVER"


def mark_gone(address: str) -> bool:
    """Mark the server at `address` as stopped; False if it was marked already (or its run's
    folder is gone)."""
    try:
        os.close(os.open(f"{address}.gone", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        return False
    return True


def said_gone(address: str, why: str) -> None:
    """Say once per run (the first job, or the run's end, to find it) that the run's fork
    server has stopped: from then on every job pays its interpreter's start-up. A server that
    stopped on purpose said why itself (and marked itself gone)."""
    if not mark_gone(address):
        return
    print(
        f"miaflow: the run's fork server has stopped ({why}); jobs run in their own "
        "interpreters from here on",
        file=sys.stderr,
    )


def job_fields(snakemake: Any) -> dict[str, Any]:
    """What the adapter's `call` reads of a Snakemake job, as plain data: the forked job gets
    these, not the `snakemake` object (nothing is unpickled)."""
    return {
        "rule": snakemake.rule,
        "threads": snakemake.threads,
        "log": list(snakemake.log),
        **{name: dict(getattr(snakemake, name).items()) for name in ("input", "output", "params")},
    }


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
        "started": list(process_start()),  # the job's log counts the script's start-up
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
    except OSError as error:  # gone (refused), or on another machine (no such file)
        connection.close()
        if isinstance(error, ConnectionRefusedError):
            said_gone(address, "its socket refuses connections")
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
