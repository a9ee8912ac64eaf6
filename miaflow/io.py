"""Atomic, deterministic artifact writers and readers (Parquet, JSON, text, safetensors).

Every writer goes to a temporary file in the destination directory and renames it into place, so a
killed job never leaves a half-written artifact. Parquet files carry no timestamps, so identical
inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes the file private; artifacts are shared
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Pretty, key-sorted JSON (stable bytes for identical content)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def write_parquet(path: str | os.PathLike, table: pa.Table | Any,
                  metadata: Mapping[str, str] | None = None) -> None:
    """Write a pyarrow Table (or pandas DataFrame) with optional string metadata, atomically."""
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_parquet_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The string metadata stored with `write_parquet` (pandas' own entry left out)."""
    raw = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in raw.items() if k != b"pandas"}


def write_with(path: str | os.PathLike, writer: Callable[[Path], None]) -> None:
    """Atomic wrapper for writers that need a file name (matplotlib, CatBoost, safetensors)."""
    with atomic_path(path) as tmp:
        writer(tmp)


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
