"""SLURM (marker `slurm`): per-rule requests from measured benchmark files
(miaflow.tools.cluster), the shipped SLURM profiles, and (also marker `e2e`) a one-node
cluster from Debian packages that runs a small workflow through the executor plugin: the same
artifacts as a local run, every job in SLURM's accounting, GPUs asked for exactly by the rules
that run torch, and DVC recording the run."""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_workflow_e2e import digests, make_project, run, tiny_params

from miaflow.plan import stages
from miaflow.tools import cluster
from miaflow.tools.cluster import Headroom

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO / "tests" / "workflow" / "slurm" / "cluster.sh"
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
# Job states are checked 1 s (not 10) after the start and 1 s (not 40) after a check that saw a
# job end; the plugin adds 10 s after each check that saw none.
FAST_POLLING = [
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--seconds-between-status-checks",
    "1",
]


def write_benchmark(records: Path, stage: str, rule: str, job: str, s: str, max_rss: str) -> None:
    path = records / stage / "benchmarks" / rule / f"{job}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{s}\t0:00:01\t{max_rss}\t1\t1\t1\t0\t0\t50\t1.0\n")


def write_rules(root: Path) -> None:
    """A workflow's rule file: a GPU rule and one derived from it, a CPU rule, a local target."""
    (root / "rules").mkdir(parents=True)
    (root / "rules" / "toy.smk").write_text(
        "rule fit:\n    resources:\n        gpu=lambda w: 1,\n    shell: 'true'\n\n\n"
        "use rule fit as refit with:\n    threads: 2\n\n\n"
        "rule score:\n    threads: 1\n    shell: 'true'\n\n\n"
        "rule toy:\n    input: 'a'\n    localrule: True\n"
    )


@pytest.fixture
def records(tmp_path) -> Path:
    root = tmp_path / "records"
    write_benchmark(root, "train", "fit", "a/shard-0", "100.0", "600.0")
    write_benchmark(root, "train", "fit", "b/shard-0", "700.0", "100.0")  # peaks of different jobs
    write_benchmark(root, "evaluate", "score", "a/x", "2.0", "-")  # too short for its memory
    # score_attacks-style per-attack timings beside the benchmark files: outputs, not jobs
    timings = root / "evaluate" / "benchmarks" / "score" / "a" / "x.attacks.tsv"
    timings.write_text("attack\tseconds\nm\t9e9\n")
    return root


def test_peaks_are_per_rule_maxima_over_benchmark_files_only(records):
    peaks = cluster.peaks([records])
    assert peaks.index.tolist() == ["fit", "score"]
    assert peaks.loc["fit"].tolist() == [2, 600.0, 700.0]
    assert peaks.loc["score", "jobs"] == 1 and math.isnan(peaks.loc["score", "max_rss"])


def test_peaks_need_benchmark_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Snakemake benchmark files"):
        cluster.peaks([tmp_path])


def test_requests_apply_headroom_rounding_and_floors(records):
    peaks = cluster.peaks([records])
    assert cluster.requests(peaks, Headroom()) == {
        "fit": {"mem_mb": 1024, "runtime": 35},  # 600 MiB x 1.5 = 900 -> 1024; 700 s x 3 = 35 min
        "score": {"mem_mb": 512, "runtime": 5},  # unmeasured memory and 6 s: the floors
    }
    gpu = cluster.requests(
        peaks,
        Headroom(mem_factor=2, time_factor=1, min_mem_mb=0, min_runtime=1, gpu_mem_mb=2048),
        gpu={"fit"},
    )
    assert gpu == {"fit": {"mem_mb": 3328, "runtime": 12}, "score": {"mem_mb": 0, "runtime": 1}}


def test_workflow_rules_are_read_from_the_rule_files(tmp_path):
    write_rules(tmp_path)
    assert cluster.gpu_rules(tmp_path) == {"fit", "refit"}  # a derived rule keeps its base's GPU
    assert cluster.job_rules(tmp_path) == {"fit", "refit", "score"}


PROFILE = """# my cluster
executor: slurm
jobs: 10
"""


