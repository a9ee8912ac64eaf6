"""`make verify` (miaflow.runtime.verify) re-hashes every artifact recorded in dvc.lock: a flipped
byte with size and modification time preserved, and a deleted file, are named; the real `dvc`
records the run and restores the files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from miaflow.runtime import verify

DVC = str(Path(sys.executable).parent / "dvc")
STAGE = """stages:
  make:
    cmd: python -c "import pathlib; d = pathlib.Path('results/shards'); d.mkdir(parents=True);
      [(d / f'shard-{i}.bin').write_bytes(bytes(range(i, i + 200))) for i in range(3)];
      pathlib.Path('results/table.csv').write_text('a,b\\\\n1,2\\\\n')"
    outs:
      - results/shards
      - results/table.csv
"""


def dvc(args: list[str], cwd: Path) -> str:
    return subprocess.run([DVC, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dvc(["init", "-q"], tmp_path)
    (tmp_path / "dvc.yaml").write_text(STAGE)
    dvc(["repro"], tmp_path)
    return tmp_path


def flip_byte_keeping_size_and_time(path: Path, offset: int = 7) -> None:
    stat, data = path.stat(), bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_clean_run_verifies(run_root: Path, capsys):
    assert verify.verify(run_root) == (4, [])
    assert verify.main([str(run_root)]) == 0
    assert (
        "all 4 checked files match dvc.lock and their provenance records" in capsys.readouterr().out
    )


def test_bit_rot_and_deletion_are_named_where_dvc_sees_nothing(run_root: Path, capsys):
    flip_byte_keeping_size_and_time(run_root / "results/shards/shard-1.bin")
    flip_byte_keeping_size_and_time(run_root / "results/table.csv", offset=2)
    assert "up to date" in dvc(["status"], run_root)  # size and time unchanged: DVC sees nothing
    (run_root / "results/shards/shard-2.bin").unlink()
    checked, problems = verify.verify(run_root)
    assert checked == 4
    assert {(p.path, p.what) for p in problems} == {
        ("results/shards/shard-1.bin", "corrupt"),
        ("results/table.csv", "corrupt"),
        ("results/shards/shard-2.bin", "missing"),
    }
    assert verify.main([str(run_root)]) == 1
    assert "3 problems in 4 checked files" in capsys.readouterr().out
    dvc(["checkout", "--relink"], run_root)  # the advice the message gives
    assert verify.verify(run_root) == (4, [])


def test_a_manifest_missing_from_the_cache_is_reported_not_skipped(run_root: Path):
    for manifest in (run_root / verify.CACHE).rglob("*.dir"):
        manifest.unlink()
    _, problems = verify.verify(run_root)
    assert [(p.path, p.what) for p in problems] == [("results/shards", "unverifiable")]


@pytest.mark.e2e
def test_a_flipped_byte_in_every_artifact_type_of_a_real_run_is_named(copy_of_finished_run: Path):
    """One file of each kind the workflow writes (by suffix: Parquet, safetensors, JSON, the
    language models' checkpoint files, tables, figures, run records), one byte flipped, half of
    them with size and modification time kept: `make verify`'s command names every one."""
    root = copy_of_finished_run
    recorded, problems = verify.recorded_files(root)
    assert not problems
    by_kind: dict[str, str] = {}
    for path in sorted(recorded):
        by_kind.setdefault(Path(path).suffix or Path(path).name, path)
    assert {
        ".parquet",
        ".safetensors",
        ".json",
        ".csv",
        ".md",
        ".tex",
        ".png",
        ".tsv",
        ".log",
    } <= by_kind.keys()
    for k, path in enumerate(sorted(by_kind.values())):
        target = root / path
        if k % 2:
            flip_byte_keeping_size_and_time(target, offset=min(7, target.stat().st_size - 1))
        else:
            data = bytearray(target.read_bytes())
            data[-1] ^= 0x01
            target.write_bytes(bytes(data))
    result = subprocess.run(
        [sys.executable, "-m", "miaflow.runtime.verify"], cwd=root, capture_output=True, text=True
    )
    assert result.returncode == 1
    named = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("corrupt: ")}
    assert named == set(by_kind.values()), result.stdout
