"""Writes are atomic and deterministic."""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from miaflow import io


def test_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError):
        with io.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_failed_rewrite_keeps_the_old_file(tmp_path):
    target = tmp_path / "out.txt"
    io.write_text(target, "old")
    with pytest.raises(RuntimeError):
        with io.atomic_path(target) as tmp:
            tmp.write_text("new")
            raise RuntimeError("killed")
    assert target.read_text() == "old"


def test_parquet_is_byte_identical_and_keeps_metadata(tmp_path):
    frame = pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]})
    io.write_parquet(tmp_path / "1.parquet", frame, {"data_hash": "abc"})
    io.write_parquet(tmp_path / "2.parquet", frame, {"data_hash": "abc"})
    assert (tmp_path / "1.parquet").read_bytes() == (tmp_path / "2.parquet").read_bytes()
    assert io.read_parquet_metadata(tmp_path / "1.parquet") == {"data_hash": "abc"}


def test_written_files_get_the_usual_permissions(tmp_path):
    """mkstemp's private 0600 must not leak into shared artifacts and caches."""
    io.write_text(tmp_path / "a.txt", "x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o666 & ~umask


def flipped(path, offset: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_every_read_verifies_parquet_page_checksums(tmp_path, monkeypatch):
    """Of 100 single-bit flips across a Parquet artifact, none reads back as different values
    without an error; a corrupt artifact under results/ is removed so the next run rebuilds it."""
    monkeypatch.chdir(tmp_path)
    frame = pd.DataFrame({"sample_id": range(5000), "score": [i / 7 for i in range(5000)]})
    good = tmp_path / "good.parquet"
    io.write_parquet(good, frame)
    size, silent = good.stat().st_size, 0
    (tmp_path / "results").mkdir()
    artifact = tmp_path / "results" / "signals.parquet"
    for k in range(100):
        artifact.write_bytes(good.read_bytes())
        flipped(artifact, k * size // 100, bit=k % 8)
        try:
            silent += not io.read_parquet(artifact).equals(frame)
        except io.CorruptArtifact as error:
            assert "results/signals.parquet is corrupt" in str(error) and "removed" in str(error)
            assert not artifact.exists()
    assert silent == 0


def test_a_corrupt_file_outside_results_is_named_but_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "user_copy.parquet"
    io.write_parquet(source, pd.DataFrame({"x": range(1000)}))
    source.write_bytes(source.read_bytes()[:-20])  # truncated
    with pytest.raises(io.CorruptArtifact, match="user_copy.parquet is corrupt.*good copy"):
        io.read_parquet(source)
    assert source.exists()
    with pytest.raises(FileNotFoundError):
        io.read_parquet(tmp_path / "missing.parquet")


def test_a_wrong_request_is_not_taken_for_corruption(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    artifact = tmp_path / "results" / "scores.parquet"
    io.write_parquet(artifact, pd.DataFrame({"score": [0.5, 0.25]}))
    with pytest.raises(Exception, match="no_such_column") as raised:
        io.read_parquet(artifact, columns=["no_such_column"])
    assert not isinstance(raised.value, io.CorruptArtifact) and artifact.exists()
