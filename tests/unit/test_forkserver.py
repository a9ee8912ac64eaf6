"""Jobs forked from the run's warm process (miaflow.runtime.forkserver): a script hands over its
job, streams, directory and environment and exits with the job's code; a killed script takes its
job with it, a signal reaches the job, and without a server the script runs the job itself.
That a forked run's artifacts equal those of jobs in their own interpreters is checked end to end
(tests/workflow/test_resume_e2e.py runs one job of every stage again with the server off, against
the shared run's bytes).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from miaflow.runtime import forkclient, forkserver, joblog, wire

# Jobs for the server to fork, importable by it from the test's folder; `Job` stands in for
# Snakemake's `snakemake` object (the adapter reads its named fields, log, rule and threads).
JOBS = """
import logging, os, signal, sys, time
from pathlib import Path


class Fields(dict):
    pass


class Job:
    def __init__(self, output, params, log):
        self.input, self.output, self.params = Fields(), Fields(output), Fields(params)
        self.log, self.rule, self.threads = [log], "a_rule", 1


def describe(*, out, word):
    print(f"stdout of {word}")
    print(f"stderr of {word}", file=sys.stderr)
    Path(out).write_text(f"{word}|{os.getcwd()}|{os.environ.get('JOB_SETTING')}|{os.getpid()}")


def typed(*, out, experiment):
    kinds = type(experiment).__name__, type(experiment.exclude_attacks).__name__
    Path(out).write_text(f"{kinds}|{experiment.label}|{os.getpid()}")


def sized(*, out, size):
    Path(out).write_text(f"{(type(size[0]).__name__, type(size[1]).__name__)}|{os.getpid()}")


def warn(*, out):
    logging.getLogger("a_job").warning("a warning of the job")
    Path(out).write_text(str(os.getpid()))


def fail(*, out):
    raise ValueError("this job fails")


def wait(*, out):
    def terminated(*_):
        Path(out + ".terminated").write_text("by SIGTERM")
        os._exit(3)

    signal.signal(signal.SIGTERM, terminated)
    Path(out).write_text(str(os.getpid()))
    time.sleep(60)
"""

SCRIPT = """
import os, sys
from pathlib import Path
from jobs_for_test import Job
from miaflow.runtime.adapter import run

params = dict(zip(sys.argv[3::2], sys.argv[4::2]))
if "experiment" in params:  # a named tuple parameter, as the evaluate stage's rules pass
    from miaflow.plan import Experiment

    params["experiment"] = Experiment("breast_cancer", params["experiment"], "lr", ("model-fpr",))
if "size" in params:  # a library's named tuple, and a path: nothing JSON carries as they are
    params["size"] = (os.terminal_size((80, 24)), Path(params["size"]))
