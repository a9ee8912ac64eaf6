"""Crash anywhere, rerun the same command: `kill -9` of a real `dvc repro` at three points, each
followed by the same command with no manual step, gives the artifacts and dvc.lock of the shared
finished run byte for byte (same seeds, same bytes: this second run is the suite's determinism
check too), no temp file and no stale lock (miaflow.runtime.resume); one job of every stage, run
again in its own interpreter, gives the bytes of the jobs forked from the run's warm process.
Corrupt or missing intermediates are found against their provenance records
(miaflow.runtime.provenance) and rebuilt by the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import copy_project
from test_verify import flip_byte_keeping_size_and_time
from test_workflow_e2e import digests, locked_artifacts, run, tiny_project

from miaflow.plan import stages
from miaflow.runtime import forkclient, joblog, resume, verify

pytestmark = pytest.mark.e2e

COMMAND = ["dvc", "repro"]
# Where the run is when it is killed: the first file of each stage's artifacts to appear.
KILL_POINTS = ["results/prepare/splits", "results/train/models", "results/evaluate/scores"]
# An output of one job of every stage (each stage has its own jobs module), that job run again in
# its own interpreter: torch training, Opacus, transformers, CatBoost, the attacks, the audit, the
# privacy audit's DP-SGD model, and the report's tables and matplotlib figures. Forced in two
# rounds, the first's jobs downstream of none of the second's: a forced job's output then never
# makes a later target's inputs newer (which would rerun the jobs in between).
OWN_INTERPRETER_ROUNDS = (
    {
        "report": "results/tables/llm.csv",
        "train": "results/train/models/digits/cnn/shard-0.safetensors",
        "queries": "results/queries/sets/digits.parquet",
        "evaluate": "results/evaluate/scores/breast_cancer/lr_ref_catboost.parquet",
        "hparams": "results/hparams/grid/digits_s3/eps-8/run-0.parquet",
        "audit": "results/audit/scores/sklearn_digits/forest.parquet",
        "privacy": "results/privacy/trials/digits/torch_lr_dp.parquet",
    },
    {
        "llm": "results/llm/models/synthetic_text/gpt2_tiny/target-0.json",
        "prepare": "results/prepare/data/breast_cancer.parquet",
    },
)


def kill_when_present(root: Path, folder: str, timeout: float = 600.0) -> None:
    """Start COMMAND and kill its whole process group (-9) once a file appears under `folder`."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    process = subprocess.Popen(
        COMMAND,
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        if any(path.is_file() for path in (root / folder).rglob("*")):
            os.killpg(process.pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    process.wait()
    assert process.returncode == -signal.SIGKILL, f"the run ended before reaching {folder}"


def test_same_seeds_give_identical_artifacts_and_dvc_lock_after_kill_9_at_three_points(
    tmp_path, request
):
    """A second run of the tiny config (README's audit example included), killed at three points
    and finished by the same command, against the shared finished run."""
    crashed = tiny_project(tmp_path / "crashed")
    stale_locks = []
    for folder in KILL_POINTS:
        kill_when_present(crashed, folder)
        stale_locks += list((crashed / resume.SNAKEMAKE_LOCKS).glob("*.lock"))
        # what a kill in the middle of an atomic write leaves behind
        (crashed / folder / ".half-written.parquet.x1y2.tmp").write_bytes(b"PAR1")
    assert stale_locks, "no kill left Snakemake's lock behind: the test did not test resuming"
    # The same command: no --unlock, no --rerun-incomplete by hand.
    run(COMMAND, crashed)
    assert resume.stale_leftovers(crashed) == []
    assert "up to date" in run(["dvc", "status"], crashed).stdout
    # Asked for only now: under xdist another worker builds it while this one ran the above.
    finished = request.getfixturevalue("finished_run")
    first_digests, second_digests = digests(finished), digests(crashed)
    assert first_digests.keys() == second_digests.keys()
    differing = [k for k in first_digests if first_digests[k] != second_digests[k]]
    assert not differing, f"artifacts differ between identical runs: {differing}"
    first_lock, second_lock = locked_artifacts(finished), locked_artifacts(crashed)
    assert {"results/evaluate", "results/tables", "results/llm"} <= first_lock.keys()
    assert first_lock == second_lock
    # The jobs above were forked from their stage's warm process (miaflow.runtime.forkserver; a
    # stage with fewer than its MIN_JOBS jobs to run runs them unforked). One job of each stage
    # again, each in its own interpreter, writes the same bytes.
    assert {stage for targets in OWN_INTERPRETER_ROUNDS for stage in targets} == set(stages.STAGES)
    before = time.time()
    for targets in OWN_INTERPRETER_ROUNDS:
        run(
            ["snakemake", "--cores", "2", "--force", *targets.values()],
            crashed,
            environment={forkclient.FORKSERVER: "off"},
        )
    logs = [log for log in (crashed / "records").rglob("*.log") if log.stat().st_mtime > before]
    assert len(logs) == len(stages.STAGES), logs  # the forced jobs, no other
    assert all(f"({joblog.OWN_PROCESS})" in log.read_text() for log in logs)
    assert digests(crashed) == first_digests


CLAIM = (
    "import sys; from miaflow.runtime.resume import claim_working_directory; "
    "print(claim_working_directory(sys.argv[1]))"
)


def test_only_the_holder_of_the_run_lock_clears_leftovers(tmp_path):
    """While a run is alive, another process touches nothing (a concurrent run then still stops
    on Snakemake's own lock); once it is dead, the next one clears what it left."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"{CLAIM}; sys.stdout.flush(); import time; time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "[]"
        (tmp_path / ".snakemake" / "locks").mkdir()
        (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("")
        (tmp_path / "results").mkdir()
        (tmp_path / "results" / ".scores.parquet.abc.tmp").write_text("")
        second = subprocess.run(
            [sys.executable, "-c", CLAIM, str(tmp_path)], capture_output=True, text=True, check=True
        )
        assert second.stdout.strip() == "None" and len(resume.stale_leftovers(tmp_path)) == 2
    finally:
        holder.kill()
        holder.wait()
    after = subprocess.run(
        [sys.executable, "-c", CLAIM, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert ".scores.parquet.abc.tmp" in after.stdout and "0.input.lock" in after.stdout
    assert resume.stale_leftovers(tmp_path) == []


def test_corrupt_truncated_and_deleted_intermediates_are_rebuilt(finished_run, tmp_path):
    """Damage in two stages: a flipped byte in the prepared data with size and modification
    time kept (bit rot, which Snakemake cannot see), a flipped byte in a model shard's weights, a
    truncated signals file and a deleted signals shard. The same command, run once, finds the
    damaged files against their provenance records at its start, removes them with what was
    computed from them, and rebuilds everything byte-identical."""
    damaged = copy_project(finished_run, tmp_path / "damaged")
    data = damaged / "results/prepare/data/breast_cancer.parquet"
    flip_byte_keeping_size_and_time(data, offset=data.stat().st_size // 2)
    # all in breast_cancer's experiments, so that the rebuild is theirs only
    signals = sorted((damaged / "results/train/signals/breast_cancer/catboost").glob("*.parquet"))
    models = sorted((damaged / "results/train/models/breast_cancer/lr").glob("*.safetensors"))
    signals[0].write_bytes(signals[0].read_bytes()[:-100])
    weights = bytearray(models[0].read_bytes())
    weights[-9] ^= 0x04  # in the last tensor's bytes
    models[0].write_bytes(bytes(weights))
    signals[1].unlink()
    assert {p.path for p in verify.verify(damaged)[1]} == {
        str(path.relative_to(damaged)) for path in (data, signals[0], signals[1], models[0])
    }
    result = run(COMMAND, damaged)
    said = result.stdout + result.stderr
    for path in (data, signals[0], models[0]):
        assert f"removed {path.relative_to(damaged)}, to be rebuilt" in said
    assert "but it was written as" in said
    assert digests(damaged) == digests(finished_run)
    assert verify.verify(damaged)[1] == [] and resume.stale_leftovers(damaged) == []
