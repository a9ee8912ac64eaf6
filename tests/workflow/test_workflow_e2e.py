"""End to end: the real `snakemake` and `dvc` commands on a tiny config in a temp directory.

The shared finished run (tests/conftest.py, `finished_run`) is read by the checks here, on this
module's own copy: contract of results/metrics.parquet, no-op reruns, clean `dvc status`, the DVC
remote round trip a reviewer does, and bad params stopping the run before any job. The second run
that byte-identical artifacts need is tests/workflow/test_resume_e2e.py's, killed and resumed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import copy_project

from miaflow.evaluation.metrics import METRIC_NAMES
from miaflow.evaluation.tables import format_mean_std
from miaflow.llm.traps import parse_group
from miaflow.plan import stages

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
WORKFLOW_FILES = [
    "Snakefile",
    "rules",
    "scripts",
    "miaflow",
    "profiles",
    "envs",
    "report",
    "dvc.yaml",
    ".dvcignore",
    ".gitignore",
    "audit/README.md",
]
TINY_ATTACKS = [
    "metric-loss",
    "metric-ment",
    "model-lira",
    "model-robust",
    "lira-online",
    "lira-offline",
    "query-neighbor",
]


def tiny_params() -> dict:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["experiments"] = [
        {"dataset": "digits", "arch": "cnn"},
        {"dataset": "breast_cancer", "arch": "lr"},
        {"dataset": "breast_cancer", "arch": "lr", "ref_arch": "catboost"},
    ]
    if SHARED_DATA.is_dir():  # the opt-in real-data path, read from the local copy
        params["experiments"].append({"dataset": "location30", "arch": "lr"})
        params["datasets"]["location30"]["path"] = str(
            SHARED_DATA / "location30/dataset_location.tgz"
        )
    params["splits"].update(repeats=3, n_reference=4, n_population=2)
    params["training"]["models_per_job"] = 5
    params["attacks"] = TINY_ATTACKS
    params["hparam_study"].update(
        settings=[{"dataset": "digits", "shots": 3}],
        shadow_models=4,
        runs=2,
        epsilons=[math.inf, 8],
        epochs=5,
        budgets=[[2, 1]],
    )
    params["hparam_study"]["search"]["trials"] = 3
    params["datasets"]["synthetic_text"] = {"n_samples": 240}
    params["llm"].update(
        repeats=2,
        n_eval=20,
        n_shots=2,
        pair_shards=1,
        neighbors={"generator": "masked_lm", "n_neighbors": 2, "fraction": 0.2, "model": None},
    )
    params["llm"]["settings"].update(n_eval=16)
    for recipe in ("gpt2_tiny", "gpt2_traps"):
        params["llm"]["models"][recipe].update(layers=1, width=32, heads=2, vocab_size=400)
    params["llm"]["models"]["gpt2_tiny"].update(epochs=6)
    # The trap experiment small (three repetition counts, 10 traps and 10 twins each); dataset
    # inference's suspect sets within the 90 members and 90 non-members of each repeat.
    params["llm"]["experiments"][1]["traps"].update(repetitions=[1, 4, 16], per_group=10)
    params["llm"]["dataset_inference"].update(sizes=[10, 40], draws=10)
    # The default's three heads and DP-SGD target, with fewer runs and canaries.
    heads = params["privacy"]["heads"][0]
    heads.update(runs=200, run_kinds=["dirac"], canaries={"dirac": 100, "mislabelled": 20})
    params["privacy"]["models"][0]["canaries"] = {"natural": 20, "mislabelled": 20, "ood": 20}
    params["architectures"]["torch_lr_dp"]["epochs"] = 10
    return params


def llm_attacks() -> set[str]:
    return set(tiny_params()["llm"]["attacks"])


def run(
    args: list[str],
    cwd: Path,
    check: bool = True,
    environment: dict[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess:
    """Run a command in the test's virtual environment (with `environment` set too); a command
    that may wait forever (on a cluster) gets a `timeout`."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.update(environment or {})
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode:
        raise AssertionError(
            f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def make_run(root: Path) -> None:
    """What `make run` runs after its set-up (Makefile): the whole workflow as one Snakemake
    command, then recorded in dvc.lock as `dvc repro` would record it."""
    run(["snakemake", "--cores", "2"], root)
    run(["python", "-m", "miaflow.runtime.commit"], root)


def make_project(root: Path, params: dict) -> Path:
    root.mkdir(parents=True)
    for name in WORKFLOW_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, root / name)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["git", "init", "-q"], root)
    run(["git", "config", "user.email", "ci@example.org"], root)
    run(["git", "config", "user.name", "CI"], root)
    run(["dvc", "init", "-q"], root)
    run(["dvc", "config", "core.analytics", "false"], root)
    return root


