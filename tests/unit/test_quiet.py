"""`make run`'s quiet terminal (miaflow.runtime.quiet): everything in the log, progress on
screen."""

from __future__ import annotations

import sys
from pathlib import Path

from miaflow.runtime.quiet import TAIL_LINES, Progress, main, run_quietly

DVC_LIKE_OUTPUT = [
    "WARNING: 'miaflow/__init__.py' is empty.",
    "Stage 'prepare' didn't change, skipping",
    "Running stage 'train':",
    "> snakemake train --cores all",
    *[
        line
        for done in range(1, 21)
        for line in (
            "rule train_shard:",
            "    input: " + ", ".join(f"miaflow/m{k}.py" for k in range(50)),
            f"{done} of 20 steps ({100 * done // 20}%) done",
        )
    ],
    "Running stage 'evaluate':",
    "1 of 3 steps (33%) done",
    "WorkflowError: something broke",
]


def python_printing(lines: list[str], status: int = 0) -> list[str]:
    """A command that prints `lines` and exits with `status`."""
    program = f"import sys; print({chr(10)!r}.join({lines!r})); sys.exit({status})"
    return [sys.executable, "-c", program]


def test_the_terminal_shows_stages_tenths_of_their_jobs_and_trouble():
    progress = Progress()
    shown = [text for line in DVC_LIKE_OUTPUT if (text := progress.shown(line)) is not None]
    assert shown == [
        "prepare: unchanged, skipped",
        "train: running",
        *[f"train: {done} of 20 jobs done" for done in (1, *range(2, 21, 2))],
        "evaluate: running",
        "evaluate: 1 of 3 jobs done",
        "WorkflowError: something broke",
    ]


def test_the_log_keeps_every_line_and_the_status_is_the_commands(tmp_path: Path):
    log, echoed = tmp_path / "logs/run.log", []
    assert run_quietly(python_printing(DVC_LIKE_OUTPUT), log, echoed.append) == 0
    assert log.read_text().splitlines() == DVC_LIKE_OUTPUT
    assert len(echoed) == 17 and echoed[-1] == f"Full log: {log}"


def test_a_failure_shows_the_end_of_the_log(tmp_path: Path):
    lines = [f"line {k}" for k in range(100)]
    echoed = []
    assert run_quietly(python_printing(lines, status=3), tmp_path / "run.log", echoed.append) == 3
    assert echoed[1] == "Failed (exit status 3); the end of the log:"
    assert echoed[2:] == [f"  {line}" for line in lines[-TAIL_LINES:]]


def test_the_command_line_needs_a_log_and_a_command(tmp_path: Path, capsys):
    assert main([str(tmp_path / "run.log")]) == 2
    assert "python -m miaflow.runtime.quiet LOG -- COMMAND" in capsys.readouterr().err
    assert main([str(tmp_path / "run.log"), "--", *python_printing(["ok"])]) == 0


def test_a_job_that_says_why_it_stopped_is_the_whole_error_on_screen(tmp_path: Path):
    """An explained job failure (the adapter's line) is shown alone: Snakemake's error block and
    the log's end stay in the log."""
    lines = [
        "1 of 3 steps (33%) done",
        "miaflow: rule audit_outputs: audit/outputs.parquet: prob_3 holds text, not numbers",
        "RuleException:",
        'CalledProcessError in file "/p/rules/audit.smk", line 45:',
        "Command 'set -euo pipefail;  python x.py' returned non-zero exit status 1.",
        "Error in rule audit_outputs:",
        "    jobid: 7",
        "    log: records/audit/logs/x.log (check log file(s) for error details)",
        "Shutting down, this might take some time.",
        "Exiting because a job execution failed. Look below for error messages",
        "Complete log(s): .snakemake/log/x.log",
    ]
    echoed: list[str] = []
    assert run_quietly(python_printing(lines, status=1), tmp_path / "run.log", echoed.append) == 1
    assert echoed == [
        "snakemake: 1 of 3 jobs done",
        lines[1],
        f"Full log: {tmp_path / 'run.log'}",
        "Failed (exit status 1): the reason is above.",
    ]
