"""Audits of models trained outside miaflow (README, "Audit your own model").

A user brings one of two things:

* **outputs**: per-sample logits or probabilities of their target model(s) and, optionally, of
  reference and population models, with the membership matrix, as Parquet or CSV
  (docs/audit.md has the schema);
* **a checkpoint**: safetensors weights of one of miaflow's architectures, trained on a subset of
  the target pool of a miaflow dataset (the `pool` column of
  results/prepare/splits/<dataset>.parquet), with the sample ids it trained on. Its reference and
  population models are then miaflow's own models of that dataset and architecture, which share
  the pool.

Either becomes what attacks read, a membership matrix (`miaflow.splits.Splits`) and signals
(`miaflow.signals`), after checks that stop at the first bad input, naming the file and the
problem, before any attack runs: a wrong score from a silently misread file would be worse than
no score.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow.io import ExplainedError
from miaflow.splits import AUXILIARY_POOL, ROLES, TARGET_POOL, Splits, role_of

MODEL_ID = re.compile(r"^(target|reference|population)-(\d+)$")
OUTPUT_COLUMN = re.compile(r"^(logit|prob)_(\d+)$")
PROBABILITY_TOLERANCE = 1e-3  # |sum - 1| allowed per row: CSV exports round probabilities
EXAMPLES = 5  # sample ids or rows quoted in an error message
# Buffers a torch state dict holds as integers by design (batch norm's step count).
INTEGER_BUFFERS = ("num_batches_tracked",)


class AuditInputError(ExplainedError, ValueError):
    """A user's audit file is unusable; the message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")


@dataclass(frozen=True)
class ModelOutputs:
    """Outputs of a user's models on every sample: logits or log-probabilities (n_models, n, C)."""

    model_ids: tuple[str, ...]  # targets, then references, then population models, by index
    labels: np.ndarray  # (n,) int64, sample i's label; sample ids are 0..n-1
    logits: np.ndarray  # (n_models, n, C) float32; log-probabilities are valid logits


def _examples(values: Sequence[Any] | np.ndarray) -> str:
    shown = ", ".join(str(v) for v in list(values)[:EXAMPLES])
    return shown + (", ..." if len(values) > EXAMPLES else "")


def read_user_table(path: str | Path) -> pd.DataFrame:
    """A user's Parquet or CSV file (by its suffix). Not a miaflow artifact: no checksums to
    verify, so every column is checked by the caller instead."""
    path = Path(path)
    if not path.is_file():
        raise AuditInputError(path, "file not found")
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pandas()
        if suffix == ".csv":
            return pd.read_csv(path)
    except Exception as error:  # pyarrow's and pandas' parse errors
        raise AuditInputError(path, f"cannot be read as {suffix[1:]}: {error}") from None
    raise AuditInputError(path, f"unknown format {suffix!r}: use .parquet or .csv")


def normalised_model_ids(ids: pd.Series, path: Path) -> pd.Series:
    """Model ids as miaflow writes them (`reference-03` -> `reference-3`); AuditInputError for an
    id of another form, or for two spellings of one model."""
    text = ids.astype(str)
    spellings = sorted(set(text))
    bad = [m for m in spellings if not MODEL_ID.match(m)]
    if bad:
        raise AuditInputError(
            path,
            f"model ids must be target-<i>, reference-<i> or population-<i> "
            f"(found {_examples(bad)})",
        )
    canonical = {m: "{}-{}".format(*_model_role_index(m)) for m in spellings}
    by_model: dict[str, list[str]] = {}
    for spelling, model in canonical.items():
        by_model.setdefault(model, []).append(spelling)
    clashes = [" and ".join(names) for names in by_model.values() if len(names) > 1]
    if clashes:
        raise AuditInputError(path, f"model ids {_examples(clashes)} name the same model")
    return text.map(canonical)


def _model_role_index(model_id: str) -> tuple[str, int]:
    role, index = MODEL_ID.match(model_id).groups()
    return role, int(index)


def _model_order(model_id: str) -> tuple[int, int]:
    role, index = MODEL_ID.match(model_id).groups()
    return ROLES.index(role), int(index)


def _numeric_columns(frame: pd.DataFrame, columns: list[str], path: Path) -> None:
    """Output columns hold numbers as numbers: text that looks like one is rejected, not parsed."""
    text = [c for c in columns if not pd.api.types.is_numeric_dtype(frame[c].dtype)]
    text += [c for c in columns if pd.api.types.is_bool_dtype(frame[c].dtype)]
    if text:
        kinds = ", ".join(f"{c} ({frame[c].dtype})" for c in text[:EXAMPLES])
        raise AuditInputError(path, f"columns must hold numbers, not text or booleans: {kinds}")


