"""Jobs of the privacy stage: audit experiments that train targets with canaries and score every
canary trial (miaflow.privacy.experiments), and their ε lower bounds against each target's claim
(miaflow.privacy.results), the contract results/privacy/audit.parquet."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from miaflow import io
from miaflow.jobs.common import Paths, compute_session, torch_session

log = logging.getLogger(__name__)


def _metadata(data: str | Path) -> dict[str, str]:
    """What the trials were computed from: the prepared dataset's content hash."""
    return {"data_hash": io.read_parquet_metadata(data)["content_hash"]}


def privacy_heads(
    *,
    data: str | Path,
    canaries: str | Path,
    trials: str | Path,
    audit: Mapping[str, Any],
    delta: float,
    seed: int,
    threads: int,
) -> None:
    """The study's linear heads on a dataset's features, with canaries (`head_trials`)."""
    from miaflow.compute import torch_device
    from miaflow.data import read_dataset
    from miaflow.privacy.head_experiments import head_trials

    loaded = read_dataset(data)
    with torch_session(threads):
        table, scored = head_trials(
            loaded.name,
            loaded.features,
            loaded.labels,
            loaded.n_classes,
            audit,
            delta,
            seed,
            torch_device(),
        )
    io.write_parquet(canaries, table, _metadata(data))
    io.write_parquet(trials, scored, _metadata(data))


def privacy_model(
    *,
    data: str | Path,
    canaries: str | Path,
    trials: str | Path,
    audit: Mapping[str, Any],
    arch: Mapping[str, Any],
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    delta: float,
    seed: int,
    threads: int,
) -> None:
    """A model of an architecture recipe trained with canaries, its canaries scored
    (`model_trials`); its accuracy is logged and kept in the trials' metadata."""
    from miaflow.data import read_dataset
    from miaflow.privacy.model_experiments import model_trials

    loaded = read_dataset(data)
    with compute_session(arch, threads):
        table, scored, accuracy = model_trials(
            loaded.name,
            loaded.features,
            loaded.labels,
            loaded.n_classes,
            audit,
            arch,
            attacks,
            options,
            delta,
            seed,
            threads,
        )
    log.info("%s: train acc %.4f, test acc %.4f", audit["label"], *accuracy.values())
    metadata = {**_metadata(data), **{k: repr(v) for k, v in accuracy.items()}}
    io.write_parquet(canaries, table, _metadata(data))
    io.write_parquet(trials, scored, metadata)


def privacy_claim(
    *,
    canaries: str | Path,
    trials: str | Path,
    audit: Mapping[str, Any],
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
) -> None:
    """A user's model that claims an (ε, δ), from its outputs on its canaries (`audit_trials`)."""
    from miaflow.privacy.claims import audit_trials

    scored = audit_trials(str(canaries), audit, attacks, options, seed)
    io.write_parquet(trials, scored, {"canaries_sha256": io.file_hash(canaries)})


def privacy_bounds(*, trials: Paths, audit: str | Path, confidence: float, seed: int) -> None:
    """The ε lower bounds of every audit experiment's trials, one file (`results.bounds`)."""
    from miaflow.privacy.results import bounds, concat_rows

    rows = concat_rows([bounds(io.read_parquet(path), confidence, seed) for path in trials])
    for target, refuted in rows.groupby("target_model", sort=False)["falsified"].any().items():
        log.info("%s: %s", target, "claim refuted" if refuted else "claim not refuted")
    io.write_parquet(audit, rows)
