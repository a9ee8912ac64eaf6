"""Every figure of the report, drawn from small synthetic inputs, keeps its legends, tick labels
and texts on the canvas and apart (`miaflow.evaluation.plots.layout_problems`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from test_hparam_report import _bound, _roc, _selection, _study, _with_baselines, _with_blackbox
from test_llm_report import _history, _metrics
from test_llm_settings import settings_metrics

from miaflow.attacks.registry import ATTACKS
from miaflow.evaluation import (
    llm_inference_report,
    llm_report,
    llm_settings_report,
    llm_traps_report,
    plots,
)
from miaflow.evaluation.metrics import roc_table
from miaflow.hparams import baselines_figure as hparam_baselines
from miaflow.hparams import blackbox as hparam_blackbox
from miaflow.hparams import figures as hparam_figures
from miaflow.hparams import tables as hparam_tables
from miaflow.privacy import results as privacy_results

REPEATS = 3
NON_MEMBERS = 450  # about 2e-3 as the lowest measurable FPR, as on digits


def _scores(attacks: list[str]) -> pd.DataFrame:
    """Scores of `attacks` on one target model per repeat, each attack a little stronger than
    the one before; metric-corr ties (a 0/1 decision), as the real one does."""
    gen = np.random.default_rng(5)
    frames = []
    for k, attack in enumerate(attacks):
        for repeat in range(REPEATS):
            is_member = np.r_[np.ones(NON_MEMBERS + 10 * repeat, bool), np.zeros(NON_MEMBERS, bool)]
            score = gen.normal(0.05 * k * is_member, 1.0)
            if attack == "metric-corr":
                score = (score > 0.5).astype(np.float64)
            frames.append(
                pd.DataFrame(
                    {
                        "dataset": "digits",
                        "target_model": "cnn",
                        "attack": attack,
                        "repeat": repeat,
                        "is_member": is_member,
                        "score": score,
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def _classifier_attacks() -> list[str]:
    return sorted(name for name, attack in ATTACKS.items() if attack.family != "llm")


def _risk() -> pd.DataFrame:
    gen = np.random.default_rng(9)
    is_member = np.arange(200) < 100
    frames = [
        pd.DataFrame(
            {
                "dataset": dataset,
                "target_model": model,
                "attack": "sm-risk",
                "repeat": 0,
                "is_member": is_member,
                "score": np.clip(gen.beta(2, 2, 200) + 0.1 * is_member, 0, 1),
            }
        )
        for dataset in ("purchase", "texas")
        for model in ("mlp", "mlp_advreg", "mlp_memguard")
    ]
    return pd.concat(frames, ignore_index=True)


def _defenses() -> pd.DataFrame:
    rows = [
        (d, m, defense, acc, tpr)
        for d in ("purchase", "texas")
        for m, defense, acc, tpr in (
            ("mlp", "none", 0.84, 0.12),
            ("mlp_advreg", "adversarial regularization", 0.8, 0.05),
            ("mlp_memguard", "memguard", 0.84, 0.03),
        )
    ]
    return pd.DataFrame(
        rows, columns=["dataset", "target_model", "defense", "test_acc", "best_tpr_at_1pct_fpr"]
    )


def _sweep() -> pd.DataFrame:
    """The default run's sweep: every reference-calibrated model and LiRA attack over 2 to 20
    reference models, three query attacks over 1 to 10 queries."""
    swept = [
        name
        for name, attack in ATTACKS.items()
        if attack.family in ("model", "lira") and "reference" in attack.needs
    ]
    axes = [
        (swept, "reference models", (2, 4, 8, 16, 20)),
        (["query-neighbor", "query-augment", "query-adv"], "queries", (1, 2, 5, 10)),
    ]
    rows = [
        (attack, axis, count, repeat, 0.5 + 0.01 * count**0.5 + 0.01 * repeat)
        for attacks, axis, counts in axes
        for attack in attacks
        for count in counts
        for repeat in range(REPEATS)
    ]
    return pd.DataFrame(rows, columns=["attack", "axis", "count", "repeat", "auroc"])


def _budget_study() -> pd.DataFrame:
    """The study with the default configuration's budgets (M = 16 models, T = 20 trials): costs
    55, 95, 175, 196 and 560 models, two of them close on a log axis; TPRs near 0 with a wide
    spread, whose error bars would reach below 0."""
    study = _study()
    kept = study[study["attack"].isin(["lira", "acc-lira"])]
    template = study[study["attack"] == "kl-lira"]
    budgets = [
        ("kl-lira", 16, 16, 560),
        ("kl-lira-c2-n1", 2, 1, 55),
        ("kl-lira-c4-n1", 4, 1, 95),
        ("kl-lira-c8-n1", 8, 1, 175),
        ("kl-lira-c8-n4", 8, 4, 196),
    ]
    spread = np.resize([0.0, 0.0, 0.0, 0.02], len(template))
    variants = [
        template.assign(attack=a, candidates=c, models_per_candidate=n, cost=cost, tpr=spread)
        for a, c, n, cost in budgets
    ]
    return pd.concat([kept, *variants], ignore_index=True)


def _gap_inputs() -> tuple[pd.DataFrame, pd.DataFrame]:
    attacks = _classifier_attacks()
    metrics = pd.DataFrame(
        [
            ("digits", "cnn", a, r, "auroc", 0.5 + 0.01 * k)
            for k, a in enumerate(attacks)
            for r in range(REPEATS)
        ],
        columns=["dataset", "target_model", "attack", "repeat", "metric", "value"],
    )
    models = pd.DataFrame(
        {
            "dataset": "digits",
            "arch": "cnn",
            "role": "target",
            "model_id": [f"target-{r}" for r in range(REPEATS)],
            "train_acc": 1.0,
            "test_acc": [0.9, 0.92, 0.95],
        }
    )
    return metrics, models


def _privacy_rows() -> pd.DataFrame:
    """Audit rows of five targets (two datasets; ε 1, 8 and ∞) and the four estimators, one of
    them refuted."""
    targets = [
        ("digits", "head-dp", 1.0),
        ("digits", "head-dp-miscalibrated", 1.0),
        ("digits", "head-nonprivate", math.inf),
        ("location30", "mlp_dp8", 8.0),
        ("location30", "mlp", math.inf),
    ]
    estimators = ["clopper-pearson", "gdp", "one-run", "one-run-fdp"]
    return pd.DataFrame(
        [
            {
                "dataset": dataset,
                "target_model": target,
                "estimator": estimator,
                "epsilon": epsilon,
                "epsilon_lower": 0.4 * k + 3 * (estimator in ("gdp", "one-run-fdp")),
                "falsified": target.endswith("miscalibrated") and estimator == "one-run",
            }
            for k, (dataset, target, epsilon) in enumerate(targets)
            for estimator in estimators
        ]
    )


def _figures() -> dict[str, Callable[[Path], None]]:
    """Each figure of the report, by name, as a function of the path it is written to."""
    families = {name: attack.family for name, attack in ATTACKS.items()}
    study = _study()
    return {
        "roc": lambda p: plots.plot_roc_loglog(
            roc_table(_scores(_classifier_attacks())),
            p,
            "digits / cnn",
            {a: 0.5 for a in _classifier_attacks()},
            families,
        ),
        "roc-without-families": lambda p: plots.plot_roc_loglog(
            roc_table(_scores(_classifier_attacks())), p, "digits / cnn"
        ),
        "auroc-vs-gap": lambda p: plots.plot_auroc_vs_gap(*_gap_inputs(), families, p),
        "scaling": lambda p: plots.plot_scaling_sweep(_sweep(), p, "digits / cnn"),
        "risk-cdf": lambda p: plots.plot_risk_cdf(
            _risk().query("dataset == 'purchase' and target_model == 'mlp'"), p, "risk"
        ),
        "defense-tradeoff": lambda p: plots.plot_defense_tradeoff(_defenses(), p),
        "defense-risk-cdf": lambda p: plots.plot_defense_risk_cdfs(_risk(), _defenses(), p),
        "hparam-roc": lambda p: hparam_figures.plot_study_roc(
            _roc(study), _bound(), p, "roc", hparam_figures.lowest_measured_fpr(study)
        ),
        "hparam-relative-tpr": lambda p: hparam_figures.plot_relative_tpr(
            _with_blackbox(study), p, "relative"
        ),
        "hparam-kl-budget": lambda p: hparam_figures.plot_kl_budget(
            _budget_study().query("hpo == 'td'"), p, "KL-LiRA with reduced budgets"
        ),
        "hparam-td-vs-ed": lambda p: hparam_figures.plot_td_vs_ed(study, p, "td vs ed"),
        "hparam-pvalues": lambda p: hparam_figures.plot_pvalues(
            hparam_tables.td_vs_ed_tests(study), p, "p-values"
        ),
        "hparam-selection": lambda p: hparam_figures.plot_selection(_selection(), p, "choice"),
        "hparam-baselines": lambda p: hparam_baselines.plot_baselines(
            _with_baselines(study), p, "LiRA and attacks without shadow calibration"
        ),
        "hparam-blackbox": lambda p: hparam_blackbox.plot_blackbox(
            _with_blackbox(study), p, "Shadows on the targets' backbone or another"
        ),
        "privacy-audit": lambda p: privacy_results.plot_audit(_privacy_rows(), p),
        "llm-em-iterations": lambda p: llm_report.plot_em_iterations(_history(), p),
        "llm-mink-sweep": lambda p: llm_report.plot_mink_sweep(_metrics(), p),
        "llm-settings": lambda p: llm_settings_report.plot_settings(
            llm_settings_report.settings_table(
                settings_metrics(), {"llm-loss": "none", "em-mia": "none"}
            ),
            p,
        ),
        "llm-traps": lambda p: llm_traps_report.plot_traps(_trap_table(), p),
        "llm-dataset-inference": lambda p: llm_inference_report.plot_inference(
            _inference_tests(), 0.05, p
        ),
    }


def _trap_table() -> pd.DataFrame:
    """Every plotted attack on four repetition counts of two trap experiments."""
    gen = np.random.default_rng(3)
    rows = [
        ("synthetic_text", f"{target}/r{count}", attack, repeat, metric, gen.uniform(0.4, 1.0))
        for target in ("gpt2_traps", "smollm2_traps")
        for count in (1, 4, 16, 64)
        for attack in llm_traps_report.PLOTTED
        for repeat in range(2)
        for metric in ("auroc", "tpr_at_1pct_fpr")
    ]
    metrics = pd.DataFrame(
        rows, columns=["dataset", "target_model", "attack", "repeat", "metric", "value"]
    )
    return llm_traps_report.traps_table(
        metrics, {a: ATTACKS[a].knowledge for a in llm_traps_report.PLOTTED}
    )


def _inference_tests() -> pd.DataFrame:
    """p-values of every kind of test at four sizes on two experiments."""
    gen = np.random.default_rng(4)
    rows = [
        ("synthetic_text", target, 0, suspect, size, draw, iid, gen.uniform())
        for target in ("gpt2_tiny", "gpt2_small")
        for suspect in ("members", "non-members")
        for iid in (True, False)
        for size in (10, 25, 50, 100)
        for draw in range(5)
    ]
    return pd.DataFrame(rows, columns=llm_inference_report.COLUMNS)


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Figure]:
    """Figures as `save_png` writes them, kept for inspection."""
    figures: list[Figure] = []
    save = plots.save_png

    def keep(figure: Figure, path: str | Path) -> None:
        save(figure, path)
        figures.append(figure)

    for module in (
        plots,
        hparam_figures,
        hparam_baselines,
        hparam_blackbox,
        llm_report,
        llm_settings_report,
        llm_traps_report,
        llm_inference_report,
    ):
        monkeypatch.setattr(module, "save_png", keep)
    return figures


@pytest.mark.parametrize("name", sorted(_figures()))
def test_report_figures_keep_labels_apart_and_on_the_canvas(
    name: str, drawn: list[Figure], tmp_path: Path
):
    _figures()[name](tmp_path / f"{name}.png")
    (figure,) = drawn
    assert plots.layout_problems(figure) == []


# The least height of a legend's text, in pixels, as the report (about 1280 px wide) shows it.
LEGIBLE_PIXELS = 10


@pytest.mark.parametrize("name", sorted(_figures()))
def test_report_figures_legends_are_legible_at_the_reports_width(
    name: str, drawn: list[Figure], tmp_path: Path
):
    _figures()[name](tmp_path / f"{name}.png")
    (figure,) = drawn
    assert plots.legend_pixels(figure) >= LEGIBLE_PIXELS


def test_legend_pixels_scale_with_the_figures_width():
    narrow, wide = Figure(figsize=(6, 4)), Figure(figsize=(24, 4))
    for figure in (narrow, wide):
        axes = figure.add_subplot()
        axes.plot([0, 1], [0, 1], label="attack")
        axes.legend(fontsize=6)
    assert plots.legend_pixels(narrow) == pytest.approx(6 * plots.FIGURE_DPI / 72)
    assert plots.legend_pixels(wide) < LEGIBLE_PIXELS  # 3600 px shown at 1280 px


def test_zero_and_unresolved_bars_are_drawn_and_labelled(drawn: list[Figure], tmp_path: Path):
    study = _with_baselines(_study())
    cells = (study["attack"] == "attack-p") & (study["fpr"] == study["fpr"].min())
    study.loc[cells, "tpr"] = 0.0
    study.loc[(study["attack"] == "qmia") & (study["fpr"] == study["fpr"].min()), "tpr"] = np.nan
    hparam_baselines.plot_baselines(study, tmp_path / "baselines.png", "baselines")
    (figure,) = drawn
    labels = [t.get_text() for axes in figure.axes for t in axes.texts]
    assert "0" in labels and "n.r." in labels


def test_layout_problems_sees_a_legend_off_the_canvas_and_crowded_ticks():
    figure = Figure(figsize=(3, 2))
    axes = figure.add_subplot()
    for k in range(30):
        axes.plot([0, 1], [0, k], label=f"attack number {k}")
    axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    axes.set_xticks(np.arange(40))
    problems = plots.layout_problems(figure)
    assert "legend 0 leaves the canvas" in problems
    assert "tick label '0' overlaps tick label '1'" in problems


def test_kl_budget_error_bars_stay_within_0_and_1(drawn: list[Figure], tmp_path: Path):
    hparam_figures.plot_kl_budget(_budget_study().query("hpo == 'td'"), tmp_path / "kl.png", "kl")
    (figure,) = drawn
    bars = [
        np.concatenate(c.get_segments())
        for axes in figure.axes
        for c in axes.collections
        if len(c.get_segments())
    ]
    assert bars
    y = np.concatenate(bars)[:, 1]
    assert y.min() >= 0.0 and y.max() <= 1.0


def test_roc_panels_list_every_attack_once_per_family(drawn: list[Figure], tmp_path: Path):
    attacks = _classifier_attacks()
    families = {name: attack.family for name, attack in ATTACKS.items()}
    roc = roc_table(_scores(attacks))
    auroc = {attack: 0.5 + 0.01 * k for k, attack in enumerate(attacks)}
    plots.plot_roc_loglog(roc, tmp_path / "roc.png", "digits / cnn", auroc, families)
    (figure,) = drawn
    best, *panels = figure.axes
    assert best.get_title() == "best of each family"
    listed = [t.get_text() for axes in panels for t in axes.get_legend().get_texts()]
    assert sorted(label for label in listed if label != "chance") == [
        f"{attack} ({auroc[attack]:.3f})" for attack in attacks
    ]
    for axes in figure.axes:
        assert len(axes.get_legend().get_texts()) <= plots.ROC_PANEL_ATTACKS + 1  # and chance
    strongest = {families[a]: a for a in attacks}  # the last of each family, by AUROC
    assert [t.get_text() for t in best.get_legend().get_texts()][:-1] == [
        f"{family}: {strongest[family]} ({auroc[strongest[family]]:.3f})"
        for family in sorted(strongest)
    ]


def test_roc_axes_start_at_the_lowest_measured_fpr(drawn: list[Figure], tmp_path: Path):
    roc = roc_table(_scores(["lira-online", "metric-corr"]))
    plots.plot_roc_loglog(
        roc,
        tmp_path / "roc.png",
        "digits / cnn",
        families={"lira-online": "lira", "metric-corr": "metric"},
    )
    (figure,) = drawn
    lowest = 1 / NON_MEMBERS  # every repeat has as many non-members
    for axes in figure.axes:
        assert axes.get_xlim() == pytest.approx((lowest, 1.0))
    lines = {line.get_label(): line for line in figure.axes[2].get_lines()}
    tied = roc[(roc["attack"] == "metric-corr") & (roc["fpr"] > 0)]
    # the 0/1 decision of metric-corr measures one point: its line starts there, not below
    assert lines["metric-corr"].get_xdata()[0] == pytest.approx(
        tied.groupby("repeat")["fpr"].min().max()
    )


def test_study_roc_starts_at_one_over_the_pooled_non_members(drawn: list[Figure], tmp_path: Path):
    study = _study()
    hparam_figures.plot_study_roc(
        _roc(study),
        _bound(),
        tmp_path / "roc.png",
        "roc",
        hparam_figures.lowest_measured_fpr(study),
    )
    (figure,) = drawn
    positives = study["positives"].min()
    for axes in figure.axes:
        assert axes.get_xlim() == pytest.approx((1 / positives, 1.0))
        assert min(line.get_xdata()[0] for line in axes.get_lines()) >= 1 / positives


def test_wrapped_names_break_after_underscores_and_keep_every_character():
    name = "mnist5k_s32_efficientnet_lite0_pc128_shadow_efficientnet_lite2"
    lines = hparam_tables.wrapped_name(name, 16).split("\n")
    assert "".join(lines) == name and len(lines) > 3
    assert all(len(line) <= 16 or "_" not in line[:-1] for line in lines)
    assert all(line.endswith("_") for line in lines[:-1])
    assert hparam_tables.wrapped_name("digits_s8", 16) == "digits_s8"
