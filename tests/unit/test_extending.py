"""docs/extending.md, step by step: a new attack (in a new family, with an option) and a new
dataset, added as a fork would add them, accepted by validation, planned by the rules, loaded by
the prepare job and scored by the evaluate job. Every addition is a monkeypatch, undone after
each test, so that no other test sees the toys: the attack's catalogue entry, its family, and its
module among the modules the scoring runner imports (this test module plays that module)."""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import problems_of
from test_attacks import _write_toy_store

from miaflow import config, io, plan
from miaflow.attacks import registry, scoring
from miaflow.attacks.inputs import AttackInputs
from miaflow.attacks.options import Options, option
from miaflow.attacks.registry import ATTACKS, Attack, catalogue
from miaflow.data import DATASETS, Dataset, DatasetSize, DatasetSpec, load_dataset, read_dataset
from miaflow.evaluation.metrics import summary
from miaflow.evaluation.tables import auroc_table, family_table
from miaflow.jobs import evaluate, prepare
from miaflow.plan import Experiment
from miaflow.seeding import rng

ATTACK, FAMILY, DATASET = "toy-out-mean", "toy", "toy_blobs"
MODULE = "miaflow.attacks.toy"  # where the guide puts the attack's function


# --- The attack: the guide's module, options class and catalogue entry (Adding an attack) --------


@dataclass(frozen=True)
class ToyOutMeanOptions(Options):
    """toy-out-mean's options (the guide's class in miaflow/attacks/options.py)."""

    signal: Literal["loss", "phi"] = option("loss", doc="The signal compared with its OUT mean.")


def toy_out_mean(inputs: AttackInputs) -> np.ndarray:
    """Target's loss (or phi) against its mean over the OUT reference models (offline)."""
    signal = inputs.options.signal
    values, out = inputs.reference[signal], ~inputs.reference_keep
    mean_out = (values * out).sum(axis=0) / out.sum(axis=0)  # NaN without OUT models
    gap = inputs.target[signal] - mean_out
    return -gap if signal == "loss" else gap  # higher = member: a member's loss is low, phi high


def toy_entry() -> Attack:
    """The guide's entry in the catalogue of miaflow/attacks/registry.py."""
    return Attack(
        ATTACK,
        FAMILY,
        f"{MODULE}.toy_out_mean",
        "Target's loss (or phi) against its mean over the OUT reference models (offline).",
        needs=frozenset({"reference"}),
        options=ToyOutMeanOptions,
    )


# --- The dataset: the guide's loader and DatasetSpec (Adding a dataset, steps 1 and 2) ----------


def load_toy_blobs(opts, seed, sources) -> Dataset:
    """Two Gaussian blobs, one per class, drawn from the seed; classes alternate (balanced)."""
    n_samples, n_features = int(opts["n_samples"]), int(opts["n_features"])
    generator = rng(seed, DATASET)
    labels = np.arange(n_samples, dtype=np.int64) % 2
    centres = generator.normal(size=(2, n_features))
    features = centres[labels] + generator.normal(size=(n_samples, n_features))
    return Dataset(DATASET, "tabular", features.astype(np.float32), labels, 2)


TOY_BLOBS = DatasetSpec(
    DATASET,
    "tabular",
    "two Gaussian blobs generated from the seed, 2 classes (a toy)",
    load_toy_blobs,
    offline=True,
    defaults={"n_samples": 400, "n_features": 8},
    size=lambda options: DatasetSize(options["n_samples"], 2, options["n_samples"] // 2),
)


# --- The guide's addition to params.schema.json (dataset step 3; an attack needs none) --------

DATASET_OPTIONS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "n_samples": {"type": "integer", "minimum": 2},
        "n_features": {"type": "integer", "minimum": 1},
    },
}


@pytest.fixture
def toy_attack(monkeypatch) -> str:
    """The family added to FAMILIES, the entry to the catalogue and the module to the scoring
    runner's; undone afterwards."""
    monkeypatch.setattr(registry, "FAMILIES", (*registry.FAMILIES, FAMILY))
    monkeypatch.setitem(ATTACKS, ATTACK, toy_entry())
    monkeypatch.setitem(scoring.MODULES, MODULE, sys.modules[__name__])
    return ATTACK


@pytest.fixture
def toy_dataset(monkeypatch) -> str:
    """The dataset's entry in DATASETS; removed afterwards."""
    monkeypatch.setitem(DATASETS, DATASET, TOY_BLOBS)
    return DATASET


@pytest.fixture
def toy_schema(monkeypatch) -> dict:
    """params.schema.json with the toy dataset's name and options, as validation reads it (the
    attack's id and options come from the catalogue)."""
    schema = config.schema()
    schema["$defs"]["dataset_name"]["enum"].append(DATASET)
    schema["properties"]["datasets"]["properties"][DATASET] = DATASET_OPTIONS_SCHEMA
    monkeypatch.setattr(config, "schema", lambda: copy.deepcopy(schema))
    return schema


