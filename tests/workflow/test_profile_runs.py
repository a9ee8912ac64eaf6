"""A profile chosen on the command line runs in runs/NAME/ (miaflow.runtime.profiles), beside
the results of the profile params.yaml selects, which it leaves as they are."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from miaflow.runtime.profiles import link_project, relocated, working_directory

PARAMS = {"profile": "default", "profiles": {"real-cpu": {"seed": 1}, "other": {"seed": 2}}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    for folder in ("miaflow", "rules", "results", "records", "audit", ".git"):
        (tmp_path / folder).mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data/README.md").write_text("raw data")
    return tmp_path


def test_only_a_known_profile_other_than_params_yaml_s_gets_its_own_directory(project):
    assert working_directory({"profile": "other"}, project) == project / "runs/other"
    assert working_directory({"profile": "default"}, project) is None  # params.yaml's
    assert working_directory({}, project) is None
    assert working_directory({"profile": "nope"}, project) is None  # validation stops it
    (project / "params.yaml").write_text(yaml.safe_dump({**PARAMS, "profile": "other"}))
    assert working_directory({"profile": "other"}, project) is None
    assert working_directory({"profile": "default"}, project) == project / "runs/default"


def test_the_run_directory_links_what_rules_read_and_keeps_its_own_outputs(project):
    run = link_project(project, project / "runs/other")
    assert (run / "miaflow").resolve() == (project / "miaflow").resolve()
    assert (run / "params.yaml").read_text() == (project / "params.yaml").read_text()
    assert not any((run / name).exists() for name in ("results", "records", "runs", ".git"))
    # data/ is the run's own folder, its entries links: downloads land in the project's data/raw
    assert (run / "data").is_dir() and not (run / "data").is_symlink()
    assert (run / "data/raw").is_symlink() and (project / "data/raw").is_dir()
    assert (run / ".snakemake/gpu-slots").resolve() == (project / ".snakemake/gpu-slots").resolve()
    assert link_project(project, run) == run  # a second run finds its links in place


def test_paths_that_leave_the_project_name_the_same_files_from_two_levels_below():
    config = {
        "datasets": {"adult": {"path": "../shared/data/adult"}, "x": {"path": "/abs"}},
        "audits": [{"outputs": "audit/outputs.parquet"}],
        "llm": {"model": "org/name"},
    }
    moved = relocated(config, 2)
    assert moved["datasets"]["adult"]["path"] == "../../../shared/data/adult"
    assert moved["datasets"]["x"]["path"] == "/abs"
    assert moved["audits"] == [{"outputs": "audit/outputs.parquet"}]  # linked: unchanged
    assert moved["llm"] == {"model": "org/name"}


def artifacts(root: Path) -> dict[str, str]:
    """sha256 of every file under results/ and records/ (modification times are not kept)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for tree in ("results", "records")
        for path in sorted((root / tree).rglob("*"))
        if path.is_file()
    }


@pytest.mark.e2e
def test_a_command_line_profile_runs_in_its_directory_and_leaves_the_default_as_it_is(tmp_path):
    from test_workflow_e2e import make_project, run, tiny_params

    params = tiny_params()
    params["profiles"]["other"] = {"seed": 7}
    root = make_project(tmp_path / "project", params)
    target = ["snakemake", "--cores", "1", "results/prepare/splits/breast_cancer.parquet"]
    run(target, root)
    before = artifacts(root)
    mtimes = {path: (root / path).stat().st_mtime_ns for path in before}
    run([*target, "--config", "profile=other"], root)
    assert artifacts(root) == before
    assert {path: (root / path).stat().st_mtime_ns for path in before} == mtimes
    elsewhere = artifacts(root / "runs/other")
    splits = "results/prepare/splits/breast_cancer.parquet"
    assert elsewhere[splits] != before[splits]  # another seed, another split
    assert {
        "records/prepare/provenance/results/prepare/splits/breast_cancer.parquet.json",
        "records/prepare/logs/prepare_dataset/breast_cancer.log",
    } <= set(elsewhere)
    assert "Nothing to be done" in run([*target, "-n"], root).stdout
    assert "Nothing to be done" in run([*target, "-n", "--config", "profile=other"], root).stdout
