"""The verdicts as a reader meets them (miaflow.evaluation.headline, job report.verdicts): the
results/summary.json contract, one DVC metrics file per experiment, the verdict table and the
summary lines, with a language-model selection's separability beside its attacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_verdicts import _experiment

from miaflow import io
from miaflow.evaluation.headline import HEADLINE_KEYS
from miaflow.evaluation.metrics import score_metrics
from miaflow.evaluation.verdicts import verdict_lines
from miaflow.jobs.report import collect_metrics, verdicts
from miaflow.llm.separability import labelled_draws, selection_scores

# The contract of results/summary.json (issue #43), as a later check reads it.
CONTRACT_KEYS = set("best_attack auroc best_attack_low_fpr tpr_at_low_fpr low_fpr".split())
CONTRACT_KEYS |= {"tied_with", "tied_with_low_fpr"}


def _scores(dataset: str, target_model: str, attacks: dict, n: int = 300, repeats: int = 3):
    """Per-sample scores on `repeats` targets sharing n samples, each with its own half of
    members; `attacks` maps a name to (member, rng) -> scores."""
    seed = len(dataset) + len(target_model)
    return _experiment(dataset, attacks, n, repeats, seed).assign(target_model=target_model)


def strong(member, rng):
    return 2.0 * member + rng.normal(size=member.size)


def weak(member, rng):
    return 0.3 * member + rng.normal(size=member.size)


def coarse(member, rng):
    """A fine AUROC but a top value shared by a third of the non-members: TPR 0 at 1% FPR."""
    return np.where(member, rng.integers(2, 4, member.size), rng.integers(1, 4, member.size))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The verdicts job on two experiments and one language-model setting whose members are
    told apart by a word (a separable selection), from score files as the stages write them."""
    root = tmp_path_factory.mktemp("verdicts")
    tables = {
        "toy/mlp": _scores("toy", "mlp", {"strong": strong, "twin": strong, "weak": weak}),
        "toy/coarse": _scores("toy", "coarse", {"coarse": coarse, "weak": weak}),
        "text/lm/easy": _scores("text", "lm/easy", {"llm-loss": strong}, n=40, repeats=2),
    }
    scores = []
    for name, table in tables.items():
        scores.append(root / f"scores-{name.replace('/', '-')}.parquet")
        io.write_parquet(scores[-1], table)
    metrics = []
    for path in scores:
        metrics.append(path.with_name(path.name.replace("scores", "metrics")))
        io.write_parquet(metrics[-1], score_metrics(io.read_parquet(path), (0.01, 0.1)))
    points = root / "operating_points.parquet"
    from miaflow.evaluation.operating_points import operating_point_table

    every = pd.concat(map(io.read_parquet, scores))
    io.write_parquet(points, operating_point_table(every, [0.01, 0.1]))
    collect_metrics(
        experiment_metrics=metrics,
        operating_points=points,
        metrics=root / "metrics.parquet",
        priors=[0.01, 0.1],
    )
    easy = tables["text/lm/easy"].query("attack == 'llm-loss'")
    sets = [
        ("lm/easy", r, g["sample_id"].to_numpy(), g["is_member"].to_numpy(), _texts(g))
        for r, g in easy.groupby("repeat")
    ]
    io.write_parquet(root / "selection.parquet", selection_scores(sets, "text"))
    verdicts(
        metrics=root / "metrics.parquet",
        scores=scores,
        selection=[root / "selection.parquet"],
        rankings=root / "rankings.parquet",
        verdicts=root / "verdicts.parquet",
        summary=root / "summary.json",
        headline=root / "headline",
        verdicts_table=[root / f"verdicts{s}" for s in (".csv", ".md", ".tex")],
        low_fpr=0.01,
        alpha=0.05,
        n_resamples=199,
        seed=0,
    )
    return root


def _texts(rows: pd.DataFrame) -> list[str]:
    return [
        ("alpha " if m else "omega ") + f"text {i}" for i, m in zip(rows.sample_id, rows.is_member)
    ]


