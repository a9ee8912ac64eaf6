"""The queries stage's surrogates, regressors and canaries through the real `snakemake` on a tiny
config: the DVC `queries` target builds them, scores read them, and Query-ref has metrics rows on
images only."""

from __future__ import annotations

import pandas as pd
import pytest
from test_workflow_e2e import make_project, run, tiny_params

pytestmark = pytest.mark.e2e


def test_fitted_query_artifacts_build_through_snakemake(tmp_path):
    params = tiny_params()
    params["experiments"] = [
        {"dataset": "digits", "arch": "cnn"},
        {"dataset": "breast_cancer", "arch": "lr"},
    ]
    params["splits"].update(repeats=2, n_reference=2, n_population=0)
    params["architectures"]["cnn"]["epochs"] = 3
    params["attacks"] = ["metric-loss", "query-transfer", "query-qrm", "query-ref"]
    params["attack_options"] = {
        "query-qrm": {"epochs": 2},
        "query-ref": {"boundary_eva_num": 20, "n_canaries": 2, "steps": 2},
    }
    params["llm"]["experiments"] = []  # collect_metrics would need the llm stage's metrics
    root = make_project(tmp_path / "project", params)

    run(["snakemake", "prepare", "--cores", "2"], root)
    run(["snakemake", "train", "--cores", "2", "--allowed-rules", "train_shard", "train"], root)
    # The DVC queries stage's command: only its own rules, and it must build the query artifacts.
    run(
        [
            "snakemake",
            "queries",
            "--cores",
            "2",
            "--allowed-rules",
            "query_surrogates",
            "query_regressors",
            "query_canaries",
            "queries",
        ],
        root,
    )
    built = sorted(
        p.relative_to(root / "results/queries").as_posix()
        for p in (root / "results/queries").rglob("*.parquet")
    )
    assert built == [
        "canaries/digits/cnn.parquet",
        "regressors/breast_cancer/lr.parquet",
        "regressors/digits/cnn.parquet",
        "surrogates/breast_cancer/lr.parquet",
        "surrogates/digits/cnn.parquet",
    ]

    run(
        [
            "snakemake",
            "collect_metrics",
            "--cores",
            "2",
            "--allowed-rules",
            "collect_metrics",
            "operating_points",
            "score_attacks",
        ],
        root,
    )
    metrics = pd.read_parquet(root / "results/metrics.parquet")
    attacks = metrics.groupby("dataset")["attack"].unique().map(sorted).to_dict()
    assert attacks == {
        "digits": ["metric-loss", "query-qrm", "query-ref", "query-transfer"],
        "breast_cancer": ["metric-loss", "query-qrm", "query-transfer"],
    }
    ref_scores = pd.read_parquet(
        root / "results/evaluate/scores/digits/cnn.parquet", filters=[("attack", "==", "query-ref")]
    )
    assert len(ref_scores) == 2 * 20 and ref_scores["score"].notna().all()
