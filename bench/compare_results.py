"""Compare the artifacts of two finished runs byte for byte (run records and timing tables aside).

    python bench/compare_results.py OLD_ROOT NEW_ROOT [--layout v1|v2]

Prints how many artifacts match, and every one that differs or exists on one side only; exits
non-zero unless all match. Run records (records/, and in runs older than that folder the logs,
benchmark files and the tables built from measured times, `cost` and `families`) are left out:
they differ between any two runs. `--layout` maps the paths of an older run onto today's:
`v2`, a run made before each artifact had one name (query artifacts under results/queries/hsj,
transfer, qrm and ref; the study's trials under results/hparams/hpo and its per-run metrics under
results/hparams/attacks; EM-MIA's iterates under results/llm/em; audited models' records under
results/audit/models); `v1`, a run made before the stage-per-folder layout (three DVC stages:
query artifacts under results/train/queries/, the model and test tables under results/evaluate/).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

RUN_RECORDS = ("/logs/", "/benchmarks/", "/tables/cost.", "/tables/families.")
V1_LAYOUT = [
    (r"^results/train/queries/(transfer|qrm|ref)/", r"results/queries/\1/"),
    (r"^results/train/queries/(\w+)/queries\.parquet$", r"results/queries/sets/\1.parquet"),
    (
        r"^results/train/queries/(\w+)/(\w+)/outputs\.parquet$",
        r"results/queries/outputs/\1/\2.parquet",
    ),
    (r"^results/train/queries/(\w+)/(\w+)/hsj\.parquet$", r"results/queries/hsj/\1/\2.parquet"),
    (r"^results/evaluate/(models|tests)\.parquet$", r"results/report/\1.parquet"),
]
# Folders renamed so that folder, rule and code name one artifact by one word (applied after v1's).
V2_LAYOUT = [
    (r"^results/queries/hsj/", "results/queries/distances/"),
    (r"^results/queries/transfer/", "results/queries/surrogates/"),
    (r"^results/queries/qrm/", "results/queries/regressors/"),
    (r"^results/queries/ref/", "results/queries/canaries/"),
    (r"^results/hparams/hpo/", "results/hparams/trials/"),
    (r"^results/hparams/attacks/", "results/hparams/metrics/"),
    (r"^results/llm/em/", "results/llm/iterates/"),
    (r"^results/audit/models/", "results/audit/records/"),
]
LAYOUTS = {"current": [], "v2": V2_LAYOUT, "v1": V1_LAYOUT + V2_LAYOUT}


def digests(root: Path, renames: list[tuple[str, str]] = ()) -> dict[str, str]:
    """sha256 of every artifact below root/results, keyed by its (renamed) relative path."""
    found = {}
    for path in sorted((root / "results").rglob("*")):
        relative = path.relative_to(root).as_posix()
        if not path.is_file() or any(part in relative for part in RUN_RECORDS):
            continue
        for pattern, replacement in renames:
            relative = re.sub(pattern, replacement, relative)
        found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument(
        "--layout",
        choices=sorted(LAYOUTS),
        default="current",
        help="layout of the old run's results",
    )
    args = parser.parse_args()
    old = digests(args.old, LAYOUTS[args.layout])
    new = digests(args.new)
    differ = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    only_old, only_new = sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())
    same = len(old.keys() & new.keys()) - len(differ)
    print(
        f"{same} of {len(old.keys() | new.keys())} artifacts byte-identical "
        f"({len(old)} old, {len(new)} new; "
        "logs, benchmark files, cost and families tables left out)"
    )
    for label, paths in [("differ", differ), ("only in old", only_old), ("only in new", only_new)]:
        for path in paths:
            print(f"{label}: {path}")
    return 0 if not (differ or only_old or only_new) else 1


if __name__ == "__main__":
    sys.exit(main())
