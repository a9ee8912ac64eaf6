"""A local run's warm process: the libraries imported once per run, each job forked from it.

A job of the embedded default is a short Python process, and about half of the default's job
time went to each job's interpreter importing torch, transformers, scikit-learn, ... again
(docs/speed.md). So a local run (the Snakefile's `onstart`) starts this server, on a Unix socket
that the run bound in a private temporary directory beforehand (a job that starts first waits
for the server instead of running unforked). While no job is waiting, the server imports the
modules that the run's jobs modules can run and every library they import, even inside them. A
job's script (`miaflow.runtime.adapter.run`) connects and hands over its job's named fields (as
JSON: nothing is unpickled), working directory, environment and standard streams; the server
forks a child that takes them on, tells the script its pid (the script forwards SIGTERM, SIGINT
and SIGHUP to it), runs the job as the script would have (`adapter.call`), importing what the
server has not yet, and sends back its exit code. A child whose script is gone (killed) kills
itself. The server never runs a torch operation, and it stops forking (jobs then run unforked)
if an import starts a thread or the CUDA driver, neither of which survives a fork; it exits when
the run that started it does.

A job never runs code older than the files it records: before each fork the server checks that
every module of the package it has imported is unchanged on disk, and stops forking for the
rest of the run when one is not (a researcher edited it mid-run), so later jobs import the
edited code in their own interpreters; each job's provenance records also hold the digest of
every library file it runs (`miaflow.runtime.adapter`), so `make verify` names an artifact
computed from code that has changed since. The server forks only the job functions of
`miaflow.jobs` and only for the run's own working directory.

Where the server cannot be reached (a cluster job on another machine, `--no-hooks`), scripts run
their jobs themselves, as they always could. Snakemake's benchmark file of a forked job measures
only its script, so each job's log has the job's own CPU seconds and peak memory, which the cost
table reads (miaflow.runtime.joblog.read_benchmarks).

    python -m miaflow.runtime.forkserver FD PARENT_PID DIRECTORY JOBS STAGE...   (by `start`)
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import importlib
import importlib.util
import inspect
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from miaflow.plan import code
from miaflow.runtime import adapter, wire
from miaflow.runtime.forkclient import FORKSERVER, mark_gone, said_gone

POLL_SECONDS = 0.5  # how often the server looks for ended children and a gone parent
MIN_JOBS = 3  # fewer script jobs than this run in their own interpreters
REQUEST_SECONDS = 10  # a script that connected sends its request at once
FOLDER_PREFIX = "miaflow-forkserver-"  # the run's private socket folder: <prefix><run pid>-...
JOBS = f"{code.PACKAGE}.jobs"  # the package whose job functions a run's server forks


def preload_names(
    run_stages: list[str], root: Path = code.ROOT
) -> list[tuple[str, tuple[str, ...]]]:
    """What the jobs of `run_stages` can import: (module, names taken from it) for every import
    statement of every module of their jobs modules' closure, and those modules themselves; the
    package's own first, then the libraries that most of those modules import (a short run ends
    before the server has imported what only one rarely used module needs)."""
    jobs_modules = [f"miaflow.jobs.{stage}" for stage in run_stages]
    closures = code.closures(jobs_modules, root).values()
    ours = sorted({module for closure in closures for module in closure})
    found: dict[str, tuple[str, ...]] = {}
    importers: Counter[str] = Counter()
    for module in ours:
        tree = ast.parse((root / code.module_file(module, root)).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update({alias.name: () for alias in node.names if alias.name not in found})
                importers.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = (*found.get(node.module, ()), *(alias.name for alias in node.names))
                found[node.module] = tuple(dict.fromkeys(names))
                importers[node.module.split(".")[0]] += 1
    found.update({module: () for module in ours})
    return sorted(
        found.items(),
        key=lambda item: (item[0] not in ours, -importers[item[0].split(".")[0]], item[0]),
    )


def preload(module: str, taken: tuple[str, ...]) -> None:
    """Import `module` and touch the names taken from it (lazy modules load them then); what
    cannot be imported here (an optional library) is left to the job."""
    try:
        loaded = importlib.import_module(module)
        for name in taken:
            getattr(loaded, name, None)
    except Exception:  # noqa: BLE001 - an optional library absent here fails in its job
        pass


def listening_socket(address: str) -> socket.socket:
    """A Unix socket listening at `address`. The run binds it before it starts the server, which
    inherits it: a script that connects while the server is still starting waits in its backlog
    for a fork instead of running its job unforked; once the server has ended, the socket is
    closed and waiting scripts run their jobs themselves."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    return listener