def test_profile_update_keeps_the_rest_and_is_stable(records, tmp_path):
    write_rules(tmp_path)
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "config.yaml").write_text(PROFILE)
    first = cluster.update_profile(
        profile, [records], Headroom(), "a toy run", "regen", root=tmp_path
    )
    text = (profile / "config.yaml").read_text()
    assert text.startswith(PROFILE) and cluster.MARKER in text
    assert (
        "# Measured on a toy run: 3 benchmark files of 2 rules." in text
        and "# Regenerate: regen" in text
    )
    settings = yaml.safe_load(text)
    assert settings["executor"] == "slurm" and settings["set-resources"] == first
    # A key added by hand below the marker, and an entry of a rule these records lack, are kept;
    # mem_mb and runtime follow the new records.
    edited = text.replace("  fit:  #", "  gone:\n    mem_mb: 7\n  fit:  #").replace(
        "    runtime: 35\n", '    runtime: 35\n    slurm_partition: "gpu-a"\n'
    )
    (profile / "config.yaml").write_text(edited)
    write_benchmark(records, "train", "fit", "c/shard-0", "1400.0", "10.0")
    cluster.update_profile(
        profile, [records], Headroom(), "a toy run", "regen", cpu_only=True, root=tmp_path
    )
    again = (profile / "config.yaml").read_text()
    assert again.startswith(PROFILE) and again.count(cluster.MARKER) == 1
    assert yaml.safe_load(again)["set-resources"] == {
        "fit": {"mem_mb": 1024, "runtime": 70, "slurm_partition": "gpu-a", "gpu": 0},
        "gone": {"mem_mb": 7},
        "refit": {"gpu": 0},  # no records, but a GPU rule: no GPU on a CPU-only cluster either
        "score": {"mem_mb": 512, "runtime": 5},
    }
    assert "(the values below, if any, else the cluster's defaults): gone, refit." in again
    # Rewriting from the same records changes nothing.
    cluster.update_profile(
        profile, [records], Headroom(), "a toy run", "regen", cpu_only=True, root=tmp_path
    )
    assert (profile / "config.yaml").read_text() == again


def test_set_resources_above_the_marker_is_refused(records, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(PROFILE + "set-resources:\n  fit:\n    mem_mb: 1\n")
    with pytest.raises(ValueError, match="set-resources above the line"):
        cluster.update_profile(path, [records], Headroom(), "a toy run", "regen", root=tmp_path)
    assert path.read_text().endswith("mem_mb: 1\n")


def test_command_line(records, tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(PROFILE)
    cluster.main(
        [
            "--records",
            str(records),
            "--profile",
            str(path),
            "--time-factor",
            "1",
            "--min-runtime",
            "1",
        ]
    )
    assert "mem_mb and runtime of 2 rules" in capsys.readouterr().out
    text = path.read_text()
    assert yaml.safe_load(text)["set-resources"]["fit"]["runtime"] == 12
    assert f"--records {records} --profile {path} --time-factor 1 --min-runtime 1" in text


# --- the shipped profiles ---------------------------------------------------------------------


def profile(name: str) -> dict:
    return yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())


def global_gpus(settings: dict) -> int:
    return int(next(r.split("=")[1] for r in settings["resources"] if r.startswith("gpu=")))


@pytest.mark.parametrize("name", ["slurm", "slurm-cpu"])
def test_slurm_profiles_replace_the_default_workflow_profile(name):
    """Used as --workflow-profile, each replaces profiles/default: it repeats every setting of
    it but `cores` (unset: threads are not capped at the submit host's cores) and `resources`.
    Its requests name rules of the workflow, each with memory and time."""
    default, settings = profile("default"), profile(name)
    assert settings["executor"] == "slurm" and "cores" not in settings
    assert "default-resources" not in settings  # a site's own --profile keeps its defaults
    assert {
        k: v for k, v in default.items() if k not in ("cores", "resources")
    }.items() <= settings.items()
    requested = {rule for rule, values in settings["set-resources"].items() if "mem_mb" in values}
    assert requested <= cluster.job_rules() and len(requested) >= 30
    assert all(
        values["runtime"] >= 1
        for rule, values in settings["set-resources"].items()
        if rule in requested
    )


def test_report_stage_jobs_are_one_group():
    report = set(stages.rules("report")) - {"report"}
    for name in ("slurm", "slurm-cpu"):
        assert profile(name)["groups"] == {rule: "report" for rule in report}


def test_cpu_profile_asks_no_rule_for_a_gpu_and_the_gpu_profile_keeps_them():
    cpu, gpu = profile("slurm-cpu"), profile("slurm")
    assert global_gpus(cpu) == 0 and global_gpus(gpu) > 0
    without = {rule for rule, values in cpu["set-resources"].items() if values.get("gpu") == 0}
    assert without == cluster.gpu_rules()
    assert not any("gpu" in values for values in gpu["set-resources"].values())


# --- a one-node cluster -----------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture(scope="module")
def slurm_cluster():
    """A one-node cluster with accounting (tests/workflow/slurm/cluster.sh; packages installed if
    missing), stopped afterwards. Skips, saying why, where this machine cannot run one."""
    # munged wants every directory above its socket open to all, which pytest's are not.
    state = Path(tempfile.mkdtemp(prefix="miaflow-slurm-", dir="/var/tmp"))
    state.chmod(0o755)
    ports = dict(zip(["CTLD_PORT", "SLURMD_PORT", "DBD_PORT", "DB_PORT"], map(str, free_ports(4))))
    started = time.monotonic()
    result = subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), "start", str(state)],
        env={**os.environ, **ports},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    try:
        if result.returncode == 77:
            *details, reason = result.stderr.strip().splitlines() or ["(no reason given)"]
            pytest.skip("\n".join([f"no SLURM cluster on this machine: {reason}", *details]))
        assert result.returncode == 0, f"cluster.sh start failed:\n{result.stdout}\n{result.stderr}"
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", str(state / "slurm.conf"))
            yield {"state": state, "start": time.monotonic() - started}
    finally:
        subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop", str(state)], check=True, timeout=120)
        shutil.rmtree(state)