def readme_block(marker: str) -> str:
    """The fenced block right after `<!-- audit-example: <marker> -->` in README.md."""
    text = (REPO / "README.md").read_text()
    found = re.search(rf"<!-- audit-example: {marker} -->\n```\w+\n(.*?)\n```", text, re.S)
    assert found, f"README.md has no audit-example block {marker!r}"
    return found.group(1)


def with_readme_audit(project: Path) -> Path:
    """README's audit example, as written: its shell block run in the project, its `audits`
    entry added to the project's params.yaml."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_block("shell")], cwd=project, env=env, check=True
    )
    params = yaml.safe_load((project / "params.yaml").read_text())
    params.update(yaml.safe_load(readme_block("params")))
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return project


def with_privacy_claim(project: Path) -> Path:
    """README's audit with a privacy claim, ε = 2 at δ = 1e-5, tested by 100 canaries whose
    outputs are drawn apart from their bits (nothing can refute the claim), versioned by DVC as
    README's files are."""
    import numpy as np

    rng = np.random.default_rng(0)
    probabilities = rng.dirichlet(np.ones(10), size=100)
    canaries = pd.DataFrame(
        {
            "model_id": "target-0",
            "sample_id": np.arange(100),
            "label": rng.integers(0, 10, 100),
            **{f"prob_{c}": probabilities[:, c] for c in range(10)},
            "included": rng.random(100) < 0.5,
            "kind": "ood",
        }
    )
    canaries.to_parquet(project / CLAIMED_CANARIES, index=False)
    run(["dvc", "add", "-q", CLAIMED_CANARIES], project)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["audits"][0].update(epsilon=2.0, delta=1e-5, canaries=CLAIMED_CANARIES)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return project


CLAIMED_CANARIES = "audit/canaries.parquet"


def tiny_project(root: Path) -> Path:
    """The tiny config's project, with README's audit of a scikit-learn model (which claims an
    ε for the privacy audit)."""
    return with_privacy_claim(with_readme_audit(make_project(root, tiny_params())))


