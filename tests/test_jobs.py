"""Jobs that write several artifacts in one process write what the separate steps would."""

from __future__ import annotations

import pytest

from miaflow import io, jobs
from miaflow.data import read_dataset, write_dataset
from miaflow.splits import make_splits
from test_training import ARCHS, toy_dataset


def _trained_shard(tmp_path, arch_name: str):
    """Data, splits and one trained shard (with its signals) as the workflow writes them."""
    dataset = toy_dataset(image=arch_name == "cnn")
    data, splits = tmp_path / "data.parquet", tmp_path / "splits.parquet"
    write_dataset(data, dataset)
    drawn = make_splits(240, seed=1, dataset="toy", repeats=2, n_reference=2, n_population=0)
    io.write_parquet(splits, drawn.to_table(), {"data_hash": dataset.content_hash()})
    models, signals = tmp_path / "shard-0.safetensors", tmp_path / "shard-0.parquet"
    jobs.train_shard(data, splits, list(drawn.model_ids), "toy", arch_name, ARCHS[arch_name], 3, 1,
                     models, tmp_path / "shard-0.json", signals)
    return data, splits, models, signals


@pytest.mark.parametrize("arch_name", ["mlp", "cnn", "lr"])
def test_train_shard_writes_the_signals_of_its_saved_models(tmp_path, arch_name):
    data, _, models, signals = _trained_shard(tmp_path, arch_name)
    separately = tmp_path / "separately.parquet"
    jobs.compute_signals(data, models, 1, separately)
    assert signals.read_bytes() == separately.read_bytes()


def test_score_attacks_writes_the_metrics_of_its_scores(tmp_path):
    _, splits, _, signals = _trained_shard(tmp_path, "lr")
    out = {name: tmp_path / f"{name}.parquet" for name in ("scores", "metrics", "roc")}
    jobs.score_attacks(splits, [signals], [signals], ["metric-loss", "lira-offline"], {}, "toy", "lr",
                       0, [], [], out["scores"], tmp_path / "timings.tsv", metrics_out=out["metrics"],
                       roc_out=out["roc"], fpr_levels=[0.01, 0.1], confidence=0.9)
    jobs.compute_metrics(out["scores"], [0.01, 0.1], 0.9, tmp_path / "metrics-2.parquet",
                         tmp_path / "roc-2.parquet")
    assert out["metrics"].read_bytes() == (tmp_path / "metrics-2.parquet").read_bytes()
    assert out["roc"].read_bytes() == (tmp_path / "roc-2.parquet").read_bytes()


def test_prepare_dataset_draws_the_splits_of_the_stored_data(tmp_path):
    params = {"target_ratio": 0.5, "member_ratio": 0.5, "repeats": 2, "n_reference": 2,
              "n_population": 2}
    data, splits = tmp_path / "data.parquet", tmp_path / "splits.parquet"
    jobs.prepare_dataset("breast_cancer", {}, params, 7, data, splits)

    stored = read_dataset(data)
    drawn = make_splits(len(stored.labels), seed=7, dataset="breast_cancer", **params)
    io.write_parquet(tmp_path / "separately.parquet", drawn.to_table(),
                     {"data_hash": stored.content_hash()})
    assert splits.read_bytes() == (tmp_path / "separately.parquet").read_bytes()


@pytest.mark.parametrize("compiled", [False, True])
def test_use_deterministic_algorithms_sets_torchs_flags(compiled):
    """Both forms turn on deterministic kernels (warn only); only the compiled one pays for
    importing torch._inductor, whose own flag it also sets."""
    import subprocess
    import sys

    probe = f"""
import sys, torch
from miaflow.jobs import use_deterministic_algorithms
use_deterministic_algorithms(compiled={compiled})
inductor = sys.modules.get("torch._inductor.config")
print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
      inductor is not None and inductor.deterministic)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", str(compiled)]
