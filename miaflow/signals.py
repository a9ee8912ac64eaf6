"""Per-sample signals (docs/algorithms.md#signals, #numerical-stability) and the signal store that
attacks read.

Models are run once; their raw logits are cached per training shard together with the derived
signals, in long format (one row per model and sample, docs/algorithms.md#artifacts). Attacks then
read (models x samples) matrices of one signal at a time from a `SignalStore`, never a model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from miaflow.io import read_schema, read_table, write_parquet

SIGNALS = ("loss", "confidence", "phi", "correct", "entropy", "mentr", "margin")

LOG_ZERO_PROB = float(np.log(1e-45))  # stands in for log(0) in GBDT/LR log-probabilities
PROB_FLOOR = 1e-30  # clamp for the logs of H and Mentr, as TDDBench and Song & Mittal do


def signals_from_logits(logits: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Every signal of SIGNALS, shape (..., n), from logits (..., n, C) and labels (n,).

    Log-probabilities are valid logits, so GBDT/LR outputs go through the same path once their
    -inf entries are made finite. Everything is computed in float64 from the log-softmax, so that
    phi and the loss neither saturate nor overflow for extremely confident models.
    """
    from scipy.special import logsumexp  # imported here: the workflow's parse reaches this module
    from scipy.stats import entropy  # imported here: scipy.stats is slow to import

    z = np.asarray(logits, dtype=np.float64)
    z = np.where(np.isneginf(z), LOG_ZERO_PROB, z)
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - logsumexp(z, axis=-1, keepdims=True)
    p = np.exp(log_p)

    y = np.broadcast_to(np.asarray(labels, dtype=np.int64), z.shape[:-1])
    is_label = np.arange(z.shape[-1]) == y[..., None]
    z_y = np.take_along_axis(z, y[..., None], axis=-1)[..., 0]
    z_others = np.where(is_label, -np.inf, z)
    log_p_y = np.take_along_axis(log_p, y[..., None], axis=-1)[..., 0]
    p_y = np.exp(log_p_y)

    log_one_minus_p = np.log(np.maximum(-np.expm1(log_p), PROB_FLOOR))  # expm1: exact near p = 1
    mentr = -(1.0 - p_y) * np.maximum(log_p_y, np.log(PROB_FLOOR)) - np.where(
        is_label, 0.0, p * log_one_minus_p
    ).sum(axis=-1)
    return {
        "loss": -log_p_y,
        "confidence": p_y,
        "phi": z_y - logsumexp(z_others, axis=-1),
        "correct": (z.argmax(axis=-1) == y).astype(np.float64),
        "entropy": entropy(p, base=2, axis=-1),
        "mentr": mentr,
        "margin": z_y - z_others.max(axis=-1),
    }


def outputs_table(
    model_ids: list[str], sample_ids: np.ndarray, labels: np.ndarray, logits: np.ndarray
) -> pa.Table:
    """Long-format table of logits (n_models, n_samples, C) plus every signal, one row per pair.

    Rows are model-major. Signals are computed from the float32 logits that are stored, so the
    table agrees with a recomputation from its own `logits` column.
    """
    logits = np.asarray(logits, dtype=np.float32)
    n_models, n_samples, n_classes = logits.shape
    if len(model_ids) != n_models:
        raise ValueError(f"{len(model_ids)} model ids for logits of {n_models} models")
    labels = np.asarray(labels, dtype=np.int64)
    signals = signals_from_logits(logits, labels)
    model_rows = np.repeat(np.arange(n_models), n_samples)
    columns = {
        "model_id": pa.array(model_ids, pa.string()).take(model_rows),
        "sample_id": pa.array(np.tile(np.asarray(sample_ids, dtype=np.int64), n_models)),
        "label": pa.array(np.tile(labels, n_models)),
        "logits": pa.FixedSizeListArray.from_arrays(pa.array(logits.reshape(-1)), n_classes),
    }
    columns.update({name: pa.array(signals[name].reshape(-1)) for name in SIGNALS})
    return pa.table(columns)


def write_signal_shard(
    path: str | os.PathLike, table: pa.Table, metadata: Mapping[str, str]
) -> None:
    """Write one shard atomically; `metadata` records the data and model hashes it came from."""
    write_parquet(path, table, metadata)