class ImportedFiles:
    """The source files of `packages` (folders or single modules) this process has imported,
    each with its status (size, modification time) when it was first seen: what a fork runs.
    Each module is classified once, by name, so that a check costs a stat per file of ours."""

    def __init__(self, packages: list[Path]) -> None:
        self.packages = [str(path.resolve()) for path in packages]
        self.known: dict[str, str | None] = {}  # module name -> its file if ours, else None
        self.seen: dict[str, tuple[int, int]] = {}

    def _file_of_ours(self, module: Any) -> str | None:
        path = getattr(module, "__file__", None)
        if not path:
            return None
        resolved = os.path.realpath(path)
        ours = any(resolved == root or resolved.startswith(f"{root}/") for root in self.packages)
        return resolved if ours else None

    def changed(self) -> str | None:
        """The first imported file that changed on disk since it was seen (new ones are seen
        now), or None."""
        for name, module in list(sys.modules.items()):
            if name not in self.known:
                self.known[name] = self._file_of_ours(module)
            path = self.known[name]
            if path is None:
                continue
            try:
                status = os.stat(path)
            except OSError:
                return path  # removed
            now = (status.st_size, status.st_mtime_ns)
            if self.seen.setdefault(path, now) != now:
                return path
        return None


def serve(
    listener: socket.socket, parent: int, directory: str, jobs: str, run_stages: list[str]
) -> None:
    """Fork one child per connection on `listener` until `parent` (the run) is gone; while no
    script is waiting, import the next module that the jobs of `run_stages` may need
    (`preload_names`' order), so that the server is of use from the run's first jobs on. Jobs
    are forked only if they are functions of the package `jobs`, for `directory` (the run's),
    and while the package's files the server imported are unchanged on disk."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # a CUDA check at import leaves CUDA unused
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle; it stops us
    pending = preload_names(run_stages)
    imported = ImportedFiles([code.ROOT / code.PACKAGE, _package_folder(jobs)])
    imported.changed()  # what the server imported to start
    while os.getppid() == parent:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        waiting, _, _ = select.select([listener], [], [], 0 if pending else POLL_SECONDS)
        if not waiting:
            if pending:
                module, taken = pending.pop(0)
                preload(module, taken)
                imported.changed()  # seen as imported: an edit from now on stops the forking
                if why := unsafe_to_fork():
                    print(f"miaflow: importing {module}, {why}; jobs run unforked", file=sys.stderr)
                    mark_gone(listener.getsockname())
                    return
            continue
        connection, _ = listener.accept()
        taken = take_request(connection)
        if taken is None:
            connection.close()
            continue
        request, fds = taken
        if not _is_job(request.get("job"), jobs) or not _same_directory(
            request.get("directory"), directory
        ):
            refuse(connection, fds, f"the fork server refused {request.get('job')!r}")
            continue
        if edited := _edited(imported.changed()) or unsafe_to_fork():
            # the script runs its job itself, with the code as it is now
            refuse(
                connection, fds, f"{edited}: the jobs from here on run in their own interpreters"
            )
            mark_gone(listener.getsockname())
            return
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:  # the child leaves only through os._exit, never into this loop
            status = 1
            try:
                listener.close()
                status = child(connection, request, fds)
            except BaseException:  # noqa: BLE001 - taking the request on failed
                traceback.print_exc()
            finally:
                os._exit(status)
        for fd in fds:
            os.close(fd)
        connection.close()


def _package_folder(name: str) -> Path:
    """The folder of the top-level package of `name` (or its file, for a single module)."""
    origin = Path(importlib.util.find_spec(name.split(".")[0]).origin)
    return origin.parent if origin.name == "__init__.py" else origin


def _edited(path: str | None) -> str | None:
    return None if path is None else f"{path} changed during the run"


def take_request(connection: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """A script's request and its standard streams, or None if it gave up (or stalled for
    `REQUEST_SECONDS`) before sending it whole."""
    connection.settimeout(REQUEST_SECONDS)
    try:
        header, fds, _, _ = socket.recv_fds(connection, wire.LENGTH.size, 3)
        if len(header) < wire.LENGTH.size:
            raise ConnectionError("no request")
        (size,) = wire.LENGTH.unpack(header)
        payload = wire.receive_exactly(connection, size)
        request = json.loads(payload) if len(payload) == size else None
    except (OSError, ValueError):
        return None
    finally:
        connection.settimeout(None)
    if not isinstance(request, dict):
        for fd in fds:
            os.close(fd)
        return None
    return request, fds


def refuse(connection: socket.socket, fds: list[int], why: str) -> None:
    """Close a request unforked (its script then runs the job itself), saying why."""
    for fd in fds:
        os.close(fd)
    connection.close()
    print(f"miaflow: {why}", file=sys.stderr)


def unsafe_to_fork() -> str | None:
    """Why forking this process would be unsafe now, if it would: a Python thread (it may hold a
    lock the child then waits for forever), or the CUDA driver in use (CUDA does not survive a
    fork: GPU jobs would fail). None if it is safe."""
    if threading.active_count() > 1:
        return "the server started a thread"
    with contextlib.suppress(OSError), open("/proc/self/maps") as mapped:
        if "libcuda.so" in mapped.read():
            return "the server loaded the CUDA driver"
    return None


def child(connection: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    """Take on the script's request (its job, directory, environment and standard streams
    `fds`) and run its job; the exit code, also sent to the script."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["directory"])
    take_on_environment(request["environment"])
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # A library may configure logging when imported (Opacus: a root handler on stderr); in a job's
    # own process it would import after the job's log handler, and leave logging alone.
    logging.root.handlers.clear()
    connection.sendall(wire.PID.pack(os.getpid()))
    threading.Thread(target=_die_with_script, args=(connection,), daemon=True).start()
    try:
        job = SimpleNamespace(**wire.from_plain(request["fields"]))
        adapter.call(adapter.job_function(request["job"]), job, tuple(request["started"]))
        status = 0
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - the script's process would print it and exit 1
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError):
        wire.send_message(connection, json.dumps({"code": status}).encode())
    return status


