"""Fetch a dataset's upstream file: retries with backoff, sha256 check, atomic write."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from pathlib import Path

from miaflow.io import ExplainedError

log = logging.getLogger(__name__)


class ChecksumError(ExplainedError, ValueError):
    """A downloaded file's sha256 differs from the published one."""


class DownloadError(ExplainedError, OSError):
    """A file could not be fetched, after retries."""


def download(
    url: str,
    dest: str | os.PathLike,
    sha256: str | None,
    *,
    retries: int = 4,
    timeout: float = 60.0,
    backoff: float = 2.0,
) -> str:
    """Fetch `url` (http(s) or file) into `dest` atomically and return its sha256.

    Network failures, 5xx/429 answers and truncated bodies are retried `retries` times with
    exponential backoff; a checksum mismatch is not (the server sends the wrong file) and leaves
    nothing at `dest`.
    """
    import http.client
    import time
    import urllib.error

    from miaflow.io import atomic_path

    attempt = 0
    while True:
        attempt += 1
        try:
            with atomic_path(dest) as tmp:
                actual = _fetch(url, tmp, timeout)
                if sha256 is not None and actual != sha256:
                    raise ChecksumError(
                        f"{url}: sha256 {actual}, expected {sha256}; nothing written to {dest}"
                    )
            if sha256 is None:
                log.warning("%s: no published sha256 to check; got %s", url, actual)
            return actual
        except urllib.error.HTTPError as error:
            if (error.code < 500 and error.code != 429) or attempt > retries:
                raise DownloadError(_download_failure(url, dest, attempt, error)) from error
            failure: Exception = error
        except (OSError, http.client.HTTPException) as error:  # URLError, timeouts, truncation
            if attempt > retries:
                raise DownloadError(_download_failure(url, dest, attempt, error)) from error
            failure = error
        delay = backoff * 2 ** (attempt - 1)
        log.warning("%s: attempt %d failed (%s); retrying in %.1f s", url, attempt, failure, delay)
        time.sleep(delay)


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a local file, remembered per (path, size, modification time): validation
    checks the same local copies each time one process validates params."""
    status = os.stat(path)
    return _sha256(str(Path(path).resolve()), status.st_size, status.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    from miaflow.io import file_hash

    return file_hash(path)


def _fetch(url: str, target: Path, timeout: float) -> str:
    """Stream one response into `target`, hashing as it goes; a short body is an error."""
    import http.client
    import urllib.request

    digest, size = hashlib.sha256(), 0
    with urllib.request.urlopen(url, timeout=timeout) as response, open(target, "wb") as out:
        for block in iter(lambda: response.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
            size += len(block)
        expected = response.headers.get("Content-Length")
    if expected is not None and size != int(expected):
        raise http.client.IncompleteRead(b"", int(expected) - size)
    return digest.hexdigest()


def _download_failure(url: str, dest: str | os.PathLike, attempts: int, error: Exception) -> str:
    return (
        f"could not download {url} to {dest} ({attempts} attempt(s)): {error}. Without a "
        f"network, get the file elsewhere and place it at {dest}, or set the dataset option "
        f"`path` to a local copy."
    )
