"""The short summary `make run` prints at the end: where the results are, the best attack per
experiment and how long the run took.

    python -m miaflow.tools.summary [--root .] [--started <epoch seconds>]

A finished run leaves dozens of tables and figures; a person first wants to know where to look
and the headline: for each experiment (dataset/target model, as the tables name it), the verdict
of the report stage (results/report/verdicts.parquet): the best attack by mean AUROC and the
best by TPR at a low FPR, each with the attacks not separated from it, the flags that say when
a "best" is hollow, and for a language-model selection what a model-free classifier alone gets,
each line under the table that holds its AUROC. With `--started` (the run's start, `date
+%s`) the time is the wall time since then; without it, the sum of the jobs' times in the run
records (Snakemake benchmark files), which is not wall time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from miaflow import io
from miaflow.attacks.registry import ATTACKS, LLM
from miaflow.evaluation.llm_report import is_sweep
from miaflow.evaluation.verdicts import verdict_lines
from miaflow.llm.settings import parse_label
from miaflow.progress import duration

METRICS = Path("results/metrics.parquet")
TABLES = Path("results/tables")
FIGURES = Path("results/figures")
REPORT = Path("report.html")
RECORDS = Path("records")
COST_TABLE = RECORDS / "report/cost.md"
HEADLINE_TABLE = TABLES / "auroc.md"
LLM_TABLE = TABLES / "llm.md"  # the language-model attacks, which auroc.md leaves out
LLM_SWEEP_TABLE = TABLES / "llm_mink_sweep.md"  # the Min-K% k points, which llm.md leaves out
LLM_SETTINGS_TABLE = TABLES / "llm_settings.md"
VERDICTS = Path("results/report/verdicts.parquet")  # one row per experiment: the summary lines
RANKINGS = Path("results/report/rankings.parquet")
OPERATING_POINTS = Path("results/evaluate/operating_points.parquet")


def job_seconds(root: Path) -> tuple[float, int]:
    """(sum of column `s`, number of jobs) over the Snakemake benchmark files in the run records
    (records/<stage>/benchmarks/**.tsv): every job's own wall time, which adds up parallel jobs."""
    from miaflow.runtime.joblog import benchmark_files, read_benchmarks

    files = benchmark_files(root / "records")
    return float(read_benchmarks(files)["s"].sum()), len(files)


def _count_stems(folder: Path) -> int:
    """Tables or figures in a folder, each counted once over its formats (csv, md, tex; png,
    ...)."""
    return (
        len({p.name.split(".")[0] for p in folder.iterdir() if p.is_file()})
        if folder.is_dir()
        else 0
    )


def _where(root: Path) -> list[str]:
    """Where the report, tables, figures and metrics are (paths under `root`, as given)."""
    report = _report_state(root)
    return [
        f"  report:   {report}",
        f"  tables:   {root / TABLES}/ ({_count_stems(root / TABLES)}, as csv, md and tex; "
        f"AUROC of every attack: {root / HEADLINE_TABLE})",
        f"  figures:  {root / FIGURES}/ ({_count_stems(root / FIGURES)})",
        f"  metrics:  {root / METRICS} (every metric per dataset, target model, attack, repeat)",
        f"  logs:     {root / RECORDS}/<stage>/logs/ (progress: grep -r miaflow.progress); "
        f"cost per stage: {root / COST_TABLE}",
    ]


def _report_state(root: Path) -> str:
    """The report's path, and whether it shows these results: it is current when it is newer
    than the metrics it summarises."""
    report, metrics = root / REPORT, root / METRICS
    if not report.is_file():
        return f"not built yet: `make report` writes {report}"
    if metrics.is_file() and report.stat().st_mtime < metrics.stat().st_mtime:
        return f"{report} (older than {metrics}: `make report` rebuilds it)"
    return f"{report} (current)"


def source_table(target_model: str, attack: str) -> Path:
    """The table that holds the AUROC a verdict line quotes: the benchmark settings' for a
    language-model setting, the Min-K% sweep's for one of its k points, the language models'
    for their other attacks, else the headline AUROC table."""
    if parse_label(target_model) is not None:
        return LLM_SETTINGS_TABLE
    if attack in ATTACKS and ATTACKS[attack].family == LLM:
        return LLM_SWEEP_TABLE if is_sweep(attack) else LLM_TABLE
    return HEADLINE_TABLE


def _best_lines(root: Path) -> list[str]:
    """The verdict line of every experiment (`miaflow.evaluation.verdicts.verdict_lines`),
    under the table that holds each line's AUROC."""
    if not (root / VERDICTS).is_file():
        return [f"Best attacks: {root / VERDICTS} not found (the report stage has not run)."]
    table = io.read_parquet(root / VERDICTS)
    lines = verdict_lines(table)
    sources = [source_table(t, a) for t, a in zip(table["target_model"], table["best_attack"])]
    said = [
        "Best attack per experiment, by mean AUROC ± std over its target models and by TPR at "
        "a low FPR, each with the attacks its tests do not separate from it "
        f"({root / RANKINGS}; every TPR's threshold and realized FPR: {root / OPERATING_POINTS}):"
    ]
    for source in dict.fromkeys(sources):
        said.append(f" AUROC as in {root / source}:")
        said += [line for line, s in zip(lines, sources) if s == source]
    return said


def _time_line(root: Path, started: float | None, now: float) -> str:
    if started is not None:
        return f"Wall time: {duration(now - started)}."
    seconds, jobs = job_seconds(root)
    if not jobs:
        return "Time: no run records (records/*/benchmarks/) yet."
    return (
        f"Job time: {duration(seconds)} over {jobs} jobs (run records; jobs in parallel add "
        "up, so not wall time)."
    )


def summary(
    root: str | Path = ".", started: float | None = None, now: float | None = None
) -> list[str]:
    """The summary's lines for the project at `root`; `started` and `now` in epoch seconds."""
    root = Path(root)
    return [
        "Results:",
        *_where(root),
        *_best_lines(root),
        _time_line(root, started, time.time() if now is None else now),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m miaflow.tools.summary",
        description="Where a run's results are, and its headline.",
    )
    parser.add_argument("--root", default=".", help="the project directory (default: .)")
    parser.add_argument(
        "--started", type=float, help="the run's start in epoch seconds (date +%%s)"
    )
    options = parser.parse_args(argv)
    print("\n".join(summary(options.root, options.started)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