@pytest.fixture
def params(repo, monkeypatch) -> dict:
    """The repository's params.yaml, using both toys, read where the workflow reads it."""
    monkeypatch.chdir(repo)  # the profiles' local dataset paths are relative to the repository
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["experiments"].append({"dataset": DATASET, "arch": "mlp"})
    params["datasets"][DATASET] = {"n_samples": 400}
    params["attacks"].append(ATTACK)
    params["attack_options"][ATTACK] = {"signal": "phi"}
    return params


# --- The catalogue entry --------------------------------------------------------------------


def test_a_new_family_must_be_added_to_families_first():
    with pytest.raises(ValueError, match=f"unknown family '{FAMILY}'"):
        toy_entry()
    assert ATTACK not in ATTACKS


def test_the_entry_holds_its_family_needs_options_and_description(toy_attack):
    attack = ATTACKS[toy_attack]
    assert (attack.family, attack.needs, attack.reads, attack.subset) == (
        FAMILY,
        frozenset({"reference"}),
        (),
        False,
    )
    assert attack.modalities == {"image", "tabular", "text"}
    assert attack.doc.startswith("Target's loss (or phi)")
    assert registry.attack_options(toy_attack, {}) == ToyOutMeanOptions(signal="loss")
    assert scoring.score_function(toy_attack) is toy_out_mean
    with pytest.raises(ValueError, match="in the catalogue twice"):
        catalogue([*ATTACKS.values(), toy_entry()])


def test_the_score_is_known_on_hand_made_arrays(toy_attack):
    """Known answers: the unit test the guide asks for beside tests/unit/test_attacks.py."""
    keep = np.array([[1, 0], [0, 1], [0, 0]], dtype=bool)  # 3 references, 2 samples
    loss = np.array([[9.0, 1.0], [2.0, 9.0], [4.0, 3.0]])  # OUT means: 3 and 2
    inputs = AttackInputs(
        target={"loss": np.array([0.5, 2.5])},
        reference={"loss": loss},
        reference_keep=keep,
        target_on_population={},
        population={},
        population_keep=np.zeros((0, 0), bool),
    )
    np.testing.assert_allclose(scoring.run_attack(toy_attack, inputs), [2.5, -0.5])


# --- Loading ----------------------------------------------------------------------------------


def test_the_dataset_loads_through_the_registry_in_canonical_order(toy_dataset):
    dataset = load_dataset(toy_dataset, {"n_features": 3}, seed=7)
    assert (dataset.name, dataset.modality, dataset.n_classes) == (DATASET, "tabular", 2)
    assert dataset.features.shape == (400, 3) and dataset.features.dtype == np.float32
    np.testing.assert_array_equal(np.bincount(dataset.labels), [200, 200])
    again = load_dataset(toy_dataset, {"n_features": 3}, seed=7)
    assert again.content_hash() == dataset.content_hash()  # the same sample ids every time
    assert load_dataset(toy_dataset, {"n_features": 3}, seed=8).content_hash() != (
        dataset.content_hash()
    )
    with pytest.raises(ValueError, match="unknown options"):
        load_dataset(toy_dataset, {"n_sample": 10}, seed=7)


def test_the_prepare_job_stores_it_with_its_splits(toy_dataset, tmp_path):
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
        dataset=toy_dataset,
        options={"n_samples": 200},
        split_settings=settings,
        seed=3,
    )
    stored = read_dataset(data)
    assert stored.content_hash() == load_dataset(toy_dataset, {"n_samples": 200}, 3).content_hash()
    assert io.read_parquet_metadata(splits)["data_hash"] == stored.content_hash()


# --- Validating -------------------------------------------------------------------------------


def test_without_its_entries_validation_rejects_the_attack_and_the_dataset(params):
    message = problems_of(params)
    assert f"attacks[{len(params['attacks']) - 1}]: '{ATTACK}' is not one of" in message
    assert f"attack_options.{ATTACK}: unknown key" in message
    assert f"experiments[{len(params['experiments']) - 1}].dataset: '{DATASET}'" in message
    assert f"datasets.{DATASET}: unknown key" in message


def test_the_catalogue_entry_is_all_the_schema_needs_of_the_attack(toy_attack, params):
    message = problems_of(params)
    assert ATTACK not in message  # its id and options are in the schema generated from it
    assert f"datasets.{DATASET}: unknown key" in message  # the dataset still needs its entries


def test_with_them_validation_accepts_a_params_yaml_using_both(
    toy_attack, toy_dataset, toy_schema, params
):
    effective = config.validate(params)
    assert ATTACK in effective["attacks"] and effective["datasets"][DATASET] == {"n_samples": 400}


