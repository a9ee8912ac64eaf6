"""Tables and figures of the language-model attacks (miaflow.evaluation.llm_report)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from miaflow.evaluation import llm_report as lr
from miaflow.evaluation.metrics import METRICS_COLUMNS
from miaflow.evaluation.tables import MISSING, format_mean_std, write_table

EXPERIMENTS = (("rotten_tomatoes", "smollm2_ft"), ("wikimia", "pythia_160m"))
REPEATS = 3
METRICS = ("auroc", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr", "tpr_at_10pct_fpr")
# Deliberately not in table order; llm-zlib is registered but has no metrics (no row).
KNOWLEDGE = {
    "llm-recall-toppref": "oracle",
    "llm-mink-k50": "none",
    "em-mia-zlib-kendall": "none",
    "llm-recall": "shots",
    "llm-minkpp": "none",
    "em-mia": "none",
    "llm-mink": "none",
    "llm-mink-k10": "none",
    "llm-minkpp-k10": "none",
    "llm-minkpp-k50": "none",
    "em-mia-loss-auroc": "none",
    "llm-loss": "none",
    "llm-mink-k20": "none",
    "llm-zlib": "none",
}
EXPECTED_ROWS = [
    "llm-loss",
    "llm-mink",
    "llm-minkpp",
    "em-mia",
    "em-mia-loss-auroc",
    "em-mia-zlib-kendall",
    "llm-recall‡",
    "llm-recall-toppref†",
]
# llm-loss's AUROC on the first experiment, by design: mean 0.7, std (ddof = 1) 0.1.
DESIGNED = (0.6, 0.7, 0.8)
MARKS = (
    "† oracle: uses true membership labels; ‡ uses known non-member texts (prefix shots, a "
    "population or reference corpus); § uses known member texts (Con-ReCall's prefix); "
    "¶ not an attack: the AUROC a labelled model-free classifier of the texts reaches "
    "(cross-fitted), what the member/non-member selection alone gives."
)


def _metrics() -> pd.DataFrame:
    gen = np.random.default_rng(11)
    rows = []
    for dataset, model in EXPERIMENTS:
        for attack in [*KNOWLEDGE, "lira"]:  # lira: an image attack, not a language-model one
            if attack == "llm-zlib" or (attack == "llm-recall" and dataset == "wikimia"):
                continue
            for repeat in range(REPEATS):
                for metric in METRICS:
                    low, high = (0.5, 0.9) if metric == "auroc" else (0.0, 0.3)
                    value = float(gen.uniform(low, high))
                    if (attack, dataset, metric) == ("llm-loss", "rotten_tomatoes", "auroc"):
                        value = DESIGNED[repeat]
                    if attack == "llm-mink-k20":
                        value = 0.99  # must lose to llm-mink at k = 0.2
                    rows.append(
                        {
                            "dataset": dataset,
                            "target_model": model,
                            "attack": attack,
                            "repeat": repeat,
                            "metric": metric,
                            "value": value,
                            "ci_low": value - 0.05,
                            "ci_high": value + 0.05,
                        }
                    )
    frame = pd.DataFrame(rows, columns=METRICS_COLUMNS)
    return frame.iloc[gen.permutation(len(frame))].reset_index(drop=True)


def _history() -> pd.DataFrame:
    gen = np.random.default_rng(5)
    rows = [
        {
            "dataset": dataset,
            "target_model": model,
            "repeat": repeat,
            "attack": attack,
            "iteration": iteration,
            "auroc": float(gen.uniform(0.5, 0.8)),
        }
        for dataset, model in EXPERIMENTS
        for attack in ("em-mia-zlib-kendall", "em-mia")
        for repeat in range(REPEATS)
        for iteration in range(5)
    ]
    return pd.DataFrame(rows)


def _by_hand(values: np.ndarray) -> str:
    mean = values.sum() / len(values)
    std = math.sqrt(((values - mean) ** 2).sum() / (len(values) - 1))
    return format_mean_std(mean, std)


def _values(metrics: pd.DataFrame, attack: str, dataset: str, metric: str) -> np.ndarray:
    rows = metrics[
        (metrics["attack"] == attack)
        & (metrics["dataset"] == dataset)
        & (metrics["metric"] == metric)
    ]
    return rows.sort_values("repeat")["value"].to_numpy()


@pytest.fixture(scope="module")
def metrics() -> pd.DataFrame:
    return _metrics()


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list:
    """Figures handed to `save_png`, instead of being written."""
    figures: list = []
    monkeypatch.setattr(lr, "save_png", lambda figure, path: figures.append(figure))
    return figures


def test_llm_table_columns(metrics: pd.DataFrame):
    table = lr.llm_table(metrics, KNOWLEDGE)
    expected = (
        ["attack"]
        + [f"{d}/{m} {label}" for d, m in EXPERIMENTS for label in ("AUROC", "TPR@1%", "TPR@5%")]
        + ["knowledge"]
    )
    assert list(table.columns) == expected


def test_llm_table_cells_by_hand(metrics: pd.DataFrame):
    table = lr.llm_table(metrics, KNOWLEDGE).set_index("attack")
    assert table.at["llm-loss", "rotten_tomatoes/smollm2_ft AUROC"] == "0.700 ± 0.100"
    for attack, label, dataset, metric in [
        ("llm-recall-toppref†", "wikimia/pythia_160m TPR@5%", "wikimia", "tpr_at_5pct_fpr"),
        (
            "em-mia-loss-auroc",
            "rotten_tomatoes/smollm2_ft TPR@1%",
            "rotten_tomatoes",
            "tpr_at_1pct_fpr",
        ),
        ("llm-mink", "wikimia/pythia_160m AUROC", "wikimia", "auroc"),
    ]:
        expected = _by_hand(_values(metrics, attack.rstrip("†‡"), dataset, metric))
        assert " ± " in expected
        assert table.at[attack, label] == expected
    # llm-recall was not run on wikimia.
    assert table.at["llm-recall‡", "wikimia/pythia_160m AUROC"] == MISSING
    assert table.at["llm-recall‡", "rotten_tomatoes/smollm2_ft AUROC"] != MISSING


def test_llm_table_rows_marks_and_caption(metrics: pd.DataFrame):
    table = lr.llm_table(metrics, KNOWLEDGE)
    assert list(table["attack"]) == EXPECTED_ROWS
    assert list(table["knowledge"]) == ["none"] * 6 + ["shots", "oracle"]
    # The k sweep, the image attack and attacks without metrics are not rows.
    assert not any(re.search(r"-k\d+$", attack) for attack in table["attack"])
    assert "lira" not in set(table["attack"]) and "llm-zlib" not in set(table["attack"])
    caption = table.attrs["caption"]
    assert MARKS in caption
    assert f"{REPEATS} repeats" in caption and "ddof = 1" in caption


def test_llm_table_repeat_counts_differ_in_caption(metrics: pd.DataFrame):
    fewer = metrics[~((metrics["attack"] == "em-mia") & (metrics["repeat"] == 2))]
    assert f"2–{REPEATS} repeats" in lr.llm_table(fewer, KNOWLEDGE).attrs["caption"]


def test_llm_table_other_metrics(metrics: pd.DataFrame):
    table = lr.llm_table(metrics, KNOWLEDGE, metrics_shown=("tpr_at_10pct_fpr", "precision"))
    assert list(table.columns)[1:3] == [
        "rotten_tomatoes/smollm2_ft TPR@10%",
        "rotten_tomatoes/smollm2_ft precision",
    ]
    assert (table["wikimia/pythia_160m precision"] == MISSING).all()
    expected = _by_hand(_values(metrics, "em-mia", "wikimia", "tpr_at_10pct_fpr"))
    assert table.set_index("attack").at["em-mia", "wikimia/pythia_160m TPR@10%"] == expected


def test_llm_table_rejects_unknown_knowledge(metrics: pd.DataFrame):
    with pytest.raises(ValueError, match="unknown knowledge"):
        lr.llm_table(metrics, {**KNOWLEDGE, "llm-loss": "partial"})


def test_llm_table_shows_the_prefix_cut_beside_recall_and_names_blind_baselines(
    metrics: pd.DataFrame,
):
    from miaflow.attacks.llm_inputs import PREFIX_FIT_COLUMNS, prefix_fit_row

    fits = pd.DataFrame(
        [
            prefix_fit_row("rotten_tomatoes", "smollm2_ft", repeat, np.array(kept), 8)
            for repeat, kept in enumerate([[8, 8, 3, 0], [8, 8, 8, 8], [8, 8, 8, 2]])
        ],
        columns=list(PREFIX_FIT_COLUMNS),
    )
    assert fits[["shortened", "emptied"]].values.tolist() == [[1, 1], [0, 0], [1, 0]]
    assert fits["cut_share"].tolist() == [0.5, 0.0, 0.25]
    blind = metrics[metrics["attack"] == "llm-recall"].assign(attack="llm-blind-shots")
    knowledge = {**KNOWLEDGE, "llm-blind-shots": "shots"}
    table = lr.llm_table(pd.concat([metrics, blind]), knowledge, prefix_fit=fits)
    rows = table.set_index("attack")
    column = f"rotten_tomatoes/smollm2_ft {lr.PREFIX_CUT}"
    assert rows.at["llm-recall‡", column] == _by_hand(np.array([0.5, 0.0, 0.25]))
    assert rows.at["llm-recall‡", f"wikimia/pythia_160m {lr.PREFIX_CUT}"] == MISSING
    assert (rows.drop(index="llm-recall‡")[column] == "").all()
    assert list(table["attack"])[-3:] == ["llm-recall‡", "llm-blind-shots‡", "llm-recall-toppref†"]
    assert "never query the target model" in table.attrs["caption"]
    assert lr.PREFIX_CUT in table.attrs["caption"]
    without = lr.llm_table(metrics, KNOWLEDGE)
    assert not any(lr.PREFIX_CUT in c for c in without.columns)
    assert "never query" not in without.attrs["caption"]


def test_metric_label():
    assert lr.metric_label("auroc") == "AUROC"
    assert lr.metric_label("tpr_at_0.1pct_fpr") == "TPR@0.1%"
    assert lr.metric_label("accuracy") == "accuracy"


def test_mink_sweep_table(metrics: pd.DataFrame):
    table = lr.mink_sweep_table(metrics, KNOWLEDGE)
    assert list(table.columns) == ["k"] + [
        f"{d}/{m} {name}" for d, m in EXPERIMENTS for name in ("Min-K%", "Min-K%++")
    ]
    assert table["k"].tolist() == pytest.approx([0.1, 0.2, 0.5])
    rows = table.set_index("k")
    for dataset, model in EXPERIMENTS:
        for attack, name in (("llm-mink", "Min-K%"), ("llm-minkpp", "Min-K%++")):
            column = f"{dataset}/{model} {name}"
            # k = 0.2 is the base attack, not the "-k20" duplicate (AUROC 0.99 everywhere).
            assert rows.at[0.2, column] == _by_hand(_values(metrics, attack, dataset, "auroc"))
            for k, suffix in ((0.1, "-k10"), (0.5, "-k50")):
                values = _values(metrics, f"{attack}{suffix}", dataset, "auroc")
                assert rows.at[k, column] == _by_hand(values)
    caption = table.attrs["caption"]
    assert f"{REPEATS} repeats" in caption and "ddof = 1" in caption and "k = 0.2" in caption


def test_mink_sweep_table_only_registered_attacks(metrics: pd.DataFrame):
    knowledge = {a: k for a, k in KNOWLEDGE.items() if a != "llm-mink-k50"}
    table = lr.mink_sweep_table(metrics, knowledge).set_index("k")
    assert table.at[0.5, "wikimia/pythia_160m Min-K%"] == MISSING
    assert table.at[0.5, "wikimia/pythia_160m Min-K%++"] != MISSING


@pytest.mark.parametrize("frame", ["no rows", "other attacks only"])
def test_tables_without_language_models(metrics: pd.DataFrame, tmp_path: Path, frame: str):
    empty = (
        pd.DataFrame(columns=METRICS_COLUMNS)
        if frame == "no rows"
        else metrics[metrics["attack"] == "lira"]
    )
    table = lr.llm_table(empty, KNOWLEDGE)
    assert table.empty and list(table.columns) == ["attack", "knowledge"]
    sweep = lr.mink_sweep_table(empty, KNOWLEDGE)
    assert sweep.empty and list(sweep.columns) == ["k"]
    assert "no language-model experiments" in table.attrs["caption"]
    assert "no language-model experiments" in sweep.attrs["caption"]
    for name, result in (("llm", table), ("sweep", sweep)):
        write_table(result, tmp_path / name, result.attrs["caption"])
        for suffix in ("csv", "md", "tex"):
            assert (tmp_path / f"{name}.{suffix}").stat().st_size > 0


def _figures(metrics: pd.DataFrame) -> dict[str, object]:
    empty = pd.DataFrame(columns=METRICS_COLUMNS)
    return {
        "em_iterations": lambda p: lr.plot_em_iterations(_history(), p),
        "mink_sweep": lambda p: lr.plot_mink_sweep(metrics, p),
        "em_iterations_empty": lambda p: lr.plot_em_iterations(_history().iloc[:0], p),
        "mink_sweep_empty": lambda p: lr.plot_mink_sweep(empty, p),
    }


@pytest.mark.parametrize(
    "name", ["em_iterations", "mink_sweep", "em_iterations_empty", "mink_sweep_empty"]
)
def test_figures_are_reproducible_pngs(metrics: pd.DataFrame, reproducible_png, name: str):
    reproducible_png(_figures(metrics)[name])


def test_em_iterations_content(captured: list):
    history = _history()
    lr.plot_em_iterations(history, "unused.png")
    (figure,) = captured
    assert "diagnostic: uses true labels" in figure.get_suptitle()
    assert [axes.get_title() for axes in figure.axes] == [f"{d}/{m}" for d, m in EXPERIMENTS]
    lines = {line.get_label(): line for line in figure.axes[1].get_lines()}
    assert set(lines) == {"em-mia", "em-mia-zlib-kendall", "chance"}
    runs = history[(history["dataset"] == "wikimia") & (history["attack"] == "em-mia")]
    expected = [runs.loc[runs["iteration"] == i, "auroc"].sum() / REPEATS for i in range(5)]
    assert list(lines["em-mia"].get_xdata()) == list(range(5))
    assert lines["em-mia"].get_ydata() == pytest.approx(expected)
    assert list(lines["chance"].get_ydata()) == [0.5, 0.5]


def test_mink_sweep_plot_content(metrics: pd.DataFrame, captured: list):
    lr.plot_mink_sweep(metrics, "unused.png")
    (figure,) = captured
    assert [axes.get_title() for axes in figure.axes] == ["Min-K%", "Min-K%++"]
    lines = {line.get_label(): line for line in figure.axes[1].get_lines()}
    assert {f"{d}/{m}" for d, m in EXPERIMENTS} <= set(lines)
    line = lines["rotten_tomatoes/smollm2_ft"]
    expected = [
        _values(metrics, attack, "rotten_tomatoes", "auroc").mean()
        for attack in ("llm-minkpp-k10", "llm-minkpp", "llm-minkpp-k50")
    ]
    assert list(line.get_xdata()) == pytest.approx([0.1, 0.2, 0.5])
    assert line.get_ydata() == pytest.approx(expected)


@pytest.mark.parametrize("draw", ["em", "sweep"])
def test_empty_figures_say_so(metrics: pd.DataFrame, captured: list, draw: str):
    if draw == "em":
        lr.plot_em_iterations(_history().iloc[:0], "unused.png")
    else:
        lr.plot_mink_sweep(metrics[metrics["attack"] == "lira"], "unused.png")
    (figure,) = captured
    assert not figure.axes
    texts = [text.get_text() for text in figure.texts]
    assert "no language-model experiments" in texts
    if draw == "em":
        assert "diagnostic: uses true labels" in figure.get_suptitle()
