"""Per-rule cluster resources (memory, wall time) from the benchmark files of a finished run.

A batch scheduler kills a job that outgrows the memory or time it asked for, and queues a job
that asks for much more than it needs behind others; guesses are wrong both ways. Every job of
the workflow writes a Snakemake benchmark file (`records/<stage>/benchmarks/<rule>/...tsv`: wall
seconds `s`, peak resident memory `max_rss` in MiB, `cpu_time`), so the requests are computed
from those: per rule, the peak over its jobs times a stated headroom, with floors. They go into
the `set-resources` block of a Snakemake profile (profiles/slurm, profiles/slurm-cpu), which
this rewrites below a marker line, keeping the rest of the file and any other per-rule keys:

    python -m miaflow.tools.cluster --records records --profile profiles/slurm-cpu \\
        --cpu-only --measured-on "the default config on a 2-core CPU machine"

Values hold for the config that was measured: a larger one (more data, models, epochs) needs
its own run's records (docs/cluster.md).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from miaflow.io import write_text
from miaflow.plan.code import ROOT
from miaflow.plan.stages import RULE_HEADER
from miaflow.runtime.joblog import benchmark_files, read_benchmarks

PROFILE_FILE = "config.yaml"
MARKER = (
    "# --- below: written by `python -m miaflow.tools.cluster` "
    "(mem_mb and runtime are rewritten, other keys kept) ---"
)
# A Snakemake benchmark file's header names these; other TSV files under benchmarks/ (such as
# score_attacks' per-attack timings, *.attacks.tsv) are job outputs, not benchmarks.
MEM_STEP_MB = 256  # requests are rounded up to this, so a similar run gives the same file
_GPU = re.compile(r"^\s+gpu\s*=", re.M)
_LOCAL = re.compile(r"^\s+localrule:\s*True", re.M)


@dataclass(frozen=True)
class Headroom:
    """How far above the measured peak a request goes, and the least one asks for."""

    mem_factor: float = 1.5  # peak RSS varies with the node, the data and library versions
    time_factor: float = 3.0  # cluster nodes may be slower, and share their disks and cores
    min_mem_mb: int = 512  # the measured peaks include Python's and the imports' own memory
    min_runtime: int = 5  # minutes; shorter requests gain little in scheduling
    # Added for rules that declare a GPU: CUDA's host-side memory (context, kernel libraries),
    # which a measurement on a CPU machine does not see.
    gpu_mem_mb: int = 0

    def describe(self) -> str:
        gpu = (
            (
                f" + {self.gpu_mem_mb} MB for rules that declare a GPU (CUDA's host memory, not "
                "in a CPU measurement)"
            )
            if self.gpu_mem_mb
            else ""
        )
        return (
            f"mem_mb = peak max_rss x{self.mem_factor:g}{gpu}, rounded up to {MEM_STEP_MB}, at "
            f"least {self.min_mem_mb}; runtime = peak wall time x{self.time_factor:g} in "
            f"minutes, at least {self.min_runtime}"
        )


def rule_bodies(root: Path = ROOT) -> dict[str, str]:
    """Each rule of the workflow at `root` (rules/*.smk) and the text of its definition (a
    derived rule's: its base's, then what it changes)."""
    bodies: dict[str, str] = {}
    for path in sorted((root / "rules").glob("*.smk")):
        parts = RULE_HEADER.split(path.read_text())
        for defined, base, derived, text in zip(*(parts[i + 1 :: 4] for i in range(4))):
            bodies[defined or derived] = bodies[base] + text if base else text
    return bodies


def gpu_rules(root: Path = ROOT) -> set[str]:
    """Rules whose resources declare `gpu` (those that run torch)."""
    return {name for name, body in rule_bodies(root).items() if _GPU.search(body)}


def job_rules(root: Path = ROOT) -> set[str]:
    """Rules whose jobs a cluster runs (all but the local target rules)."""
    return {name for name, body in rule_bodies(root).items() if not _LOCAL.search(body)}


def peaks(records: Sequence[Path]) -> pd.DataFrame:
    """Per rule (index, sorted): jobs, and the peak max_rss (MiB) and wall seconds over its
    jobs; NaN where no job could be measured (Snakemake leaves very short jobs' values out)."""
    files = [path for root in records for path in benchmark_files(root)]
    if not files:
        raise FileNotFoundError(
            f"no Snakemake benchmark files under {', '.join(map(str, records))} "
            "(expected <stage>/benchmarks/<rule>/...tsv)"
        )
    table = read_benchmarks(files)
    return table.groupby("rule", sort=True).agg(
        jobs=("rule", "size"), max_rss=("max_rss", "max"), s=("s", "max")
    )


def requests(
    measured: pd.DataFrame, headroom: Headroom, gpu: Collection[str] = ()
) -> dict[str, dict[str, int]]:
    """mem_mb and runtime (minutes) per rule from `peaks`; `gpu`: the rules that declare a GPU.
    An unmeasured value gets the floor."""
    out = {}
    for rule, row in measured.iterrows():
        mem = 0 if math.isnan(row["max_rss"]) else row["max_rss"] * headroom.mem_factor
        mem += headroom.gpu_mem_mb if rule in gpu else 0
        minutes = 0 if math.isnan(row["s"]) else row["s"] * headroom.time_factor / 60
        out[str(rule)] = {
            "mem_mb": max(headroom.min_mem_mb, math.ceil(mem / MEM_STEP_MB) * MEM_STEP_MB),
            "runtime": max(headroom.min_runtime, math.ceil(minutes)),
        }
    return out


def split_profile(text: str, path: Path) -> tuple[str, dict]:
    """The hand-written part of a profile (above MARKER) and the set-resources below it."""
    head, _, generated = text.partition(MARKER)
    settings = yaml.safe_load(head) or {}
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: not a YAML mapping")
    if "set-resources" in settings:
        raise ValueError(
            f"{path}: set-resources above the line {MARKER!r}; move it below that "
            "line (or remove it) so that it is updated, not duplicated"
        )
    # Below the marker: its comment lines and the set-resources mapping ("" without a marker).
    below = yaml.safe_load(generated) or {}
    return head.rstrip("\n") + "\n", below.get("set-resources") or {}


def render(
    head: str,
    existing: Mapping[str, Mapping],
    measured: pd.DataFrame,
    computed: Mapping[str, Mapping[str, int]],
    notes: Sequence[str],
    rules: Collection[str],
) -> str:
    """The profile's text: `head` unchanged, then the marker, `notes` as comment lines and
    set-resources, where measured rules get their `computed` mem_mb and runtime (other keys
    kept) and the others stay as they were; those of `rules` (the cluster's) left unmeasured
    are named."""
    merged = {rule: dict(values) for rule, values in existing.items()}
    for rule, values in computed.items():
        merged.setdefault(rule, {}).update(values)
    unmeasured = sorted((set(rules) | set(existing)) - set(computed))
    lines = [MARKER, *(f"# {note}" for note in notes)]
    if unmeasured:
        lines.append(
            "# Not in those records (the values below, if any, else the cluster's "
            f"defaults): {', '.join(unmeasured)}."
        )
    lines.append("set-resources:")
    for rule in sorted(merged):
        if rule in computed:
            row = measured.loc[rule]
            jobs = int(row["jobs"])
            lines.append(
                f"  {rule}:  # {jobs} job{'s' * (jobs != 1)}; peak "
                f"{_number(row['max_rss'], 'MiB')}, {_number(row['s'], 's')}"
            )
        else:
            lines.append(f"  {rule}:")
        lines += [f"    {key}: {_scalar(value)}" for key, value in merged[rule].items()]
    return head + "\n" + "\n".join(lines) + "\n"


def _number(value: float, unit: str) -> str:
    return f"? {unit}" if math.isnan(value) else f"{value:.1f} {unit}"


def _scalar(value: object) -> str:
    """A YAML scalar (JSON's are YAML's) for a resource value."""
    return json.dumps(value) if isinstance(value, str) else str(value)


def update_profile(
    profile: Path,
    records: Sequence[Path],
    headroom: Headroom,
    measured_on: str,
    command: str,
    *,
    cpu_only: bool = False,
    root: Path = ROOT,
) -> dict[str, dict[str, int]]:
    """Rewrite `profile`/config.yaml's set-resources from `records` (atomically); `cpu_only`
    gives every rule that declares a GPU gpu: 0. Returns the computed requests."""
    path = profile / PROFILE_FILE if profile.is_dir() else profile
    head, existing = split_profile(path.read_text(), path)
    measured = peaks(records)
    gpu = gpu_rules(root)
    computed = requests(measured, headroom, gpu)
    notes = [
        f"Measured on {measured_on}: {int(measured['jobs'].sum())} benchmark files of "
        f"{len(measured)} rules.",
        f"{headroom.describe()}.",
    ]
    if cpu_only:
        existing = {rule: dict(values) for rule, values in existing.items()}
        for rule in gpu:
            existing.setdefault(rule, {})["gpu"] = 0
        notes.append(
            "CPU-only: rules that declare a GPU get gpu: 0, for sbatch and for the srun "
            "inside the job."
        )
    notes.append(f"Regenerate: {command}")
    write_text(path, render(head, existing, measured, computed, notes, job_rules(root)))
    return computed


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m miaflow.tools.cluster",
        description="Write per-rule mem_mb and runtime into a Snakemake profile's set-resources, "
        "from the benchmark files of finished runs.",
    )
    parser.add_argument(
        "--records",
        type=Path,
        nargs="+",
        default=[Path("records")],
        help="run records folder(s) of finished runs (peaks are over all of them)",
    )
    parser.add_argument(
        "--profile", type=Path, required=True, help="profile folder (or its config.yaml) to update"
    )
    parser.add_argument(
        "--measured-on", default=None, help="what ran: config and machine, for the header comment"
    )
    parser.add_argument(
        "--cpu-only",
        action="store_true",
        help="a CPU-only cluster: rules that declare a GPU get gpu: 0",
    )
    defaults = Headroom()
    parser.add_argument("--mem-factor", type=float, default=defaults.mem_factor)
    parser.add_argument("--time-factor", type=float, default=defaults.time_factor)
    parser.add_argument("--min-mem-mb", type=int, default=defaults.min_mem_mb)
    parser.add_argument("--min-runtime", type=int, default=defaults.min_runtime, help="minutes")
    parser.add_argument(
        "--gpu-mem-mb",
        type=int,
        default=defaults.gpu_mem_mb,
        help="added to the memory of rules that declare a GPU",
    )
    args = parser.parse_args(argv)
    headroom = Headroom(
        args.mem_factor, args.time_factor, args.min_mem_mb, args.min_runtime, args.gpu_mem_mb
    )
    command = shlex.join(
        ["python", "-m", "miaflow.tools.cluster", *(sys.argv[1:] if argv is None else argv)]
    )
    measured_on = args.measured_on or "the runs recorded in " + ", ".join(map(str, args.records))
    written = update_profile(
        args.profile, args.records, headroom, measured_on, command, cpu_only=args.cpu_only
    )
    print(f"{args.profile}: mem_mb and runtime of {len(written)} rules")


if __name__ == "__main__":
    main()
