"""What a Snakemake command does at its start (miaflow.runtime.start): only one that runs jobs
removes damaged artifacts and a dead run's leftovers; any other names the damage and changes
nothing."""

from __future__ import annotations

import ast
import fcntl
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake import cli
from test_provenance import copy_job, project, run_job  # noqa: F401 (project: a fixture)
from test_verify import flip_byte_keeping_size_and_time
from test_workflow_e2e import run

from miaflow import io
from miaflow.runtime import commit, resume, verify
from miaflow.runtime.start import NON_EXECUTING, RunAlive, executes, start


def test_every_branch_of_snakemakes_command_line_that_runs_no_jobs_is_known():
    """The options tested by the branches of snakemake.cli.args_to_api that call anything but
    execute_workflow (checked against the installed Snakemake, so that an upgrade adding a mode
    fails here rather than sweeping on it)."""
    function = ast.parse(inspect.getsource(cli.args_to_api)).body[0]
    tested = set()
    for branch in ast.walk(function):
        if not isinstance(branch, ast.If):
            continue
        called = {
            node.func.attr
            for node in ast.walk(branch.body[0])
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("dag_api", "workflow_api")
        }
        if called and "execute_workflow" not in called:
            tested |= {
                node.attr
                for node in ast.walk(branch.test)
                if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "args"
            }
    assert tested - {"report_after_run"} <= set(NON_EXECUTING)
    assert {"summary", "dag", "lint", "list_rules", "unlock"} <= tested  # the walk finds them


