"""Profiles side by side: a profile chosen on the command line runs in its own directory.

The profile that params.yaml selects (`profile:`) runs in the project directory: its results/
and records/ are what DVC tracks and publishes. `snakemake --config profile=NAME` with another
NAME runs in runs/NAME/ instead (the Snakefile makes it Snakemake's working directory), with its
own results/, records/ and .snakemake/: it neither overwrites the selected profile's artifacts
nor makes them look out of date, so switching back recomputes nothing.

Every path in the workflow is relative to the working directory, so runs/NAME/ links back to
what the rules read from the project: each top-level entry (miaflow/, whose files are the jobs'
code inputs, scripts/, rules/, audit/, params.yaml, ...), except what a run writes itself. data/
is a folder of its own whose entries are links, so that downloads land in the project's one
data/raw/ while a run's sweep of its own data/ for dead writers' temporary files
(miaflow.runtime.resume) does not reach into another live run's downloads. The GPU slots
(miaflow.compute) are the project's, shared by runs side by side. Relative paths in params that
leave the project (`../data/...`) are rewritten to name the same files from runs/NAME/.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from miaflow.compute import DEFAULT_LOCK_DIR
from miaflow.config import DEFAULT_PROFILE, ConfigError, read

RUNS = "runs"
OWN = {"results", "records", RUNS}  # what each working directory writes for itself
RAW = Path("data/raw")
OUTSIDE = "../"  # a relative path that leaves the project


def working_directory(config: Mapping[str, Any], root: Path) -> Path | None:
    """runs/NAME under the project `root` when the config's profile NAME (as the command line
    set it) is a known profile other than the one params.yaml selects; None otherwise (an
    unknown name is left to validation, which stops the run)."""
    chosen = config.get("profile", DEFAULT_PROFILE)
    try:
        written = read(root / "params.yaml")
    except (ConfigError, OSError):
        return None
    if not isinstance(written, Mapping) or not isinstance(chosen, str):
        return None
    known = {DEFAULT_PROFILE, *(written.get("profiles") or {})}
    if chosen == written.get("profile", DEFAULT_PROFILE) or chosen not in known or "/" in chosen:
        return None
    return root / RUNS / chosen


def link_project(root: Path, directory: Path) -> Path:
    """Make `directory` a working directory of the project at `root` (links to what the rules
    read; see the module's docstring) and return it. Idempotent: existing entries are kept."""
    directory.mkdir(parents=True, exist_ok=True)
    (root / RAW).mkdir(parents=True, exist_ok=True)
    (root / DEFAULT_LOCK_DIR).mkdir(parents=True, exist_ok=True)
    (directory / DEFAULT_LOCK_DIR).parent.mkdir(parents=True, exist_ok=True)
    _link(root / DEFAULT_LOCK_DIR, directory / DEFAULT_LOCK_DIR)
    for entry in root.iterdir():
        if entry.name.startswith(".") or entry.name in OWN:
            continue
        if entry.name == RAW.parts[0]:
            (directory / entry.name).mkdir(exist_ok=True)
            for inside in entry.iterdir():
                _link(inside, directory / entry.name / inside.name)
        else:
            _link(entry, directory / entry.name)
    return directory


def _link(target: Path, link: Path) -> None:
    """A relative symbolic link, so that the project can move with its runs."""
    if not link.is_symlink() and not link.exists():
        with contextlib.suppress(FileExistsError):  # another parse linked it meanwhile
            link.symlink_to(os.path.relpath(target, link.parent))


def relocated(value: Any, depth: int) -> Any:
    """`value` (the config or a part of it) with every string that is a relative path leaving
    the project (starting with ../) prefixed with ../ `depth` times: the same file, named from a
    working directory `depth` levels below the project."""
    if isinstance(value, Mapping):
        return {key: relocated(item, depth) for key, item in value.items()}
    if isinstance(value, list):
        return [relocated(item, depth) for item in value]
    if isinstance(value, str) and value.startswith(OUTSIDE):
        return OUTSIDE * depth + value
    return value