run("jobs_for_test." + sys.argv[1], Job({"out": sys.argv[2]}, params, "job.log"))
"""


@pytest.fixture
def server(tmp_path: Path):
    """A fork server preloading nothing (no stages) that forks the job functions of the module
    `jobs_for_test` for `tmp_path`, and the environment that points to it; its stderr is in
    `server.err`."""
    (tmp_path / "jobs_for_test.py").write_text(JOBS)
    (tmp_path / "script.py").write_text(SCRIPT)
    address = str(tmp_path / "socket")
    environment = dict(os.environ, PYTHONPATH=str(tmp_path), JOB_SETTING="from the script")
    errors = (tmp_path / "server.err").open("w")
    with forkserver.listening_socket(address) as listener:  # as `forkserver.start` does
        process = forkserver.spawn(
            listener,
            [],
            directory=str(tmp_path),
            jobs="jobs_for_test",
            env=dict(environment, JOB_SETTING="from the server"),
            cwd="/",
            stderr=errors,
        )
    yield dict(environment, **{forkclient.FORKSERVER: address})
    process.terminate()
    process.wait(timeout=10)
    errors.close()


def script(tmp_path: Path, environment: dict, *arguments: str, **options) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "script.py", *arguments],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **options,
    )


def test_a_forked_job_runs_in_the_scripts_directory_environment_and_streams(tmp_path, server):
    ended = script(tmp_path, server, "describe", "out.txt", "word", "hello")
    stdout, stderr = ended.communicate(timeout=60)
    assert ended.returncode == 0, stderr
    word, directory, setting, pid = (tmp_path / "out.txt").read_text().split("|")
    assert (word, directory, setting) == ("hello", str(tmp_path), "from the script")
    assert int(pid) != ended.pid  # the server's child, not the script, ran it
    assert stdout == "stdout of hello\n" and "stderr of hello" in stderr
    log = (tmp_path / "job.log").read_text()
    assert joblog.logged_usage(log) is not None and "(forked)" in log


def test_a_named_tuple_parameter_reaches_the_forked_job_as_itself(tmp_path, server):
    ended = script(tmp_path, server, "typed", "typed.txt", "experiment", "catboost")
    assert ended.wait(timeout=60) == 0
    kinds, label, pid = (tmp_path / "typed.txt").read_text().split("|")
    assert (kinds, label) == ("('Experiment', 'tuple')", "catboost_ref_lr")
    assert int(pid) != ended.pid


def test_a_job_whose_fields_json_cannot_carry_runs_in_its_script(tmp_path, server):
    ended = script(tmp_path, server, "sized", "sized.txt", "size", "a/path")
    assert ended.wait(timeout=60) == 0
    kinds, pid = (tmp_path / "sized.txt").read_text().split("|")
    assert kinds == "('terminal_size', 'PosixPath')" and int(pid) == ended.pid


def test_only_the_packages_tuple_classes_come_back_from_a_request():
    from miaflow.plan import Experiment

    fields = {"params": {"experiment": Experiment("d", "a", "a", ("x",)), "pair": (1, [2])}}
    back = wire.from_plain(json.loads(json.dumps(wire.to_plain(fields))))
    assert back == fields
    assert type(back["params"]["experiment"]) is Experiment
    assert type(back["params"]["pair"]) is tuple
    foreign = {wire.TUPLE: ["os.terminal_size", [[80, 24]]]}
    with pytest.raises(ValueError, match="os.terminal_size"):
        wire.from_plain(foreign)


@pytest.fixture
def server_that_configured_logging(tmp_path: Path) -> None:
    """The server's imports set up logging, as Opacus' do (`logging.basicConfig` on stderr)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import logging, sys\nlogging.basicConfig(stream=sys.stderr)\n"
    )


def test_a_forked_job_logs_to_its_log_only(server_that_configured_logging, tmp_path, server):
    ended = script(tmp_path, server, "warn", "warn.txt")
    _, stderr = ended.communicate(timeout=60)
    assert ended.returncode == 0, stderr
    assert int((tmp_path / "warn.txt").read_text()) != ended.pid
    assert "a warning of the job" in (tmp_path / "job.log").read_text()
    assert "a warning of the job" not in stderr


def _pid(path: Path) -> int:
    return int(path.read_text().split("|")[-1])