def test_summary_json_keeps_the_contract(run):
    summary = io.read_json(run / "summary.json")
    assert sorted(summary) == ["text/lm/easy", "toy/coarse", "toy/mlp"]
    for entry in summary.values():
        assert CONTRACT_KEYS <= entry.keys()
        assert isinstance(entry["tied_with"], list) and isinstance(entry["tied_with_low_fpr"], list)
    assert "separability" in summary["text/lm/easy"]
    assert "separability" not in summary["toy/mlp"]


def test_a_tie_is_said_as_a_tie_and_a_coarse_winner_is_flagged(run):
    summary = io.read_json(run / "summary.json")
    mlp = summary["toy/mlp"]
    # twin scores exactly as strong: not separated, whichever id is shown first
    assert {mlp["best_attack"], *mlp["tied_with"]} >= {"strong", "twin"}
    assert "weak" not in mlp["tied_with"]
    coarse = summary["toy/coarse"]
    assert coarse["best_attack"] == "coarse" and "auroc_best_tpr_zero" in coarse["flags"]
    assert coarse["best_attack_low_fpr"] == "weak" and coarse["tpr_at_low_fpr"] > 0


def test_a_separable_selection_is_flagged_and_said_on_its_line(run):
    entry = io.read_json(run / "summary.json")["text/lm/easy"]
    assert entry["separability"] == 1.0 and entry["separability_form"] == "bag_of_words"
    assert "selection_separable" in entry["flags"]
    lines = verdict_lines(io.read_parquet(run / "verdicts.parquet"))
    line = next(line for line in lines if "text/lm/easy" in line)
    assert "selection alone AUROC 1.000 (bag of words)" in line
    assert not any("selection" in line for line in lines if "toy/" in line)


def test_one_flat_metrics_file_per_experiment(run):
    files = sorted(p.name for p in (run / "headline").iterdir())
    assert files == ["text-lm-easy.json", "toy-coarse.json", "toy-mlp.json"]
    entry = io.read_json(run / "headline/toy-mlp.json")
    assert list(entry) == sorted(HEADLINE_KEYS[:-1])  # no selection outside language models
    assert all(not isinstance(v, (list, dict)) for v in entry.values())
    assert io.read_json(run / "headline/text-lm-easy.json")["selection"] == 1.0


def test_the_verdict_table_and_the_ppv_metrics(run):
    table = pd.read_csv(run / "verdicts.csv")
    assert table["experiment"].tolist() == ["text/lm/easy", "toy/coarse", "toy/mlp"]
    assert "not separated from" in table.set_index("experiment").loc["toy/mlp", "not_separated"]
    metrics = io.read_parquet(run / "metrics.parquet")
    ppv = metrics[metrics["metric"].str.startswith("ppv_")]
    assert set(ppv["metric"]) == {
        f"ppv_at_{fpr}pct_fpr_{prior}pct_prior" for fpr in ("1", "10") for prior in ("1", "10")
    }
    # PPV at a realized FPR of 0 is not 1 but unknown
    assert ppv["value"].isna().any() and (ppv["value"].dropna() <= 1).all()


def test_labelled_draws_name_the_settings_as_the_attacks_do():
    splits = pd.DataFrame(
        {
            "repeat": [0] * 4,
            "sample_id": [0, 1, 2, 3],
            "set": ["eval"] * 4,
            "is_member": [True, False, True, False],
            "position": [0, 1, 2, 3],
        }
    )
    texts = np.array(["a", "b", "c", "d"], dtype=object)
    ((label, repeat, ids, member, drawn),) = labelled_draws(splits, texts, None, "gpt2", 1)
    assert (label, repeat, ids.tolist(), member.tolist(), drawn) == (
        "gpt2",
        0,
        [0, 1, 2, 3],
        [True, False, True, False],
        ["a", "b", "c", "d"],
    )
