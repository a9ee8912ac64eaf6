"""End to end: README's audit example, run as written in the shared finished run (its project
has it, tests/workflow/test_workflow_e2e.py's `tiny_project`), through the real `snakemake`; a
bad file stopping the audit before any attack runs; and a checkpoint audited with miaflow's
reference models."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import yaml
from test_audit import trained_outside
from test_workflow_e2e import TINY_ATTACKS, make_project, run, tiny_params

pytestmark = [pytest.mark.audit, pytest.mark.e2e]


def test_the_readme_audit_example_runs_as_written(copy_of_finished_run):
    audited = copy_of_finished_run
    metrics = pd.read_parquet(audited / "results/audit/metrics/sklearn_digits/forest.parquet")
    assert set(metrics["target_model"]) == {"forest"} and set(metrics["dataset"]) == {
        "sklearn_digits"
    }
    auroc = metrics[metrics["metric"] == "auroc"].set_index("attack")["value"]
    # no population models (no RMIA: model-robust), no queries
    assert set(auroc.index) == set(TINY_ATTACKS) - {"model-robust", "query-neighbor"}
    assert auroc["lira-online"] > 0.7 and auroc["metric-loss"] > 0.6  # the forests memorise
    log = (audited / "records/audit/logs/score_audit/sklearn_digits/forest.log").read_text()
    assert "model-robust skipped: needs population models" in log
    assert "query-neighbor skipped: queries the model" in log
    # Run again, it finds the audit done and prints its best attacks, as the run did.
    result = run(["snakemake", "audit", "--cores", "1"], audited)
    said = result.stdout + result.stderr
    assert re.search(
        rf"^  sklearn_digits/forest +{re.escape(auroc.idxmax())} +AUROC \d\.\d{{3}}, "
        r"TPR@1%FPR \d\.\d{3}  \(over 1 target model\)$",
        said,
        re.MULTILINE,
    )
    assert re.search(r"^total +1$", said, re.MULTILINE)  # that report is the only job


def test_a_bad_file_stops_the_audit_before_any_attack(copy_of_finished_run):
    """`make run`'s terminal (its quiet filter) shows the reason in one line naming the file,
    without a traceback or Snakemake's error block; the job's log has the traceback."""
    project = copy_of_finished_run
    scores = project / "results/audit/scores/sklearn_digits/forest.parquet"
    scored = scores.stat().st_mtime_ns
    outputs = pd.read_parquet(project / "audit/outputs.parquet")
    outputs.loc[outputs.index[3], "prob_4"] = float("nan")
    outputs.to_parquet(project / "audit/outputs.parquet", index=False)
    quietly = ["python", "-m", "miaflow.runtime.quiet", "run.log", "--"]
    result = run([*quietly, "snakemake", "audit", "--cores", "2"], project, check=False)
    assert result.returncode != 0
    reason = "audit/outputs.parquet: 1 rows have NaN or infinite probs (model target-0, sample 3)"
    log = (project / "records/audit/logs/audit_outputs/sklearn_digits/forest.log").read_text()
    assert reason in log and "Traceback" in log
    shown = [line for line in result.stdout.splitlines() if "jobs done" not in line]
    assert shown[0] == f"miaflow: rule audit_outputs: {reason} (the traceback is in " + (
        "records/audit/logs/audit_outputs/sklearn_digits/forest.log)"
    )
    assert shown[1:] == ["Full log: run.log", "Failed (exit status 1): the reason is above."]
    assert scores.stat().st_mtime_ns == scored  # no attack ran


def test_a_checkpoint_is_audited_with_miaflows_reference_models(tmp_path):
    """A torch MLP trained outside the workflow on part of the target pool of breast_cancer,
    saved as a safetensors state dict: the audit scores the checkpoint's own outputs, trains
    miaflow's reference and population models of (breast_cancer, mlp) and runs every attack they
    allow, query attacks aside."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from miaflow.data import read_dataset
    from miaflow.jobs.common import read_splits

    params = tiny_params()
    params["experiments"] = [{"dataset": "breast_cancer", "arch": "lr"}]
    params["attacks"] = ["metric-loss", "lira-online", "model-robust", "query-neighbor"]
    params["architectures"]["mlp"].update(hidden=[32], epochs=20)
    project = make_project(tmp_path / "project", params)
    run(["snakemake", "--cores", "2", "results/prepare/splits/breast_cancer.parquet"], project)
    data = read_dataset(project / "results/prepare/data/breast_cancer.parquet")
    members = read_splits(project / "results/prepare/splits/breast_cancer.parquet").target_samples[
        ::2
    ]
    model = trained_outside(
        params["architectures"]["mlp"], data.features, data.labels, data.n_classes, members
    )
    (project / "audit").mkdir(exist_ok=True)
    save_file(model.state_dict(), project / "audit/mine.safetensors")
    np.savetxt(project / "audit/members.csv", members, fmt="%d", header="sample_id", comments="")
    params["audits"] = [
        {
            "name": "mine",
            "checkpoint": "audit/mine.safetensors",
            "arch": "mlp",
            "dataset": "breast_cancer",
            "members": "audit/members.csv",
        }
    ]
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["snakemake", "audit", "--cores", "2"], project)
    metrics = pd.read_parquet(project / "results/audit/metrics/breast_cancer/mine.parquet")
    auroc = metrics[metrics["metric"] == "auroc"].set_index("attack")["value"]
    assert set(auroc.index) == {"metric-loss", "lira-online", "model-robust"}
    assert auroc.between(0, 1).all()
    # The target's signals are the checkpoint's own outputs on every sample.
    signals = pd.read_parquet(project / "results/audit/signals/breast_cancer/mine.parquet")
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(
            model(torch.tensor(data.features)), torch.tensor(data.labels), reduction="none"
        )
    np.testing.assert_allclose(
        signals.sort_values("sample_id")["loss"], loss.numpy(), rtol=1e-4, atol=1e-5
    )
    assert (
        project / "results/train/signals/breast_cancer/mlp/shard-0.parquet"
    ).is_file()  # its references
