"""The privacy stage: its audit experiments' canaries and trials, the ε lower bounds per target
with `falsified` corrected over the target's rows, the contract table, the validation of the
section and of the audits' claims, and the stage's jobs on a small dataset."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import problems_of

from miaflow import io
from miaflow.audit import AuditInputError
from miaflow.data import Dataset, write_dataset
from miaflow.jobs import privacy as jobs
from miaflow.privacy import claims, experiments, head_experiments, model_experiments, results
from miaflow.privacy.scoring import canary_scores

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLASSES, FEATURES = 4, 6


@pytest.fixture(scope="module")
def blobs() -> tuple[np.ndarray, np.ndarray]:
    """Four Gaussian classes in six dimensions, 300 samples."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, size=300)
    centres = 3 * rng.normal(size=(CLASSES, FEATURES))
    return (centres[labels] + rng.normal(size=(300, FEATURES))).astype(np.float32), labels


# --- canaries and trials -----------------------------------------------------------------------


def test_split_draws_a_sorted_base_set_and_the_rest_as_pool():
    base, pool = experiments.split(10, 4, seed=3)
    assert len(base) == 4 and list(base) == sorted(base)
    assert sorted([*base, *pool]) == list(range(10))
    again = experiments.split(10, 4, seed=3)
    assert list(again[0]) == list(base) and list(again[1]) == list(pool)


def test_pool_canaries_name_the_dataset_sample_they_come_from(blobs):
    features, labels = blobs
    base, pool = experiments.split(300, 200, seed=1)
    drawn = experiments.drawn_canaries(
        features, labels, CLASSES, pool, {"natural": 5, "mislabelled": 5, "ood": 3}, 2, 300
    )
    table = drawn.table
    assert table["sample_id"].tolist() == list(range(300, 313))
    taken = table[table["kind"] != "ood"]
    assert set(taken["source"]) <= set(pool) and not set(taken["source"]) & set(base)
    np.testing.assert_array_equal(drawn.inputs[taken.index], features[taken["source"]])
    natural, mislabelled = taken[taken["kind"] == "natural"], taken[taken["kind"] == "mislabelled"]
    assert (natural["label"].to_numpy() == labels[natural["source"]]).all()
    assert (mislabelled["label"].to_numpy() != labels[mislabelled["source"]]).all()
    assert (table.loc[table["kind"] == "ood", "source"] == -1).all()


def test_each_dirac_canary_of_the_heads_has_an_axis_of_its_own(blobs):
    features, labels = blobs
    base, pool = experiments.split(300, 200, seed=1)
    padded, canaries = head_experiments.head_canaries(
        features.astype(np.float64), labels, CLASSES, base, pool, {"natural": 3, "dirac": 4}, 5,
        1000,
    )  # fmt: skip
    assert padded.shape == (200, FEATURES + 4) and not padded[:, FEATURES:].any()
    assert canaries.table["sample_id"].tolist() == list(range(1000, 1007))
    assert canaries.inputs.shape == (7, FEATURES + 4)
    natural, dirac = canaries.inputs[:3], canaries.inputs[3:]
    assert not natural[:, FEATURES:].any()  # the ordinary canaries are zero on the new axes
    np.testing.assert_array_equal(dirac, np.c_[np.zeros((4, FEATURES)), 10 * np.eye(4)])


def test_the_canaries_as_data_keep_one_runs_bits_only(blobs):
    features, labels = blobs
    _, pool = experiments.split(300, 200, seed=1)
    drawn = experiments.drawn_canaries(features, labels, CLASSES, pool, {"ood": 4}, 2, 300)
    one = experiments.canary_table(drawn, "one-run")
    assert list(one.columns) == experiments.CANARIES
    assert one["included"].tolist() == drawn.table["included"].tolist()
    np.testing.assert_array_equal(np.stack(one["features"]), drawn.inputs.astype(np.float32))
    runs = experiments.canary_table(drawn, "runs")
    assert runs["included"].isna().all() and (runs["setting"] == "runs").all()