def test_the_schema_matches_the_registries(toy_attack, toy_dataset, toy_schema):
    """What tests/unit/test_config.py and tests/unit/test_data.py check for every attack and
    dataset."""
    assert set(toy_schema["$defs"]["attack_name"]["enum"]) == {
        name for name, attack in ATTACKS.items() if attack.family != "llm"
    }
    assert toy_schema["properties"]["attack_options"]["properties"][ATTACK] == {
        "type": "object",
        "additionalProperties": False,
        "properties": {"signal": {"enum": ["loss", "phi"]}},
    }
    assert set(toy_schema["$defs"]["dataset_name"]["enum"]) == set(DATASETS)
    assert set(DATASET_OPTIONS_SCHEMA["properties"]) == set(TOY_BLOBS.defaults)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda p: p["attack_options"][ATTACK].update(signal="entropy"),
            f"attack_options.{ATTACK}.signal: 'entropy' is not one of",
        ),
        (
            lambda p: p["splits"].update(n_reference=0),
            f"'{ATTACK}' needs reference models, but splits.n_reference is 0",
        ),
        (
            lambda p: p["datasets"][DATASET].update(n_samples=60),
            f"the 60 samples of '{DATASET}' (datasets.{DATASET}.n_samples)",
        ),
        (
            lambda p: p["datasets"][DATASET].update(n_sample=400),
            f"datasets.{DATASET}.n_sample: unknown",
        ),
    ],
)
def test_validation_checks_the_options_needs_and_size(
    toy_attack, toy_dataset, toy_schema, params, mutate, expected
):
    mutate(params)
    assert expected in problems_of(params)


# --- Planning ---------------------------------------------------------------------------------


def test_the_rules_plan_both_without_edits(toy_attack, toy_dataset, toy_schema, params):
    """rules/prepare.smk and rules/evaluate.smk ask miaflow.plan what to build."""
    effective = config.validate(params)
    experiment = Experiment(DATASET, "mlp", "mlp")
    assert experiment in plan.experiments(effective) and DATASET in plan.datasets(effective)
    assert plan.local_inputs(effective, DATASET) == []  # generated: nothing to download
    assert plan.modality(DATASET) == "tabular"
    assert ATTACK in plan.attacks_for(effective, experiment)
    assert plan.attack_options(effective, ATTACK) == {"signal": "phi"}
    assert ATTACK not in plan.swept_attacks(effective)  # only families model and lira are swept


# --- Scoring and reporting --------------------------------------------------------------------


@pytest.fixture
def scored(toy_attack, tmp_path) -> dict[str, pd.DataFrame]:
    """The evaluate stage's scoring job run on the memorising toy of tests/unit/test_attacks.py, for
    the attack with each of its signals (and metric-loss beside it), as rule score_attacks calls
    it: scores, metrics and per-attack timings."""
    _, splits = _write_toy_store(tmp_path)
    split_file = tmp_path / "splits.parquet"
    io.write_parquet(split_file, splits.to_table(), {"data_hash": "toy"})
    shards = sorted(tmp_path.glob("shard-*.parquet"))
    results = {}
    for signal in ("loss", "phi"):
        out = {name: tmp_path / f"{signal}-{name}.parquet" for name in ("scores", "metrics", "roc")}
        evaluate.score_attacks(
            splits=split_file,
            signals=shards,
            reference_signals=shards,
            timings=tmp_path / f"{signal}-timings.tsv",
            experiment=Experiment("toy", "lr", "lr"),
            attacks=[toy_attack, "metric-loss"],
            options={toy_attack: {"signal": signal}},
            seed=0,
            fpr_levels=[0.01, 0.1],
            confidence=0.95,
            **out,
        )
        results[signal] = {name: io.read_parquet(path) for name, path in out.items()}
        results[signal]["timings"] = pd.read_csv(tmp_path / f"{signal}-timings.tsv", sep="\t")
    return results


@pytest.mark.parametrize("signal", ["loss", "phi"])
def test_the_scoring_job_finds_the_members_of_a_memorising_target(scored, signal):
    metrics = scored[signal]["metrics"]
    auroc = metrics[(metrics["attack"] == ATTACK) & (metrics["metric"] == "auroc")]
    assert len(auroc) == 2  # one per target model (repeat)
    assert (auroc["value"] > 0.7).all(), auroc  # higher = member; reversed, it would be < 0.3
    scores = scored[signal]["scores"]
    assert scores[scores["attack"] == ATTACK]["score"].notna().all()


def test_the_attack_and_its_family_appear_in_the_tables(scored):
    """The rows the report stage writes (results/tables/auroc.*, families.*)."""
    means = summary(scored["phi"]["metrics"])
    assert ATTACK in set(auroc_table(means)["attack"])
    families = {name: attack.family for name, attack in ATTACKS.items()}
    table = family_table(means, scored["phi"]["timings"], families)
    assert list(table["family"]) == sorted({FAMILY, "metric"})
    assert table.set_index("family").at[FAMILY, "attacks"] == 1


def test_the_toys_are_gone_after_their_tests():
    """Run after the tests above (file order): their monkeypatches left nothing behind."""
    assert ATTACK not in ATTACKS and DATASET not in DATASETS and MODULE not in scoring.MODULES
    assert FAMILY not in registry.FAMILIES
    assert ATTACK not in config.schema()["$defs"]["attack_name"]["enum"]