def digests(root: Path) -> dict[str, str]:
    """sha256 of every artifact (under results/; run records are under records/), leaving out
    Snakemake's directory markers (in .dvcignore)."""
    out = {}
    for path in sorted((root / "results").rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_file() and path.name != ".snakemake_timestamp":
            out[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def project(finished_run, tmp_path_factory) -> Path:
    """This module's own copy of the finished tiny run (its tests rerun and commit in it)."""
    return copy_project(finished_run, tmp_path_factory.mktemp("e2e") / "project")


def test_metrics_contract(project):
    metrics = pd.read_parquet(project / "results/metrics.parquet")
    assert {"dataset", "target_model", "attack", "repeat", "metric", "value"} <= set(
        metrics.columns
    )
    assert set(metrics["attack"]) == set(TINY_ATTACKS) | llm_attacks()
    audited = metrics[metrics["target_model"] == "forest"]  # README's audit: one target model
    assert set(audited["dataset"]) == {"sklearn_digits"} and set(audited["repeat"]) == {0}
    # outputs only: no query attacks; no population models: no RMIA (model-robust)
    assert set(audited["attack"]) == set(TINY_ATTACKS) - {"query-neighbor", "model-robust"}
    metrics = metrics[metrics["attack"].isin(TINY_ATTACKS) & (metrics["target_model"] != "forest")]
    precision = metrics["metric"].str.startswith("ppv_")
    assert precision.any()  # the operating points' PPV at the membership priors
    metrics = metrics[~precision]
    assert set(metrics["metric"]) == set(METRIC_NAMES)
    assert metrics.groupby(["dataset", "target_model", "attack", "metric"]).size().eq(3).all()
    # Query attacks are not run with references of another architecture than the target's.
    mixed = metrics[metrics["target_model"] == "lr_ref_catboost"]
    assert len(mixed) and "query-neighbor" not in set(mixed["attack"])
    sweep = pd.read_parquet(project / "results/evaluate/sweep/digits/cnn.parquet")
    assert set(sweep["axis"]) == {"reference models", "queries"}
    assert sorted(sweep.loc[sweep["axis"] == "queries", "count"].unique()) == [1, 2, 5, 10]
    auroc = (
        metrics[metrics["metric"] == "auroc"]
        .groupby(["dataset", "target_model", "attack"])["value"]
        .mean()
    )
    for dataset in metrics["dataset"].unique():
        assert auroc[dataset].max() > 0.55, f"no attack above chance on {dataset}: {auroc[dataset]}"
    assert {"lr", "lr_ref_catboost"} <= set(
        metrics.loc[metrics["dataset"] == "breast_cancer", "target_model"]
    )


def test_verdicts_contract(project):
    """Issue #43's contract: every stage's operating points, the verdict of every experiment and
    setting in results/summary.json (the separability beside a language model's), the
    stability table, one DVC metrics row per experiment."""
    points = pd.read_parquet(project / "results/evaluate/operating_points.parquet")
    assert [
        "dataset", "target_model", "attack", "repeat", "calibration", "requested_fpr",
        "realized_fpr", "tpr", "threshold", "n_nonmembers",
    ] == list(points.columns[:10])  # fmt: skip
    assert set(points["calibration"]) == {"target", "shadow"}
    assert points["requested_fpr"].between(0, 1, inclusive="neither").all()  # fractions
    resolved = points[points["calibration"] == "target"].dropna(subset=["tpr"])
    assert (resolved["realized_fpr"] < resolved["requested_fpr"]).all()
    unresolved = points[points["requested_fpr"] * points["n_nonmembers"] < 1]
    assert len(unresolved) and unresolved["tpr"].isna().all()  # not resolved, never 0
    assert {"synthetic_text", "sklearn_digits"} <= set(points["dataset"])  # LLM, audit
    assert "forest" in set(points["target_model"])
    summary = json.loads((project / "results/summary.json").read_text())
    metrics = pd.read_parquet(project / "results/metrics.parquet")
    experiments = set(zip(metrics["dataset"], metrics["target_model"]))
    assert set(summary) == {f"{d}/{t}" for d, t in experiments}
    # the points cover every experiment, and the trap groups' (their table's TPRs), which are
    # not in the metrics contract
    traced = set(zip(points["dataset"], points["target_model"]))
    assert experiments <= traced
    assert all(parse_group(t) is not None for _, t in traced - experiments)
    keys = {"best_attack", "auroc", "best_attack_low_fpr", "tpr_at_low_fpr", "low_fpr"}
    for name, entry in summary.items():
        assert keys <= entry.keys(), name
        assert isinstance(entry["tied_with"], list) and isinstance(entry["tied_with_low_fpr"], list)
        assert ("separability" in entry) == name.startswith("synthetic_text/"), name
    stability = pd.read_csv(project / "results/tables/stability.csv")
    assert set(zip(stability["dataset"], stability["target_model"])) == traced
    shown = run(["dvc", "metrics", "show"], project).stdout
    assert len([line for line in shown.splitlines() if "results/headline/" in line]) == len(summary)


def test_tables_and_figures(project):
    tables = [
        f"results/tables/{stem}"
        for stem in (
            "auroc",
            "accuracy",
            "tests",
            "by_architecture",
            "reference_mismatch",
            "metrics-digits-cnn",
        )
    ]
    for stem in [*tables, "records/report/cost", "records/report/families"]:
        for suffix in (".csv", ".md", ".tex"):
            assert (project / f"{stem}{suffix}").stat().st_size > 0
    figures = {p.name for p in (project / "results/figures").iterdir()}
    assert {
        "roc-breast_cancer-lr.png",
        "auroc-vs-gap.png",
        "scaling-digits-cnn.png",
        "roc-sklearn_digits-forest.png",
    } <= figures
    assert (project / "results/figures/roc-digits-cnn.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    auroc = pd.read_csv(project / "results/tables/auroc.csv")
    assert "±" in auroc.to_string()
    assert "sklearn_digits/forest" in auroc.columns
    mismatch = pd.read_csv(project / "results/tables/reference_mismatch.csv")
    assert {"breast_cancer: lr ← catboost", "breast_cancer: lr ← lr"} <= set(mismatch.columns)
    cost = pd.read_csv(project / "records/report/cost.csv")
    assert {
        "prepare_dataset",
        "train_shard",
        "score_attacks",
        "hparam_run",
        "llm_train",
        "audit_outputs",
    } <= set(cost["rule"])  # intermediate jobs of every stage too
    benchmarks = [
        p
        for p in (project / "records").glob("*/benchmarks/**/*.tsv")
        if not p.name.endswith(".attacks.tsv")
    ]
    assert cost.loc[cost["stage"] == "total", "jobs"].item() == len(benchmarks)


PRIVACY_COLUMNS = [
    "dataset",
    "target_model",
    "attack",
    "estimator",
    "canary_kind",
    "epsilon",
    "delta",
    "confidence",
    "canaries",
    "epsilon_lower",
    "epsilon_max",
    "epsilon_point",
    "falsified",
]


def test_privacy_audit_contract(project):
    """Issue #44's contract on the default's targets (fewer canaries): the miscalibrated head is
    refuted, every other finite-ε row stays at or below its ε, the non-private head leaks, the
    audit's claim lands in the same table; the canaries never enter the ordinary metrics."""
    table = pd.read_csv(project / "results/tables/privacy_audit.csv")
    assert list(table.columns) == PRIVACY_COLUMNS
    assert not table.duplicated(
        ["dataset", "target_model", "attack", "estimator", "canary_kind"]
    ).any()
    assert {"clopper-pearson", "one-run", "one-run-fdp", "gdp"} <= set(table["estimator"])
    assert table["falsified"].dtype == bool and (table["confidence"] == 0.95).all()
    refuted = table[table["target_model"].str.contains("dp-miscalibrated")]
    assert refuted["falsified"].any()
    others = table[~table["target_model"].str.contains("dp-miscalibrated")]
    finite = others[others["epsilon"] != math.inf]
    assert len(finite) and (finite["epsilon_lower"] <= finite["epsilon"]).all()
    assert not finite["falsified"].any()
    assert {"head-dp", "torch_lr_dp", "forest"} <= set(finite["target_model"])
    open_rows = table[table["epsilon"] == math.inf]
    assert set(open_rows["target_model"]) == {"head-nonprivate"}
    assert (open_rows["epsilon_lower"] > 0).any() and not open_rows["falsified"].any()
    assert ",inf," in (project / "results/tables/privacy_audit.csv").read_text()
    claimed = table[table["target_model"] == "forest"]
    assert set(claimed["dataset"]) == {"sklearn_digits"} and (claimed["epsilon"] == 2.0).all()
    assert (
        set(claimed["estimator"]) == {"one-run", "one-run-fdp"}
        and (claimed["canaries"] == 100).all()
    )
    assert (project / "results/figures/privacy-audit.png").read_bytes()[:4] == b"\x89PNG"
    # Canaries live in the audit's own experiments: ids past the dataset's, never in the metrics.
    canaries = pd.read_parquet(project / "results/privacy/canaries/digits/heads.parquet")
    data = pd.read_parquet(project / "results/prepare/data/digits.parquet", columns=["sample_id"])
    assert canaries["sample_id"].min() == len(data)
    metrics = pd.read_parquet(project / "results/metrics.parquet")
    assert not set(metrics["target_model"]) & set(table["target_model"]) - {"forest"}


def test_hparam_study_contract(project):
    study = pd.read_parquet(project / "results/hparam_study.parquet")
    assert {"dataset", "epsilon", "hpo", "attack", "run", "fpr", "tpr"} <= set(study.columns)
    assert (study["backbone"] == "pixels").all() and (study["shadow_backbone"] == "pixels").all()
    assert set(study["epsilon"]) == {math.inf, 8.0} and set(study["hpo"]) == {"td", "ed"}
    assert {"lira", "acc-lira", "kl-lira"} <= set(study["attack"]) and set(study["run"]) == {0, 1}
    full = study[study["attack"].isin(["lira", "acc-lira", "kl-lira"])]
    assert all(
        sorted(levels) == [0.001, 0.01, 0.1]
        for _, levels in full.groupby(["epsilon", "hpo", "attack", "run"])["fpr"]
    )
    assert set(full.loc[full["hpo"] == "ed", "attack"]) == {"acc-lira", "kl-lira"}
    # a TPR where the pooled non-members resolve the FPR (NaN, never 0, where they do not),
    # with the operating point it comes from
    unresolved = study["fpr"] * study["n_nonmembers"] < 1
    assert study.loc[~unresolved, "tpr"].between(0, 1).all()
    assert study.loc[unresolved, "tpr"].isna().all()
    assert (study.loc[~unresolved, "realized_fpr"] < study.loc[~unresolved, "fpr"]).all()
    bound = pd.read_parquet(project / "results/dp_bound.parquet")
    assert {"epsilon", "fpr", "tpr_bound"} <= set(bound.columns) and set(bound["epsilon"]) == {8.0}
    assert bound["tpr_bound"].is_monotonic_increasing and bound["tpr_bound"].between(0, 1).all()
    tests = pd.read_csv(project / "results/tables/hparam_td_vs_ed.csv")
    assert {"p_ttest", "p_ttest_by", "p_perm", "p_perm_by"} <= set(tests.columns) and len(
        tests
    ) == 2 * 2 * 3
    figures = {p.name for p in (project / "results/figures").iterdir()}
    assert {
        "hparam-roc-digits_s3.png",
        "hparam-td-vs-ed.png",
        "hparam-pvalues.png",
        "hparam-baselines.png",
    } <= figures
    # The baselines without shadow calibration (the paper's Fig. 5): every target of every ε and
    # run, both HPO families, the same FPR levels and members as LiRA's rows.
    baselines = study[study["attack"].isin(["ml-leaks", "attack-p", "qmia"])]
    cells = baselines.groupby(["epsilon", "hpo", "attack", "run"])["fpr"]
    assert len(cells) == 2 * 2 * 3 * 2 and all(sorted(f) == [0.001, 0.01, 0.1] for _, f in cells)
    members = full.groupby(["epsilon", "hpo", "run"])["positives"].first().rename("members")
    joined = baselines.join(members, on=["epsilon", "hpo", "run"])
    assert (joined["positives"] == joined["members"]).all()
    assert set(zip(baselines["attack"], baselines["cost"])) == {
        ("ml-leaks", 3),  # its one shadow, tuned with 3 trials
        ("attack-p", 0),
        ("qmia", 0),
    }
    table = pd.read_csv(project / "results/tables/hparam_baselines.csv")
    assert list(table.loc[table["hpo"] == "td", "attack"].iloc[:6]) == [
        "lira",
        "acc-lira",
        "kl-lira",
        "ml-leaks",
        "attack-p",
        "qmia",
    ]


def test_language_model_attacks_contract(project):
    """Registry ids carrying the method's name, in results/metrics.parquet like every attack,
    with EM-MIA's TPR at 1% and 5% FPR; the EM-MIA table marks the label-using attacks."""
    metrics = pd.read_parquet(project / "results/metrics.parquet")
    llm = metrics[
        (metrics["dataset"] == "synthetic_text") & (metrics["target_model"] == "gpt2_tiny")
    ]
    assert set(llm["attack"]) == llm_attacks()
    assert {
        "llm-loss",
        "llm-zlib",
        "llm-lowercase",
        "llm-mink",
        "llm-minkpp",
        "llm-ref",
        "llm-neighbor",
        "llm-recall",
        "em-mia",
    } <= llm_attacks()
    assert {"auroc", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr"} <= set(llm["metric"])
    assert llm.groupby(["attack", "metric"]).size().eq(2).all()
    # every value a rate, but a TPR (and its PPV) at an FPR the few non-members cannot resolve
    # or, for a PPV, where no text is flagged: NaN
    resolved = llm["value"].notna()
    assert llm.loc[resolved, "value"].between(0, 1).all()
    assert llm.loc[~resolved, "metric"].str.fullmatch(r"(tpr|ppv)_at_.*").all()
    assert llm.loc[llm["metric"] == "auroc", "value"].notna().all()
    table = pd.read_csv(project / "results/tables/llm.csv")
    assert {"llm-recall‡", "llm-recall-toppref†", "em-mia"} <= set(table["attack"])
    assert {"llm-blind-shots‡", "llm-blind-bow‡"} <= set(table["attack"])  # blind baselines
    fit = pd.read_parquet(project / "results/llm/prefix_fit/synthetic_text/gpt2_tiny.parquet")
    assert list(fit["repeat"]) == [0, 1] and (fit["n_shots"] == 2).all()
    assert (fit["targets"] == 20).all() and (fit["cut_share"] == 0).all()  # every prefix whole
    cut = table.set_index("attack").at["llm-recall‡", "synthetic_text/gpt2_tiny prefix cut"]
    assert cut == format_mean_std(0.0, 0.0)
    iterates = pd.read_parquet(project / "results/llm/iterates/synthetic_text/gpt2_tiny.parquet")
    assert sorted(iterates["iteration"].unique()) == list(range(11))
    figures = {p.name for p in (project / "results/figures").iterdir()}
    assert {"llm-em-iterations.png", "llm-mink-sweep.png"} <= figures
    checkpoint = project / "results/llm/models/synthetic_text/gpt2_tiny/target-0"
    assert (checkpoint / "model.safetensors").is_file()
    assert not [p for p in checkpoint.iterdir() if p.suffix in (".bin", ".pt", ".pkl")]


def test_language_model_settings_contract(project):
    """EM-MIA's benchmark settings on the tiny targets: every attack on every setting, each an
    experiment "gpt2_tiny/<setting>" in the metrics; the settings table has one row per
    (experiment, setting, attack) with AUROC mean and std; exact membership in the draws."""
    from miaflow.llm.separability import SELECTION
    from miaflow.llm.settings import SETTINGS

    metrics = pd.read_parquet(project / "results/metrics.parquet")
    llm = metrics[metrics["dataset"] == "synthetic_text"]
    labels = {f"gpt2_tiny/{name}" for name in SETTINGS}
    assert set(llm["target_model"]) == {"gpt2_tiny"} | labels
    on_settings = llm[llm["target_model"].isin(labels)]
    assert on_settings.groupby("target_model")["attack"].apply(set).eq(llm_attacks()).all()
    assert (
        on_settings[on_settings["metric"] == "auroc"]
        .groupby(["target_model", "attack"])
        .size()
        .eq(2)
        .all()
    )
    table = pd.read_csv(project / "results/tables/llm_settings.csv")
    assert {"dataset", "target_model", "setting", "attack", "auroc_mean", "auroc_std"} <= set(
        table.columns
    )
    assert set(table["setting"]) == set(SETTINGS) and set(table["target_model"]) == {"gpt2_tiny"}
    assert not table.duplicated(["dataset", "target_model", "length", "setting", "attack"]).any()
    # every attack on every setting, and beside them what the selection alone separates
    assert len(table) == len(SETTINGS) * (len(llm_attacks()) + 1)
    assert table.groupby("setting")["attack"].apply(set).eq(llm_attacks() | {SELECTION}).all()
    assert table["auroc_mean"].between(0, 1).all() and (table["repeats"] == 2).all()
    assert "easy (whole texts)" in (project / "results/tables/llm_settings.md").read_text()
    assert (project / "results/figures/llm-settings.png").is_file()
    draws = pd.read_parquet(project / "results/llm/settings/draws/synthetic_text/gpt2_tiny.parquet")
    splits = pd.read_parquet(project / "results/llm/splits/synthetic_text/gpt2_tiny.parquet")
    assert draws.groupby(["repeat", "setting"]).size().eq(16).all()
    for repeat, rows in draws.groupby("repeat"):
        trained = splits[(splits["repeat"] == repeat) & (splits["set"] == "train")]["sample_id"]
        assert (rows["sample_id"].isin(trained) == rows["is_member"]).all()
    distance = draws.groupby("setting")["distance"].mean()
    assert distance["easy"] > distance["medium"] > distance["hard"]


RECENT_PREFIXES = ("llm-dcpdd", "llm-pac", "llm-conrecall", "llm-samia", "llm-camia", "llm-ezmia")


def test_recent_language_model_attacks_contract(project):
    """The six recent attacks have AUROC rows in the metrics contract for every target; their
    inputs are tables of their own (the token statistics keep their columns), aligned with the
    cached tokens; Con-ReCall's member prefix is never a scored text."""
    metrics = pd.read_parquet(project / "results/metrics.parquet")
    auroc = metrics[(metrics["target_model"] == "gpt2_tiny") & (metrics["metric"] == "auroc")]
    for prefix in RECENT_PREFIXES:
        rows = auroc[auroc["attack"].str.startswith(prefix)]
        assert len(rows) >= 2 and rows["value"].between(0, 1).all(), prefix
    table = pd.read_csv(project / "results/tables/llm.csv")
    assert {"llm-conrecall§", "llm-dcpdd‡", "llm-camia‡", "llm-ezmia"} <= set(table["attack"])
    root = project / "results/llm"
    tokens = pd.read_parquet(root / "tokens/synthetic_text/gpt2_tiny/target-0/eval.parquet")
    assert "top1" not in tokens.columns
    top1 = pd.read_parquet(root / "top1/synthetic_text/gpt2_tiny/target-0/eval.parquet")
    assert list(top1["sample_id"]) == list(tokens["sample_id"])
    assert [len(f) for f in top1["top1"]] == [len(lp) for lp in tokens["logprob"]]
    member = pd.read_parquet(root / "member_recall/synthetic_text/gpt2_tiny/target-0/eval.parquet")
    assert set(member["sample_id"]) == set(tokens["sample_id"])
    population = pd.read_parquet(
        root / "tokens/synthetic_text/gpt2_tiny/target-0/eval-population.parquet"
    )
    splits = pd.read_parquet(root / "splits/synthetic_text/gpt2_tiny.parquet")
    scored = splits.loc[splits["set"] == "eval", "sample_id"]
    assert not set(population["sample_id"]) & set(scored)  # known non-members, never scored


def test_dataset_inference_contract(project):
    """One row per test with plain numbers; non-member suspect sets tested against IID
    validation sets reject at about alpha, member sets far more often at the largest size."""
    table = pd.read_csv(project / "results/tables/llm_dataset_inference.csv")
    assert {"dataset", "target_model", "suspect", "size", "repeat", "iid", "p_value"} <= set(
        table.columns
    )
    assert set(table["suspect"]) == {"members", "non-members"} and set(table["size"]) == {10, 40}
    assert pd.api.types.is_float_dtype(table["p_value"]) and table["p_value"].between(0, 1).all()
    assert pd.api.types.is_integer_dtype(table["size"]) and set(table["iid"]) == {True, False}
    rejected = (
        (table[table["iid"]].assign(rejected=table["p_value"] < 0.05))
        .groupby(["suspect", "size"])["rejected"]
        .mean()
    )
    assert rejected["non-members"].max() <= 0.25  # 20 tests per size: about alpha
    assert rejected[("members", 40)] > rejected[("non-members", 40)] + 0.3
    assert (
        "share of tests with p < 0.05"
        in (project / "results/tables/llm_dataset_inference.md").read_text()
    )
    assert (project / "results/figures/llm-dataset-inference.png").is_file()


def test_copyright_traps_contract(project):
    """The trap experiment: exact membership (every trap inserted its repetitions times in its
    target's training texts, no twin ever), its own number of targets (the default's one, beside
    gpt2_tiny's llm.repeats), every attack's AUROC per repetition count in plain numbers,
    llm-loss's rising with the repetitions; no trap row in the metrics contract."""
    from miaflow.data import read_dataset
    from miaflow.llm import scored

    table = pd.read_csv(project / "results/tables/llm_traps.csv")
    assert {"dataset", "target_model", "attack", "repetitions", "auroc_mean"} <= set(table.columns)
    assert sorted(table["repetitions"].unique()) == [1, 4, 16]
    assert (
        pd.api.types.is_float_dtype(table["auroc_mean"]) and set(table["attack"]) == llm_attacks()
    )
    loss = table[table["attack"] == "llm-loss"].set_index("repetitions")["auroc_mean"]
    assert loss[16] > loss[1]
    root = project / "results/llm"
    traps = pd.read_parquet(root / "traps/draws/synthetic_text/gpt2_traps.parquet")
    splits = pd.read_parquet(root / "splits/synthetic_text/gpt2_traps.parquet")
    texts = read_dataset(project / "results/prepare/data/synthetic_text.parquet").features
    assert traps.groupby(["group", "is_member"]).size().eq(10).all()
    assert not set(traps["text"]) & set(texts) and (traps["sample_id"] >= len(texts)).all()
    models = root / "models/synthetic_text"
    trained = {
        lm: sorted(p.name for p in (models / lm).glob("target-*") if p.is_dir())
        for lm in ("gpt2_traps", "gpt2_tiny")
    }
    assert trained == {"gpt2_traps": ["target-0"], "gpt2_tiny": ["target-0", "target-1"]}
    trained, _ = scored.training_texts(splits, texts, "target-0", traps, tiny_params()["seed"])
    assert [trained.count(t) for t in traps["text"]] == list(traps["repetitions"])
    metrics = pd.read_parquet(project / "results/metrics.parquet")
    assert not metrics["target_model"].str.startswith("gpt2_traps").any()
    assert (project / "results/figures/llm-traps.png").is_file()


def test_reruns_are_no_ops(project):
    dry = run(["snakemake", "-n"], project)
    assert "Nothing to be done" in dry.stdout + dry.stderr
    repro = run(["dvc", "repro"], project)
    assert "didn't change, skipping" in repro.stdout and "Running stage" not in repro.stdout
    status = run(["dvc", "status"], project)
    assert "up to date" in status.stdout


REPORT_RULES = {
    "privacy_report",
    "collect_metrics",
    "verdicts",
    "stability_table",
    "collect_models",
    "paired_tests",
    "tables",
    "study_tables",
    "hparam_report",
    "llm_report",
    "cost_table",
}
LLM_RULES = {
    "llm_splits",
    "llm_tokenizer",
    "llm_train",
    "llm_neighbors",
    "llm_embeddings",
    "llm_statistics",
    "llm_reference_statistics",
    "llm_scores",
    "llm_settings",
    "llm_setting_scores",
    "llm_traps",
    "llm_inference_statistics",
    "llm_dataset_inference",
    "llm_trap_scores",
    "llm_separability",
}
HPARAM_RULES = {
    "hparam_splits",
    "hparam_noise",
    "hparam_run",
    "hparam_bound",
    "hparam_collect",
}


AUDIT_RULES = {"audit_outputs", "score_audit"}
PRIVACY_RULES = {"privacy_heads", "privacy_model", "privacy_claim", "privacy_bounds"}
# the privacy stage's jobs that score canaries with attacks (and train models), and their bounds
SCORED_PRIVACY_RULES = {"privacy_model", "privacy_claim", "privacy_bounds"}


@pytest.mark.parametrize(
    ("module", "rerun"),
    [
        # imported only indirectly, by every job (data loaders, splits, training, attacks)
        (
            "seeding",
            {
                "prepare_dataset",
                "train_shard",
                "query_sets",
                "query_outputs",
                "score_attacks",
                "scaling_sweep",
                "operating_points",
                *HPARAM_RULES,
                *LLM_RULES,
                *AUDIT_RULES,
                *PRIVACY_RULES,
                *REPORT_RULES,
            },
        ),
        # the language models' conditional likelihoods: the jobs that load a model to score texts
        # (and, in their stage, the scoring that reads what they write), not the training
        (
            "llm/conditional",
            {
                "llm_statistics",
                "llm_reference_statistics",
                "llm_inference_statistics",
                "llm_settings",
                "llm_embeddings",
                "llm_scores",
                "llm_setting_scores",
                "llm_trap_scores",
                "llm_dataset_inference",
                "llm_separability",
            },
        ),
        # queries rebuild models; audits load checkpoints; the privacy audit trains models
        ("models/ensemble", {"train_shard", "query_outputs", *AUDIT_RULES, *SCORED_PRIVACY_RULES}),
        # (and in their stage the tables of the tests, and the cost of every job)
        ("evaluation/stats", {"paired_tests", "verdicts", "hparam_report", "tables", "cost_table"}),
        # an attack's module: the jobs that score attacks (and the operating points of their
        # scores), no language-model or study job
        (
            "attacks/metric",
            {
                "score_attacks",
                "scaling_sweep",
                "score_audit",
                "operating_points",
                *SCORED_PRIVACY_RULES,
            },
        ),
    ],
)
def test_editing_a_library_module_reruns_exactly_the_jobs_that_import_it(project, module, rerun):
    """Each stage run as `dvc repro` runs it (its target, only its own rules) plans exactly the
    jobs whose own import closure (their rule's `code`) holds the edited module, and in that
    stage the jobs that read what they write, whatever edit came before. The stages
    expected to plan nothing are asked together (their targets, the rules of all of them): one
    that plans a job also does so there, so one dry run checks them all."""
    path = project / f"miaflow/{module}.py"
    original, stat = path.read_text(), path.stat()
    path.write_text(original + "\n# an edit\n")
    rules = {stage: stages.rules(stage, project) for stage in stages.STAGES}
    rerunning = [stage for stage in stages.STAGES if rerun & set(rules[stage])]
    quiet = [stage for stage in stages.STAGES if stage not in rerunning]
    planned = set()
    try:
        for targets in [[stage] for stage in rerunning] + ([quiet] if quiet else []):
            allowed = [rule for stage in targets for rule in rules[stage]]
            dry = run(
                ["snakemake", *targets, "-n", "--allowed-rules", *allowed, "--quiet", "rules"],
                project,
            ).stdout
            planned |= {
                line.split()[0]
                for line in dry.splitlines()
                if line[:1].isalpha() and len(line.split()) == 2 and line.split()[1].isdigit()
            }
    finally:
        path.write_text(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert planned - {*stages.STAGES, "total"} == rerun


def locked_artifacts(root: Path) -> dict[str, str]:
    """The hash dvc.lock records for every artifact output (run records aside)."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    return {
        out["path"]: out["md5"]
        for stage in lock["stages"].values()
        for out in stage["outs"]
        if not out["path"].startswith("records/")
    }


def test_dvc_repro_after_a_plain_snakemake_run_reruns_no_job(project):
    """A plain `snakemake` run leaves dvc.lock behind; `dvc repro` then records the outputs again
    but reruns no job (every output persists, so DVC deletes nothing before a stage's command)."""
    scores = project / "results/evaluate/scores/digits/cnn.parquet"
    before = scores.stat().st_mtime_ns
    # one job forced (the property needs no more), and what was computed from its output
    run(
        ["snakemake", "--cores", "2", "--forcerun", str(scores.relative_to(project)), "all"],
        project,
    )
    assert scores.stat().st_mtime_ns > before
    result = run(["dvc", "repro"], project)
    repro = result.stdout + result.stderr
    assert "Running stage 'evaluate'" in repro  # its run records changed, so DVC runs its command
    assert "Nothing to be done" in repro and "Finished jobid" not in repro
    assert "up to date" in run(["dvc", "status"], project).stdout
    dry = run(["snakemake", "-n"], project)
    assert "Nothing to be done" in dry.stdout + dry.stderr


def test_reviewer_flow_through_a_dvc_remote(project, tmp_path):
    remote = tmp_path / "remote"
    run(["dvc", "remote", "add", "-d", "storage", str(remote)], project)
    run(["git", "add", "-A"], project)
    run(["git", "commit", "-q", "-m", "results"], project)
    run(["git", "tag", "v-test"], project)
    run(["dvc", "push"], project)
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(project), str(clone)], tmp_path)
    run(["git", "checkout", "-q", "v-test"], clone)
    run(["dvc", "pull"], clone)
    assert "up to date" in run(["dvc", "status"], clone).stdout
    assert digests(clone) == digests(project)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("repeats", -1, "splits.repeats: -1 is less than the minimum of 1"),
        ("n_reference", "four", "splits.n_reference: 'four' is not of type 'integer'"),
    ],
)
def test_bad_params_stop_before_any_job(tmp_path, key, value, message):
    params = tiny_params()
    params["splits"][key] = value
    root = make_project(tmp_path / "bad", params)
    result = run(["snakemake", "--cores", "1"], root, check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (root / "results").exists()
