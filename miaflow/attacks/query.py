"""Label-only and neighbour query attacks (ALGORITHMS.md 3.4): Query-neighbor, -augment, -adv.

They read the models' outputs on the query set of `miaflow.queries` (artifact `queries`: one
row per model, sample and query, with signals) and, for Query-adv on images, HopSkipJump
distances (artifact `distances`), never a model. Rows are picked by `inputs.target_model` (and
`reference-0`, the shadow model) and aligned with the evaluated samples by sample id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from miaflow.attacks.learning import member_probability, train_attack_classifier
from miaflow.attacks.registry import AttackInputs, register
from miaflow.queries import AUGMENT, AUGMENT_SHADOW, NEIGHBOUR, ORIG

SHADOW = "reference-0"


def _query_info(path: str) -> dict:
    """How the queries were made (modality, methods, scales), from the artifact's metadata."""
    from miaflow.io import read_parquet_metadata

    return json.loads(read_parquet_metadata(path)["queries"])


def query_signal(path: str, model: str, kinds: Sequence[str], signal: str,
                 sample_ids: np.ndarray) -> np.ndarray:
    """(Q, n) values of `signal` of `model` on the queries of `kinds`, in kind then index order."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["sample_id", "query_kind", "query_index", signal],
                          filters=[("model_id", "=", model), ("query_kind", "in", list(kinds))])
    frame = table.to_pandas()
    frame["kind_order"] = frame["query_kind"].map({k: i for i, k in enumerate(kinds)})
    wide = frame.pivot(index=["kind_order", "query_index"], columns="sample_id", values=signal)
    missing = np.setdiff1d(sample_ids, wide.columns.to_numpy())
    if missing.size or wide.empty:
        raise KeyError(f"{path}: no {kinds} queries of {model} for samples {missing[:5].tolist()}")
    return wide.sort_index()[sample_ids].to_numpy(dtype=np.float64)


def _queries(inputs: AttackInputs) -> str:
    return str(inputs.extra["queries"])


def _first_queries(values: np.ndarray, inputs: AttackInputs) -> np.ndarray:
    """The original query (row 0) and the first `queries_used` extra ones (option; default all):
    the scaling study's cut in the number of queries."""
    used = inputs.options.get("queries_used")
    return values if used is None else values[: 1 + int(used)]


@register("query-neighbor", "query")
def query_neighbor(inputs: AttackInputs) -> np.ndarray:
    """Share of noisy neighbours with a higher loss than the sample (mean loss rise for text)."""
    path = _queries(inputs)
    loss = _first_queries(query_signal(path, inputs.target_model, [ORIG, NEIGHBOUR], "loss",
                                       inputs.sample_ids), inputs)
    rise = loss[1:] - loss[0]
    if _query_info(path)["modality"] == "text":
        return rise.mean(axis=0)
    return (rise > 0).mean(axis=0)


@register("query-augment", "query", needs=("reference",))
def query_augment(inputs: AttackInputs) -> np.ndarray:
    """Attack MLP on correctness under 10 augmentations, trained on the shadow model."""
    path = _queries(inputs)
    info = _query_info(path)
    kind = NEIGHBOUR if info["modality"] == "text" else AUGMENT
    shadow_kind = AUGMENT_SHADOW if AUGMENT_SHADOW in info else kind
    # Shadow g_0's pool is T (target_ref): its features and membership are over T as well.
    shadow = _first_queries(query_signal(path, SHADOW, [ORIG, shadow_kind], "correct",
                                         inputs.sample_ids), inputs)
    target = _first_queries(query_signal(path, inputs.target_model, [ORIG, kind], "correct",
                                         inputs.sample_ids), inputs)
    model = train_attack_classifier(shadow.T, inputs.reference_keep[0], inputs.seed)
    return member_probability(model, target.T)


@register("query-adv", "query", subset=True)
def query_adv(inputs: AttackInputs) -> np.ndarray:
    """Distance to the decision boundary (HopSkipJump, images) or correctness under noise."""
    path = _queries(inputs)
    if _query_info(path)["modality"] != "image":
        correct = query_signal(path, inputs.target_model, [ORIG, NEIGHBOUR], "correct",
                               inputs.sample_ids)
        return _first_queries(correct, inputs).mean(axis=0)
    import pyarrow.parquet as pq

    table = pq.read_table(inputs.extra["distances"], columns=["sample_id", "distance"],
                          filters=[("model_id", "=", inputs.target_model)])
    scores = np.full(len(inputs.sample_ids), np.nan)
    at = np.searchsorted(inputs.sample_ids, table.column("sample_id").to_numpy())
    scores[at] = table.column("distance").to_numpy()
    return scores
