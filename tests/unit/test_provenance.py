"""Provenance records: every job records what its outputs were computed from, every job checks
its inputs against their records, and `make verify` checks every record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_jobs import fake_snakemake
from test_verify import flip_byte_keeping_size_and_time

from miaflow import io
from miaflow.runtime import adapter, provenance, verify


def copy_job(*, source: str, copied: str) -> None:
    io.write_bytes(copied, Path(source).read_bytes())


def folder_job(*, source: str, folder: str) -> None:
    Path(folder).mkdir(parents=True)
    for k in range(3):
        io.write_bytes(Path(folder) / f"part-{k}.bin", Path(source).read_bytes()[k:])


def join_job(*, folder: str, joined: str) -> None:
    io.write_bytes(joined, b"".join(path.read_bytes() for path in sorted(Path(folder).iterdir())))


def run_job(
    job, inputs: dict, outputs: dict, stage: str = "train", code: tuple[str, ...] = ()
) -> None:
    adapter.call(
        job,
        fake_snakemake(
            input={**inputs, "code": ["miaflow/io.py", *code]},
            output=outputs,
            log=[f"records/{stage}/logs/{job.__name__}.log"],
        ),
    )


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A working directory with a raw input and one recorded artifact computed from it."""
    monkeypatch.chdir(tmp_path)
    for folder in ("data", "results", "records/prepare/logs", "records/train/logs"):
        Path(folder).mkdir(parents=True)
    Path("data/raw.bin").write_bytes(bytes(range(256)) * 8)
    run_job(copy_job, {"source": "data/raw.bin"}, {"copied": "results/first.bin"}, "prepare")
    return tmp_path


def test_an_output_records_its_content_and_its_inputs(project: Path):
    record = json.loads(Path("records/prepare/provenance/results/first.bin.json").read_text())
    assert record == {
        "artifact": "results/first.bin",
        "rule": "a_rule",
        "sha256": io.file_hash("results/first.bin"),
        "inputs": {"data/raw.bin": io.file_hash("data/raw.bin")},
    }
    assert provenance.find_record("results/first.bin") == Path(
        "records/prepare/provenance/results/first.bin.json"
    )


def test_a_recorded_input_that_hashes_as_written_is_read(project: Path):
    run_job(copy_job, {"source": "results/first.bin"}, {"copied": "results/second.bin"})
    record = json.loads(Path("records/train/provenance/results/second.bin.json").read_text())
    assert record["inputs"] == {"results/first.bin": io.file_hash("results/first.bin")}


def stopped(capsys, job, inputs: dict, outputs: dict) -> str:
    """The one line a job that stops on a corrupt input says (the adapter's), its traceback left
    to the job's log."""
    with pytest.raises(SystemExit) as stop:
        run_job(job, inputs, outputs)
    assert stop.value.code == 1
    said = capsys.readouterr().err
    assert said.startswith("miaflow: rule a_rule: ") and "Traceback" not in said
    assert "CorruptArtifact" in Path(f"records/train/logs/{job.__name__}.log").read_text()
    return said


def test_a_flipped_byte_stops_the_reader_names_the_file_and_removes_it(project: Path, capsys):
    written = io.file_hash("results/first.bin")
    flip_byte_keeping_size_and_time(Path("results/first.bin"))
    message = stopped(
        capsys, copy_job, {"source": "results/first.bin"}, {"copied": "results/second.bin"}
    )
    assert "results/first.bin is corrupt" in message and f"written as {written}" in message
    assert "run the same command again" in message
    assert not Path("results/first.bin").exists() and not Path("results/second.bin").exists()


def test_a_directory_missing_a_file_is_removed_for_rebuilding(project: Path, capsys):
    run_job(folder_job, {"source": "results/first.bin"}, {"folder": "results/parts"})
    record = json.loads(Path("records/train/provenance/results/parts.json").read_text())
    assert sorted(record["files"]) == ["part-0.bin", "part-1.bin", "part-2.bin"]
    Path("results/parts/part-1.bin").unlink()
    message = stopped(
        capsys, join_job, {"folder": "results/parts"}, {"joined": "results/third.bin"}
    )
    assert "part-1.bin: missing from the directory" in message
    assert not Path("results/parts").exists()