def test_canaries_are_scored_by_attacks_on_the_target_alone():
    """metric-loss: log p(label); metric-ent: minus the prediction's entropy in bits."""
    logits, labels = np.array([[2.0, 0.0], [0.0, 0.0]]), np.array([0, 1])
    scores = canary_scores(logits, labels, ["metric-loss", "metric-ent"], {}, seed=0)
    p = 1 / (1 + math.exp(-2))  # 0.8808: softmax of (2, 0)
    np.testing.assert_allclose(scores["metric-loss"], [math.log(p), math.log(0.5)])
    entropy = -(p * math.log2(p) + (1 - p) * math.log2(1 - p))
    np.testing.assert_allclose(scores["metric-ent"], [-entropy, -1.0])


def test_a_recipe_without_dp_sgd_claims_nothing_and_one_with_it_its_own_claim():
    dp = {"defense": {"kind": "dp_sgd", "epsilon": 2, "delta": 1e-6, "max_grad_norm": 1.0}}
    assert model_experiments.claim(dp, 1e-5) == (2.0, 1e-6)
    assert model_experiments.claim({"kind": "lr"}, 1e-5) == (math.inf, 1e-5)


def test_a_model_trains_on_its_base_set_and_included_canaries(blobs):
    """An almost unregularised logistic regression memorises its included mislabelled canaries:
    their loss is lower than that of the mislabelled canaries left out."""
    features, labels = blobs
    spec = {"arch": "lr", "train_size": 150, "canaries": {"mislabelled": 60, "natural": 20}}
    arch = {"kind": "lr", "C": 1000.0, "max_iter": 500}
    table, trials, accuracy = model_experiments.model_trials(
        "blobs", features, labels, CLASSES, spec, arch, ["metric-loss", "metric-ent"], {}, 1e-5,
        7, 1,
    )  # fmt: skip
    assert len(table) == 80 and len(trials) == 2 * 80
    assert set(trials["attack"]) == {"metric-loss", "metric-ent"}
    assert (trials["epsilon"] == math.inf).all() and (trials["setting"] == "one-run").all()
    loss = trials[trials["attack"] == "metric-loss"].set_index("sample_id")
    assert (loss["included"] == table.set_index("sample_id")["included"]).all()
    mislabelled = loss[loss["canary_kind"] == "mislabelled"]
    inside = mislabelled.loc[mislabelled["included"], "score"]
    outside = mislabelled.loc[~mislabelled["included"], "score"]
    assert inside.mean() > outside.mean() + 0.5
    assert 0.5 < accuracy["test_acc"] <= 1.0 and accuracy["train_acc"] < 1.0


def _canary_file(path, rows: int = 40, reference: bool = False, **columns) -> str:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "model_id": "target-0",
            "sample_id": np.arange(rows),
            "label": rng.integers(0, 3, rows),
            **{f"logit_{c}": rng.normal(size=rows) for c in range(3)},
            "included": np.arange(rows) % 2 == 0,
            "kind": np.where(np.arange(rows) < rows // 2, "mislabelled", "ood"),
        }
    )
    frame = frame.assign(**columns)
    if reference:  # the same outputs for a reference model beside the target
        frame = pd.concat([frame, frame.assign(model_id="reference-0")], ignore_index=True)
    frame.to_parquet(path, index=False)
    return str(path)


