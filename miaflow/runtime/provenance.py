"""Provenance records: what each artifact was computed from, checked whenever it is read.

Snakemake and DVC decide from modification times and sizes whether a file changed, and most
formats carry no checksum of their own (safetensors, CatBoost, JSON, CSV, PNG; Parquet only per
page). So every job (through `miaflow.runtime.adapter`) records, for each output under `results/`,
the sha256 of its content and of every input it was computed from, in
`records/<stage>/provenance/<output path>.json`; a directory output records each file inside.
Before a job runs, each of its inputs that has a record is hashed again and compared: a
mismatch (bit rot, a bad copy, a truncated or hand-edited file, a file missing from a directory)
stops the job with the file named, and the bad artifact is removed so that the same command run
again rebuilds it and everything computed from it. `make verify` checks every record the same
way, and also that the recorded inputs still hash as they did (an artifact not recomputed after
its input changed is stale).

Who checks what: the job checks what it reads, always (`check_inputs`); a run sweeps every
artifact once before it starts (`remove_damaged`, called by miaflow.runtime.start for a
Snakemake command that runs jobs: once in `make run`, in each stage command of `dvc repro`),
so that damage is rebuilt in the same run even where no job reads it and
where DVC, keying its hashes by size and modification time, sees no change; a command that runs
no jobs (`snakemake -n`, `--summary`, ...) only names the damage (`damaged`) and changes nothing,
reading again only the artifacts written since the last such command (`RememberedHashes`).

The records live under `records/`, apart from the artifacts, so that they never change an
artifact's hash; DVC versions them with the stage's other run records.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miaflow import io

log = logging.getLogger(__name__)

ARTIFACTS = Path("results")
RECORDS = Path("records")
FOLDER = "provenance"
SNAKEMAKE_MARKER = ".snakemake_timestamp"  # Snakemake's own mark in directory outputs

Digest = str  # sha256 of a file, or of a directory's manifest (see `digest`)
FileHash = Callable[[Path], Digest]  # how a file's sha256 is found: io.file_hash reads it


def is_artifact(path: str | Path) -> bool:
    """Whether the workflow writes (and so records) this path: everything under results/."""
    return Path(path).parts[:1] == ARTIFACTS.parts


def manifest(directory: Path, file_hash: FileHash = io.file_hash) -> dict[str, str]:
    """sha256 of every file under a directory, by path relative to it (sorted)."""
    return {
        str(file.relative_to(directory)): file_hash(file)
        for file in sorted(directory.rglob("*"))
        if file.is_file() and file.name != SNAKEMAKE_MARKER
    }


def content(path: Path, file_hash: FileHash = io.file_hash) -> dict[str, Any]:
    """What a record says about an artifact's own content: a file's sha256, or the sha256 of
    every file of a directory."""
    return {"files": manifest(path, file_hash)} if path.is_dir() else {"sha256": file_hash(path)}


def digest_of(content: Mapping[str, Any]) -> Digest:
    """One value for a `content`: a file's sha256, a directory's the sha256 of its manifest."""
    if "files" in content:
        return hashlib.sha256(json.dumps(content["files"], sort_keys=True).encode()).hexdigest()
    return content["sha256"]


def digest(path: Path) -> Digest:
    return digest_of(content(path))


def record_path(artifact: str | Path, stage: str) -> Path:
    return RECORDS / stage / FOLDER / f"{artifact}.json"


def find_record(artifact: str | Path) -> Path | None:
    """The record of an artifact, whichever stage wrote it (None if none did)."""
    found = sorted(RECORDS.glob(f"*/{FOLDER}/{artifact}.json"))
    return found[0] if found else None


def mismatch(
    path: Path, recorded: Mapping[str, Any], actual: Mapping[str, Any] | None = None
) -> tuple[Path, str] | None:
    """The file of an artifact that differs from its record (the artifact itself, or a file in a
    recorded directory) and why; None if it matches. `actual` is the artifact's `content`, when
    the caller has it already."""
    actual = content(path) if actual is None else actual
    if "files" in recorded:
        if "files" not in actual:
            return path, "it is not the directory that was written"
        for name, expected in recorded["files"].items():
            if name not in actual["files"]:
                return path / name, "missing from the directory that was written"
            if actual["files"][name] != expected:
                return (
                    path / name,
                    f"sha256 {actual['files'][name]}, but it was written as {expected}",
                )
        return None
    if "sha256" not in actual:
        return path, "it is not the file that was written"
    return (
        None
        if actual["sha256"] == recorded["sha256"]
        else (path, f"sha256 {actual['sha256']}, but it was written as {recorded['sha256']}")
    )


def read_record(path: Path) -> dict[str, Any]:
    """A record as `write_records` wrote it (ValueError if it is not one)."""
    record = json.loads(path.read_text())
    if not (
        isinstance(record, dict)
        and {"artifact", "inputs"} <= record.keys()
        and len({"sha256", "files"} & record.keys()) == 1
    ):
        raise ValueError("not a provenance record")
    return record


@dataclass(frozen=True)
class Damage:
    """A file that differs from what its provenance says: a corrupt artifact (the file inside it
    that differs), or an unreadable record (then `path` is the record)."""

    artifact: str
    path: Path
    reason: str


def scan(
    root: Path = Path("."), file_hash: FileHash = io.file_hash
) -> tuple[dict[str, dict[str, Any]], list[Damage]]:
    """Every readable record whose artifact exists under `root` (artifact -> record), and the
    damage: unreadable records, and artifacts whose content differs from their record."""
    records, damage = {}, []
    for record_file in sorted((root / RECORDS).glob(f"*/{FOLDER}/**/*.json")):
        artifact = str(record_file.relative_to(root / RECORDS)).split(f"/{FOLDER}/", 1)[1]
        artifact = artifact.removesuffix(".json")
        try:
            record = read_record(record_file)
        except ValueError as error:
            damage.append(Damage(artifact, record_file, f"unreadable provenance record: {error}"))
            continue
        if (root / artifact).exists():
            records[artifact] = record
    for artifact, record in records.items():
        if problem := mismatch(root / artifact, record, content(root / artifact, file_hash)):
            damage.append(Damage(artifact, *problem))
    return records, damage


def damaged(root: Path = Path("."), file_hash: FileHash = io.file_hash) -> list[Damage]:
    """Every artifact whose content differs from its record (an unreadable record condemns its
    artifact), then every artifact computed from one of them, directly or not (their records name
    their inputs): what `remove_damaged` removes. Reads only (files hashed by `file_hash`)."""
    records, damage = scan(root, file_hash)
    consumers: dict[str, list[str]] = {}
    for artifact, record in records.items():
        for name in record["inputs"]:
            consumers.setdefault(name, []).append(artifact)
    found = list(damage)
    todo = [bad.artifact for bad in damage]
    seen = set(todo)
    while todo:
        source = todo.pop()
        for artifact in sorted(consumers.get(source, [])):
            if artifact not in seen:
                seen.add(artifact)
                todo.append(artifact)
                found.append(Damage(artifact, root / artifact, f"computed from {source}"))
    return found


class RememberedHashes:
    """A `FileHash` that remembers each file's sha256 by the file's status (size, modification
    and status-change times, inode) in a JSON file, and reads again only a file whose status
    changed. Any write changes the status-change time, also one that restores the size and the
    modification time; damage without a write (bit rot) keeps it, and only reading the file sees
    it (a run's sweep, `make verify`, the job that reads it). A file changed in the last seconds
    is not remembered: a second write within the clock's resolution could keep its status."""

    SETTLED_NS = 2_000_000_000

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
        self.known: dict[str, list[Any]] = known if isinstance(known, dict) else {}
        self.seen: dict[str, list[Any]] = {}

    def __call__(self, file: Path) -> Digest:
        status = os.stat(file)
        key = [status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino]
        entry = self.known.get(str(file))
        sha256 = entry[-1] if entry and entry[:-1] == key else io.file_hash(file)
        if time.time_ns() - status.st_ctime_ns > self.SETTLED_NS:
            self.seen[str(file)] = [*key, sha256]
        return sha256

    def save(self) -> None:
        """Keep what this scan saw (and only that) for the next one."""
        if self.seen != self.known:
            io.write_json(self.path, self.seen)


def remove_damaged(root: Path = Path(".")) -> list[Damage]:
    """Remove what `damaged` finds, so that Snakemake, which rebuilds what its targets miss but
    not an intermediate file whose consumers are present, rebuilds the whole chain in one run.
    It also catches bit rot that keeps sizes and modification times, which Snakemake cannot see.
    Called once before a run that executes jobs (miaflow.runtime.start). Returns the damage,
    then the consumers."""
    removed = damaged(root)
    for found in removed:
        if found.path.suffix == ".json" and found.path.is_relative_to(root / RECORDS):
            found.path.unlink(missing_ok=True)  # an unreadable record
        io.discard(root / found.artifact)
    return removed


def check_inputs(inputs: Iterable[str | Path]) -> dict[str, Digest]:
    """Compare each recorded input with its record, then return every input's digest.

    A mismatch raises `io.CorruptArtifact` naming the file and both hashes; the artifact is
    removed first (it is under results/), so the same command run again rebuilds it. An input
    that does not exist is left to the job to report."""
    digests = {}
    for name in inputs:
        path = Path(name)
        if not path.exists():
            continue
        actual = content(path)  # hashed once: checked, then recorded by the job's outputs
        if is_artifact(path) and (record := find_record(path)) is not None:
            try:
                problem = mismatch(path, read_record(record), actual)
            except ValueError as error:  # JSON errors are ValueErrors
                record.unlink()
                problem = path, f"its provenance record {record} is unreadable ({error})"
            if problem:
                bad_file, reason = problem
                if bad_file != path:
                    reason = f"{bad_file.relative_to(path)}: {reason}"
                raise io.corrupt(path, reason)
        digests[str(path)] = digest_of(actual)
    return digests


def write_records(
    outputs: Iterable[str | Path], inputs: Mapping[str, Digest], stage: str, rule: str
) -> None:
    """Record each output under results/ with its content and the digests of its inputs."""
    for name in outputs:
        if not is_artifact(name) or not Path(name).exists():
            continue
        record = {
            "artifact": str(name),
            "rule": rule,
            **content(Path(name)),
            "inputs": dict(sorted(inputs.items())),
        }
        target = record_path(name, stage)
        target.parent.mkdir(parents=True, exist_ok=True)
        io.write_text(target, json.dumps(record, indent=1) + "\n")
        log.debug("recorded %s", target)