def _sample_range(sample_ids: np.ndarray, path: Path) -> int:
    """n, for sample ids that are 0 … n-1 without gaps (each model covers them all): checked on
    the distinct ids, so that a huge id costs no memory in proportion to it."""
    distinct = np.unique(sample_ids)
    if len(distinct) and distinct[0] < 0:
        raise AuditInputError(path, f"sample ids must be 0 … n-1 (found {distinct[0]})")
    gaps = np.flatnonzero(distinct != np.arange(len(distinct)))
    if len(gaps):
        first = int(gaps[0])  # ids first..distinct[first]-1 are missing
        missing = range(first, min(int(distinct[first]), first + EXAMPLES + 1))
        raise AuditInputError(
            path,
            f"sample ids must be 0 … n-1 without gaps: {len(distinct)} distinct ids, the largest "
            f"{int(distinct[-1])}; no rows for {_examples(list(missing))}",
        )
    return len(distinct)


def _integer_column(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    values = frame[column]
    if values.isna().any() or not pd.api.types.is_integer_dtype(values):
        raise AuditInputError(
            path, f"column {column!r} must hold integers without gaps (found {values.dtype})"
        )
    return values.to_numpy(np.int64)


def _output_columns(frame: pd.DataFrame, path: Path) -> tuple[str, list[str]]:
    """('logit' or 'prob', its columns in class order)."""
    found: dict[str, dict[int, str]] = {}
    for column in frame.columns:
        match = OUTPUT_COLUMN.match(str(column))
        if match:
            found.setdefault(match.group(1), {})[int(match.group(2))] = column
    if len(found) != 1:
        raise AuditInputError(
            path,
            "needs either logit_0 … logit_<C-1> or prob_0 … prob_<C-1> "
            f"columns, one kind only (found {sorted(found) or 'neither'})",
        )
    kind, columns = next(iter(found.items()))
    if sorted(columns) != list(range(len(columns))) or len(columns) < 2:
        raise AuditInputError(
            path,
            f"{kind}_<c> columns must be numbered 0 … C-1 with C >= 2 (found {sorted(columns)})",
        )
    return kind, [columns[c] for c in range(len(columns))]


def _where(frame: pd.DataFrame, rows: np.ndarray) -> str:
    """'model target-0, sample 12' for the first bad rows."""
    picked = frame.loc[rows, ["model_id", "sample_id"]].head(EXAMPLES)
    return "; ".join(f"model {m}, sample {s}" for m, s in picked.itertuples(index=False))


def read_outputs(path: str | Path) -> ModelOutputs:
    """Per-sample outputs in long format: columns model_id, sample_id, label and logit_<c> or
    prob_<c>, one row per model and sample; every model covers the same samples 0..n-1."""
    path = Path(path)
    frame = read_user_table(path).reset_index(drop=True)
    missing = [c for c in ("model_id", "sample_id", "label") if c not in frame.columns]
    if missing:
        raise AuditInputError(path, f"missing columns {missing}")
    kind, columns = _output_columns(frame, path)
    _numeric_columns(frame, columns, path)
    sample_ids, labels = (
        _integer_column(frame, "sample_id", path),
        _integer_column(frame, "label", path),
    )
    frame["model_id"] = normalised_model_ids(frame["model_id"], path)
    model_ids = tuple(sorted(set(frame["model_id"]), key=_model_order))
    if not any(role_of(m) == "target" for m in model_ids):
        raise AuditInputError(path, "has no target model (model_id target-0, …)")
    if frame.duplicated(["model_id", "sample_id"]).any():
        rows = np.flatnonzero(frame.duplicated(["model_id", "sample_id"]).to_numpy())
        raise AuditInputError(path, f"duplicate rows for {_where(frame, rows)}")

    values = frame[columns].to_numpy(np.float64)
    not_finite = ~np.isfinite(values).all(axis=1)
    if not_finite.any():
        rows = np.flatnonzero(not_finite)
        raise AuditInputError(
            path, f"{len(rows)} rows have NaN or infinite {kind}s ({_where(frame, rows)})"
        )
    if kind == "prob":
        outside = ((values < 0) | (values > 1)).any(axis=1)
        if outside.any():
            rows = np.flatnonzero(outside)
            raise AuditInputError(
                path, f"{len(rows)} rows have probabilities outside [0, 1] ({_where(frame, rows)})"
            )
        sums = values.sum(axis=1)
        off = np.abs(sums - 1) > PROBABILITY_TOLERANCE
        if off.any():
            rows = np.flatnonzero(off)
            raise AuditInputError(
                path,
                f"probabilities of {len(rows)} rows do not sum to 1 (sum "
                f"{sums[rows[0]]:.4g} for {_where(frame, rows[:1])}); give "
                "softmax outputs, or logits as logit_<c> columns",
            )

    n_samples = _sample_range(sample_ids, path)
    n_classes = len(columns)
    if ((labels < 0) | (labels >= n_classes)).any():
        rows = np.flatnonzero((labels < 0) | (labels >= n_classes))
        raise AuditInputError(
            path,
            f"labels must be 0 … {n_classes - 1}, the classes of the "
            f"{kind}_<c> columns ({_where(frame, rows)})",
        )
    label_of = np.full(n_samples, -1, dtype=np.int64)
    label_of[sample_ids] = labels
    if (label_of[sample_ids] != labels).any():
        rows = np.flatnonzero(label_of[sample_ids] != labels)
        raise AuditInputError(
            path, f"models disagree on the label of a sample ({_where(frame, rows)})"
        )

    model_rows = (
        frame["model_id"].astype(str).map({m: k for k, m in enumerate(model_ids)}).to_numpy()
    )
    logits = np.full((len(model_ids), n_samples, n_classes), np.nan)
    with np.errstate(divide="ignore"):  # log(0) = -inf: a valid log-probability (miaflow.signals)
        logits[model_rows, sample_ids] = np.log(values) if kind == "prob" else values
    covered = ~np.isnan(logits[..., 0])
    for k, model in enumerate(model_ids):
        if not covered[k].all():
            lacking = np.flatnonzero(~covered[k])
            raise AuditInputError(
                path,
                f"model {model} has no outputs for {len(lacking)} of the "
                f"{n_samples} samples ({_examples(lacking)})",
            )
    return ModelOutputs(model_ids, label_of, logits.astype(np.float32))


def _boolean_column(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    values = frame[column]
    if values.dtype == bool:
        return values.to_numpy()
    if pd.api.types.is_integer_dtype(values) and values.isin([0, 1]).all():
        return values.to_numpy() == 1
    text = values.astype(str).str.strip().str.lower()
    if values.notna().all() and text.isin(["true", "false"]).all():
        return (text == "true").to_numpy()
    raise AuditInputError(
        path,
        f"column {column!r} must be boolean (true/false or 1/0) with no "
        "empty cells: is the sample in that model's training set?",
    )


def read_membership(path: str | Path, outputs: ModelOutputs, outputs_path: str | Path) -> Splits:
    """The membership matrix: columns sample_id, optionally pool (target | auxiliary; default
    target), and one boolean column per model of `outputs` (true: trained on the sample)."""
    path = Path(path)
    frame = read_user_table(path)
    if "sample_id" not in frame.columns:
        raise AuditInputError(path, "missing column 'sample_id'")
    sample_ids = _integer_column(frame, "sample_id", path)
    n_samples = len(outputs.labels)
    values, counts = np.unique(sample_ids, return_counts=True)
    if (counts > 1).any():
        raise AuditInputError(path, f"duplicate sample ids ({_examples(values[counts > 1])})")
    listed = np.zeros(n_samples, bool)
    extra = sample_ids[(sample_ids < 0) | (sample_ids >= n_samples)]
    if len(extra):
        raise AuditInputError(
            path, f"{len(extra)} sample ids have no outputs in {outputs_path} ({_examples(extra)})"
        )
    listed[sample_ids] = True
    if not listed.all():
        raise AuditInputError(
            path,
            f"{int((~listed).sum())} samples of {outputs_path} are missing "
            f"({_examples(np.flatnonzero(~listed))})",
        )
    order = np.argsort(sample_ids)

    pool = (
        frame["pool"].astype(str).to_numpy()[order]
        if "pool" in frame.columns
        else np.full(n_samples, TARGET_POOL)
    )
    unknown = sorted(set(pool) - {TARGET_POOL, AUXILIARY_POOL})
    if unknown:
        raise AuditInputError(
            path, f"column 'pool' must be {TARGET_POOL!r} or {AUXILIARY_POOL!r} (found {unknown})"
        )
    in_target = pool == TARGET_POOL

    model_columns = [c for c in frame.columns if c not in ("sample_id", "pool")]
    canonical = normalised_model_ids(pd.Series(model_columns, dtype=str), path)
    frame = frame.rename(columns=dict(zip(model_columns, canonical)))
    model_columns = list(canonical)
    lacking = [m for m in outputs.model_ids if m not in model_columns]
    unexpected = [c for c in model_columns if c not in outputs.model_ids]
    if lacking or unexpected:
        raise AuditInputError(
            path,
            f"its model columns must be those of {outputs_path}: "
            f"missing {lacking}, not in the outputs {unexpected}",
        )
    keep = np.stack([_boolean_column(frame, m, path)[order] for m in outputs.model_ids])
    splits = Splits(outputs.model_ids, keep, in_target)
    _check_membership(splits, path)
    return splits


def _check_membership(splits: Splits, path: str | Path) -> None:
    """The protocol attacks assume: targets and references train on pool T, population models on
    A; each target has members and non-members in T (else no ROC exists)."""
    if not splits.in_target_pool.any():
        raise AuditInputError(path, "no sample is in the target pool")
    for k, model in enumerate(splits.model_ids):
        outside = splits.keep[k] & ~splits.pool_of(model)
        if outside.any():
            pool = AUXILIARY_POOL if role_of(model) == "population" else TARGET_POOL
            raise AuditInputError(
                path,
                f"{model} trained on {int(outside.sum())} samples outside the "
                f"{pool} pool ({_examples(np.flatnonzero(outside))})",
            )
    for target in splits.models("target"):
        members = splits.members(target)[splits.in_target_pool]
        if members.all() or not members.any():
            raise AuditInputError(
                path,
                f"{target} needs both members and non-members in the target "
                f"pool (it has {int(members.sum())} of {len(members)} as members)",
            )


def read_members(path: str | Path, base: Splits) -> Splits:
    """A checkpoint's membership: the `sample_id` column of `path` lists what it trained on, a
    subset of the target pool of miaflow's splits `base`. The audit's matrix is that one target
    beside `base`'s reference and population models."""
    path = Path(path)
    frame = read_user_table(path)
    if "sample_id" not in frame.columns:
        raise AuditInputError(path, "missing column 'sample_id' (the samples the model trained on)")
    sample_ids = _integer_column(frame, "sample_id", path)
    unknown = sample_ids[(sample_ids < 0) | (sample_ids >= base.n_samples)]
    if len(unknown):
        raise AuditInputError(
            path, f"sample ids beyond the dataset's {base.n_samples} samples ({_examples(unknown)})"
        )
    members = np.zeros(base.n_samples, bool)
    members[sample_ids] = True
    keep = [members] + [base.members(m) for m in base.model_ids if role_of(m) != "target"]
    model_ids = ("target-0", *(m for m in base.model_ids if role_of(m) != "target"))
    splits = base.with_models(model_ids, np.stack(keep))
    _check_membership(splits, path)
    return splits


def checkpoint_weights(path: str | Path) -> dict[str, np.ndarray]:
    """A safetensors state dict (plain tensors, nothing unpickled)."""
    from safetensors.numpy import load_file

    path = Path(path)
    if not path.is_file():
        raise AuditInputError(path, "file not found")
    try:
        weights = load_file(str(path))
    except Exception as error:  # safetensors' own errors: truncated file, garbled header
        raise AuditInputError(path, f"is not a readable safetensors file: {error}") from None
    integer = [
        f"{name} ({tensor.dtype})"
        for name, tensor in weights.items()
        if not np.issubdtype(tensor.dtype, np.floating) and not name.endswith(INTEGER_BUFFERS)
    ]
    if integer:
        raise AuditInputError(
            path,
            f"tensors must hold floating-point weights (torch would cast these silently): "
            f"{_examples(integer)}",
        )
    return weights


def checkpoint_logits(
    path: str | Path, arch: Mapping[str, Any], features: np.ndarray, n_classes: int
) -> np.ndarray:
    """(n, C) outputs of the checkpoint at `path`, built as architecture `arch`."""
    from miaflow.models.training import LEARNERS

    weights = checkpoint_weights(path)
    try:
        logits = LEARNERS[arch["kind"]].logits(arch, weights, features, n_classes)
    except (RuntimeError, KeyError, ValueError) as error:  # torch's load_state_dict names the keys
        raise AuditInputError(
            path,
            f"does not fit architecture kind {arch['kind']!r} with "
            f"{n_classes} classes and inputs {features.shape[1:]}: {error}",
        ) from None
    if not np.isfinite(logits).all():
        raise AuditInputError(path, "the model gives NaN or infinite outputs")
    return np.asarray(logits, dtype=np.float32)


def applicable(attacks: Sequence[str], splits: Splits) -> tuple[list[str], dict[str, str]]:
    """The attacks an audit can run with the models it has, and why the others cannot: no access
    to the model (query attacks, language-model attacks), or a missing model set."""
    from miaflow.attacks.registry import ATTACKS

    have = {
        need
        for need, role in (("reference", "reference"), ("population", "population"))
        if splits.models(role)
    }
    runnable, skipped = [], {}
    for name in attacks:
        attack = ATTACKS[name]
        if attack.reads or attack.family in ("query", "llm"):
            skipped[name] = "queries the model; an audit has its outputs only"
        elif not attack.needs <= have:
            skipped[name] = f"needs {' and '.join(sorted(attack.needs - have))} models"
        else:
            runnable.append(name)
    return runnable, skipped
