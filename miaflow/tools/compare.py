"""Two runs' headlines side by side, e.g. the selected profile's and another's (runs/NAME/).

    python -m miaflow.tools.compare . runs/real-cpu

Per experiment (dataset/target model), in each run: the attack with the highest mean AUROC over
its target models, that AUROC ± std and the TPR at 1% FPR (as `make run`'s summary ranks them,
miaflow.evaluation.best.best_attacks). Experiments that only one run has are listed too, with
a dash for the other.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from miaflow import io
from miaflow.evaluation.best import best_attacks, tpr_label
from miaflow.tools.summary import METRICS

COLUMNS = ["dataset", "target_model", "attack", "repeat", "metric", "value"]
MISSING = "-"


def headline(root: Path) -> pd.DataFrame:
    """best_attacks of the run at `root`, indexed by experiment name (dataset/target_model);
    FileNotFoundError if it has no results/metrics.parquet yet."""
    path = root / METRICS
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (the run at {root} has no report stage yet)")
    best = best_attacks(io.read_parquet(path, columns=COLUMNS))
    return best.set_index(best["dataset"] + "/" + best["target_model"])


def cell(row: pd.Series | None) -> str:
    """'attack AUROC 0.700 ± 0.020, TPR@1%FPR 0.100 (3)': the last number is the number of
    target models; a dash when the run lacks the experiment."""
    if row is None:
        return MISSING
    spread = "" if pd.isna(row["auroc_std"]) else f" ± {row['auroc_std']:.3f}"
    tpr = "" if pd.isna(row["tpr"]) else f", {tpr_label(row['tpr_metric'])} {row['tpr']:.3f}"
    return f"{row['attack']} AUROC {row['auroc']:.3f}{spread}{tpr} ({row['target_models']})"


def comparison(first: Path, second: Path) -> list[str]:
    """The lines of the side-by-side table: a header naming the runs, then one line per
    experiment of either run, experiments of both first (sorted), then those of one run."""
    runs = [headline(first), headline(second)]
    both = sorted(set(runs[0].index) & set(runs[1].index))
    either = sorted(set(runs[0].index) ^ set(runs[1].index))
    rows = [
        [name, *(cell(run.loc[name] if name in run.index else None) for run in runs)]
        for name in both + either
    ]
    header = ["experiment", str(first), str(second)]
    widths = [max(len(line[column]) for line in [header, *rows]) for column in range(2)]
    lines = [
        "Best attack per experiment: mean AUROC ± std over its target models, TPR at low "
        "FPR, (number of target models)"
    ]
    for line in [header, *rows]:
        lines.append(f"  {line[0]:<{widths[0]}}  {line[1]:<{widths[1]}}  {line[2]}".rstrip())
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m miaflow.tools.compare",
        description="Two runs' best attacks side by side.",
    )
    parser.add_argument("first", type=Path, help="a run's directory (e.g. .)")
    parser.add_argument("second", type=Path, help="another run's directory (e.g. runs/real-cpu)")
    options = parser.parse_args(argv)
    try:
        print("\n".join(comparison(options.first, options.second)))
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
