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

from miaflow.attacks.registry import AttackInputs, register
from miaflow.queries import AUGMENT, AUGMENT_SHADOW, NEIGHBOUR, ORIG

SHADOW = "reference-0"
VAL_RATIO, BATCH_SIZE, MAX_EPOCHS, PATIENCE = 0.1, 128, 500, 30  # ALGORITHMS.md 2.4


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


@register("query-neighbor", "query")
def query_neighbor(inputs: AttackInputs) -> np.ndarray:
    """Share of noisy neighbours with a higher loss than the sample (mean loss rise for text)."""
    path = _queries(inputs)
    loss = query_signal(path, inputs.target_model, [ORIG, NEIGHBOUR], "loss", inputs.sample_ids)
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
    shadow = query_signal(path, SHADOW, [ORIG, shadow_kind], "correct", inputs.sample_ids)
    target = query_signal(path, inputs.target_model, [ORIG, kind], "correct", inputs.sample_ids)
    return attack_classifier(shadow.T, inputs.reference_keep[0], target.T, inputs.seed)


@register("query-adv", "query", subset=True)
def query_adv(inputs: AttackInputs) -> np.ndarray:
    """Distance to the decision boundary (HopSkipJump, images) or correctness under noise."""
    path = _queries(inputs)
    if _query_info(path)["modality"] != "image":
        correct = query_signal(path, inputs.target_model, [ORIG, NEIGHBOUR], "correct",
                               inputs.sample_ids)
        return correct.mean(axis=0)
    import pyarrow.parquet as pq

    table = pq.read_table(inputs.extra["distances"], columns=["sample_id", "distance"],
                          filters=[("model_id", "=", inputs.target_model)])
    scores = np.full(len(inputs.sample_ids), np.nan)
    at = np.searchsorted(inputs.sample_ids, table.column("sample_id").to_numpy())
    scores[at] = table.column("distance").to_numpy()
    return scores


def attack_classifier(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                      seed: int) -> np.ndarray:
    """Member probability from the learning-based attack MLP of ALGORITHMS.md 2.4.

    F → 64 → ReLU → 32 → ReLU → 2, no feature scaling; 10% validation drawn without replacement;
    Adam (lr 1e-3), batch 128, at most 500 epochs, stop after 31 epochs without a strict gain in
    validation accuracy and restore the best weights. Runs on one CPU thread: the network is so
    small that more threads only add synchronisation.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _fit_and_score(train_x, train_y, test_x, seed)
    finally:
        torch.set_num_threads(threads)


def _fit_and_score(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                   seed: int) -> np.ndarray:
    import torch
    from torch import nn

    generator = np.random.default_rng(seed)
    n = len(train_x)
    validation = np.zeros(n, dtype=bool)
    validation[generator.choice(n, size=int(VAL_RATIO * n), replace=False)] = True
    x = torch.as_tensor(train_x, dtype=torch.float32)
    y = torch.as_tensor(np.asarray(train_y), dtype=torch.int64)
    x_train, y_train = x[~validation], y[~validation]
    x_val, y_val = x[validation], y[validation]

    torch.manual_seed(seed % 2**63)
    model = nn.Sequential(nn.Linear(x.shape[1], 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
                          nn.Linear(32, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    shuffle = torch.Generator().manual_seed(seed % 2**63)
    best_acc, best_state, stale = -1.0, None, 0
    for _ in range(MAX_EPOCHS):
        model.train()
        for batch in torch.randperm(len(x_train), generator=shuffle).split(BATCH_SIZE):
            loss = nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            acc = float((model(x_val).argmax(dim=1) == y_val).float().mean()) if len(y_val) else 0.0
        if acc > best_acc:
            best_acc, stale = acc, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            stale += 1
            if stale > PATIENCE:
                break
    model.load_state_dict(best_state)
    model.eval()
    with torch.no_grad():
        logits = model(torch.as_tensor(test_x, dtype=torch.float32))
    return torch.softmax(logits.double(), dim=1)[:, 1].numpy()
