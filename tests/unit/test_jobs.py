"""Jobs: the Snakemake adapter hands named fields over by name, and jobs that write several
artifacts in one process write what the separate steps would."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from test_training import ARCHS, toy_dataset

from miaflow import io
from miaflow.data import read_dataset, write_dataset
from miaflow.jobs import evaluate, prepare, report, train
from miaflow.plan import Experiment
from miaflow.plan.stages import STAGES
from miaflow.runtime import adapter
from miaflow.splits import make_splits


class Fields(dict):
    """Stands in for Snakemake's named lists: `items()` of the named entries."""


def fake_snakemake(input=None, output=None, params=None, threads=1, log=()):
    return SimpleNamespace(
        rule="a_rule",
        input=Fields(input or {}),
        output=Fields(output or {}),
        params=Fields(params or {}),
        threads=threads,
        log=list(log),
    )


def test_adapter_passes_named_fields_and_threads_by_name():
    received = {}

    def job(*, data, splits, model_ids, threads):
        received.update(data=data, splits=splits, model_ids=model_ids, threads=threads)

    snakemake = fake_snakemake(
        input={"data": "d.parquet", "code": ["miaflow/io.py"]},
        output={"splits": "s.parquet"},
        params={"model_ids": ["m"]},
        threads=3,
    )
    adapter.call(job, snakemake)
    assert received == {
        "data": "d.parquet",
        "splits": "s.parquet",
        "model_ids": ["m"],
        "threads": 3,
    }


def test_adapter_leaves_threads_out_of_jobs_that_do_not_take_them():
    def job(*, data):
        pass

    assert adapter.arguments(job, fake_snakemake(input={"data": "x"}, threads=2)) == {"data": "x"}


def test_a_misnamed_key_fails_loudly_with_its_name():
    def job(*, data, splits):
        pass

    with pytest.raises(TypeError, match="'split'"):
        adapter.call(job, fake_snakemake(input={"data": "x"}, output={"split": "y"}))
    with pytest.raises(TypeError, match="'data' is also the key"):
        adapter.arguments(job, fake_snakemake(input={"data": "x"}, output={"data": "y"}))


def _trained_shard(tmp_path, arch_name: str):
    """Data, splits and one trained shard (with its signals) as the workflow writes them."""
    dataset = toy_dataset(image=arch_name == "cnn")
    data, splits = tmp_path / "data.parquet", tmp_path / "splits.parquet"
    write_dataset(data, dataset)
    drawn = make_splits(240, seed=1, dataset="toy", repeats=2, n_reference=2, n_population=0)
    io.write_parquet(splits, drawn.to_table(), {"data_hash": dataset.content_hash()})
    models, signals = tmp_path / "shard-0.safetensors", tmp_path / "shard-0.parquet"
    train.train_shard(
        data=data,
        splits=splits,
        models=models,
        records=tmp_path / "shard-0.json",
        signals=signals,
        model_ids=list(drawn.model_ids),
        arch_name=arch_name,
        arch=ARCHS[arch_name],
        seed=3,
        threads=1,
    )
    return data, splits, models, signals


@pytest.mark.parametrize("arch_name", ["mlp", "cnn", "lr"])
def test_train_shard_writes_the_signals_of_its_saved_models(tmp_path, arch_name):
    data, _, models, signals = _trained_shard(tmp_path, arch_name)
    separately = tmp_path / "separately.parquet"
    train.compute_signals(data=data, models=models, signals=separately, threads=1)
    assert signals.read_bytes() == separately.read_bytes()


def test_score_attacks_writes_the_metrics_of_its_scores(tmp_path):
    _, splits, _, signals = _trained_shard(tmp_path, "lr")
    out = {name: tmp_path / f"{name}.parquet" for name in ("scores", "metrics", "roc")}
    evaluate.score_attacks(
        splits=splits,
        signals=[signals],
        reference_signals=[signals],
        timings=tmp_path / "timings.tsv",
        experiment=Experiment("toy", "lr", "lr"),
        attacks=["metric-loss", "lira-offline"],
        options={},
        seed=0,
        fpr_levels=[0.01, 0.1],
        confidence=0.9,
        **out,
    )
    evaluate.compute_metrics(
        scores=out["scores"],
        fpr_levels=[0.01, 0.1],
        confidence=0.9,
        metrics=tmp_path / "metrics-2.parquet",
        roc=tmp_path / "roc-2.parquet",
    )
    assert out["metrics"].read_bytes() == (tmp_path / "metrics-2.parquet").read_bytes()
    assert out["roc"].read_bytes() == (tmp_path / "roc-2.parquet").read_bytes()


