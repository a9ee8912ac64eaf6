"""Query-based attacks (docs/algorithms.md#query-based-attacks): TDDBench's query family.

They never touch a model: the queries stage writes what they read, and an attack names it in
`reads`. Query-neighbor, -augment and -adv read the models' outputs on the dataset's query set
(artifact `outputs`: one row per model, sample and query, with signals) and, for Query-adv on
images, HopSkipJump distances (`distances`). Query-transfer, -qrm and -ref read the outputs of
the models the queries stage trains for them (`surrogates`, `regressors`, `canaries`). Rows are
picked by `inputs.target_model` (and `reference-0`, the shadow model) and aligned with the
evaluated samples by sample id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from miaflow.attacks.inputs import AttackInputs
from miaflow.attacks.learning import member_probability, train_attack_classifier
from miaflow.attacks.reference import in_out_stats, log_likelihood_ratio
from miaflow.models.kinds import CANARIES, DISTANCES, QUERY_OUTPUTS, REGRESSORS, SURROGATES
from miaflow.queries.sets import AUGMENT, AUGMENT_SHADOW, NEIGHBOUR, ORIG

SHADOW = "reference-0"


def _query_info(path: str) -> dict:
    """How the queries were made (modality, methods, scales), from the artifact's metadata."""
    from miaflow.io import read_parquet_metadata

    return json.loads(read_parquet_metadata(path)["queries"])


def query_signal(
    path: str, model: str, kinds: Sequence[str], signal: str, sample_ids: np.ndarray
) -> np.ndarray:
    """(Q, n) values of `signal` of `model` on the queries of `kinds`, in kind then index order."""
    from miaflow.io import read_parquet

    frame = read_parquet(
        path,
        columns=["sample_id", "query_kind", "query_index", signal],
        filters=[("model_id", "=", model), ("query_kind", "in", list(kinds))],
    )
    frame["kind_order"] = frame["query_kind"].map({k: i for i, k in enumerate(kinds)})
    wide = frame.pivot(index=["kind_order", "query_index"], columns="sample_id", values=signal)
    missing = np.setdiff1d(sample_ids, wide.columns.to_numpy())
    if missing.size or wide.empty:
        raise KeyError(f"{path}: no {kinds} queries of {model} for samples {missing[:5].tolist()}")
    return wide.sort_index()[sample_ids].to_numpy(dtype=np.float64)


def _queries(inputs: AttackInputs) -> str:
    return str(inputs.extra[QUERY_OUTPUTS])


def _first_queries(values: np.ndarray, inputs: AttackInputs) -> np.ndarray:
    """The original query (row 0) and the first `queries_used` extra ones (the attack's option;
    None: all): the scaling study's cut in the number of queries."""
    used = inputs.options.queries_used
    return values if used is None else values[: 1 + used]


def query_neighbor(inputs: AttackInputs) -> np.ndarray:
    """Share of noisy neighbours with a higher loss than the sample (mean loss rise for text)."""
    path = _queries(inputs)
    loss = _first_queries(
        query_signal(path, inputs.target_model, [ORIG, NEIGHBOUR], "loss", inputs.sample_ids),
        inputs,
    )
    rise = loss[1:] - loss[0]
    if _query_info(path)["modality"] == "text":
        return rise.mean(axis=0)
    return (rise > 0).mean(axis=0)


def query_augment(inputs: AttackInputs) -> np.ndarray:
    """Attack MLP on correctness under 10 augmentations, trained on the shadow model."""
    path = _queries(inputs)
    info = _query_info(path)
    kind = NEIGHBOUR if info["modality"] == "text" else AUGMENT
    shadow_kind = AUGMENT_SHADOW if AUGMENT_SHADOW in info else kind
    # Shadow g_0's pool is T (target_ref): its features and membership are over T as well.
    shadow = _first_queries(
        query_signal(path, SHADOW, [ORIG, shadow_kind], "correct", inputs.sample_ids), inputs
    )
    target = _first_queries(
        query_signal(path, inputs.target_model, [ORIG, kind], "correct", inputs.sample_ids), inputs
    )
    model = train_attack_classifier(shadow.T, inputs.reference_keep[0], inputs.seed)
    return member_probability(model, target.T)