def test_the_server_forks_only_job_functions_of_its_package_for_its_directory(tmp_path, server):
    """A request for anything else (a library's function, a private one, another directory)
    gets no fork: its script runs what it asked for itself."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "script.py").write_text(SCRIPT)
    ended = script(elsewhere, server, "describe", str(tmp_path / "far.txt"), "word", "x")
    assert ended.wait(timeout=60) == 0 and _pid(tmp_path / "far.txt") == ended.pid
    forged = dict(server, PYTHONPATH=f"{tmp_path}:{server['PYTHONPATH']}")
    (tmp_path / "script.py").write_text(
        SCRIPT.replace('"jobs_for_test." + sys.argv[1]', "sys.argv[1]")
    )
    ended = script(tmp_path, forged, "os.getcwd", "x.txt")
    ended.wait(timeout=60)
    refused = (tmp_path / "server.err").read_text()
    assert "refused 'jobs_for_test.describe'" in refused and "refused 'os.getcwd'" in refused
    assert not (tmp_path / "x.txt").exists()


def test_an_edited_module_stops_the_forking_and_later_jobs_run_the_edit(tmp_path, server):
    """A job never runs code older than the files: once a module the server imported changes
    on disk, the server forks no more, and each script runs its job itself with the edit."""
    first = script(tmp_path, server, "describe", "first.txt", "word", "x")
    assert first.wait(timeout=60) == 0 and _pid(tmp_path / "first.txt") != first.pid
    jobs = tmp_path / "jobs_for_test.py"
    jobs.write_text(jobs.read_text().replace('f"{word}|', 'f"edited {word}|'))
    for name in ("second", "third"):
        ended = script(tmp_path, server, "describe", f"{name}.txt", "word", "x")
        _, stderr = ended.communicate(timeout=60)
        assert ended.returncode == 0
        written = (tmp_path / f"{name}.txt").read_text()
        assert written.startswith("edited x|") and _pid(tmp_path / f"{name}.txt") == ended.pid
        assert "fork server has stopped" not in stderr  # the server said why itself, once
    said = (tmp_path / "server.err").read_text()
    assert said.count("jobs_for_test.py changed during the run") == 1


def test_a_dead_server_is_said_once(tmp_path, server):
    """A server that died (killed) refuses connections: the first job to find it says so, the
    others run as quietly."""
    address = server[forkclient.FORKSERVER]
    dead = subprocess.run(["pkill", "-9", "-f", f"forkserver [0-9]+ [0-9]+ {tmp_path}"])
    assert dead.returncode == 0
    time.sleep(0.5)
    said = []
    for name in ("one", "two"):
        ended = script(tmp_path, server, "describe", f"{name}.txt", "word", "x")
        _, stderr = ended.communicate(timeout=60)
        assert ended.returncode == 0 and _pid(tmp_path / f"{name}.txt") == ended.pid
        said.append("fork server has stopped" in stderr)
    assert said == [True, False] and Path(f"{address}.gone").exists()


def test_stale_socket_folders_of_dead_runs_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(forkserver.tempfile, "gettempdir", lambda: str(tmp_path))
    alive = tmp_path / f"{forkserver.FOLDER_PREFIX}{os.getpid()}-abc"
    dead_pid = _exited_pid()
    dead = tmp_path / f"{forkserver.FOLDER_PREFIX}{dead_pid}-def"
    for folder in (alive, dead):
        folder.mkdir()
        (folder / "socket").write_text("")
    assert forkserver.remove_stale_folders() == [dead]
    assert alive.exists() and not dead.exists()


def _exited_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    return ended.pid


def test_without_a_server_the_script_runs_the_job_itself(tmp_path, server):
    for unreachable in ({forkclient.FORKSERVER: str(tmp_path / "absent")}, {}):
        environment = {k: v for k, v in server.items() if k != forkclient.FORKSERVER}
        environment.update(unreachable)
        ended = script(tmp_path, environment, "describe", "own.txt", "word", "x")
        assert ended.wait(timeout=60) == 0
        assert int((tmp_path / "own.txt").read_text().split("|")[3]) == ended.pid
        assert "(own process)" in (tmp_path / "job.log").read_text()


def test_a_script_before_the_server_waits_for_it_and_one_left_waiting_runs_its_job(
    tmp_path, server
):
    """The run binds the socket before it starts the server (`forkserver.start`): a job whose
    script connects first waits for the server and is forked; a script still waiting when the
    socket closes (the server ended without taking it) runs its job itself."""
    environment = dict(server, **{forkclient.FORKSERVER: str(tmp_path / "early")})
    with forkserver.listening_socket(environment[forkclient.FORKSERVER]) as listener:
        early = script(tmp_path, environment, "describe", "early.txt", "word", "x")
        time.sleep(1)
        assert early.poll() is None and not (tmp_path / "early.txt").exists()  # waiting
        late_server = forkserver.spawn(
            listener, [], directory=str(tmp_path), jobs="jobs_for_test", env=environment
        )
    try:
        assert early.wait(timeout=60) == 0
        assert int((tmp_path / "early.txt").read_text().split("|")[3]) != early.pid
    finally:
        late_server.terminate()
        late_server.wait(timeout=10)
    environment[forkclient.FORKSERVER] = str(tmp_path / "never")
    with forkserver.listening_socket(environment[forkclient.FORKSERVER]):
        left = script(tmp_path, environment, "describe", "left.txt", "word", "x")
        time.sleep(1)
        assert left.poll() is None and not (tmp_path / "left.txt").exists()
    assert left.wait(timeout=60) == 0
    assert int((tmp_path / "left.txt").read_text().split("|")[3]) == left.pid


def test_a_server_that_closes_before_answering_leaves_the_job_to_the_script(tmp_path, server):
    """A server that stops forking (miaflow.runtime.forkserver.unsafe_to_fork) may close a
    connection it had not yet taken: the job then runs in the script's own process."""
    address = str(tmp_path / "closing")
    closing = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    closing.bind(address)
    closing.listen(1)
    environment = dict(server, **{forkclient.FORKSERVER: address})
    ended = script(tmp_path, environment, "describe", "own.txt", "word", "x")
    closing.accept()[0].close()
    assert ended.wait(timeout=60) == 0
    assert int((tmp_path / "own.txt").read_text().split("|")[3]) == ended.pid
    closing.close()


