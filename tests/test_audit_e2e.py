"""End to end: README's audit example, run as written in a project, through the real `snakemake`;
and a bad file stopping the audit before any attack runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import copy_project
from test_workflow_e2e import make_project, run, tiny_params, with_readme_audit

pytestmark = [pytest.mark.audit, pytest.mark.e2e]


def audit_project(root: Path) -> Path:
    """A small project with README's audit example, as written."""
    params = tiny_params()
    params["experiments"] = [{"dataset": "breast_cancer", "arch": "lr"}]
    params["attacks"] = ["metric-loss", "lira-online", "rmia-offline", "query-neighbor"]
    return with_readme_audit(make_project(root, params))


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> Path:
    project = audit_project(tmp_path_factory.mktemp("audit") / "project")
    run(["snakemake", "audit", "--cores", "2"], project)
    return project


def test_the_readme_audit_example_runs_as_written(audited):
    metrics = pd.read_parquet(audited / "results/audit/metrics/sklearn_digits/forest.parquet")
    assert set(metrics["target_model"]) == {"forest"} and set(metrics["dataset"]) == {"sklearn_digits"}
    auroc = metrics[metrics["metric"] == "auroc"].set_index("attack")["value"]
    assert set(auroc.index) == {"metric-loss", "lira-online"}  # no population models, no queries
    assert auroc["lira-online"] > 0.7 and auroc["metric-loss"] > 0.6  # the forests memorise
    log = (audited / "records/audit/logs/score_audit/sklearn_digits/forest.log").read_text()
    assert "rmia-offline skipped: needs population models" in log
    assert "query-neighbor skipped: queries the model" in log
    assert "Nothing to be done" in run(["snakemake", "audit", "-n"], audited).stdout


def test_a_bad_file_stops_the_audit_before_any_attack(audited, tmp_path):
    project = copy_project(audited, tmp_path / "project")
    scores = project / "results/audit/scores/sklearn_digits/forest.parquet"
    scored = scores.stat().st_mtime_ns
    outputs = pd.read_parquet(project / "audit/outputs.parquet")
    outputs.loc[outputs.index[3], "prob_4"] = float("nan")
    outputs.to_parquet(project / "audit/outputs.parquet", index=False)
    result = run(["snakemake", "audit", "--cores", "2"], project, check=False)
    assert result.returncode != 0
    log = (project / "records/audit/logs/audit_outputs/sklearn_digits/forest.log").read_text()
    assert "audit/outputs.parquet: 1 rows have NaN or infinite probs (model target-0, sample 3)" in log
    assert scores.stat().st_mtime_ns == scored  # no attack ran
