"""bench/workflow_e2e.py's accounting: which files are jobs, the import-recording hook, floors."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("workflow_e2e", REPO / "bench" / "workflow_e2e.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

BENCHMARK = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def test_only_snakemake_benchmark_files_are_jobs(tmp_path):
    folder = tmp_path / "records" / "evaluate" / "benchmarks" / "score_attacks" / "toy"
    folder.mkdir(parents=True)
    (folder / "mlp.tsv").write_text(BENCHMARK + "12.5\t0:00:12\t1\t1\t1\t1\t0\t0\t50\t10.0\n")
    (folder / "mlp.attacks.tsv").write_text("attack\tseconds\nmetric-loss\t0.5\n")  # an output
    jobs = bench.benchmark_jobs(tmp_path)
    assert jobs.to_dict("records") == [{"rule": "score_attacks", "s": 12.5, "cpu_time": 10.0}]


def test_hook_records_script_jobs_only(tmp_path):
    hook = tmp_path / bench.HOOK_DIR
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(bench.SITECUSTOMIZE)
    env = dict(os.environ, PYTHONPATH=str(hook))
    # The job burns some 50 ms of CPU: os.times() counts in clock ticks (10 ms), and a job that
    # only imports can end within one tick (seen under load: cpu 0.0).
    job = (
        "import time, types, decimal\nsnakemake = types.SimpleNamespace(rule='toy_rule')\n"
        "start = time.process_time()\nwhile time.process_time() - start < 0.05: pass\n"
    )
    subprocess.run([sys.executable, "-c", job], env=env, check=True)
    subprocess.run([sys.executable, "-c", "import decimal"], env=env, check=True)  # not a job
    records = bench.hook_records(tmp_path)
    assert records["rule"].tolist() == ["toy_rule"]
    record = records.iloc[0]
    assert "decimal" in record["modules"] and "sitecustomize" not in record["modules"]
    assert record["lifetime"] > 0 and record["cpu"] > 0


def test_floors_measured_once_per_distinct_set_of_modules(tmp_path, monkeypatch):
    (tmp_path / bench.HOOK_DIR).mkdir()
    records = pd.DataFrame(
        {"rule": ["a", "a", "b"], "modules": [["json", "decimal"], ["decimal", "json"], ["json"]]}
    )
    runs = []

    def fake_fastest(args, root, repeats):
        script = Path(args[-1]).read_text()
        runs.append((script, repeats))
        return 2.0 if "decimal" in script else 1.0

    monkeypatch.setattr(bench, "fastest", fake_fastest)
    assert bench.measure_floors(tmp_path, records, 3).tolist() == [2.0, 2.0, 1.0]
    assert len(runs) == 2 and all(repeats == 3 for _, repeats in runs)
    # the generated script imports exactly the recorded list, and runs
    subprocess.run([sys.executable, str(tmp_path / bench.HOOK_DIR / "floor-0.py")], check=True)


def test_report_counts_jobs_without_benchmark_file(capsys):
    jobs = pd.DataFrame(
        {"rule": ["train_shard", "train_shard"], "s": [10.0, 20.0], "cpu_time": [9.0, 19.0]}
    )
    records = pd.DataFrame(
        {
            "rule": ["train_shard", "train_shard", "cost_table"],
            "lifetime": [9.5, 19.5, 3.0],
            "cpu": [9.0, 19.0, 2.0],
            "modules": [["numpy", "torch"]] * 2 + [["numpy"]],
            "floor": [4.0, 4.0, 1.0],
        }
    )
    bench.report(jobs, records, cores=2, wall=25.0, cpu=32.0, noop=1.0, bare=0.05, repeats=3)
    out = capsys.readouterr().out
    line = {text.split(":")[0]: text for text in out.splitlines()}
    assert "3 jobs (1 without a benchmark file" in out
    assert "33.0 s inside jobs" in out
    assert "fastest of 3" in out
    assert line["start-up floors, all jobs"].endswith(" 9.0 s")
    assert line["share of job time that is start-up floor"].endswith(" 27.3%")  # 9 / 33
    # payload 6 + 16 + 2 = 24 of 50 machine seconds
    assert line["share of machine time outside job payloads"].endswith(" 52.0%")
    assert "idle core-seconds: 18.0 of 50.0" in out
    assert "payload of the shortest / longest train_shard job: 6.0 s / 16.0 s" in out
