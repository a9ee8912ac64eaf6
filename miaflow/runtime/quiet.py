"""Run a command with its full output in a log file and only its progress on the terminal.

    python -m miaflow.runtime.quiet LOG -- COMMAND [ARG ...]

`make run` runs its Snakemake command through it (it works for `dvc repro` too). Snakemake prints
every job with its whole input list (the code closure alone is some fifty files), so the default
run printed about 1,900 lines before its summary. Here each line goes to LOG as it comes; the
terminal gets the lines that say where the run is (its jobs done at every tenth of them, and
under `dvc repro` each stage as it starts or is skipped) and anything that looks like a failure.
When the command fails, the end of the log follows, so the error is on screen without opening
the file; a job that stopped for a reason a user can fix (a bad input file, a full disk) says it
in one line (`miaflow: rule <rule>: ...`, miaflow.runtime.adapter), and then that line alone is
the error on screen: Snakemake's error block and the log's end are left to the log. Snakemake's
own log (`.snakemake/log/`) is filtered like its terminal output, so LOG is the only complete
record of a run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

STAGE = re.compile(r"^Running stage '(?P<stage>[\w-]+)'")
SKIPPED = re.compile(r"^Stage '(?P<stage>[\w-]+)' didn't change, skipping")
STEPS = re.compile(r"^(?P<done>\d+) of (?P<total>\d+) steps \(\d+%\) done")
TROUBLE = re.compile(r"error|exception|traceback|failed|removed|warning", re.IGNORECASE)
# DVC's note on every empty file among a stage's deps (the package's empty __init__.py).
EMPTY_DEP = re.compile(r"^WARNING: '.*' is empty\.$")
TAIL_LINES = 40  # shown from the log when the command fails
EXPLAINED = re.compile(r"^miaflow: rule \w+: ")  # a job's one-line reason (the adapter's)
# Snakemake's report of a failed job and run, which an explained reason makes redundant.
FAILURE_BLOCK = re.compile(
    r"^(Error in rule|\s+log: .*error details|Exiting because|Shutting down|Complete log|"
    r"RuleException:|CalledProcessError in file|Command '.*' returned non-zero|"
    r"Removing output files of failed job|WorkflowError|Job failed|\s+(message|jobid|input|"
    r"output|conda-env|shell|reason|wildcards|resources|threads):)"
)


class Progress:
    """Reads the command's lines one by one and says which the terminal shows."""

    def __init__(self) -> None:
        self.stage = "snakemake"  # the DVC stage running, once one has started
        self.tenths_shown = -1
        self.explained = 0  # jobs that stopped with a one-line reason

    def shown(self, line: str) -> str | None:
        """The line's text for the terminal, or None."""
        if EXPLAINED.match(line):
            self.explained += 1
            return line
        if self.explained and FAILURE_BLOCK.match(line):
            return None
        if match := STAGE.match(line):
            self.stage, self.tenths_shown = match["stage"], -1
            return f"{self.stage}: running"
        if match := SKIPPED.match(line):
            return f"{match['stage']}: unchanged, skipped"
        if match := STEPS.match(line):
            done, total = int(match["done"]), int(match["total"])
            tenths = 10 * done // total
            if tenths == self.tenths_shown:
                return None
            self.tenths_shown = tenths
            return f"{self.stage}: {done} of {total} jobs done"
        return line if TROUBLE.search(line) and not EMPTY_DEP.match(line) else None


def run_quietly(command: Sequence[str], log: Path, echo: Callable[[str], None] = print) -> int:
    """Run `command`, writing its output (stdout and stderr, merged) to `log` and `echo`-ing
    its progress; returns the command's exit status."""
    log.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    progress = Progress()
    with log.open("w") as record:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
        assert process.stdout is not None
        for line in process.stdout:
            record.write(line)
            record.flush()
            tail.append(line.rstrip("\n"))
            if (shown := progress.shown(line.rstrip("\n"))) is not None:
                echo(shown)
        status = process.wait()
    echo(f"Full log: {log}")
    if status != 0 and progress.explained:
        echo(f"Failed (exit status {status}): the reason is above.")
    elif status != 0:
        echo(f"Failed (exit status {status}); the end of the log:")
        for line in tail:
            echo(f"  {line}")
    return status


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    return run_quietly(argv[2:], Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
