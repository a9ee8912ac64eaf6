"""Query attacks whose models are trained by the workflow (ALGORITHMS.md 3.4): Query-transfer,
Query-qrm and Query-ref. Training jobs (`miaflow.query_models`) write their outputs on pool T;
these scores read them from `inputs.extra` (rows of `inputs.target_model`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from miaflow.attacks.reference import _log_likelihood_ratio, in_out_stats
from miaflow.attacks.registry import AttackInputs, register


def _rows(path: str, model_ids: Sequence[str], columns: Sequence[str]) -> pd.DataFrame:
    """Rows of `model_ids` in an artifact, sorted by model (in the given order) and sample."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["model_id", "sample_id", *columns],
                          filters=[("model_id", "in", list(model_ids))]).to_pandas()
    table["model_id"] = pd.Categorical(table["model_id"], categories=list(model_ids))
    return table.sort_values([c for c in ("model_id", "sample_id", "canary") if c in table],
                             ignore_index=True)


def _target_rows(inputs: AttackInputs, artifact: str, columns: Sequence[str]) -> pd.DataFrame:
    """The target's rows of an artifact covering all of pool T, in the order of `inputs`."""
    table = _rows(inputs.extra[artifact], [inputs.target_model], columns)
    if not np.array_equal(table["sample_id"].to_numpy(), inputs.sample_ids):
        raise ValueError(f"{inputs.extra[artifact]}: rows of {inputs.target_model} do not cover "
                         "the evaluated samples")
    return table


@register("query-transfer", "query")
def query_transfer(inputs: AttackInputs) -> np.ndarray:
    """Li & Zhang: negative true-label loss of a surrogate trained on the target's predicted labels."""
    return -_target_rows(inputs, "surrogates", ["loss"])["loss"].to_numpy(np.float64)


@register("query-qrm", "query")
def query_qrm(inputs: AttackInputs) -> np.ndarray:
    """Bertran et al.: target score standardised by a regressor fitted on non-members, (s − μ)/σ."""
    from miaflow.io import read_parquet_metadata

    signal = read_parquet_metadata(inputs.extra["regressors"])["signal"]
    table = _target_rows(inputs, "regressors", ["mu", "log_sigma"])
    return ((inputs.target[signal] - table["mu"].to_numpy())
            / np.exp(table["log_sigma"].to_numpy()))


@register("query-ref", "query", needs=("reference",), subset=True, modalities=("image",))
def query_ref(inputs: AttackInputs) -> np.ndarray:
    """Wen et al.: mean over canaries of LiRA's fixed-variance LLR of the target's canary phi.

    Scores only the points that have canaries; the others are NaN (not evaluated).
    """
    n_references = inputs.reference_keep.shape[0]
    references = [f"reference-{m}" for m in range(n_references)]
    table = _rows(inputs.extra["canaries"], [*references, inputs.target_model], ["canary", "phi"])
    points = np.unique(table["sample_id"].to_numpy())
    n_canaries = int(table["canary"].max()) + 1
    if len(table) != (n_references + 1) * len(points) * n_canaries:
        raise ValueError(f"{inputs.extra['canaries']}: not every model has phi of every canary")
    phi = table["phi"].to_numpy().reshape(n_references + 1, len(points) * n_canaries)
    position = np.searchsorted(inputs.sample_ids, points)
    if not np.array_equal(inputs.sample_ids[np.minimum(position, len(inputs.sample_ids) - 1)], points):
        raise ValueError(f"{inputs.extra['canaries']}: canaries of samples outside pool T")
    keep = np.repeat(inputs.reference_keep[:, position], n_canaries, axis=1)
    phi_in, phi_out = in_out_stats(phi[:n_references], keep)
    llr = _log_likelihood_ratio(phi[n_references], phi_in.median, phi_in.pooled_std,
                                phi_out.median, phi_out.pooled_std)
    scores = np.full(len(inputs.sample_ids), np.nan)
    scores[position] = llr.reshape(len(points), n_canaries).mean(axis=1)
    return scores