def test_a_claimed_audit_is_scored_per_canary_and_kind(tmp_path):
    path = _canary_file(tmp_path / "canaries.parquet")
    audit = {"name": "mine", "dataset": "own", "epsilon": 2.0, "delta": 1e-6}
    trials = claims.audit_trials(path, audit, ["metric-loss"], {}, seed=0)
    assert len(trials) == 40 and set(trials["target_model"]) == {"mine"}
    assert trials["included"].tolist() == [k % 2 == 0 for k in range(40)]
    assert trials.groupby("canary_kind").size().to_dict() == {"mislabelled": 20, "ood": 20}
    assert (trials["epsilon"] == 2.0).all() and (trials["delta"] == 1e-6).all()
    frame = pd.read_parquet(path)
    logits = frame[["logit_0", "logit_1", "logit_2"]].to_numpy()
    expected = np.take_along_axis(logits, frame[["label"]].to_numpy(), 1)[:, 0] - np.log(
        np.exp(logits).sum(axis=1)
    )
    np.testing.assert_allclose(trials["score"], expected, rtol=1e-5)


def test_the_claim_job_writes_the_trials_of_the_users_canaries(tmp_path):
    path = _canary_file(tmp_path / "canaries.parquet")
    trials = tmp_path / "trials.parquet"
    audit = {"name": "mine", "dataset": "own", "epsilon": 2.0, "delta": 1e-6}
    jobs.privacy_claim(
        canaries=path, trials=trials, audit=audit, attacks=["metric-loss"], options={}, seed=0
    )
    assert len(io.read_parquet(trials)) == 40
    assert io.read_parquet_metadata(trials)["canaries_sha256"] == io.file_hash(path)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"included": True}, "needs canaries both in and out"),
        ({"included": 2}, "must be boolean"),
        ({"reference": True}, "target models only"),
    ],
)
def test_a_bad_canary_file_is_named_with_its_problem(tmp_path, columns, message):
    path = _canary_file(tmp_path / "canaries.parquet", **columns)
    with pytest.raises(AuditInputError, match=message):
        claims.read_canaries(path)


# --- bounds, falsified and the table -------------------------------------------------------------


def _one_run(target: str, epsilon: float, scores: np.ndarray, included: np.ndarray, kind: str):
    return pd.DataFrame(
        {
            "dataset": "d",
            "target_model": target,
            "attack": "metric-loss",
            "setting": "one-run",
            "canary_kind": kind,
            "epsilon": epsilon,
            "delta": 1e-12,  # δ's term of the one-run p-value, 4e-10 at most here: negligible
            "noise_multiplier": 0.0,
            "run": 0,
            "sample_id": np.arange(len(scores)),
            "included": included,
            "score": scores,
        }
    )


def _ceiling(guesses: int, tests: int) -> float:
    """One run with every guess right and δ = 0 (the trials' 1e-12 moves it by less than 1e-6):
    q^r = β/tests, ε = log(q / (1 − q))."""
    q = (0.05 / tests) ** (1 / guesses)
    return math.log(q / (1 - q))


def test_perfectly_separated_canaries_reach_the_one_run_ceiling_and_refute_a_smaller_claim():
    """200 canaries, 100 in, scored 1 when in: the grid's largest guess count (all 200, read at
    95% / 5 grid points) is all right, so ε̂ = log(q/(1 − q)) for q = 0.01^(1/200) = 3.760."""
    included = np.arange(200) < 100
    trials = _one_run("leaky", 1.0, included.astype(float), included, "dirac")
    rows = results.bounds(trials, 0.95, seed=0).set_index("estimator")
    assert rows.loc["one-run", "epsilon_lower"] == pytest.approx(_ceiling(200, 5), abs=1e-6)
    assert rows.loc["one-run", "epsilon_lower"] == pytest.approx(3.760, abs=1e-3)
    assert rows.loc["one-run", "canaries"] == 200 and rows.loc["one-run", "epsilon"] == 1.0
    assert bool(rows.loc["one-run", "falsified"]) and not bool(rows.loc["one-run-fdp", "falsified"])
    unclaimed = results.bounds(trials.assign(epsilon=math.inf), 0.95, seed=0)
    assert not unclaimed["falsified"].any()