def test_an_unreadable_record_condemns_its_artifact(project: Path, capsys):
    Path("records/prepare/provenance/results/first.bin.json").write_text('{"artifact": ')
    message = stopped(
        capsys, copy_job, {"source": "results/first.bin"}, {"copied": "results/second.bin"}
    )
    assert re.search("provenance record .* is unreadable", message)
    assert not Path("results/first.bin").exists()


def test_inputs_outside_results_are_hashed_but_not_checked(project: Path):
    Path("data/raw.bin").write_bytes(b"changed by the user")
    run_job(copy_job, {"source": "data/raw.bin"}, {"copied": "results/again.bin"})
    record = json.loads(Path("records/train/provenance/results/again.bin.json").read_text())
    assert record["inputs"] == {"data/raw.bin": io.file_hash("data/raw.bin")}


def test_verify_names_corrupt_and_stale_artifacts_without_dvc(project: Path, capsys):
    run_job(copy_job, {"source": "results/first.bin"}, {"copied": "results/second.bin"})
    assert verify.verify(project) == (2, [])
    assert verify.main([str(project)]) == 0
    flip_byte_keeping_size_and_time(Path("results/second.bin"))
    Path("data/raw.bin").write_bytes(b"a new download")  # first.bin was computed from the old one
    problems = {(p.path, p.what) for p in verify.verify(project)[1]}
    assert problems == {("results/second.bin", "corrupt"), ("results/first.bin", "stale")}
    assert verify.main([str(project)]) == 1
    assert "2 problems in 2 checked files" in capsys.readouterr().out


def test_verify_names_a_garbled_record(project: Path):
    record = Path("records/prepare/provenance/results/first.bin.json")
    record.write_text(record.read_text().replace('"artifact"', '"artefact"'))
    assert [(p.path, p.what) for p in verify.verify(project)[1]] == [
        ("records/prepare/provenance/results/first.bin.json", "corrupt")
    ]


def test_remove_damaged_removes_what_differs_and_what_was_computed_from_it(project: Path):
    run_job(folder_job, {"source": "results/first.bin"}, {"folder": "results/parts"})
    run_job(join_job, {"folder": "results/parts"}, {"joined": "results/from_parts.bin"})
    run_job(copy_job, {"source": "results/from_parts.bin"}, {"copied": "results/last.bin"})
    run_job(copy_job, {"source": "results/first.bin"}, {"copied": "results/second.bin"})
    flip_byte_keeping_size_and_time(Path("results/parts/part-2.bin"))
    Path("records/train/provenance/results/second.bin.json").write_text("{")
    removed = {d.artifact: d.reason for d in provenance.remove_damaged()}
    assert removed.keys() == {
        "results/parts",
        "results/second.bin",
        "results/from_parts.bin",
        "results/last.bin",
    }
    assert removed["results/last.bin"] == "computed from results/from_parts.bin"
    assert "written as" in removed["results/parts"]
    assert not any(Path(a).exists() for a in removed)
    assert not Path("records/train/provenance/results/second.bin.json").exists()
    assert Path("results/first.bin").exists() and provenance.remove_damaged() == []


def test_a_record_holds_the_code_that_ran_and_an_edit_makes_its_artifact_stale(project: Path):
    """A job edited during a run (or after it) leaves an artifact computed by other code than the
    files hold now: its record names each library file's digest, so `make verify` names it."""
    library = Path("miaflow/lib.py")
    library.parent.mkdir()
    library.write_text("x = 1\n")
    run_job(
        copy_job,
        {"source": "results/first.bin"},
        {"copied": "results/second.bin"},
        code=(str(library),),
    )
    record = json.loads(Path("records/train/provenance/results/second.bin.json").read_text())
    assert record["inputs"][str(library)] == io.file_hash(library)
    assert verify.verify(project)[1] == []
    library.write_text("x = 2\n")
    [problem] = verify.verify(project)[1]
    assert (problem.path, problem.what) == ("results/second.bin", "stale")
    assert str(library) in problem.detail
