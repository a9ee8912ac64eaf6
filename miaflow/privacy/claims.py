"""The privacy audit of a model trained elsewhere that claims an (ε, δ) (an entry of `audits`
with `epsilon`, `delta` and `canaries`; docs/audit.md): its outputs on its canaries and their
inclusion, checked (`read_canaries`), scored like a trained model's (`miaflow.privacy.scoring`),
one run per target model."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from miaflow.privacy.scoring import canary_scores, scored_trials
from miaflow.seeding import derive_seed


def audit_trials(
    path: str,
    audit: Mapping[str, Any],
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
) -> pd.DataFrame:
    """Trials of a user's audit that claims `epsilon` and `delta` for its target models, from
    their outputs on the canaries and the canaries' inclusion (`read_canaries`): one run per
    target model, named the audit's name (with `/<model id>` when the file has several)."""
    outputs, table = read_canaries(path)
    frames = []
    for k, model in enumerate(outputs.model_ids):
        rows = table[table["model_id"] == model].sort_values("sample_id")
        name = audit["name"] if len(outputs.model_ids) == 1 else f"{audit['name']}/{model}"
        scores = canary_scores(
            outputs.logits[k].astype(np.float64),
            outputs.labels,
            attacks,
            options,
            derive_seed(seed, audit["dataset"], name),
        )
        identity = {
            "dataset": audit["dataset"],
            "target_model": name,
            "epsilon": float(audit["epsilon"]),
            "delta": float(audit["delta"]),
            "noise_multiplier": math.nan,
        }
        frames.append(scored_trials(identity, rows.reset_index(drop=True), scores))
    return pd.concat(frames, ignore_index=True)


def read_canaries(path: str) -> tuple[Any, pd.DataFrame]:
    """A user's canaries: their target models' outputs on them in the format of an audit's
    `outputs` (`miaflow.audit.read_outputs`: model_id target-<i>, sample_id 0 … m−1, label,
    logit_<c> or prob_<c>; every model covers every canary), with `included` (boolean: the model
    trained on the canary) and an optional `kind` (default "given"). Returns the outputs and a
    table of model_id, sample_id, kind and included. AuditInputError names the file and the
    problem: reference or population models, a bit that is not boolean, a target with every
    canary in or every canary out."""
    from miaflow.audit import AuditInputError, normalised_model_ids, read_outputs, read_user_table
    from miaflow.splits import role_of

    outputs = read_outputs(path)
    others = [m for m in outputs.model_ids if role_of(m) != "target"]
    if others:
        raise AuditInputError(path, f"canaries are audited on target models only, not {others}")
    frame = read_user_table(path)
    if "included" not in frame.columns:
        raise AuditInputError(path, "missing column 'included' (whether the model trained on it)")
    bits = frame["included"]
    if bits.isna().any() or not (
        pd.api.types.is_bool_dtype(bits) or set(pd.unique(bits)) <= {0, 1}
    ):
        raise AuditInputError(path, "column 'included' must be boolean (or 0/1), without gaps")
    table = pd.DataFrame(
        {
            "model_id": normalised_model_ids(frame["model_id"], path).to_numpy(),
            "sample_id": frame["sample_id"].to_numpy(np.int64),
            "kind": frame["kind"].astype(str).to_numpy() if "kind" in frame else "given",
            "included": bits.to_numpy().astype(bool),
        }
    )
    for model, rows in table.groupby("model_id"):
        if rows["included"].all() or not rows["included"].any():
            raise AuditInputError(
                path, f"model {model}: needs canaries both in and out of its training set"
            )
    return outputs, table
