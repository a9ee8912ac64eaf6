"""Atomic, deterministic artifact writers and readers (Parquet, JSON, text, safetensors).

Every writer goes to a temporary file in the destination directory and renames it into place, so a
killed job never leaves a half-written artifact. Parquet files carry no timestamps, so identical
inputs give byte-identical files, and a CRC per data page that every read here verifies: a
corrupt artifact stops the job that reads it, naming the file, instead of feeding it wrong values.
The workflow's artifacts (under results/) found corrupt are removed, so that running the same
command again rebuilds them and what was computed from them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: writing text or JSON needs neither (parse time, commit)
    import pandas as pd
    import pyarrow as pa

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


@contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory next to `path`; it replaces `path`, whole, only if the block
    succeeds, so a killed job leaves either the old directory or the new one."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes the directory private
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


def write_parquet(
    path: str | os.PathLike, table: pa.Table | Any, metadata: Mapping[str, str] | None = None
) -> None:
    """Write a pyarrow Table (or pandas DataFrame) with optional string metadata, atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)


class ExplainedError(Exception):
    """An error whose message is the whole story for a user: the file and what is wrong with it.
    A job that stops on one says it in a line (`miaflow.runtime.adapter`); its log keeps the
    traceback."""


class CorruptArtifact(ExplainedError, RuntimeError):
    """An artifact whose content does not match its checksums, or does not parse at all."""


def discard(path: str | os.PathLike) -> None:
    """Remove a file or a directory output, if it is there."""
    path = Path(path)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def corrupt(path: str | os.PathLike, reason: str) -> CorruptArtifact:
    """The error for a corrupt file or directory; a workflow artifact (under ./results/) is
    removed first, so that the next run rebuilds it instead of reading it again."""
    path = Path(path)
    if path.resolve().is_relative_to(Path.cwd().resolve() / "results"):
        discard(path)
        return CorruptArtifact(
            f"{path} is corrupt ({reason}). It was removed: run the same "
            "command again to rebuild it and what was computed from it."
        )
    return CorruptArtifact(f"{path} is corrupt ({reason}); replace it with a good copy.")


def _checked(path: str | os.PathLike, read: Callable[[], Any]) -> Any:
    import pyarrow as pa

    try:
        return read()
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    # a bad CRC, a truncated or garbled footer, garbled pandas metadata (JSON) in the footer
    except (OSError, pa.ArrowException, ValueError) as error:
        if _intact(path):
            raise  # the request was wrong (e.g. a column it lacks), not the file
        raise corrupt(path, f"{type(error).__name__}: {error}") from None


def _intact(path: str | os.PathLike) -> bool:
    """Whether the whole file reads, every page's CRC checked."""
    import pyarrow as pa

    try:
        _verified_table(path, {}).to_pandas()
    except (OSError, pa.ArrowException, ValueError):
        return False
    return True


def read_table(path: str | os.PathLike, **options: Any) -> pa.Table:
    """`pq.read_table`, verifying every page's CRC."""
    return _checked(path, lambda: _verified_table(path, options))


def read_schema(path: str | os.PathLike) -> pa.Schema:
    """The schema in a Parquet artifact's footer."""
    import pyarrow.parquet as pq

    return _checked(path, lambda: pq.read_schema(path))


def read_parquet(path: str | os.PathLike, **options: Any) -> pd.DataFrame:
    """A Parquet artifact as a DataFrame (`read_table`, then pandas)."""
    return _checked(path, lambda: _verified_table(path, options).to_pandas())


def _verified_table(path: str | os.PathLike, options: Mapping[str, Any]) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(path, page_checksum_verification=True, **options)


def read_parquet_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The string metadata stored with `write_parquet` (pandas' own entry left out)."""
    raw = read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in raw.items() if k != b"pandas"}


def write_with(path: str | os.PathLike, writer: Callable[[Path], None]) -> None:
    """Atomic wrapper for writers that need a file name (matplotlib, CatBoost, safetensors)."""
    with atomic_path(path) as tmp:
        writer(tmp)


def file_hash(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file's content (sha256 for our records, md5 where DVC's are compared)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()