@pytest.mark.parametrize(
    "options, runs",
    [
        ([], True),
        (["-n"], False),
        (["--touch"], False),
        (["--summary"], False),
        (["--detailed-summary"], False),
        (["--dag"], False),
        (["--rulegraph"], False),
        (["--lint"], False),
        (["--list-rules"], False),
        (["--list-changes", "code"], False),
        (["--report", "report.html"], False),
        (["--report", "report.html", "--report-after-run"], True),
    ],
)
def test_a_command_line_runs_jobs_unless_it_asks_for_something_else(
    options, runs, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # no Snakefile, hence no workflow profile
    _, args = cli.parse_args(options)
    if args.report:
        args.reporter = "html"  # as args_to_api sets it
    assert executes(args) is runs


def listing(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(path): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def damaged(project: Path, monkeypatch) -> Path:  # noqa: F811
    """The project with a flipped byte (size and time kept) in an artifact that another was
    computed from; this process holds no run lock yet."""
    monkeypatch.setattr(resume, "_held", [])
    run_job(copy_job, {"source": "results/first.bin"}, {"copied": "results/second.bin"})
    flip_byte_keeping_size_and_time(Path("results/first.bin"))
    return project


def test_a_command_that_runs_no_jobs_names_the_damage_and_changes_nothing(damaged: Path):
    Path("results/.first.bin.abc.tmp").write_bytes(b"a dead run's")
    before = listing(damaged)
    said = start(runs=False)
    assert listing(damaged) == before
    assert [line.split(" is to be rebuilt")[0] for line in said] == [
        "warning: results/first.bin",
        "warning: results/second.bin",
    ]
    assert "but it was written as" in said[0] and "computed from results/first.bin" in said[1]


def test_a_command_that_runs_no_jobs_reads_nothing_while_a_run_is_alive(damaged: Path):
    resume.RUN_LOCK.parent.mkdir()
    descriptor = os.open(resume.RUN_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(descriptor, fcntl.LOCK_EX)  # as a live run holds it
    try:
        assert start(runs=False) == []
    finally:
        os.close(descriptor)
    assert start(runs=False) != []


def test_a_second_run_is_refused_while_another_lives(damaged: Path):
    """Whatever Snakemake's own lock says (`snakemake --unlock` removes it under a live run too),
    a command that would run jobs beside a live run stops, naming it, and touches nothing."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from miaflow.runtime.resume import claim_working_directory as claim; claim(); "
            "print('held', flush=True); import time; time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = listing(damaged)
        with pytest.raises(RunAlive, match=rf"another run is alive .*pid {holder.pid}, started"):
            start(runs=True)
        assert listing(damaged) == before
    finally:
        holder.kill()
        holder.wait()
    assert start(runs=True)  # the holder is dead: this run claims the directory


def test_a_run_removes_the_damage_and_what_was_computed_from_it(damaged: Path):
    said = start(runs=True)
    assert [line.split(",")[0] for line in said] == [
        "removed results/first.bin",
        "removed results/second.bin",
    ]
    assert not Path("results/first.bin").exists() and not Path("results/second.bin").exists()


def tree(root: Path) -> dict[str, tuple[str, int, int]]:
    """sha256, size and modification time of every file of a project but Snakemake's and git's
    own folders."""
    return {
        str(path.relative_to(root)): (io.file_hash(path), *_size_and_time(path))
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root).parts[0] not in (".snakemake", ".git")
    }


def _size_and_time(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


@pytest.mark.e2e
def test_commands_that_run_no_jobs_leave_a_damaged_run_as_it_is_and_a_run_rebuilds_it(
    copy_of_finished_run: Path,
):
    """A flipped byte, size and time kept, in a table and in the study's ROC curves: -n and the
    other commands that run no jobs name both and change no file, `make verify` names both, and
    a run removes them with what was computed from them and rebuilds them as they were."""
    root = copy_of_finished_run
    damaged = ["results/tables/auroc.csv", "results/hparams/roc.parquet"]
    written = {name: io.file_hash(root / name) for name in damaged}
    for name in damaged:
        flip_byte_keeping_size_and_time(root / name, offset=(root / name).stat().st_size // 2)
    before = tree(root)
    for options in (["-n"], ["--summary"], ["--detailed-summary"], ["--dag"], ["--list-rules"]):
        said = run(["snakemake", *options], root).stderr
        for name in damaged:
            assert f"warning: {name} is to be rebuilt" in said, options
    assert tree(root) == before
    assert {problem.path for problem in verify.verify(root)[1]} == set(damaged)
    said = run(["snakemake", "--cores", "2"], root).stderr
    for name in damaged:
        assert f"removed {name}, to be rebuilt" in said
    assert {name: io.file_hash(root / name) for name in damaged} == written


def test_make_run_is_one_snakemake_command_recorded_in_dvc_lock(tmp_path):
    """`make run` runs the workflow as one Snakemake command, which sweeps, then records it in
    dvc.lock (miaflow.runtime.commit; tests/workflow/test_resume_e2e.py compares that lock with `dvc
    repro`'s), after creating the outs that stage commands create when empty."""
    repo = Path(__file__).resolve().parents[2]
    recipe = (repo / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    command = " ".join(recipe.replace("\\\n", " ").split())  # one line, as the shell reads it
    assert (
        "python -m miaflow.runtime.quiet records/make-run.log -- snakemake --cores all && "
        "python -m miaflow.runtime.commit"
    ) in command
    created = commit.created_directories(repo / "dvc.yaml")
    assert {"results/llm", "records/llm", "results/audit", "records/audit"} <= set(created)
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  a:\n    cmd:\n      - snakemake a\n      - mkdir -p out/a 'out/b c'\n"
        "  b:\n    cmd: snakemake b\n"
    )
    assert commit.created_directories(tmp_path / "dvc.yaml") == ["out/a", "out/b c"]


@pytest.mark.e2e
def test_the_same_commands_repair_a_cut_lock_and_remove_what_a_removed_audit_left(
    copy_of_finished_run: Path,
):
    """`make run`'s commands after dvc.lock was emptied, then cut in half: exit 0, `dvc status`
    clean, the metrics unchanged. Then the audit is removed from params.yaml: the next run
    removes its files (the ROC figure in the report's folder too) from results/ and dvc.lock,
    and `make verify` finds nothing. Before that run, `make verify` calls them orphans."""
    from test_workflow_e2e import make_run

    root = copy_of_finished_run
    metrics = (root / "results/metrics.parquet").read_bytes()
    whole = (root / "dvc.lock").read_text()
    for cut in ("", whole[: len(whole) // 2]):
        (root / "dvc.lock").write_text(cut)
        assert verify.verify(root)[1]  # reported, not a crash
        make_run(root)
        assert "up to date" in run(["dvc", "status"], root).stdout
        assert (root / "results/metrics.parquet").read_bytes() == metrics
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["audits"] = []
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for path in (root / "audit").glob("*.parquet*"):  # the files and their DVC pointers
        path.unlink()
    figure = "results/figures/roc-sklearn_digits-forest.png"
    assert ("orphan", figure) in {(p.what, p.path) for p in verify.verify(root)[1]}
    said = run(["snakemake", "--cores", "2"], root).stderr
    assert f"removed {figure}: no rule writes it any more" in said
    run(["python", "-m", "miaflow.runtime.commit"], root)
    assert not (root / figure).exists() and "forest" not in (root / "dvc.lock").read_text()
    assert verify.verify(root)[1] == []
    assert "up to date" in run(["dvc", "status"], root).stdout