def test_falsified_is_corrected_over_the_targets_deciding_rows():
    """A claim of 3.7 lies between the ceiling read alone (3.760, at 1 − β/5) and read beside a
    second deciding row (3.618, at 1 − β/(2·5)): refuted alone, not with the second row."""
    assert _ceiling(200, 10) == pytest.approx(3.618, abs=1e-3)
    included = np.arange(200) < 100
    strong = _one_run("t", 3.7, included.astype(float), included, "dirac")
    noise = np.random.default_rng(1).normal(size=200)
    weak = _one_run("t", 3.7, noise, included, "natural")
    alone = results.bounds(strong, 0.95, seed=0)
    assert alone["falsified"].tolist() == [True, False]  # one-run; one-run-fdp never decides
    both = results.bounds(pd.concat([strong, weak], ignore_index=True), 0.95, seed=0)
    assert not both["falsified"].any()


def test_independent_runs_give_clopper_pearson_and_gdp_rows():
    """400 runs whose canary score ignores its bit: the held-out half's rates bound nothing."""
    rng = np.random.default_rng(2)
    runs = pd.DataFrame(
        {
            "dataset": "d",
            "target_model": "t",
            "attack": "metric-loss",
            "setting": "runs",
            "canary_kind": "dirac",
            "epsilon": 1.0,
            "delta": 1e-5,
            "noise_multiplier": 1.0,
            "run": np.arange(400),
            "sample_id": 7,
            "included": rng.random(400) < 0.5,
            "score": rng.normal(size=400),
        }
    )
    rows = results.bounds(runs, 0.95, seed=0)
    assert rows["estimator"].tolist() == ["clopper-pearson", "gdp"]
    assert (rows["canaries"] == 400).all() and (rows["positives"] + rows["negatives"] == 200).all()
    assert (rows["epsilon_lower"] == 0).all() and not rows["falsified"].any()


def test_the_table_has_the_contracts_columns_and_plain_numbers(tmp_path):
    included = np.arange(200) < 100
    trials = pd.concat(
        [
            _one_run("a", 1.0, included.astype(float), included, "dirac"),
            _one_run("b", math.inf, included.astype(float), included, "dirac"),
        ],
        ignore_index=True,
    )
    table = results.audit_table(results.bounds(trials, 0.95, seed=0))
    assert list(table.columns) == results.TABLE_COLUMNS
    assert "refuted: a." in table.attrs["caption"]
    from miaflow.evaluation.tables import write_table

    write_table(table, tmp_path / "privacy_audit", table.attrs["caption"])
    text = (tmp_path / "privacy_audit.csv").read_text().splitlines()
    assert text[0] == ",".join(results.TABLE_COLUMNS)
    assert text[-1].startswith("d,b,metric-loss,one-run-fdp,dirac,inf,1e-12,0.95,200,")
    read = pd.read_csv(tmp_path / "privacy_audit.csv")
    assert read["falsified"].tolist() == [True, False, False, False]
    assert read["epsilon"].tolist() == [1.0, 1.0, math.inf, math.inf]


# --- validation ----------------------------------------------------------------------------------


@pytest.fixture
def params(repo) -> dict:
    return yaml.safe_load((repo / "params.yaml").read_text())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda p: p["privacy"]["heads"][0].update(batch_size=100),
            "privacy.heads[0].batch_size: 100 cuts privacy.heads[0].train_size 400 and the "
            "canaries of one run (200, privacy.heads[0].canaries) into different numbers of "
            "batches",
        ),
        (
            lambda p: p["privacy"]["models"][0].update(train_size=1000),
            "privacy.models[0].train_size: architectures.torch_lr_dp.batch_size 550 cuts "
            "privacy.models[0].train_size 1000 and its 300 canaries (privacy.models[0].canaries) "
            "into different numbers of batches",
        ),
        (
            lambda p: p["privacy"].update(attacks=["metric-loss", "model-lira"]),
            "privacy.attacks[1]: 'model-lira' needs reference",
        ),
        (
            lambda p: p["privacy"]["heads"][0].update(train_size=1700),
            "privacy.heads[0]: train_size 1700 and 100 samples for canaries",
        ),
        (
            lambda p: p["privacy"]["heads"][0]["targets"][2].update(noise_scale=0.5),
            "privacy.heads[0].targets[2].noise_scale: a non-private target",
        ),
        (
            lambda p: p["privacy"]["heads"][0]["targets"][1].update(name="head-dp"),
            "the target 'head-dp' of 'digits' is named by privacy.heads[0] too",
        ),
        (
            lambda p: p["privacy"]["heads"][0].update(canaries={"dirac": 1}),
            "privacy.heads[0].canaries: one run needs 2 canaries or more, got 1",
        ),
        (
            lambda p: p["privacy"]["models"][0].update(arch="nope"),
            "privacy.models[0].arch: 'nope' is not a key of architectures",
        ),
    ],
)
def test_validation_names_what_a_privacy_audit_cannot_run(params, edit, message):
    edit(params)
    assert message in problems_of(params)