def slurm_params() -> dict:
    """Small and fast: one tabular dataset, a torch model (a GPU rule) and a scikit-learn one,
    three attacks, no hyperparameter study, no language model and nothing for the privacy audit
    (its bounds job writes an empty table)."""
    params = tiny_params()
    params["experiments"] = [
        {"dataset": "breast_cancer", "arch": "mlp"},
        {"dataset": "breast_cancer", "arch": "lr"},
    ]
    params["attacks"] = ["metric-loss", "model-lira", "lira-offline"]
    params["training"]["models_per_job"] = "auto"
    params["hparam_study"]["settings"] = []
    params["llm"]["experiments"] = []
    params["privacy"].update(heads=[], models=[])
    return params


def snakemake_env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def slurm_jobs(output: str) -> pd.DataFrame:
    """The SLURM jobs of one Snakemake run (named by its run id), from accounting."""
    run_id = next(line.split()[-1] for line in output.splitlines() if "SLURM run ID:" in line)
    listed = subprocess.run(
        [
            "sacct",
            "-X",
            "--allusers",
            "--noheader",
            "--parsable2",
            "--starttime",
            "2000-01-01",
            "--name",
            run_id,
            "--format=JobIDRaw,State,Comment,AllocTRES",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split("|") for line in listed.splitlines()]
    return pd.DataFrame(rows, columns=["job", "state", "comment", "tres"])


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory) -> dict:
    """The small workflow run locally (`snakemake --cores 2`) and, at the same time, through
    SLURM with profiles/slurm-cpu, in two copies of the project."""
    root = tmp_path_factory.mktemp("slurm-run")
    local = make_project(root / "local", slurm_params())
    remote = make_project(root / "cluster", slurm_params())
    log = root / "local.log"
    started = time.monotonic()
    with log.open("w") as output:
        local_run = subprocess.Popen(
            ["snakemake", "--cores", "2"],
            cwd=local,
            env=snakemake_env(),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        result = run(  # a job that can never start (asks more than the node has) stays pending
            ["snakemake", "--workflow-profile", "profiles/slurm-cpu", *FAST_POLLING],
            remote,
            timeout=900,
        )
        wall = time.monotonic() - started
        assert local_run.wait(timeout=600) == 0, log.read_text()
    return {
        "local": local,
        "cluster": remote,
        "output": result.stdout + result.stderr,
        "wall": wall,
        "start": slurm_cluster["start"],
    }


@pytest.mark.e2e
def test_a_run_through_slurm_gives_the_artifacts_of_a_local_run(slurm_run, capsys):
    jobs = slurm_jobs(slurm_run["output"])
    with_this = f"{len(jobs)} SLURM jobs in {slurm_run['wall']:.0f} s"
    with capsys.disabled():
        print(
            f"\nSLURM cluster started in {slurm_run['start']:.0f} s; "
            f"profiles/slurm-cpu: {with_this}"
        )
    local, remote = digests(slurm_run["local"]), digests(slurm_run["cluster"])
    assert local.keys() == remote.keys() and "results/metrics.parquet" in local
    assert [k for k in local if local[k] != remote[k]] == []
    # Every job ran in SLURM and completed there, the report stage's rules as one job; none
    # asked for a GPU, though the torch model's training declares one.
    assert (jobs["state"] == "COMPLETED").all(), jobs
    assert jobs["comment"].str.startswith("rule_train_shard_wildcards_breast_cancer_mlp").sum() == 1
    group = jobs["comment"].str.startswith("rule_report_")  # named by the group and its rules
    assert group.sum() == 1 and "cost_table" in jobs.loc[group, "comment"].item()
    assert {c.split("_wildcards")[0] for c in jobs.loc[~group, "comment"]} == {
        "rule_prepare_dataset",
        "rule_hparam_collect",
        "rule_train_shard",
        "rule_score_attacks",
        "rule_scaling_sweep",
        "rule_operating_points",
        "rule_privacy_bounds",
    }
    assert len(jobs) == 1 + 1 + 2 + 2 + 2 + 1 + 1 + 1, with_this
    assert not jobs["tres"].str.contains("gpu").any(), jobs


@pytest.mark.e2e
def test_dvc_records_a_cluster_run_without_running_it_again(slurm_run):
    """The stage commands DVC runs (snakemake with profiles/default, locally) find nothing to
    do after the cluster run, so `dvc commit` records it and the stages are up to date."""
    remote = slurm_run["cluster"]
    dry = run(["snakemake", "-n"], remote)
    assert "Nothing to be done" in dry.stdout + dry.stderr
    # This config has no query attack and no language model: their stages' outputs do not
    # exist, so those stages (and report, which reads them) cannot be recorded. Their stage
    # commands create their (empty) results folders, which the evaluate stage reads.
    for folder in ("queries", "llm", "audit"):
        (remote / "results" / folder).mkdir(exist_ok=True)
    stages = ["prepare", "train", "evaluate", "hparams"]
    run(["dvc", "commit", "--force", *stages], remote)
    assert "up to date" in run(["dvc", "status", *stages], remote).stdout
    repro = run(["dvc", "repro", "--single-item", *stages], remote).stdout
    assert repro.count("didn't change, skipping") == len(stages) and "Running stage" not in repro


@pytest.mark.e2e
def test_gpu_profile_asks_slurm_for_a_gpu_for_torch_jobs_only(slurm_run):
    """profiles/slurm: training the MLP (torch) gets one of the node's GPUs, the logistic
    regression none; the models come out byte-identical again."""
    remote = slurm_run["cluster"]
    result = run(
        [
            "snakemake",
            "--workflow-profile",
            "profiles/slurm",
            *FAST_POLLING,
            "--forcerun",
            "train_shard",
            "--until",
            "train_shard",
        ],
        remote,
        timeout=600,
    )
    jobs = slurm_jobs(result.stdout + result.stderr).set_index("comment")
    assert len(jobs) == 2 and (jobs["state"] == "COMPLETED").all(), jobs
    gpu = {
        comment.split("_wildcards_")[1]: "gres/gpu=1" in tres
        for comment, tres in jobs["tres"].items()
    }
    assert gpu == {"breast_cancer_mlp_0": True, "breast_cancer_lr_0": False}
    trained = {k: v for k, v in digests(remote).items() if k.startswith("results/train/")}
    assert trained and trained.items() <= digests(slurm_run["local"]).items()
