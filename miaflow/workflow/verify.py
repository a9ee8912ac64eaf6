"""Re-hash every artifact of a finished run against what `dvc.lock` recorded (`make verify`).

DVC and Snakemake both decide from sizes and modification times whether a file changed, so a
flipped bit that keeps both (bit rot, a bad copy) goes unseen. This reads every file again: each
output's md5 in dvc.lock, and for a directory output the per-file md5s of its manifest in the DVC
cache (`.dvc/cache/files/md5/<xx>/<rest>.dir`), and names each file that is corrupt or missing.

    python -m miaflow.workflow.verify [ROOT]    # exit status 1 if anything is wrong
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from miaflow.io import file_hash

CACHE = Path(".dvc/cache/files/md5")


@dataclass(frozen=True)
class Problem:
    path: str
    what: str  # corrupt, missing, unverifiable
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
                problems.append(Problem(out["path"], "unverifiable", "its manifest is not in the "
                                        "DVC cache; run `dvc pull` (or `dvc fetch`) first"))
                continue
            files.update({f"{out['path']}/{entry['relpath']}": entry["md5"] for entry in manifest})
    return files, problems


def verify(root: str | Path = ".") -> tuple[int, list[Problem]]:
    """(number of files checked, problems), reading every recorded file in full."""
    root = Path(root)
    files, problems = recorded_files(root)
    for relative, expected in sorted(files.items()):
        path = root / relative
        if not path.is_file():
            problems.append(Problem(relative, "missing", f"dvc.lock records md5 {expected}"))
        elif (actual := file_hash(path, "md5")) != expected:
            problems.append(Problem(relative, "corrupt", f"md5 {actual}, dvc.lock records "
                                    f"{expected}"))
    return len(files), problems


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(".")
    if not (root / "dvc.lock").is_file():
        print(f"{root / 'dvc.lock'} not found: verify checks a run recorded by `dvc repro`")
        return 1
    checked, problems = verify(root)
    for problem in problems:
        print(f"{problem.what}: {problem.path} ({problem.detail})")
    if problems:
        print(f"{len(problems)} of {checked} recorded files are wrong. Restore them from the DVC "
              "cache with `dvc checkout --relink <path>` (it rewrites them from the cache even "
              "where size and time look unchanged), or rebuild with `dvc repro --force <stage>`.")
        return 1
    print(f"all {checked} recorded files match dvc.lock")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
