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