def _is_job(name: Any, jobs: str) -> bool:
    """Whether `name` names a public function defined in the package `jobs`."""
    if not isinstance(name, str) or not name.startswith(f"{jobs}."):
        return False
    if name.rsplit(".", 1)[1].startswith("_"):
        return False
    try:
        found = wire.named(name)
    except (ImportError, AttributeError, ValueError):
        return False
    module = getattr(found, "__module__", "") or ""
    return inspect.isfunction(found) and (module == jobs or module.startswith(f"{jobs}."))


def _same_directory(asked: Any, directory: str) -> bool:
    return isinstance(asked, str) and os.path.realpath(asked) == os.path.realpath(directory)


def take_on_environment(environment: dict[str, str]) -> None:
    """The script's environment, also where libraries read it only once, when they were loaded:
    the job's thread count for BLAS and OpenMP (Snakemake sets OMP_NUM_THREADS, ... per job; the
    number of BLAS threads changes a float's last bits) and the temporary folder."""
    os.environ.clear()
    os.environ.update(environment)
    tempfile.tempdir = None
    if threads := environment.get("OMP_NUM_THREADS"):
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(threads))


def _die_with_script(connection: socket.socket) -> None:
    """The script closes its end only when it dies: then so does its job."""
    with contextlib.suppress(OSError):
        while connection.recv(1):
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def spawn(
    listener: socket.socket,
    run_stages: list[str],
    directory: str | None = None,
    jobs: str = JOBS,
    **options: Any,
) -> subprocess.Popen:
    """The server's process, serving this process's run on `listener`, which it inherits: the
    job functions of the package `jobs`, for the run's `directory` (default: this process's
    working directory); `options` go to `subprocess.Popen`."""
    descriptor = listener.fileno()
    arguments = [str(descriptor), str(os.getpid()), directory or os.getcwd(), jobs, *run_stages]
    return subprocess.Popen(
        [sys.executable, "-m", __name__, *arguments], pass_fds=[descriptor], **options
    )


def remove_stale_folders() -> list[Path]:
    """The socket folders of this user's runs that are no longer alive (killed), removed."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        try:
            pid = int(folder.name.removeprefix(FOLDER_PREFIX).split("-")[0])
            if folder.stat().st_uid != os.getuid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        except (ValueError, OSError):
            continue
    return removed


def start(workflow: Any) -> None:
    """For a local run's main process: start the server and give its address to the jobs.

    A no-op elsewhere: cluster jobs, `MIAFLOW_FORKSERVER=off`, and runs of fewer than
    `MIN_JOBS` script jobs, for which importing every library the stage may need costs more than
    it saves."""
    if (
        os.environ.get(FORKSERVER) == "off"
        or not workflow.is_main_process
        or not workflow.local_exec
    ):
        return
    jobs = [job for job in workflow.dag.needrun_jobs() if job.rule.script]
    run_stages = sorted({stage for job in jobs if (stage := adapter.stage_of(job))})
    if len(jobs) < MIN_JOBS:
        return
    remove_stale_folders()
    folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")  # private: mode 0700
    address = os.path.join(folder, "socket")
    with listening_socket(address) as listener:  # closed here; the server's copy stays open
        server = spawn(listener, run_stages, stdin=subprocess.DEVNULL)
    os.environ[FORKSERVER] = address

    def stop() -> None:
        if server.poll() is not None and server.returncode != 0:
            said_gone(address, f"exit status {server.returncode}")
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)
        with contextlib.suppress(OSError):
            os.rmdir(folder)

    atexit.register(stop)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]), *sys.argv[3:5], sys.argv[5:])
