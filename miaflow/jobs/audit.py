"""Jobs of the audit stage: a model trained outside miaflow, brought as its outputs or as a
checkpoint (miaflow.audit), checked and turned into a membership matrix and signals, then
attacked like any experiment (the same scores, metrics and ROC files, which the report reads)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.evaluation.best import best_lines
from miaflow.jobs.common import Paths, compute_session, read_splits
from miaflow.plan import Experiment
from miaflow.splits import Splits, role_of

log = logging.getLogger(__name__)
BEST = 3  # the attacks `snakemake audit` prints for each audit


def _accuracy_records(
    audit: Experiment, splits: Splits, labels: np.ndarray, logits: np.ndarray
) -> list[dict[str, Any]]:
    """Train/test accuracy of each audited model, the rows collect_models gathers."""
    records = []
    for k, model in enumerate(splits.model_ids):
        members, heldout = splits.members(model), splits.pool_of(model) & ~splits.members(model)
        correct = logits[k].argmax(axis=1) == labels
        records.append(
            {
                "dataset": audit.dataset,
                "arch": audit.label,
                "model_id": model,
                "role": role_of(model),
                "n_train": int(members.sum()),
                "n_heldout": int(heldout.sum()),
                "train_acc": float(correct[members].mean()),
                "test_acc": float(correct[heldout].mean()) if heldout.any() else float("nan"),
            }
        )
    return records


def _write(
    splits: Splits,
    model_ids: Sequence[str],
    labels: np.ndarray,
    logits: np.ndarray,
    data_hash: str,
    models_hash: str,
    audit: Experiment,
    splits_out: str | Path,
    signals_out: str | Path,
    records_out: str | Path,
) -> None:
    from miaflow.signals import outputs_table, write_signal_shard

    io.write_parquet(splits_out, splits.to_table(), metadata={"data_hash": data_hash})
    table = outputs_table(list(model_ids), np.arange(len(labels)), labels, logits)
    write_signal_shard(signals_out, table, {"data_hash": data_hash, "models_sha256": models_hash})
    audited = splits.with_models(tuple(model_ids), np.stack([splits.members(m) for m in model_ids]))
    io.write_json(records_out, _accuracy_records(audit, audited, labels, logits))


def audit_outputs(
    *,
    outputs: str | Path,
    membership: str | Path,
    audit: Experiment,
    splits: str | Path,
    signals: str | Path,
    records: str | Path,
) -> None:
    """A user's per-sample outputs and membership matrix, checked (miaflow.audit raises on the
    first problem, naming the file) and stored as the membership matrix and signals attacks read."""
    from miaflow.audit import read_membership, read_outputs

    given = read_outputs(outputs)
    matrix = read_membership(membership, given, outputs)
    log.info(
        "%s: %d models (%s), %d samples, %d classes",
        audit.name,
        len(given.model_ids),
        ", ".join(given.model_ids),
        len(given.labels),
        given.logits.shape[-1],
    )
    # What the signals were computed from: the user's two files, in this order.
    source = hashlib.sha256((io.file_hash(outputs) + io.file_hash(membership)).encode()).hexdigest()
    _write(
        matrix,
        given.model_ids,
        given.labels,
        given.logits,
        source,
        io.file_hash(outputs),
        audit,
        splits,
        signals,
        records,
    )


def audit_checkpoint(
    *,
    checkpoint: str | Path,
    members: str | Path,
    data: str | Path,
    base_splits: str | Path,
    arch: Mapping[str, Any],
    audit: Experiment,
    splits: str | Path,
    signals: str | Path,
    records: str | Path,
    threads: int,
) -> None:
    """A user's checkpoint of a miaflow architecture: its outputs on every sample of the prepared
    dataset, with its membership (`members`) beside miaflow's reference and population models
    of the same dataset and pool (`base_splits`)."""
    from miaflow.audit import checkpoint_logits, read_members
    from miaflow.data import read_dataset

    loaded = read_dataset(data)
    matrix = read_members(members, read_splits(base_splits))
    with compute_session(arch, threads):
        logits = checkpoint_logits(checkpoint, arch, loaded.features, loaded.n_classes)
    log.info(
        "%s: checkpoint %s on %d samples of %s, %d members",
        audit.name,
        checkpoint,
        len(loaded.labels),
        loaded.name,
        int(matrix.members("target-0").sum()),
    )
    _write(
        matrix,
        ["target-0"],
        loaded.labels,
        logits[None],
        io.read_parquet_metadata(base_splits)["data_hash"],
        io.file_hash(checkpoint),
        audit,
        splits,
        signals,
        records,
    )


def score_audit(
    *,
    splits: str | Path,
    signals: Paths,
    reference_signals: Paths,
    scores: str | Path,
    timings: str | Path,
    metrics: str | Path,
    roc: str | Path,
    audit: Experiment,
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
    fpr_levels: Sequence[float],
    confidence: float,
) -> None:
    """Every attack the audit's models allow (miaflow.audit.applicable), scored as the evaluate
    stage scores an experiment; the others are named in the log with the reason."""
    from miaflow.audit import applicable
    from miaflow.jobs.evaluate import score_attacks

    runnable, skipped = applicable(attacks, read_splits(splits))
    for attack, reason in skipped.items():
        log.info("%s: %s skipped: %s", audit.name, attack, reason)
    score_attacks(
        splits=splits,
        signals=signals,
        reference_signals=reference_signals,
        scores=scores,
        timings=timings,
        metrics=metrics,
        roc=roc,
        experiment=audit,
        attacks=runnable,
        options=options,
        seed=seed,
        fpr_levels=fpr_levels,
        confidence=confidence,
    )


def audit(*, metrics: Paths) -> None:
    """The stage's target (rule audit): print each audit's best attacks (BEST of them), as
    `make run`'s summary prints each experiment's best, so that `snakemake audit` ends with its
    result. Logged too, for the run records."""
    if not metrics:
        lines = ["No audits configured: see docs/audit.md (params.yaml, `audits`)."]
    else:
        table = pd.concat([io.read_parquet(path) for path in metrics], ignore_index=True)
        lines = [
            f"Best attacks of each audit (mean AUROC ± std over its target models; every "
            f"attack: {Path(metrics[0]).parents[1]}/):",
            *best_lines(table, top=BEST),
        ]
    for line in lines:
        log.info("%s", line)
    print("\n".join(lines), flush=True)