def test_paired_tests_read_the_scores_and_the_metrics_of_the_evaluate_stage(tmp_path):
    _, splits, _, signals = _trained_shard(tmp_path, "lr")
    out = {name: tmp_path / f"{name}.parquet" for name in ("scores", "metrics", "roc")}
    evaluate.score_attacks(
        splits=splits,
        signals=[signals],
        reference_signals=[signals],
        timings=tmp_path / "timings.tsv",
        experiment=Experiment("toy", "lr", "lr"),
        attacks=["metric-loss", "metric-conf", "lira-offline"],
        options={},
        seed=0,
        fpr_levels=[0.1],
        confidence=0.9,
        **out,
    )
    report.paired_tests(
        metrics=out["metrics"],
        scores=[out["scores"]],
        tests=tmp_path / "tests.parquet",
        tested_metrics=["auroc"],
        alpha=0.05,
        n_resamples=19,
        seed=0,
    )
    tests = io.read_parquet(tmp_path / "tests.parquet")
    # 2 vs-best rows, 1 family-best row (lira against metric), all tested over samples.
    assert sorted(tests["family"]) == ["family-best", "vs-best", "vs-best"]
    assert {"attack_a", "attack_b", "p_ttest_by", "p_perm_by"} <= set(tests.columns)
    assert tests["p_perm"].between(1 / 20, 1).all() and tests["p_delong"].notna().all()
    assert (tests["n_samples"] > 0).all()


def test_score_attacks_names_an_artifact_the_rule_does_not_give(tmp_path):
    _, splits, _, signals = _trained_shard(tmp_path, "lr")
    with pytest.raises(ValueError, match="'query-qrm' reads \\['regressors'\\]"):
        evaluate.score_attacks(
            splits=splits,
            signals=[signals],
            reference_signals=[signals],
            scores=tmp_path / "s.parquet",
            timings=tmp_path / "t.tsv",
            metrics=tmp_path / "m.parquet",
            roc=tmp_path / "r.parquet",
            experiment=Experiment("toy", "lr", "lr"),
            attacks=["query-qrm"],
            options={},
            seed=0,
            fpr_levels=[0.1],
            confidence=0.9,
        )


def test_prepare_dataset_draws_the_splits_of_the_stored_data(tmp_path):
    settings = {
        "target_ratio": 0.5,
        "member_ratio": 0.5,
        "repeats": 2,
        "n_reference": 2,
        "n_population": 2,
    }
    data, splits = tmp_path / "data.parquet", tmp_path / "splits.parquet"
    prepare.prepare_dataset(
        sources=[],
        data=data,
        splits=splits,
        dataset="breast_cancer",
        options={},
        split_settings=settings,
        seed=7,
    )

    stored = read_dataset(data)
    drawn = make_splits(len(stored.labels), seed=7, dataset="breast_cancer", **settings)
    io.write_parquet(
        tmp_path / "separately.parquet", drawn.to_table(), {"data_hash": stored.content_hash()}
    )
    assert splits.read_bytes() == (tmp_path / "separately.parquet").read_bytes()


@pytest.mark.parametrize("compiled", [False, True])
def test_use_deterministic_algorithms_sets_torchs_flags(compiled):
    """Both forms turn on deterministic kernels (warn only); only the compiled one pays for
    importing torch._inductor, whose own flag it also sets."""
    probe = f"""
import sys, torch
from miaflow.compute import use_deterministic_algorithms
use_deterministic_algorithms(compiled={compiled})
inductor = sys.modules.get("torch._inductor.config")
print(torch.are_deterministic_algorithms_enabled(),
      torch.is_deterministic_algorithms_warn_only_enabled(),
      inductor is not None and inductor.deterministic)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", str(compiled)]


@pytest.mark.parametrize("stage", STAGES)
def test_a_jobs_module_leaves_heavy_libraries_to_the_jobs_that_use_them(stage):
    """Every job pays its script's imports before its first line: the adapter and a stage's jobs
    module import no library that takes a second or more (torch, transformers, scikit-learn, …);
    the job functions import what they use."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, miaflow.runtime.adapter, miaflow.jobs.{stage}; print(*sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [name for name in adapter.HEAVY_MODULES if name in loaded] == []


def test_a_job_stopped_by_a_full_disk_says_it_in_one_line(tmp_path, capsys):
    """A cause the user fixes (a full disk, a bad input file) ends the job with one line naming
    it; the traceback goes to the job's log only. A bug keeps its traceback."""
    import errno

    def full_disk(*, out):
        raise OSError(errno.ENOSPC, "No space left on device", out)

    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as stop:
        adapter.call(full_disk, fake_snakemake(output={"out": "results/x.parquet"}, log=[log]))
    said = capsys.readouterr().err
    assert stop.value.code == 1 and said.count("\n") == 1
    assert said.startswith("miaflow: rule a_rule: no space left on device writing results/x")
    assert "Traceback" not in said and "Traceback" in log.read_text()

    def bug(*, out):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        adapter.call(bug, fake_snakemake(output={"out": "x"}, log=[log]))
