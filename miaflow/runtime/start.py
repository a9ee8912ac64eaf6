"""What a Snakemake command of this workflow does before it builds its DAG: only a command that
runs jobs changes the working directory.

Every Snakemake command parses the Snakefile: a run, but also `-n`, `--summary`,
`--detailed-summary`, `--report`, `--lint`, `--list-*`, `--dag`, `--rulegraph`, ... A command that
runs jobs first resumes after a crash (miaflow.runtime.resume) and removes every artifact that
differs from its provenance record, with what was computed from it
(miaflow.runtime.provenance.remove_damaged), so that it rebuilds them. A command that runs none
changes nothing under results/ or records/: it names the damage it finds, which the next run
rebuilds. It reads again only the artifacts written since the last such command (their hashes
are kept in .snakemake/, by file status: miaflow.runtime.provenance.RememberedHashes), so that
`snakemake -n` on a finished run stays fast; damage that no write made (bit rot) is left to the
next run's sweep, `make verify` and the job that reads the artifact.

Snakemake 9 parses the Snakefile before it picks the executor, so at parse time the `workflow`
object cannot tell: `workflow.dryrun` (a property of the executor) is always False then, and only
`-n` shows, in `workflow.output_settings.dryrun`; `--summary`, `--dag` and the like are branches
of the command line's dispatch (`snakemake.cli.args_to_api`), taken after the parse. So
`runs_jobs` reads the parsed command line from that function's frame and follows its branches
(NON_EXECUTING; tests/workflow/test_start.py checks it against the installed Snakemake). A
workflow parsed through Snakemake's Python API, not its command line, counts as running no jobs:
it changes nothing here, and each job still checks what it reads
(miaflow.runtime.provenance.check_inputs).

`make run` runs one Snakemake command for the whole workflow, so the artifacts are hashed once
per run; `dvc repro` runs one per stage that changed, each sweeping. The sweep is also what makes
a run see damage that keeps a file's size and modification time, which DVC, keying its hashes by
them, would not see.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from miaflow.runtime.provenance import Damage, RememberedHashes, damaged, remove_damaged
from miaflow.runtime.resume import claim_working_directory, live_run, no_run_alive

# The artifacts' hashes as the last command that runs no jobs found them.
HASHES = Path(".snakemake/miaflow-hashes.json")
# The options of `snakemake` that make it do something other than run jobs, as attributes of
# its parsed command line: the branches of snakemake.cli.args_to_api, -n and --touch.
NON_EXECUTING = (
    "dryrun",
    "touch",
    "lint",
    "list_target_rules",
    "list_rules",
    "print_compilation",
    "containerize",
    "reporter",
    "generate_unit_tests",
    "dag",
    "rulegraph",
    "filegraph",
    "d3dag",
    "unlock",
    "cleanup_metadata",
    "conda_cleanup_envs",
    "conda_create_envs_only",
    "list_conda_envs",
    "cleanup_shadow",
    "container_cleanup_images",
    "list_changes",
    "list_input_changes",
    "list_params_changes",
    "list_untracked",
    "summary",
    "detailed_summary",
    "archive",
    "delete_all_output",
    "delete_temp_output",
)


def command_line() -> argparse.Namespace | None:
    """The parsed command line of the `snakemake` command parsing the workflow (its profile
    applied); None for a workflow parsed through the Python API."""
    from snakemake import cli

    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is cli.args_to_api.__code__:
            return frame.f_locals["args"]
        frame = frame.f_back
    return None


def executes(args: argparse.Namespace) -> bool:
    """Whether a `snakemake` command line runs jobs (`--report` after a run does)."""
    chosen = {name for name in NON_EXECUTING if getattr(args, name, None) not in (None, False)}
    if args.report_after_run:
        chosen.discard("reporter")
    return not chosen


def runs_jobs(workflow: Any) -> bool:
    """Whether the Snakemake command parsing the workflow is a run's main process that runs jobs
    (`workflow`: the Snakefile's)."""
    if not workflow.is_main_process or workflow.output_settings.dryrun:
        return False
    args = command_line()
    return args is not None and executes(args)


def start(runs: bool, root: Path = Path(".")) -> list[str]:
    """Prepare the working directory for a command, and say what was done or found.

    A command that runs jobs claims the working directory and removes what dead runs left and
    the damaged artifacts; RunAlive if another run is alive there (nothing is touched). Any
    other command, if no run is alive, only names the damage (reading again only the artifacts
    written since the last such command)."""
    if not runs:
        if not no_run_alive(root):
            return []  # a live run's records and artifacts are changing under us
        hashes = RememberedHashes(root / HASHES)
        found = damaged(root, hashes)
        hashes.save()
        return [
            f"warning: {bad.artifact} is to be rebuilt (a run removes it; this command "
            f"changes nothing): {_why(bad)}"
            for bad in found
        ]
    leftovers = claim_working_directory(root)
    if leftovers is None:
        raise RunAlive(
            f"another run is alive in this directory ({live_run(root)}): wait for it or stop "
            "it; `snakemake --unlock` does not end it, and two runs would write the same files"
        )
    return [f"removed what a dead run left: {leftover}" for leftover in leftovers] + [
        f"removed {found.artifact}, to be rebuilt: {_why(found)}" for found in remove_damaged(root)
    ]


class RunAlive(RuntimeError):
    """A command that runs jobs found another live run in its working directory."""


def _why(found: Damage) -> str:
    return f"{found.path} {found.reason}"
