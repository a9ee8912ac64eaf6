"""Section `audits`: audits of models trained elsewhere (`miaflow.audit`), each with one kind of
input whose files exist in audit/, as `miaflow.plan.audits` reads them; and no file in audit/
that no audit names.

DVC's stage `audit` depends on the folder audit/ as a whole (miaflow.plan.stages), so that
adding, editing or removing an audit's file reruns it. A stray file there (a scratch copy, an
editor's backup) would change the folder's hash in dvc.lock, and a reviewer's clone, which lacks
it, would report changed deps; so validation names it and stops the run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from miaflow.models.kinds import KINDS

FOLDER = Path("audit")  # the users' audit files (docs/audit.md)
# The folder's own files: its guide, and the ignore list that `dvc add` writes there.
KEPT = ("README.md", ".gitignore")
# The keys that name a file (`canaries`: the privacy audit's, miaflow.validation.privacy).
FILE_KEYS = ("outputs", "membership", "checkpoint", "members", "canaries")
# The keys of each kind of input; an audit gives the first key of exactly one kind.
AUDIT_KINDS = {
    "outputs": ("outputs", "membership"),
    "checkpoint": ("checkpoint", "arch", "dataset", "members"),
}


def problems(config: Mapping[str, Any]) -> list[str]:
    """Each audit gives exactly one kind of input, with files that exist; a checkpoint names a
    miaflow dataset and a torch architecture; no audit reports under another result's name."""
    from miaflow.data import DATASETS
    from miaflow.plan import audits, experiments

    taken = {e.name for e in experiments(config)}
    problems, seen = [], set()
    for i, audit in enumerate(audits(config)):
        where = f"audits[{i}]"
        given = [kind for kind, keys in AUDIT_KINDS.items() if keys[0] in audit]
        if len(given) != 1:
            problems.append(
                f"{where}: give either outputs and membership (the models' outputs) or "
                "checkpoint, arch, dataset and members (a checkpoint), not both or "
                "neither"
            )
            continue
        keys = AUDIT_KINDS[given[0]]
        other = {
            key for kind, names in AUDIT_KINDS.items() if kind != given[0] for key in names
        } - {*keys, "dataset"}
        problems += [
            f"{where}.{key}: missing (an audit of {given[0]} needs {', '.join(keys)})"
            for key in keys
            if key not in audit
        ]
        problems += [
            f"{where}.{key}: only an audit of a checkpoint takes it"
            for key in sorted(other)
            if key in audit
        ]
        for key in FILE_KEYS:
            if key not in audit:
                continue
            if not Path(audit[key]).resolve().is_relative_to(FOLDER.resolve()):
                problems.append(
                    f"{where}.{key}: {audit[key]} is outside {FOLDER}/: DVC's stage audit "
                    f"depends on {FOLDER}/, so a file elsewhere is neither versioned nor pushed, "
                    f"and a reviewer cannot reproduce the audit; move it into {FOLDER}/ (and "
                    "`dvc add` it there)"
                )
            elif not Path(audit[key]).is_file():
                problems.append(
                    f"{where}.{key}: {audit[key]} not found (working directory {Path.cwd()})"
                )
        name = audit["experiment"].name
        if name in taken or name in seen:
            problems.append(
                f"{where}.name: {name} is already the name of another result; choose another name"
            )
        seen.add(name)
        if given[0] != "checkpoint" or "arch" not in audit or "dataset" not in audit:
            continue
        if audit["dataset"] not in DATASETS:
            problems.append(f"{where}.dataset: {audit['dataset']!r} is not a miaflow dataset")
        arch = config["architectures"].get(audit["arch"])
        if arch is None:
            problems.append(f"{where}.arch: {audit['arch']!r} is not a key of architectures")
        elif not KINDS[arch["kind"]].torch:
            problems.append(
                f"{where}.arch: checkpoints of kind {arch['kind']!r} are not supported "
                "(a torch state dict is); bring the model's outputs instead"
            )
    problems += [
        f"{path}: no audit names this file, but DVC's stage audit depends on every file "
        f"in {FOLDER}/ (dvc.lock would change, and a clone without it reports changed "
        f"deps): delete it, move it out of {FOLDER}/ or name it in an audit"
        for path in strays(audits(config))
    ]
    return problems


def strays(audits: list[dict[str, Any]]) -> list[Path]:
    """The files in FOLDER that no audit names: neither a named file, nor its DVC pointer file
    (`<file>.dvc`), nor one of KEPT."""
    named = {Path(audit[key]).resolve() for audit in audits for key in FILE_KEYS if key in audit}
    expected = {
        *named,
        *(path.with_name(f"{path.name}.dvc") for path in named),
        *((FOLDER / name).resolve() for name in KEPT),
    }
    return [
        path
        for path in sorted(FOLDER.rglob("*"))
        if path.is_file() and path.resolve() not in expected
    ]
