"""Tables, tests and figures of the hyperparameter study (miaflow.hparams.tables,
miaflow.hparams.figures, miaflow.hparams.baselines_figure and
miaflow.hparams.blackbox)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer

from miaflow.evaluation.tables import format_mean_std
from miaflow.hparams import baselines_figure as hb
from miaflow.hparams import blackbox as hbb
from miaflow.hparams import figures as hf
from miaflow.hparams import tables as ht

# as long as the names of real settings, so that the layout tests see them
SETTING = "mnist5k_s32_efficientnet_lite0_pc128"
EPSILONS = (math.inf, 8.0)
RUNS = 4
FPRS = (0.001, 0.01, 0.1)
POSITIVES = 500
# attack -> (candidates, models_per_candidate, cost, hpo values present)
ATTACKS = {
    "lira": (1, 8, 8, ("td",)),
    "acc-lira": (16, 1, 16, ("td", "ed")),
    "kl-lira": (16, 4, 64, ("td", "ed")),
    "kl-lira-c4-n1": (4, 1, 4, ("td",)),
}
# A cell where TD-HPO clearly leaks more in every run, and one where TD and ED are identical.
LEAKY = (math.inf, "kl-lira", 0.1)
EQUAL = (8.0, "acc-lira", 0.01)


def _study() -> pd.DataFrame:
    gen = np.random.default_rng(7)
    rows = []
    for epsilon in EPSILONS:
        for attack, (candidates, models, cost, hpos) in ATTACKS.items():
            for hpo in hpos:
                for run in range(RUNS):
                    for fpr in FPRS:
                        tp = int(gen.integers(1, 3 * fpr * POSITIVES + 5))
                        if (epsilon, attack, fpr) == (8.0, "lira", 0.001):
                            tp = 0  # LiRA finds nothing: relative TPR undefined
                        rows.append(
                            {
                                "dataset": "digits",
                                "setting": SETTING,
                                "shots": 8,
                                "epsilon": epsilon,
                                "hpo": hpo,
                                "attack": attack,
                                "candidates": candidates,
                                "models_per_candidate": models,
                                "cost": cost,
                                "divergence": "kl",
                                "run": run,
                                "fpr": fpr,
                                "tpr": tp / POSITIVES,
                                "tpr_interp": tp / POSITIVES + gen.uniform(0, 0.002),
                                "tp": tp,
                                "positives": POSITIVES,
                                "auroc": gen.uniform(0.5, 0.7),
                            }
                        )
    study = pd.DataFrame(rows)
    ed_leaky = _cell(study, *LEAKY, "ed")
    study.loc[_mask(study, *LEAKY, "td"), "tpr_interp"] = (
        study.loc[ed_leaky, "tpr_interp"].to_numpy() + 0.1 + np.array([0.01, 0.03, 0.02, 0.04])
    )
    study.loc[_mask(study, *EQUAL, "td"), "tpr_interp"] = study.loc[
        _cell(study, *EQUAL, "ed"), "tpr_interp"
    ].to_numpy()
    return study


def _mask(study: pd.DataFrame, epsilon: float, attack: str, fpr: float, hpo: str) -> pd.Series:
    return (
        (study["epsilon"] == epsilon)
        & (study["attack"] == attack)
        & (study["fpr"] == fpr)
        & (study["hpo"] == hpo)
    )


def _cell(study: pd.DataFrame, epsilon: float, attack: str, fpr: float, hpo: str) -> pd.Index:
    return study[_mask(study, epsilon, attack, fpr, hpo)].sort_values("run").index


# baseline -> (models trained, factor on the TPR of the attack whose rows it copies)
BASELINE_ROWS = {"ml-leaks": (10, 0.5), "attack-p": (0, 0.25), "qmia": (0, 0.125)}


def _with_baselines(study: pd.DataFrame) -> pd.DataFrame:
    """The study with rows of the baselines: copies of LiRA's TD rows and ACC-LiRA's ED rows,
    renamed, their TPRs scaled by a factor per baseline."""
    copied = study[
        ((study["attack"] == "lira") & (study["hpo"] == "td"))
        | ((study["attack"] == "acc-lira") & (study["hpo"] == "ed"))
    ]
    frames = [study]
    for attack, (cost, factor) in BASELINE_ROWS.items():
        frames.append(
            copied.assign(
                attack=attack,
                candidates=int(cost > 0),
                models_per_candidate=int(cost > 0),
                cost=cost,
                tpr=copied["tpr"] * factor,
            )
        )
    return pd.concat(frames, ignore_index=True)


# attack -> factor on its TPR when the shadows train on the attacker's own backbone
BLACK_BOX_FACTORS = {"lira": 0.1, "acc-lira": 0.05, "kl-lira": 0.125}
WHITE_BOX = SETTING
BLACK_BOX = f"{WHITE_BOX}_shadow_efficientnet_lite2"


def _with_blackbox(study: pd.DataFrame) -> pd.DataFrame:
    """The study as a white-box setting on Lite0 features, with a black-box twin whose shadows
    train on Lite2's: copies of its rows, each attack's TPR scaled by a factor."""
    lite0 = "efficientnet-lite0"
    white = study.assign(setting=WHITE_BOX, backbone=lite0, shadow_backbone=lite0)
    black = white[white["attack"].isin(BLACK_BOX_FACTORS)].assign(
        setting=BLACK_BOX, shadow_backbone="efficientnet-lite2"
    )
    black["tpr"] = black["tpr"] * black["attack"].map(BLACK_BOX_FACTORS)
    return pd.concat([white, black], ignore_index=True)


def _roc(study: pd.DataFrame) -> pd.DataFrame:
    grid = np.geomspace(1e-3, 1.0, 40)
    keys = study[["dataset", "setting", "epsilon", "hpo", "attack", "run"]].drop_duplicates()
    keys = keys[keys["attack"].isin(ht.FULL_ATTACKS)]
    frames = [
        pd.DataFrame({**key._asdict(), "fpr": grid, "tpr": grid ** (0.5 + 0.05 * key.run)})
        for key in keys.itertuples(index=False)
    ]
    return pd.concat(frames, ignore_index=True)


def _bound() -> pd.DataFrame:
    fpr = np.geomspace(1e-3, 1.0, 100)
    tpr = np.minimum.reduce(
        [np.ones_like(fpr), math.exp(8.0) * fpr, 1 - math.exp(-8.0) * (1 - fpr)]
    )
    return pd.DataFrame(
        {"dataset": "digits", "setting": SETTING, "epsilon": 8.0, "fpr": fpr, "tpr_bound": tpr}
    )


def _selection() -> pd.DataFrame:
    gen = np.random.default_rng(3)
    lrs = np.array([1e-4, 1e-3, 1e-2, 1e-1])
    batches = np.array([16, 32, 64, 128])
    rows = []
    for epsilon in EPSILONS:
        for hpo in ht.HPO_ORDER:
            for run in range(RUNS):
                for target in range(5):
                    target_lr, target_batch = gen.choice(lrs), int(gen.choice(batches))
                    exact = hpo == "td"  # TD rows: the attack recovers the target's values exactly
                    rows.append(
                        {
                            "dataset": "digits",
                            "setting": SETTING,
                            "epsilon": epsilon,
                            "hpo": hpo,
                            "run": run,
                            "target": target,
                            "chosen": int(gen.integers(0, 16)),
                            "target_lr": target_lr,
                            "target_batch_size": target_batch,
                            "target_clip_norm": math.nan if math.isinf(epsilon) else 1.0,
                            "chosen_lr": target_lr if exact else gen.choice(lrs),
                            "chosen_batch_size": target_batch
                            if exact
                            else int(gen.choice(batches)),
                            "chosen_clip_norm": math.nan if math.isinf(epsilon) else 1.0,
                        }
                    )
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def study() -> pd.DataFrame:
    return _study()


def test_headline_table_order_and_cells(study: pd.DataFrame):
    table = ht.headline_table(study)
    assert list(table.columns) == [
        "setting",
        "epsilon",
        "hpo",
        "attack",
        "TPR@0.1%",
        "TPR@1%",
        "TPR@10%",
        "runs",
    ]
    attacks = {"td": ht.FULL_ATTACKS, "ed": ("acc-lira", "kl-lira")}
    expected = [(e, h, a) for e in ("∞", "8") for h in ("td", "ed") for a in attacks[h]]
    assert list(zip(table["epsilon"], table["hpo"], table["attack"])) == expected
    assert (table["runs"] == RUNS).all()
    assert "kl-lira-c4-n1" not in set(table["attack"])

    values = study.loc[_mask(study, 8.0, "kl-lira", 0.01, "ed"), "tpr"].to_numpy()
    mean = values.sum() / RUNS
    std = math.sqrt(((values - mean) ** 2).sum() / (RUNS - 1))
    row = table[(table["epsilon"] == "8") & (table["hpo"] == "ed") & (table["attack"] == "kl-lira")]
    assert row["TPR@1%"].item() == format_mean_std(mean, std)
    assert " ± " in row["TPR@1%"].item()
    assert "caption" in table.attrs


def test_baselines_table_puts_the_baselines_after_the_three_attacks(study: pd.DataFrame):
    table = ht.baselines_table(_with_baselines(study))
    assert list(table.columns) == list(ht.headline_table(study).columns)
    attacks = {
        "td": (*ht.FULL_ATTACKS, "ml-leaks", "attack-p", "qmia"),
        "ed": ("acc-lira", "kl-lira", "ml-leaks", "attack-p", "qmia"),
    }
    expected = [(e, h, a) for e in ("∞", "8") for h in ("td", "ed") for a in attacks[h]]
    assert list(zip(table["epsilon"], table["hpo"], table["attack"])) == expected
    values = study.loc[_mask(study, math.inf, "lira", 0.1, "td"), "tpr"].to_numpy() / 4
    row = table[
        (table["epsilon"] == "∞") & (table["hpo"] == "td") & (table["attack"] == "attack-p")
    ]
    assert row["TPR@10%"].item() == format_mean_std(values.mean(), values.std(ddof=1))
    assert "Attack-P" in table.attrs["caption"]
    # the headline keeps its three attacks
    assert set(ht.headline_table(_with_baselines(study))["attack"]) == set(ht.FULL_ATTACKS)


def test_blackbox_table_compares_each_attack_with_its_white_box_twin(study: pd.DataFrame):
    table = hbb.blackbox_table(_with_blackbox(study))
    assert list(table.columns) == hbb.COLUMNS and "−93%" in table.attrs["caption"]
    assert set(table["setting"]) == {BLACK_BOX} and set(table["white_box"]) == {WHITE_BOX}
    assert len(table) == len(EPSILONS) * len(FPRS) * len(ht.FULL_ATTACKS)
    assert list(table["attack"].iloc[:3]) == list(ht.FULL_ATTACKS)
    for attack, factor in BLACK_BOX_FACTORS.items():
        rows = table[table["attack"] == attack]
        np.testing.assert_allclose(rows["tpr_black_box"], rows["tpr_white_box"] * factor)
        defined = rows[rows["tpr_white_box"] > 0]
        np.testing.assert_allclose(defined["change"], factor - 1.0)
    # KL-LiRA over ACC-LiRA in the black box, at ε = ∞ and 10% FPR
    white = {
        a: study.loc[_mask(study, math.inf, a, 0.1, "td"), "tpr"].mean()
        for a in ("acc-lira", "kl-lira")
    }
    row = table[(table["epsilon"] == "∞") & (table["fpr"] == 0.1) & (table["attack"] == "kl-lira")]
    expected = (0.125 * white["kl-lira"]) / (0.05 * white["acc-lira"]) - 1.0
    assert row["over_acc_lira"].item() == pytest.approx(expected)
    # LiRA's mean TPR is 0 at ε = 8 and 0.1% FPR: its change is undefined, not infinite
    lira = table[(table["epsilon"] == "8") & (table["fpr"] == 0.001) & (table["attack"] == "lira")]
    assert lira["change"].isna().all()
    # the twin is found by name: another white-box setting on the same backbone is not it, and
    # a black-box setting without its twin in the run gets NaN
    blackbox = _with_blackbox(study)
    other = blackbox[blackbox["setting"] == WHITE_BOX].assign(
        setting="mnist5k_s32_efficientnet_lite0_pc4", tpr=1.0
    )
    orphan = blackbox[blackbox["setting"] == BLACK_BOX].assign(
        setting="digits_s16_shadow_pixels", shadow_backbone="pixels", shots=16
    )
    table = hbb.blackbox_table(pd.concat([blackbox, other, orphan], ignore_index=True))
    twinned = table[table["setting"] == BLACK_BOX]
    assert set(twinned["white_box"]) == {WHITE_BOX} and (twinned["tpr_white_box"] < 1.0).all()
    alone = table[table["setting"] == "digits_s16_shadow_pixels"]
    assert len(alone) == len(twinned) and alone["tpr_white_box"].isna().all()
    # no black-box setting: an empty table with the same columns
    empty = hbb.blackbox_table(study.assign(backbone="pixels", shadow_backbone="pixels"))
    assert empty.empty and list(empty.columns) == hbb.COLUMNS


def test_blackbox_figure_pairs_white_and_black_bars(
    study: pd.DataFrame, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    drawn = []
    monkeypatch.setattr(hbb, "save_png", lambda figure, path: drawn.append(figure))
    hbb.plot_blackbox(_with_blackbox(study), tmp_path / "x.png", SETTING)
    (figure,) = drawn
    assert len(figure.axes) == len(EPSILONS) * len(FPRS)
    bars = [c for c in figure.axes[0].containers if isinstance(c, BarContainer)]
    assert [c.get_label() for c in bars] == [
        f"{a}, {side}" for a in ht.FULL_ATTACKS for side in ("white box", "black box")
    ]
    lira = study.loc[_mask(study, math.inf, "lira", 0.001, "td"), "tpr"].mean()
    assert bars[0].patches[0].get_height() == pytest.approx(lira)
    assert bars[1].patches[0].get_height() == pytest.approx(0.1 * lira)


def test_baselines_figure_has_a_bar_per_attack_in_every_panel(
    study: pd.DataFrame, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    drawn = []
    monkeypatch.setattr(hb, "save_png", lambda figure, path: drawn.append(figure))
    hb.plot_baselines(_with_baselines(study), tmp_path / "x.png", SETTING)
    (figure,) = drawn
    panels = figure.axes
    assert len(panels) == len(EPSILONS) * len(FPRS)
    for axes in panels:
        bars = [c for c in axes.containers if isinstance(c, BarContainer)]
        assert [c.get_label() for c in bars] == [*ht.FULL_ATTACKS, "ml-leaks", "attack-p", "qmia"]
    # the first panel is ε = ∞ at 0.1% FPR; its LiRA bar is LiRA's mean TPR over runs
    lira = study.loc[_mask(study, math.inf, "lira", 0.001, "td"), "tpr"].mean()
    assert panels[0].patches[0].get_height() == pytest.approx(lira)
    assert panels[0].patches[4].get_height() == pytest.approx(lira / 4)


def test_relative_tpr_by_hand(study: pd.DataFrame):
    table = ht.relative_tpr_table(study)
    assert len(table) == len(EPSILONS) * len(FPRS)
    assert list(table["epsilon"]) == [math.inf] * 3 + [8.0] * 3
    row = table[(table["epsilon"] == math.inf) & (table["fpr"] == 0.01)].iloc[0]
    kl = study.loc[_mask(study, math.inf, "kl-lira", 0.01, "td"), "tpr"].mean()
    lira = study.loc[_mask(study, math.inf, "lira", 0.01, "td"), "tpr"].mean()
    assert row["kl-lira / lira"] == pytest.approx(kl / lira)
    assert row["lira"] == pytest.approx(lira)
    # LiRA's TPR is 0 in every run of this cell: the ratio is undefined, not inf.
    zero = table[(table["epsilon"] == 8.0) & (table["fpr"] == 0.001)].iloc[0]
    assert zero["lira"] == 0.0
    assert math.isnan(zero["kl-lira / lira"]) and math.isnan(zero["acc-lira / lira"])


def test_kl_budget_table(study: pd.DataFrame):
    table = ht.kl_budget_table(study)
    assert set(table["attack"]) == {"kl-lira", "kl-lira-c4-n1"}
    assert len(table) == 2 * len(EPSILONS) * len(FPRS)
    row = table[
        (table["attack"] == "kl-lira-c4-n1") & (table["epsilon"] == 8.0) & (table["fpr"] == 0.1)
    ].iloc[0]
    values = study.loc[_mask(study, 8.0, "kl-lira-c4-n1", 0.1, "td"), "tpr"]
    assert row["mean_tpr"] == pytest.approx(values.mean())
    assert row["std_tpr"] == pytest.approx(values.std(ddof=1))
    assert (row["candidates"], row["models_per_candidate"], row["cost"], row["runs"]) == (
        4,
        1,
        4,
        RUNS,
    )
    assert row["lira_tpr"] == pytest.approx(
        study.loc[_mask(study, 8.0, "lira", 0.1, "td"), "tpr"].mean()
    )
    assert row["acc_lira_tpr"] == pytest.approx(
        study.loc[_mask(study, 8.0, "acc-lira", 0.1, "td"), "tpr"].mean()
    )
    # Within a cell the cheaper budget comes first.
    first = table[(table["epsilon"] == math.inf) & (table["fpr"] == 0.001)]
    assert list(first["attack"]) == ["kl-lira-c4-n1", "kl-lira"]


def _test_row(tests: pd.DataFrame, epsilon: float, attack: str, fpr: float) -> pd.Series:
    rows = tests[
        (tests["epsilon"] == epsilon) & (tests["attack"] == attack) & (tests["fpr"] == fpr)
    ]
    assert len(rows) == 1
    return rows.iloc[0]


def test_td_vs_ed_tests(study: pd.DataFrame):
    tests = ht.td_vs_ed_tests(study)
    assert list(tests.columns) == ht.TEST_COLUMNS
    # acc-lira and kl-lira have TD and ED rows; LiRA and the reduced variant only TD.
    assert len(tests) == len(EPSILONS) * 2 * len(FPRS)
    assert set(tests["attack"]) == {"acc-lira", "kl-lira"}
    assert (tests["n_runs"] == RUNS).all() and (tests["permutation"] == "exact").all()

    leaky = _test_row(tests, *LEAKY)
    assert leaky["mean_diff"] == pytest.approx(0.125)
    assert leaky["mean_td"] - leaky["mean_ed"] == pytest.approx(leaky["mean_diff"])
    # All 4 differences positive and distinct: only the identity among 2^4 sign flips is as extreme.
    assert leaky["p_perm"] == pytest.approx(1 / 2**RUNS)
    assert leaky["t_statistic"] > 0 and leaky["p_ttest"] < 0.05

    equal = _test_row(tests, *EQUAL)
    assert equal["mean_diff"] == 0.0
    assert equal["p_ttest"] == 1.0 and equal["p_perm"] == 1.0
    assert not equal["reject_ttest"] and not equal["reject_perm"]

    for test in ("ttest", "perm"):
        assert (tests[f"p_{test}_by"] >= tests[f"p_{test}"] - 1e-15).all()
        assert (tests[f"reject_{test}"] == (tests[f"p_{test}_by"] <= 0.05)).all()
    assert list(tests["epsilon"]) == sorted(tests["epsilon"], reverse=True)


def test_td_vs_ed_monte_carlo(study: pd.DataFrame):
    tests = ht.td_vs_ed_tests(study, n_resamples=10, seed=1)
    assert (tests["permutation"] == "monte-carlo").all()
    assert ((tests["p_perm"] > 0) & (tests["p_perm"] <= 1)).all()
    # (count + 1) / (n_resamples + 1): the smallest possible value is 1/11.
    assert tests["p_perm"].min() >= 1 / 11 - 1e-12
    # Enough resamples to enumerate every pattern: exact again.
    assert (ht.td_vs_ed_tests(study, n_resamples=2**RUNS)["permutation"] == "exact").all()


def test_td_vs_ed_needs_both_hpos(study: pd.DataFrame):
    only_td = study[study["hpo"] == "td"]
    tests = ht.td_vs_ed_tests(only_td)
    assert tests.empty and list(tests.columns) == ht.TEST_COLUMNS


def test_selection_table():
    selection = _selection()
    table = ht.selection_table(selection)
    assert len(table) == len(EPSILONS) * 2
    assert list(zip(table["epsilon"], table["hpo"])) == [
        (math.inf, "td"),
        (math.inf, "ed"),
        (8.0, "td"),
        (8.0, "ed"),
    ]
    assert (table["n_targets"] == RUNS * 5).all()
    td = table[table["hpo"] == "td"]
    assert (td["median_abs_log10_lr_ratio"] == 0.0).all() and np.allclose(td["spearman_lr"], 1.0)
    assert (td["median_abs_log10_batch_ratio"] == 0.0).all()
    ed = selection[(selection["hpo"] == "ed") & (selection["epsilon"] == 8.0)]
    expected = np.median(np.abs(np.log10(ed["chosen_lr"] / ed["target_lr"])))
    row = table[(table["hpo"] == "ed") & (table["epsilon"] == 8.0)].iloc[0]
    assert row["median_abs_log10_lr_ratio"] == pytest.approx(expected)
    assert -1 <= row["spearman_batch"] <= 1


def _figures(study: pd.DataFrame) -> dict[str, object]:
    return {
        "roc": lambda p: hf.plot_study_roc(
            _roc(study), _bound(), p, SETTING, hf.lowest_measured_fpr(study)
        ),
        "relative": lambda p: hf.plot_relative_tpr(study, p, SETTING),
        "budget": lambda p: hf.plot_kl_budget(study, p, SETTING),
        "td_vs_ed": lambda p: hf.plot_td_vs_ed(study, p, SETTING),
        "pvalues": lambda p: hf.plot_pvalues(ht.td_vs_ed_tests(study), p, SETTING),
        "selection": lambda p: hf.plot_selection(_selection(), p, SETTING),
        "baselines": lambda p: hb.plot_baselines(_with_baselines(study), p, SETTING),
        "blackbox": lambda p: hbb.plot_blackbox(_with_blackbox(study), p, SETTING),
    }


@pytest.mark.parametrize(
    "name",
    ["roc", "relative", "budget", "td_vs_ed", "pvalues", "selection", "baselines", "blackbox"],
)
def test_figures_are_reproducible_pngs(study: pd.DataFrame, reproducible_png, name: str):
    reproducible_png(_figures(study)[name])


def test_plot_study_roc_draws_one_setting(study: pd.DataFrame, tmp_path: Path):
    roc = _roc(study)
    other = roc.assign(setting="digits_s16")
    with pytest.raises(ValueError, match="one setting"):
        hf.plot_study_roc(pd.concat([roc, other]), _bound(), tmp_path / "x.png", "both", 1e-3)
