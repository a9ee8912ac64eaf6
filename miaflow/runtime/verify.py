"""Re-hash every artifact of a finished run against what `dvc.lock` recorded (`make verify`).

DVC and Snakemake both decide from sizes and modification times whether a file changed, so a
flipped bit that keeps both (bit rot, a bad copy) goes unseen. This reads every file again: each
output's md5 in dvc.lock, and for a directory output the per-file md5s of its manifest in the DVC
cache (`.dvc/cache/files/md5/<xx>/<rest>.dir`), and names each file that is corrupt or missing.
It then checks every provenance record under records/ (`miaflow.runtime.provenance`): each artifact
against the sha256 its job recorded, and each recorded input (the code that ran included)
against the digest it had when the artifact was computed (a mismatch there means the artifact is
stale); and names the files under results/ that no rule writes any more (orphans: a removed
audit or experiment, `miaflow.runtime.orphans`) apart from stale ones. A run made with plain
`snakemake` (no dvc.lock) is checked against its provenance records alone.

    python -m miaflow.runtime.verify [ROOT]    # exit status 1 if anything is wrong
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from miaflow.io import file_hash
from miaflow.runtime import provenance
from miaflow.runtime.commit import lock_gaps, lock_problem
from miaflow.runtime.orphans import orphans, produced_by_workflow

CACHE = Path(".dvc/cache/files/md5")


@dataclass(frozen=True)
class Problem:
    path: str
    what: str  # corrupt, missing, stale, orphan, unverifiable, unreadable
    detail: str


def _manifest(root: Path, dir_hash: str) -> list[dict] | None:
    """The files of a directory output as DVC recorded them, None if the cache lacks it."""
    path = root / CACHE / dir_hash[:2] / f"{dir_hash[2:]}.dir"
    return json.loads(path.read_text()) if path.is_file() else None


def recorded_files(root: Path) -> tuple[dict[str, str], list[Problem]]:
    """Every file dvc.lock records (relative path -> md5), and the outputs whose directory
    manifest is not in the local cache (they cannot be checked file by file)."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    files, problems = {}, []
    for stage in lock["stages"].values():
        for out in stage.get("outs", []):
            if not out.get("md5", "").endswith(".dir"):
                files[out["path"]] = out["md5"]
                continue
            manifest = _manifest(root, out["md5"].removesuffix(".dir"))
            if manifest is None:
                problems.append(
                    Problem(
                        out["path"],
                        "unverifiable",
                        "its manifest is not in the "
                        "DVC cache; run `dvc pull` (or `dvc fetch`) first",
                    )
                )
                continue
            files.update({f"{out['path']}/{entry['relpath']}": entry["md5"] for entry in manifest})
    return files, problems


def check_lock(root: Path) -> tuple[int, list[Problem]]:
    """(files checked, problems) against the md5s of dvc.lock, reading every file in full."""
    files, problems = recorded_files(root)
    for relative, expected in sorted(files.items()):
        path = root / relative
        if not path.is_file():
            problems.append(Problem(relative, "missing", f"dvc.lock records md5 {expected}"))
        elif (actual := file_hash(path, "md5")) != expected:
            problems.append(
                Problem(relative, "corrupt", f"md5 {actual}, dvc.lock records {expected}")
            )
    return len(files), problems


def check_provenance(root: Path, known_bad: set[str]) -> tuple[int, list[Problem]]:
    """(artifacts checked, problems) against their provenance records: each artifact's content,
    then (for artifacts that are intact) whether each input still has the digest it was computed
    from. A corrupt input (here or in `known_bad`) is reported once, as corrupt, not again as the
    cause of stale consumers. Records of artifacts no longer on disk are left to the dvc.lock
    check (an earlier configuration may have made them)."""
    records, damage = provenance.scan(root)
    problems = [
        Problem(str(found.path.relative_to(root)), "corrupt", found.reason) for found in damage
    ]
    bad = known_bad | {found.artifact for found in damage}

    def is_bad(name: str) -> bool:
        return any(path == name or path.startswith(f"{name}/") for path in bad)

    digest = cache(lambda path: provenance.digest(root / path))
    for artifact, record in records.items():
        for name, expected in record["inputs"].items():
            if (
                not is_bad(artifact)
                and not is_bad(name)
                and (root / name).exists()
                and (actual := digest(name)) != expected
            ):
                problems.append(
                    Problem(
                        artifact,
                        "stale",
                        f"computed from {name} with digest {expected}, which now has {actual}",
                    )
                )
    return len(records), problems


def orphan_problems(root: Path) -> list[Problem]:
    """The files under results/ that no rule of the workflow writes any more (a removed audit or
    experiment), as Snakemake's summary of the workflow lists its files; none if it cannot."""
    produced = produced_by_workflow(root)
    if produced is None:
        return []
    found = [
        path
        for path in orphans(root, produced)
        if path.parts[:1] == ("results",)  # the summary lists outputs, not logs
    ]
    detail = "no rule writes it any more (a removed audit or experiment); the next run removes it"
    return [Problem(str(path), "orphan", detail) for path in found]


def verify(root: str | Path = ".") -> tuple[int, list[Problem]]:
    """(number of files checked, problems): dvc.lock's files when there is one (an unreadable
    lock is one problem, and its files go unchecked), then every artifact with a provenance
    record."""
    root = Path(root)
    checked, problems = 0, []
    if (why := lock_problem(root)) is not None:
        fix = "`make run` (or `python -m miaflow.runtime.commit`) records it again"
        problems.append(Problem("dvc.lock", "unreadable", f"{why}; {fix}"))
    elif (root / "dvc.lock").is_file():
        checked, problems = check_lock(root)
        if gaps := lock_gaps(root):
            shown = ", ".join(gaps[:3]) + (f" (+{len(gaps) - 3})" if len(gaps) > 3 else "")
            detail = f"records no {shown}; `make run` records them again"
            problems.insert(0, Problem("dvc.lock", "incomplete", detail))
    recorded, provenance_problems = check_provenance(root, {p.path for p in problems})
    problems += [p for p in provenance_problems if p not in problems]
    orphaned = orphan_problems(root)
    named = {p.path for p in orphaned}
    return checked + recorded, orphaned + [p for p in problems if p.path not in named]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(".")
    if not (root / "dvc.lock").is_file() and not (root / provenance.RECORDS).is_dir():
        print(
            f"neither {root / 'dvc.lock'} nor {root / provenance.RECORDS} found: verify checks "
            "a finished run"
        )
        return 1
    checked, problems = verify(root)
    for problem in problems:
        print(f"{problem.what}: {problem.path} ({problem.detail})")
    if problems:
        print(
            f"{len(problems)} problems in {checked} checked files. Restore corrupt or missing "
            "files from the DVC cache with `dvc checkout --relink <path>` (it rewrites them "
            "from the cache even where size and time look unchanged), or delete them and run "
            "the same command again (`make run`, `dvc repro` or `snakemake`) to rebuild them; "
            "rebuild a stale artifact by deleting it."
        )
        return 1
    print(f"all {checked} checked files match dvc.lock and their provenance records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