def test_a_failing_forked_job_fails_its_script_with_the_traceback(tmp_path, server):
    ended = script(tmp_path, server, "fail", "out.txt")
    _, stderr = ended.communicate(timeout=60)
    assert ended.returncode == 1
    assert "ValueError: this job fails" in stderr


def _started_job(tmp_path: Path, environment: dict) -> tuple[subprocess.Popen, int]:
    """A script whose forked job waits, and the job's pid once it runs."""
    waiting = script(tmp_path, environment, "wait", "pid.txt", start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return waiting, int((tmp_path / "pid.txt").read_text())


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_killed_script_takes_its_forked_job_with_it(tmp_path, server):
    waiting, job = _started_job(tmp_path, server)
    assert job != waiting.pid
    waiting.kill()
    waiting.wait()
    assert _gone(job)


def test_a_signal_to_the_script_reaches_its_forked_job(tmp_path, server):
    waiting, job = _started_job(tmp_path, server)
    waiting.send_signal(signal.SIGTERM)
    assert waiting.wait(timeout=30) == 1
    assert _gone(job)
    assert (tmp_path / "pid.txt.terminated").read_text() == "by SIGTERM"  # not killed: told


def test_the_server_preloads_what_the_stages_jobs_import_and_only_that():
    names = dict(forkserver.preload_names(["report"]))
    assert "miaflow.jobs.report" in names and "miaflow.jobs.llm" not in names
    assert "Figure" in names["matplotlib.figure"]  # imported inside a function
    order = [module for module, _ in forkserver.preload_names(["hparams", "llm"])]
    assert "transformers" in order
    first_library = next(k for k, module in enumerate(order) if not module.startswith("miaflow"))
    assert all(module.startswith("miaflow") for module in order[:first_library])
    assert order.index("torch") < order.index("efficientnet_lite_pytorch")  # common ones first


UNSAFE_PROBE = """
import threading
from miaflow.runtime import forkserver

print(forkserver.unsafe_to_fork())
release = threading.Event()
waiting = threading.Thread(target=release.wait)
waiting.start()
print(forkserver.unsafe_to_fork())
release.set()
"""


def test_a_process_with_a_second_thread_is_unsafe_to_fork():
    """In a fresh interpreter: the test's own process has pytest-xdist's threads."""
    said = subprocess.run(
        [sys.executable, "-c", UNSAFE_PROBE], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert said == ["None", "the server started a thread"]
