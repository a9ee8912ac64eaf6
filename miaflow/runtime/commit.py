"""Record a finished Snakemake run of the whole workflow in dvc.lock, as `dvc repro` would.

    python -m miaflow.runtime.commit

`make run` runs the workflow as one Snakemake DAG (`snakemake --cores all`), not as `dvc
repro`'s eight stage commands: Snakemake parses the workflow once instead of eight times, and a
job starts as soon as its own inputs exist rather than when the whole previous stage is done
(the language-model stage runs beside the tabular ones). Then this records every stage's deps
and outs (DVC's `commit --force`, through its Python API), hashing them into dvc.lock and the DVC
cache: the lock that `dvc repro` writes after the same jobs (tests/workflow/test_resume_e2e.py
compares the two), so `dvc status` is clean and a later `dvc repro` runs nothing. First it
creates what a stage's command creates when the stage has nothing to write (its `mkdir -p` in
dvc.yaml, such as results/llm without language-model experiments): DVC refuses to record a
missing out.

Nothing is lost whatever happens meanwhile:
- DVC rewrites dvc.lock in place; here each of its YAML writes goes to a temporary file renamed
  into place (`atomic_dvc_writes`), so a kill leaves the old lock or the new one, whole.
- A lock that is unreadable anyway (cut by a copy, emptied by an older DVC, edited) would stop
  every DVC command ("validation failed"): it is set aside (`.snakemake/`) and recorded again
  from the artifacts, which is what the commit does in any case.
- A commit that fails (a full disk) says why in a line and removes the temporary files DVC left
  in its cache.
"""

from __future__ import annotations

import errno
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from miaflow import io

MKDIR = ("mkdir", "-p")
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the lock is 230 kB
LOCK = Path("dvc.lock")
SET_ASIDE = Path(".snakemake/miaflow-unreadable-dvc.lock")  # the last lock found unreadable
DVC_TEMP_FILES = ".dvc/cache/**/.*.tmp"  # what an interrupted write into DVC's cache leaves
# DVC's YAML, JSON and TOML writers, each importing `_dump_data` by name.
DVC_WRITERS = (
    "dvc.utils.serialize._common",
    "dvc.utils.serialize._yaml",
    "dvc.utils.serialize._json",
    "dvc.utils.serialize._toml",
    "dvc.utils.serialize._py",
)


def created_directories(dvc_yaml: Path) -> list[str]:
    """The directories the stages' commands create with `mkdir -p`, in stage order."""
    directories = []
    for stage in yaml.load(dvc_yaml.read_text(), Loader=YAML_LOADER)["stages"].values():
        commands = stage["cmd"] if isinstance(stage["cmd"], list) else [stage["cmd"]]
        for command in commands:
            words = shlex.split(command)
            if tuple(words[:2]) == MKDIR:
                directories += words[2:]
    return directories


def lock_problem(root: Path = Path(".")) -> str | None:
    """Why `dvc.lock` under `root` is unreadable to DVC (not YAML, or not a lock file by DVC's
    own schema), or None if it is readable or absent."""
    path = root / LOCK
    if not path.exists():
        return None
    try:
        data = yaml.load(path.read_text(), Loader=YAML_LOADER)
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        return f"not YAML: {str(error).splitlines()[0]}"
    if data is None:
        return "empty"
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA
    from voluptuous import Invalid

    try:
        COMPILED_LOCKFILE_SCHEMA(data)
    except Invalid as error:
        return f"not a lock file: {error}"
    return None


def lock_gaps(root: Path = Path(".")) -> list[str]:
    """What a readable dvc.lock lacks of dvc.yaml's stages and their outs (a lock cut short
    can still parse): "stage <name>" or "<stage>: out <path>"; empty if it records them all."""
    lock = yaml.load((root / LOCK).read_text(), Loader=YAML_LOADER) or {}
    recorded = lock.get("stages", {})
    gaps = []
    for name, stage in yaml.load((root / "dvc.yaml").read_text(), Loader=YAML_LOADER)[
        "stages"
    ].items():
        if name not in recorded:
            gaps.append(f"stage {name}")
            continue
        locked = {out["path"] for out in recorded[name].get("outs", [])}
        declared = [next(iter(out)) if isinstance(out, dict) else out for out in stage["outs"]]
        gaps += [f"{name}: out {out}" for out in declared if out not in locked]
    return gaps


def set_aside_unreadable_lock(root: Path = Path(".")) -> str | None:
    """Move an unreadable dvc.lock to `SET_ASIDE` (the commit then records every stage anew);
    the line that says so, or None if the lock was readable."""
    problem = lock_problem(root)
    if problem is None:
        return None
    aside = root / SET_ASIDE
    aside.parent.mkdir(parents=True, exist_ok=True)
    (root / LOCK).replace(aside)
    return f"miaflow: dvc.lock was unreadable ({problem}); set aside as {SET_ASIDE}, recorded again"


def _atomic_dump_data(original: Callable[..., Any]) -> Callable[..., Any]:
    """DVC's `_dump_data`, writing a local file through a temporary file and a rename."""

    def dump(path: Any, data: Any, dumper: Any, fs: Any = None, **dumper_args: Any) -> Any:
        if fs is not None and getattr(fs, "protocol", "local") != "local":
            return original(path, data, dumper, fs=fs, **dumper_args)
        with io.atomic_path(path) as temporary, open(temporary, "w+", encoding="utf-8") as fd:
            dumper(data, fd, **dumper_args)

    return dump


@contextmanager
def atomic_dvc_writes() -> Iterator[None]:
    """Within the block, DVC writes dvc.lock (and its other YAML/JSON files) atomically."""
    import importlib

    modules = [importlib.import_module(name) for name in DVC_WRITERS]
    originals = [module._dump_data for module in modules]
    atomic = _atomic_dump_data(originals[0])
    for module in modules:
        module._dump_data = atomic
    try:
        yield
    finally:
        for module, original in zip(modules, originals):
            module._dump_data = original


def remove_dvc_temp_files(root: Path = Path(".")) -> list[Path]:
    """The temporary files an interrupted write left in DVC's cache, removed."""
    found = sorted(root.glob(DVC_TEMP_FILES))
    for path in found:
        path.unlink(missing_ok=True)
    return found


def failure_line(error: BaseException) -> str:
    """One line saying why the commit failed, for the terminal (the log has the traceback)."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        where = f" writing {error.filename}" if error.filename else ""
        return (
            f"miaflow: dvc commit failed: no space left on device{where}. Free space and run "
            "the same command again: the run's artifacts are whole and need no rerun."
        )
    return f"miaflow: dvc commit failed: {type(error).__name__}: {error}"


def commit(root: Path = Path(".")) -> int:
    """Set an unreadable lock aside, create the stages' empty outs, then DVC's `commit --force`
    with atomic writes; 0, or 1 with the reason in a line on stderr."""
    import logging

    from dvc.repo import Repo

    logging.getLogger("dvc").setLevel(logging.ERROR)  # as `dvc commit --quiet`: errors are ours
    if said := set_aside_unreadable_lock(root):
        print(said, file=sys.stderr)
    for directory in created_directories(root / "dvc.yaml"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    try:
        with atomic_dvc_writes(), Repo(str(root)) as repo:
            repo.commit(force=True)
    except Exception as error:  # noqa: BLE001 - said in a line; DVC's own types vary
        print(failure_line(error), file=sys.stderr)
        removed = remove_dvc_temp_files(root)
        if removed:
            print(
                f"miaflow: removed {len(removed)} temporary files from .dvc/cache", file=sys.stderr
            )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(commit())
