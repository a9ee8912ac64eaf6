"""Audits of models trained outside miaflow: reading and checking a user's files, the attacks an
audit can run, and scores on a toy target that memorises (higher = more likely member)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import softmax
from sklearn.metrics import roc_auc_score
from test_training import ARCHS, toy_dataset

from miaflow import io
from miaflow.audit import AuditInputError, applicable, read_members, read_membership, read_outputs
from miaflow.data import write_dataset
from miaflow.jobs import audit as jobs
from miaflow.plan import Experiment
from miaflow.splits import make_splits

pytestmark = pytest.mark.audit

N_SAMPLES, N_CLASSES = 120, 3
MODELS = [
    "target-0",
    "target-1",
    *(f"reference-{k}" for k in range(8)),
    "population-0",
    "population-1",
]


def memorising_outputs(seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Long-format logits of models that are confident on their members only, and the matrix:
    the first 80 samples form the target pool (targets, references), the rest the auxiliary."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, N_CLASSES, N_SAMPLES)
    in_target = np.arange(N_SAMPLES) < 80
    keep = {}
    for model in MODELS:
        role, index = model.split("-")
        pool = ~in_target if role == "population" else in_target
        if role == "reference" and int(index) % 2:  # complementary pairs, as miaflow draws them
            keep[model] = pool & ~keep[f"reference-{int(index) - 1}"]
        else:
            keep[model] = pool & (rng.random(N_SAMPLES) < 0.5)
    rows = []
    for model in MODELS:
        logits = rng.normal(size=(N_SAMPLES, N_CLASSES))
        logits[np.arange(N_SAMPLES), labels] += np.where(keep[model], 4.0, 0.5)
        rows.append(
            pd.DataFrame(
                {
                    "model_id": model,
                    "sample_id": np.arange(N_SAMPLES),
                    "label": labels,
                    **{f"logit_{c}": logits[:, c] for c in range(N_CLASSES)},
                }
            )
        )
    membership = pd.DataFrame(
        {
            "sample_id": np.arange(N_SAMPLES),
            "pool": np.where(in_target, "target", "auxiliary"),
            **keep,
        }
    )
    return pd.concat(rows, ignore_index=True), membership


def write(frame: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path


def audit_scores(
    tmp_path: Path, outputs: Path, membership: Path, attacks: list[str]
) -> pd.DataFrame:
    audit = Experiment("toy", "mine", "mine")
    files = {
        name: tmp_path / f"{name}.parquet"
        for name in ("splits", "signals", "scores", "metrics", "roc")
    }
    jobs.audit_outputs(
        outputs=outputs,
        membership=membership,
        audit=audit,
        splits=files["splits"],
        signals=files["signals"],
        records=tmp_path / "records.json",
    )
    jobs.score_audit(
        splits=files["splits"],
        signals=[files["signals"]],
        reference_signals=[files["signals"]],
        scores=files["scores"],
        timings=tmp_path / "timings.tsv",
        metrics=files["metrics"],
        roc=files["roc"],
        audit=audit,
        attacks=attacks,
        options={},
        seed=1,
        fpr_levels=[0.01, 0.1],
        confidence=0.95,
    )
    return io.read_parquet(files["scores"])


def test_memorising_models_are_exposed_by_every_applicable_attack(tmp_path):
    outputs, membership = memorising_outputs()
    scores = audit_scores(
        tmp_path,
        write(outputs, tmp_path / "outputs.parquet"),
        write(membership, tmp_path / "membership.csv"),
        ["metric-loss", "lira-online", "rmia-offline", "learn-original", "query-neighbor"],
    )
    assert set(scores["attack"]) == {"metric-loss", "lira-online", "rmia-offline", "learn-original"}
    assert set(scores["repeat"]) == {0, 1}
    calibrated = scores[
        scores["attack"] != "learn-original"
    ]  # an attack MLP on 40 shadow members: noisy
    for (attack, repeat), group in calibrated.groupby(["attack", "repeat"]):
        assert roc_auc_score(group["is_member"], group["score"]) > 0.7, (attack, repeat)
        assert set(group["sample_id"]) <= set(range(80))  # the target pool only
    records = io.read_json(tmp_path / "records.json")
    assert [r["model_id"] for r in records] == MODELS
    assert all(r["dataset"] == "toy" and r["arch"] == "mine" for r in records)


def test_probabilities_and_logits_give_the_same_scores(tmp_path):
    outputs, membership = memorising_outputs()
    logits = outputs[[f"logit_{c}" for c in range(N_CLASSES)]].to_numpy()
    probabilities = outputs.drop(columns=[f"logit_{c}" for c in range(N_CLASSES)])
    for c, column in enumerate(softmax(logits, axis=1).T):
        probabilities[f"prob_{c}"] = column
    membership_path = write(membership, tmp_path / "membership.parquet")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    from_logits = audit_scores(
        tmp_path / "a",
        write(outputs, tmp_path / "logits.parquet"),
        membership_path,
        ["metric-loss", "lira-offline"],
    )
    from_probabilities = audit_scores(
        tmp_path / "b",
        write(probabilities, tmp_path / "probs.csv"),
        membership_path,
        ["metric-loss", "lira-offline"],
    )
    np.testing.assert_allclose(
        from_logits["score"], from_probabilities["score"], rtol=1e-4, atol=1e-4
    )


def test_attacks_that_need_what_an_audit_lacks_are_skipped_with_a_reason(tmp_path):
    outputs, membership = memorising_outputs()
    targets_only = [m for m in MODELS if m.startswith("target")]
    outputs = write(outputs[outputs["model_id"].isin(targets_only)], tmp_path / "outputs.parquet")
    membership = write(
        membership[["sample_id", "pool", *targets_only]], tmp_path / "membership.parquet"
    )
    matrix = read_membership(membership, read_outputs(outputs), outputs)
    runnable, skipped = applicable(
        ["metric-loss", "lira-online", "rmia-offline", "query-adv"], matrix
    )
    assert runnable == ["metric-loss"]
    assert skipped == {
        "lira-online": "needs reference models",
        "rmia-offline": "needs population and reference models",
        "query-adv": "queries the model; an audit has its outputs only",
    }


def _broken(
    outputs: pd.DataFrame, membership: pd.DataFrame, case: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    outputs, membership = outputs.copy(), membership.copy()
    if case == "class columns with a gap":
        outputs = outputs.rename(columns={"logit_2": "logit_3"})
    elif case == "missing samples":
        outputs = outputs[~((outputs["model_id"] == "reference-1") & (outputs["sample_id"] < 7))]
    elif case == "NaN logits":
        outputs.loc[5, "logit_1"] = np.nan
    elif case == "probabilities not summing to 1":
        outputs = outputs.rename(columns={f"logit_{c}": f"prob_{c}" for c in range(N_CLASSES)})
        outputs[[f"prob_{c}" for c in range(N_CLASSES)]] = 0.4
    elif case == "both logits and probabilities":
        outputs["prob_0"] = 1.0
    elif case == "labels disagree":
        outputs.loc[N_SAMPLES + 3, "label"] = (outputs.loc[N_SAMPLES + 3, "label"] + 1) % N_CLASSES
    elif case == "bad model id":
        outputs.loc[outputs["model_id"] == "reference-3", "model_id"] = "shadow-3"
    elif case == "membership lacks samples":
        membership = membership[membership["sample_id"] != 17]
    elif case == "membership lacks a model":
        membership = membership.drop(columns=["reference-2"])
    elif case == "membership has another model":
        membership["reference-9"] = False
    elif case == "member outside its pool":
        membership.loc[100, "target-1"] = True
    elif case == "target without non-members":
        membership.loc[membership["pool"] == "target", "target-0"] = True
    elif case == "membership not boolean":
        membership["target-0"] = membership["target-0"].astype(int) * 2
    return outputs, membership


BROKEN = {
    "class columns with a gap": ("outputs", "numbered 0 … C-1"),
    "missing samples": (
        "outputs",
        "model reference-1 has no outputs for 7 of the 120 samples (0, 1, 2, 3, 4, ...)",
    ),
    "NaN logits": ("outputs", "1 rows have NaN or infinite logits (model target-0, sample 5)"),
    "probabilities not summing to 1": (
        "outputs",
        "probabilities of 1440 rows do not sum to 1 (sum 1.2",
    ),
    "both logits and probabilities": ("outputs", "one kind only"),
    "labels disagree": ("outputs", "models disagree on the label of a sample"),
    "bad model id": (
        "outputs",
        "model ids must be target-<i>, reference-<i> or population-<i> (found shadow-3)",
    ),
    "membership lacks samples": ("membership", "1 samples of"),
    "membership lacks a model": ("membership", "missing ['reference-2']"),
    "membership has another model": ("membership", "not in the outputs ['reference-9']"),
    "member outside its pool": (
        "membership",
        "target-1 trained on 1 samples outside the target pool (100)",
    ),
    "target without non-members": ("membership", "target-0 needs both members and non-members"),
    "membership not boolean": ("membership", "column 'target-0' must be boolean"),
}


@pytest.mark.parametrize("case", list(BROKEN))
@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_bad_inputs_stop_naming_the_file_and_the_problem(tmp_path, case, suffix):
    outputs, membership = _broken(*memorising_outputs(), case)
    paths = {
        "outputs": write(outputs, tmp_path / f"outputs{suffix}"),
        "membership": write(membership, tmp_path / f"membership{suffix}"),
    }
    culprit, problem = BROKEN[case]
    with pytest.raises(AuditInputError) as raised:
        read_membership(paths["membership"], read_outputs(paths["outputs"]), paths["outputs"])
    assert str(raised.value).startswith(f"{paths[culprit]}: ")
    assert problem in str(raised.value)


def test_unreadable_files_are_named(tmp_path):
    (tmp_path / "outputs.parquet").write_bytes(b"not parquet")
    (tmp_path / "outputs.json").write_text("{}")
    for name, problem in [
        ("outputs.parquet", "cannot be read as parquet"),
        ("outputs.json", "unknown format"),
        ("absent.csv", "file not found"),
    ]:
        with pytest.raises(AuditInputError, match=problem):
            read_outputs(tmp_path / name)


def test_a_failed_check_writes_nothing(tmp_path):
    outputs, membership = _broken(*memorising_outputs(), "NaN logits")
    with pytest.raises(AuditInputError):
        jobs.audit_outputs(
            outputs=write(outputs, tmp_path / "o.parquet"),
            membership=write(membership, tmp_path / "m.parquet"),
            audit=Experiment("toy", "mine", "mine"),
            splits=tmp_path / "splits.parquet",
            signals=tmp_path / "signals.parquet",
            records=tmp_path / "records.json",
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.parquet", "o.parquet"]


def trained_outside(
    arch: dict, features: np.ndarray, labels: np.ndarray, n_classes: int, members: np.ndarray
):
    """A torch module of a miaflow architecture trained without miaflow (plain Adam, full batch)
    on `members`: what a user brings as a checkpoint."""
    import torch

    from miaflow.models.recipe import build_module

    torch.manual_seed(0)
    model = build_module(arch, features.shape[1:], n_classes)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.tensor(features[members]), torch.tensor(labels[members])
    for _ in range(300):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimiser.step()
    return model


def _checkpoint(tmp_path: Path) -> tuple[Path, Path, Path, np.ndarray]:
    """A prepared toy dataset and its splits, and an MLP trained outside the workflow on half of
    the target pool, saved as a plain state dict."""
    from safetensors.torch import save_file

    dataset = toy_dataset(image=False)
    write_dataset(tmp_path / "data.parquet", dataset)
    splits = make_splits(
        len(dataset.labels), seed=3, dataset="toy", repeats=1, n_reference=2, n_population=2
    )
    io.write_parquet(
        tmp_path / "splits.parquet",
        splits.to_table(),
        metadata={"data_hash": dataset.content_hash()},
    )
    members = splits.target_samples[::2]
    model = trained_outside(
        ARCHS["mlp"], dataset.features, dataset.labels, dataset.n_classes, members
    )
    save_file(model.state_dict(), tmp_path / "mine.safetensors")
    write(pd.DataFrame({"sample_id": members}), tmp_path / "members.csv")
    return (
        tmp_path / "mine.safetensors",
        tmp_path / "members.csv",
        tmp_path / "data.parquet",
        members,
    )


def test_a_checkpoint_is_audited_beside_miaflows_reference_models(tmp_path):
    checkpoint, members, data, trained_on = _checkpoint(tmp_path)
    audit = Experiment("toy", "mine", "mine")
    jobs.audit_checkpoint(
        checkpoint=checkpoint,
        members=members,
        data=data,
        base_splits=tmp_path / "splits.parquet",
        arch=ARCHS["mlp"],
        audit=audit,
        splits=tmp_path / "audit-splits.parquet",
        signals=tmp_path / "signals.parquet",
        records=tmp_path / "records.json",
        threads=1,
    )
    matrix = read_members(members, jobs.read_splits(tmp_path / "splits.parquet"))
    assert matrix.model_ids == (
        "target-0",
        "reference-0",
        "reference-1",
        "population-0",
        "population-1",
    )
    assert np.array_equal(np.flatnonzero(matrix.members("target-0")), np.sort(trained_on))
    signals = io.read_parquet(tmp_path / "signals.parquet")
    assert set(signals["model_id"]) == {"target-0"}
    loss = signals.set_index("sample_id")["loss"]
    held_out = np.setdiff1d(matrix.target_samples, trained_on)
    assert loss[trained_on].mean() < loss[held_out].mean()  # it memorised its members
    [record] = io.read_json(tmp_path / "records.json")
    assert record["train_acc"] > record["test_acc"]


def test_a_checkpoint_of_another_architecture_is_named(tmp_path):
    checkpoint, members, data, _ = _checkpoint(tmp_path)
    other = {**ARCHS["mlp"], "hidden": [16, 8]}
    with pytest.raises(
        AuditInputError, match=f"^{checkpoint}: does not fit architecture kind 'mlp'"
    ):
        jobs.audit_checkpoint(
            checkpoint=checkpoint,
            members=members,
            data=data,
            base_splits=tmp_path / "splits.parquet",
            arch=other,
            audit=Experiment("toy", "mine", "mine"),
            splits=tmp_path / "s.parquet",
            signals=tmp_path / "g.parquet",
            records=tmp_path / "r.json",
            threads=1,
        )


def test_checkpoint_members_outside_the_target_pool_are_rejected(tmp_path):
    _, _, _, _ = _checkpoint(tmp_path)
    base = jobs.read_splits(tmp_path / "splits.parquet")
    path = write(pd.DataFrame({"sample_id": base.auxiliary_samples[:3]}), tmp_path / "wrong.csv")
    with pytest.raises(
        AuditInputError, match="target-0 trained on 3 samples outside the target pool"
    ):
        read_members(path, base)


@pytest.mark.parametrize(
    ("audit", "problem"),
    [
        (
            {"name": "mine"},
            "audits[0]: give either outputs and membership (the models' outputs) or checkpoint",
        ),
        (
            {"name": "mine", "outputs": "audit/o.parquet"},
            "audits[0].membership: missing (an audit of outputs needs outputs, membership)",
        ),
        (
            {"name": "mine", "outputs": "audit/o.parquet", "membership": "audit/absent.csv"},
            "audits[0].membership: audit/absent.csv not found",
        ),
        (
            {
                "name": "mine",
                "outputs": "audit/o.parquet",
                "membership": "audit/o.parquet",
                "arch": "mlp",
            },
            "audits[0].arch: only an audit of a checkpoint takes it",
        ),
        (
            {
                "name": "mine",
                "outputs": "audit/o.parquet",
                "membership": "audit/o.parquet",
                "checkpoint": "audit/o.parquet",
            },
            "audits[0]: give either outputs and membership",
        ),
        (
            {
                "name": "mine",
                "checkpoint": "audit/o.parquet",
                "arch": "mlp",
                "dataset": "nope",
                "members": "audit/o.parquet",
            },
            "audits[0].dataset: 'nope' is not a miaflow dataset",
        ),
        (
            {
                "name": "mine",
                "checkpoint": "audit/o.parquet",
                "arch": "catboost",
                "dataset": "purchase",
                "members": "audit/o.parquet",
            },
            "audits[0].arch: checkpoints of kind 'catboost' are not supported",
        ),
        (
            {
                "name": "mlp",
                "checkpoint": "audit/o.parquet",
                "arch": "mlp",
                "dataset": "purchase",
                "members": "audit/o.parquet",
            },
            "audits[0].name: purchase/mlp is already the name of another result",
        ),
        (
            {"name": "Mine", "outputs": "audit/o.parquet", "membership": "audit/o.parquet"},
            "audits[0].name: 'Mine' does not match",
        ),
        (  # not versioned by the audit stage's DVC dependency: a reviewer would lack it
            {"name": "mine", "outputs": "o.parquet", "membership": "audit/o.parquet"},
            "audits[0].outputs: o.parquet is outside audit/",
        ),
    ],
)
def test_audits_are_validated_before_any_job(repo, tmp_path, monkeypatch, audit, problem):
    import yaml

    from miaflow import config

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["datasets"] = {
        k: v for k, v in params["datasets"].items() if "path" not in v
    }  # no ../shared
    monkeypatch.chdir(tmp_path)
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "o.parquet").write_bytes(b"")
    (tmp_path / "o.parquet").write_bytes(b"")
    params["audits"] = [audit]
    with pytest.raises(config.ConfigError) as caught:
        config.validate(params)
    assert problem in str(caught.value)


def test_a_valid_audit_passes_validation(repo, tmp_path, monkeypatch):
    import yaml

    from miaflow import config, plan

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["datasets"] = {k: v for k, v in params["datasets"].items() if "path" not in v}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "o.parquet").write_bytes(b"")
    params["audits"] = [
        {
            "name": "mine",
            "outputs": "audit/o.parquet",
            "membership": "audit/o.parquet",
        },
        {
            "name": "mine_mlp",
            "checkpoint": "audit/o.parquet",
            "arch": "mlp",
            "dataset": "digits",
            "members": "audit/o.parquet",
        },
    ]
    effective = config.validate(params)
    assert [a["experiment"].name for a in plan.audits(effective)] == [
        "mine/mine",
        "digits/mine_mlp",
    ]
    assert ("digits", "mlp") in plan.trained(effective)  # its reference models are trained


def test_a_file_in_audit_that_no_audit_names_is_rejected_by_name(repo, tmp_path, monkeypatch):
    """DVC's stage audit depends on the folder audit/: a stray file would change dvc.lock. The
    named files, their DVC pointer files, the folder's README and `dvc add`'s .gitignore pass."""
    import yaml

    from miaflow import config
    from miaflow.plan.stages import USER_INPUTS
    from miaflow.validation.audits import FOLDER

    assert USER_INPUTS == (str(FOLDER),)  # the folder validation checks is the stage's dep
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["datasets"] = {k: v for k, v in params["datasets"].items() if "path" not in v}
    monkeypatch.chdir(tmp_path)
    for name in (
        "outputs.parquet",
        "outputs.parquet.dvc",
        "membership.parquet",
        "membership.parquet.dvc",
        "README.md",
        ".gitignore",
        "scratch.csv",
        "old/outputs.parquet",
    ):
        (tmp_path / "audit" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "audit" / name).write_bytes(b"")
    params["audits"] = [
        {
            "name": "mine",
            "outputs": "audit/outputs.parquet",
            "membership": "./audit/membership.parquet",
        }
    ]
    with pytest.raises(config.ConfigError) as caught:
        config.validate(params)
    named = [
        line.split(":")[0].strip(" -")
        for line in str(caught.value).splitlines()
        if "no audit names this file" in line
    ]
    assert named == ["audit/old/outputs.parquet", "audit/scratch.csv"]
    (tmp_path / "audit/scratch.csv").unlink()
    (tmp_path / "audit/old/outputs.parquet").unlink()
    config.validate(params)


def test_a_huge_sample_id_is_named_without_memory_in_proportion_to_it(tmp_path):
    """Sample ids are checked on the distinct ids: an id of 10**12 (a row index gone wrong)
    names the file and the gap instead of allocating terabytes."""
    import tracemalloc

    outputs, _ = memorising_outputs()
    outputs.loc[outputs.index[-1], "sample_id"] = 10**12
    path = write(outputs, tmp_path / "huge.parquet")
    tracemalloc.start()
    with pytest.raises(AuditInputError, match=r"huge.parquet: sample ids must be 0 … n-1") as error:
        read_outputs(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert "the largest 1000000000000" in str(error.value) and peak < 50 * 2**20


def test_model_ids_are_normalised_and_two_spellings_of_one_model_rejected(tmp_path):
    outputs, membership = memorising_outputs()
    spelt = outputs.replace({"model_id": {"reference-1": "reference-01"}})
    read = read_outputs(write(spelt, tmp_path / "spelt.parquet"))
    assert "reference-1" in read.model_ids and "reference-01" not in read.model_ids
    splits = read_membership(
        write(membership.rename(columns={"reference-1": "reference-001"}), tmp_path / "m.csv"),
        read,
        "spelt.parquet",
    )
    assert splits.model_ids == read.model_ids
    both = pd.concat([outputs, spelt[spelt["model_id"] == "reference-01"]], ignore_index=True)
    with pytest.raises(AuditInputError, match="reference-01 and reference-1 name the same model"):
        read_outputs(write(both, tmp_path / "both.parquet"))


def test_numbers_stored_as_text_are_rejected_not_parsed(tmp_path):
    outputs, _ = memorising_outputs()
    outputs["logit_1"] = outputs["logit_1"].map(str)  # "0.25": text that looks like a number
    with pytest.raises(AuditInputError, match=r"must hold numbers.*logit_1 \((object|str)\)"):
        read_outputs(write(outputs, tmp_path / "text.parquet"))


def test_a_checkpoint_with_integer_weights_is_rejected(tmp_path):
    from safetensors.numpy import save_file

    from miaflow.audit import checkpoint_weights

    path = tmp_path / "model.safetensors"
    save_file(
        {
            "fc.weight": np.ones((2, 3), np.int64),
            "bn.num_batches_tracked": np.zeros((), np.int64),  # an integer buffer by design
            "fc.bias": np.zeros(2, np.float32),
        },
        str(path),
    )
    with pytest.raises(AuditInputError, match=r"floating-point weights.*fc.weight \(int64\)") as e:
        checkpoint_weights(path)
    assert "num_batches_tracked" not in str(e.value)