class SignalStore:
    """Read-only view of signal shards: (models x samples) matrices of one signal at a time.

    Only the `model_id` and `sample_id` columns are read up front, to index the rows of every
    model by sample id; a signal column is read from the shards the first time it is asked for.
    """

    def __init__(
        self,
        paths: Sequence[Path],
        index: dict[str, tuple[np.ndarray, np.ndarray]],
        columns: frozenset[str],
    ) -> None:
        self._paths = tuple(paths)
        self._index = index  # model id -> (its sample ids ascending, their row numbers)
        self._available = columns
        self._cache: dict[str, np.ndarray] = {}

    @classmethod
    def read(cls, paths: Sequence[str | os.PathLike]) -> SignalStore:
        """Index the rows of the shards at `paths` (which together hold each pair at most once)."""
        paths = [Path(p) for p in paths]
        names: dict[str, int] = {}
        codes, sample_ids = [], []
        for path in paths:
            table = read_table(
                path, columns=["model_id", "sample_id"], read_dictionary=["model_id"]
            )
            for chunk in table.column("model_id").chunks:
                to_code = np.array(
                    [names.setdefault(m, len(names)) for m in chunk.dictionary.to_pylist()],
                    dtype=np.int64,
                )
                codes.append(to_code[chunk.indices.to_numpy()])
            sample_ids.append(table.column("sample_id").to_numpy())
        code = np.concatenate(codes) if codes else np.empty(0, np.int64)
        sample = np.concatenate(sample_ids) if sample_ids else np.empty(0, np.int64)

        order = np.lexsort((sample, code))  # by model, then sample id
        bounds = np.searchsorted(code[order], np.arange(len(names) + 1))
        index: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for model, k in names.items():
            rows = order[bounds[k] : bounds[k + 1]]
            if len(rows) == 0:  # a name in a Parquet dictionary but in no row
                continue
            if np.any(np.diff(sample[rows]) == 0):
                raise ValueError(f"model {model!r} has duplicate sample ids in {paths}")
            index[model] = (sample[rows], rows)
        columns = frozenset(read_schema(paths[0]).names) if paths else frozenset()
        return cls(paths, index, columns)

    @property
    def model_ids(self) -> tuple[str, ...]:
        return tuple(self._index)

    @property
    def signals(self) -> tuple[str, ...]:
        """Names of the per-sample columns `matrix` serves (signals, `logits`, `label`)."""
        return tuple(sorted(self._available - {"model_id", "sample_id"}))

    def matrix(self, model_ids: Sequence[str], signal: str, sample_ids: np.ndarray) -> np.ndarray:
        """Values of `signal`, shape (len(model_ids), len(sample_ids)), float64.

        `signal="logits"` gives float32 logits of shape (n_models, n_samples, C).
        """
        sample_ids = np.asarray(sample_ids, dtype=np.int64)
        rows = np.empty((len(model_ids), len(sample_ids)), dtype=np.int64)
        for k, model in enumerate(model_ids):
            rows[k] = self._rows(model, sample_ids)
        return self._column(signal)[rows]

    def _rows(self, model: str, sample_ids: np.ndarray) -> np.ndarray:
        if model not in self._index:
            raise KeyError(f"model {model!r} is not in the signal store")
        known, rows = self._index[model]
        at = np.minimum(np.searchsorted(known, sample_ids), len(known) - 1)
        missing = known[at] != sample_ids
        if missing.any():
            raise KeyError(
                f"model {model!r} has no outputs for sample ids "
                f"{sample_ids[missing][:5].tolist()} (and {missing.sum()} in all)"
            )
        return rows[at]

    def _column(self, signal: str) -> np.ndarray:
        if signal not in self._cache:
            if signal not in self._available or signal in ("model_id", "sample_id"):
                raise KeyError(f"no signal {signal!r} in the signal store")
            chunks = [
                chunk
                for path in self._paths
                for chunk in read_table(path, columns=[signal]).column(signal).chunks
            ]
            if signal == "logits":
                width = chunks[0].type.list_size
                values = [c.flatten().to_numpy(zero_copy_only=False) for c in chunks]
                self._cache[signal] = np.concatenate(values).reshape(-1, width)
            else:
                values = [c.to_numpy(zero_copy_only=False) for c in chunks]
                self._cache[signal] = np.concatenate(values).astype(np.float64, copy=False)
        return self._cache[signal]
