"""Recording a run in dvc.lock (miaflow.runtime.commit): a kill, a cut lock or a full disk loses
nothing, and says what happened in a line."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from miaflow.runtime import commit, verify

DVC = str(Path(sys.executable).parent / "dvc")
DVC_YAML = """stages:
  first:
    cmd: [mkdir -p out, cp in.txt out/copy.txt]
    deps: [in.txt]
    outs: [out]
  second:
    cmd: cp out/copy.txt second.txt
    deps: [out]
    outs: [second.txt]
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A DVC project without git, its two stages' outputs in place and recorded once."""
    monkeypatch.chdir(tmp_path)
    subprocess.run([DVC, "init", "--no-scm", "-q"], check=True)
    Path("dvc.yaml").write_text(DVC_YAML)
    Path("in.txt").write_text("data\n")
    Path("out").mkdir()
    Path("out/copy.txt").write_text("data\n")
    Path("second.txt").write_text("data\n")
    assert commit.commit(tmp_path) == 0
    return tmp_path


def status(root: Path) -> str:
    return subprocess.run([DVC, "status"], cwd=root, capture_output=True, text=True).stdout


@pytest.mark.parametrize("cut", ["empty", "half", "garbled"])
def test_a_cut_or_unreadable_lock_is_recorded_again_whole(project: Path, cut: str, capsys):
    whole = (project / "dvc.lock").read_text()
    assert commit.lock_problem(project) is None and commit.lock_gaps(project) == []
    damaged = {"empty": "", "half": whole[: len(whole) // 2], "garbled": whole + "\t: ]\n"}[cut]
    (project / "dvc.lock").write_text(damaged)
    assert commit.lock_problem(project) or commit.lock_gaps(project)
    assert verify.verify(project)[1]  # reported, not a crash
    assert commit.commit(project) == 0
    assert (project / "dvc.lock").read_text() == whole
    assert "up to date" in status(project)


def test_a_kill_while_dvc_writes_the_lock_leaves_the_old_one_whole(project: Path, monkeypatch):
    """DVC writes dvc.lock in place; under `atomic_dvc_writes` a write that stops half-way (here
    an error after the first half, as a kill would) leaves the lock as it was."""
    from dvc.utils.serialize import _yaml

    before = (project / "dvc.lock").read_bytes()
    real_dump = _yaml._dump

    def dump_half_then_die(data, stream):
        whole = io.StringIO()
        real_dump(data, whole)
        if "dvc.lock" not in str(getattr(stream, "name", "")):  # the run cache's, say
            return real_dump(data, stream)
        stream.write(whole.getvalue()[: len(whole.getvalue()) // 2])
        stream.flush()
        raise KeyboardInterrupt("killed half-way")

    monkeypatch.setattr(_yaml, "_dump", dump_half_then_die)
    Path("in.txt").write_text("other data\n")
    Path("out/copy.txt").write_text("other data\n")
    with commit.atomic_dvc_writes(), pytest.raises(KeyboardInterrupt):
        from dvc.repo import Repo

        with Repo(str(project)) as repo:
            repo.commit(force=True)
    assert (project / "dvc.lock").read_bytes() == before
    assert not list(project.glob(".dvc.lock.*.tmp"))


def test_a_full_disk_in_the_commit_says_why_and_removes_dvcs_temporary_files(
    project: Path, monkeypatch, capsys
):
    from dvc.repo import Repo

    def full_disk(self, *args, **kwargs):
        leftover = project / ".dvc/cache/files/md5/ab/.cdef.1234.tmp"
        leftover.parent.mkdir(parents=True, exist_ok=True)
        leftover.write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(leftover))

    monkeypatch.setattr(Repo, "commit", full_disk)
    assert commit.commit(project) == 1
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("miaflow: dvc commit failed: no space left on device writing")
    assert "Free space and run the same command again" in said[0]
    assert said[1] == "miaflow: removed 1 temporary files from .dvc/cache"
    assert not list(project.glob(commit.DVC_TEMP_FILES))