def test_an_audit_claims_epsilon_delta_and_canaries_together(params, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "audit").mkdir()
    for name in ("outputs.parquet", "membership.parquet", "canaries.parquet"):
        (tmp_path / "audit" / name).write_bytes(b"")
    files = {"outputs": "audit/outputs.parquet", "membership": "audit/membership.parquet"}
    params["audits"] = [{"name": "mine", **files, "epsilon": 1.0}]
    said = problems_of(params)
    assert "audits[0]: epsilon without delta, canaries" in said
    assert "canaries.parquet: no audit names this file" in said  # not yet named


# --- the jobs ------------------------------------------------------------------------------------


def test_the_heads_and_bounds_jobs_write_trials_and_the_contract(blobs, tmp_path):
    """A small head audit: a non-private head and an honest one at ε = 1, 40 runs with one Dirac
    canary and one run with 30 canaries; then its bounds."""
    features, labels = blobs
    data = tmp_path / "data.parquet"
    write_dataset(data, Dataset("blobs", "tabular", features, labels.astype(np.int64), CLASSES))
    audit = {
        "train_size": 200, "batch_size": 150, "lr": 0.05, "clip_norm": 1.0, "epochs": 5,
        "runs": 40, "run_kinds": ["dirac"], "canaries": {"dirac": 20, "mislabelled": 10},
        "targets": [{"name": "open", "epsilon": math.inf}, {"name": "dp", "epsilon": 1.0}],
    }  # fmt: skip
    paths = {name: tmp_path / f"{name}.parquet" for name in ("canaries", "trials", "audit")}
    jobs.privacy_heads(
        data=data, canaries=paths["canaries"], trials=paths["trials"], audit=audit, delta=1e-5,
        seed=4, threads=1,
    )  # fmt: skip
    canaries, trials = io.read_parquet(paths["canaries"]), io.read_parquet(paths["trials"])
    assert canaries.groupby("setting").size().to_dict() == {"one-run": 30, "runs": 1}
    assert trials.groupby(["target_model", "setting"]).size().to_dict() == {
        ("dp", "one-run"): 30, ("dp", "runs"): 40, ("open", "one-run"): 30, ("open", "runs"): 40,
    }  # fmt: skip
    noise = trials.groupby("target_model")["noise_multiplier"].first()
    assert noise["open"] == 0 and noise["dp"] > 1  # the accountant's σ for ε = 1
    jobs.privacy_bounds(trials=[paths["trials"]], audit=paths["audit"], confidence=0.95, seed=4)
    rows = io.read_parquet(paths["audit"])
    assert set(rows["estimator"]) == {"clopper-pearson", "gdp", "one-run", "one-run-fdp"}
    assert len(rows) == 2 * (2 + 2 * 2)  # per target: runs (1 kind), one run (2 kinds); 2 each
    assert not rows["falsified"].any()
    empty = tmp_path / "empty.parquet"
    jobs.privacy_bounds(trials=[], audit=empty, confidence=0.95, seed=4)
    assert io.read_parquet(empty).empty
