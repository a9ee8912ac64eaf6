"""Resume after any crash by running the same command again, with no manual step.

A run killed with `kill -9` (or by the machine) leaves three things behind: Snakemake's lock files,
which make every later run stop until `snakemake --unlock`; outputs of jobs that were running,
which Snakemake marks incomplete (the profile's `rerun-incomplete` reruns those jobs); and the
temporary files of atomic writes (`miaflow.io`), which DVC would otherwise record inside a tracked
output. The first two are only safe to clear when no other run is alive. So every Snakemake
process that parses the workflow tries to take an OS lock on `.snakemake/miaflow-run.lock`: the
kernel releases it when its holder dies, even on `kill -9`. Whoever gets it knows that no other run
in this working directory is alive (a live run, or this run's own job processes, hold it), and
removes what dead runs left. A process that does not get it leaves everything as it is, and a
second run that would run jobs stops there, naming the live run (its pid, which the holder
writes into the lock file): also after `snakemake --unlock`, which removes Snakemake's own lock
of a live run too.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path

RUN_LOCK = Path(".snakemake/miaflow-run.lock")
SNAKEMAKE_LOCKS = Path(".snakemake/locks")
# Where atomic writers put their temporary files and directories, named `.<name>.<random>.tmp`.
WRITTEN_TREES = ("results", "data")
TEMP_PATTERN = ".*.tmp"

_held: list[int] = []  # the lock's file descriptor, kept open for the life of this process


def claim_working_directory(root: str | os.PathLike = ".") -> list[Path] | None:
    """Take the run lock of the working directory `root` and remove what dead runs left behind.

    Returns the removed paths, or None if another live process holds the lock (then nothing is
    touched). Holding the lock already (a second call in one process) returns an empty list.
    """
    if _held:
        return []
    root = Path(root)
    lock = root / RUN_LOCK
    lock.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    _held.append(descriptor)
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"{os.getpid()} {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
    return stale_leftovers(root, remove=True)


def live_run(root: str | os.PathLike = ".") -> str:
    """Who holds the run lock of `root`, as its holder wrote it ("<pid> <start time>")."""
    try:
        pid, _, started = (Path(root) / RUN_LOCK).read_text().strip().partition(" ")
    except OSError:
        return "a live run"
    return f"pid {pid}, started {started}" if pid else "a live run"


def no_run_alive(root: str | os.PathLike = ".") -> bool:
    """Whether no live process holds the run lock of `root` (this one included), checked by taking
    and releasing it: for a command that reads the working directory but must not claim it."""
    lock = Path(root) / RUN_LOCK
    if not lock.exists():
        return True
    descriptor = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)  # closing releases the lock
    return True


def stale_leftovers(root: str | os.PathLike = ".", *, remove: bool = False) -> list[Path]:
    """Snakemake lock files and atomic writers' temporary files under `root`; removed if asked
    (only the holder of the run lock may ask)."""
    root = Path(root)
    found = sorted((root / SNAKEMAKE_LOCKS).glob("*.lock"))
    for tree in WRITTEN_TREES:
        found += sorted((root / tree).rglob(TEMP_PATTERN))
    if remove:
        for path in found:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    return found