def query_adv(inputs: AttackInputs) -> np.ndarray:
    """Distance to the decision boundary (HopSkipJump, images) or correctness under noise."""
    path = _queries(inputs)
    if _query_info(path)["modality"] != "image":
        correct = query_signal(
            path, inputs.target_model, [ORIG, NEIGHBOUR], "correct", inputs.sample_ids
        )
        return _first_queries(correct, inputs).mean(axis=0)
    from miaflow.io import read_table

    table = read_table(
        inputs.extra[DISTANCES],
        columns=["sample_id", "distance"],
        filters=[("model_id", "=", inputs.target_model)],
    )
    scores = np.full(len(inputs.sample_ids), np.nan)
    at = np.searchsorted(inputs.sample_ids, table.column("sample_id").to_numpy())
    scores[at] = table.column("distance").to_numpy()
    return scores


# --- attacks that read what the queries stage fits: surrogates, regressors, canaries ----------


def _rows(path: str, model_ids: Sequence[str], columns: Sequence[str]) -> pd.DataFrame:
    """Rows of `model_ids` in an artifact, sorted by model (in the given order) and sample."""
    from miaflow.io import read_parquet

    table = read_parquet(
        path,
        columns=["model_id", "sample_id", *columns],
        filters=[("model_id", "in", list(model_ids))],
    )
    table["model_id"] = pd.Categorical(table["model_id"], categories=list(model_ids))
    return table.sort_values(
        [c for c in ("model_id", "sample_id", "canary") if c in table], ignore_index=True
    )


def _target_rows(inputs: AttackInputs, artifact: str, columns: Sequence[str]) -> pd.DataFrame:
    """The target's rows of an artifact covering all of pool T, in the order of `inputs`."""
    table = _rows(inputs.extra[artifact], [inputs.target_model], columns)
    if not np.array_equal(table["sample_id"].to_numpy(), inputs.sample_ids):
        raise ValueError(
            f"{inputs.extra[artifact]}: rows of {inputs.target_model} do not cover "
            "the evaluated samples"
        )
    return table


def query_transfer(inputs: AttackInputs) -> np.ndarray:
    """Li & Zhang: negative true-label loss of a surrogate trained on the target's predicted
    labels."""
    return -_target_rows(inputs, SURROGATES, ["loss"])["loss"].to_numpy(np.float64)


def query_qrm(inputs: AttackInputs) -> np.ndarray:
    """Bertran et al.: target score standardised by a regressor fitted on non-members, (s − μ)/σ."""
    from miaflow.io import read_parquet_metadata

    signal = read_parquet_metadata(inputs.extra[REGRESSORS])["signal"]
    table = _target_rows(inputs, REGRESSORS, ["mu", "log_sigma"])
    return (inputs.target[signal] - table["mu"].to_numpy()) / np.exp(table["log_sigma"].to_numpy())


def query_ref(inputs: AttackInputs) -> np.ndarray:
    """Wen et al.: mean over canaries of LiRA's fixed-variance LLR of the target's canary phi.

    Scores only the points that have canaries; the others are NaN (not evaluated).
    """
    n_references = inputs.reference_keep.shape[0]
    references = [f"reference-{m}" for m in range(n_references)]
    table = _rows(inputs.extra[CANARIES], [*references, inputs.target_model], ["canary", "phi"])
    points = np.unique(table["sample_id"].to_numpy())
    n_canaries = int(table["canary"].max()) + 1
    if len(table) != (n_references + 1) * len(points) * n_canaries:
        raise ValueError(f"{inputs.extra[CANARIES]}: not every model has phi of every canary")
    phi = table["phi"].to_numpy().reshape(n_references + 1, len(points) * n_canaries)
    position = np.searchsorted(inputs.sample_ids, points)
    if not np.array_equal(
        inputs.sample_ids[np.minimum(position, len(inputs.sample_ids) - 1)], points
    ):
        raise ValueError(f"{inputs.extra[CANARIES]}: canaries of samples outside pool T")
    keep = np.repeat(inputs.reference_keep[:, position], n_canaries, axis=1)
    phi_in, phi_out = in_out_stats(phi[:n_references], keep)
    llr = log_likelihood_ratio(
        phi[n_references], phi_in.median, phi_in.pooled_std, phi_out.median, phi_out.pooled_std
    )
    scores = np.full(len(inputs.sample_ids), np.nan)
    scores[position] = llr.reshape(len(points), n_canaries).mean(axis=1)
    return scores
