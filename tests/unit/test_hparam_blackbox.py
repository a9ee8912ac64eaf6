"""The study's jobs end to end on a tiny digits setting, white-box and black-box: the tables name
both feature sets, and a black-box setting attacks its white-box twin's very targets (same
splits, same seeds) with shadows trained, and tuned, on the attacker's features."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from miaflow import io
from miaflow.data import Dataset, load_dataset, write_dataset
from miaflow.hparams.attacks import roc_metrics, rotate
from miaflow.jobs import hparams as jobs

SEARCH = {
    "trials": 2,
    "sampler": "random",
    "val_ratio": 0.3,
    "batch_size": [4, 32],
    "lr": [1e-3, 1e-1],
    "clip_norm": [0.2, 10.0],
}
WHITE = {"dataset": "digits", "shots": 3, "backbone": "vit-b16"}
BLACK = {**WHITE, "shadow_backbone": "pixels"}
M, SEED, FPR = 3, 5, [0.1, 0.5]


def _run(root, setting, data, shadow_data) -> dict[str, pd.DataFrame]:
    root.mkdir()
    jobs.hparam_splits(
        data=data, splits=root / "splits.parquet", setting=setting, n_shadow=M, run=0, seed=SEED
    )
    outputs = {k: root / f"{k}.parquet" for k in ("trials", "grid", "metrics", "roc", "selection")}
    jobs.hparam_run(
        data=data,
        shadow_data=shadow_data,
        splits=root / "splits.parquet",
        noise=[],
        **outputs,
        setting=setting,
        epsilon=float("inf"),
        run=0,
        n_shadow=M,
        search=SEARCH,
        epochs=3,
        budgets=[[2, 1]],
        divergence="kl",
        fpr_levels=FPR,
        seed=SEED,
        threads=1,
    )
    outputs["splits"] = root / "splits.parquet"
    return {k: io.read_parquet(p) for k, p in outputs.items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[str, pd.DataFrame]]:
    """Digits pixels, and a fixed random projection of them standing in for backbone features."""
    root = tmp_path_factory.mktemp("study")
    digits = load_dataset("digits", {}, seed=0)
    pixels = digits.features.reshape(len(digits.labels), -1)
    projection = np.random.default_rng(0).normal(size=(pixels.shape[1], 32)) / 8.0
    features = np.tanh(pixels @ projection).astype(np.float32)
    write_dataset(root / "pixels.parquet", digits)
    write_dataset(root / "vit.parquet", Dataset("digits", "tabular", features, digits.labels, 10))
    return {
        "white": _run(root / "white", WHITE, root / "vit.parquet", []),
        "black": _run(root / "black", BLACK, root / "vit.parquet", [root / "pixels.parquet"]),
    }


def test_the_tables_name_the_targets_and_the_shadows_features(runs):
    for kind, shadow in (("white", "vit-b16"), ("black", "pixels")):
        metrics = runs[kind]["metrics"]
        assert set(metrics["backbone"]) == {"vit-b16"}
        assert set(metrics["shadow_backbone"]) == {shadow}
        assert set(runs[kind]["selection"]["shadow_backbone"]) == {shadow}
    assert set(runs["black"]["metrics"]["setting"]) == {"digits_s3_vit_b16_shadow_pixels"}
    assert set(runs["white"]["metrics"]["setting"]) == {"digits_s3_vit_b16"}
    columns = ["setting", "dataset", "shots", "epsilon", "hpo", "attack", "run", "fpr", "tpr"]
    assert set(columns) <= set(runs["black"]["metrics"].columns)


def test_a_black_box_setting_attacks_its_white_box_twins_targets(runs):
    white, black = runs["white"], runs["black"]
    pd.testing.assert_frame_equal(white["splits"], black["splits"])
    size = M + 1
    grid = black["grid"]
    theirs, ours = grid[grid["backbone"] == "vit-b16"], grid[grid["backbone"] == "pixels"]
    # the targets' side: the diagonal and the ED targets only; the attacker's: a whole grid
    assert len(theirs) == 2 * size
    assert theirs.query("family == 'grid'").eval("row == column").all()
    assert len(ours) == size * size and set(ours["family"]) == {"grid"}
    wgrid = white["grid"]
    for family, query in (("grid", "row == column"), ("ed", "row >= 0")):
        mine = theirs[theirs["family"] == family].query(query).sort_values("row")
        twin = wgrid[wgrid["family"] == family].query(query).sort_values("row")
        np.testing.assert_allclose(np.stack(mine["stat"]), np.stack(twin["stat"]), atol=1e-5)
    # the attacker tuned its own η on its own features, for the TD splits alone
    trials = black["trials"]
    assert set(trials.loc[trials["backbone"] == "pixels", "family"]) == {"td"}
    pd.testing.assert_frame_equal(
        trials[trials["backbone"] == "vit-b16"].reset_index(drop=True), white["trials"]
    )


def test_black_box_lira_scores_the_targets_with_the_attackers_grid(runs):
    black = runs["black"]
    grid, size = black["grid"], M + 1
    shadows = grid[grid["backbone"] == "pixels"].sort_values(["row", "column"])
    stats = np.stack(shadows["stat"]).astype(np.float64).reshape(size, size, -1)
    targets = grid[(grid["backbone"] == "vit-b16") & (grid["family"] == "grid")]
    targets = np.stack(targets.sort_values("row")["stat"]).astype(np.float64)
    splits = black["splits"].query("family == 'td'").sort_values(["split", "position"])
    members = splits["member"].to_numpy(bool).reshape(size, -1)
    scores, is_member, _ = rotate(stats, targets, members, "lira")
    expected = pd.DataFrame(roc_metrics(scores, is_member, FPR))
    got = black["metrics"].query("hpo == 'td' and attack == 'lira'").reset_index(drop=True)
    np.testing.assert_allclose(got["tpr"], expected["tpr"])
    np.testing.assert_allclose(got["auroc"], expected["auroc"])
    # KL-LiRA's choices name the attacker's columns, with the attacker's tuned η
    selection = black["selection"].query("hpo == 'td'")
    diagonal = shadows[shadows["row"] == shadows["column"]].set_index("row")
    np.testing.assert_allclose(
        selection["chosen_lr"], diagonal["lr"].to_numpy()[selection["chosen"].to_numpy()]
    )


def test_each_side_trains_its_own_columns():
    from miaflow.hparams.training import grid_columns

    etas = pd.DataFrame({"lr": [0.1, 0.2, 0.3]})
    best = {"td": etas, "ed": etas * 10}
    both = grid_columns(best, 3, "both")
    assert [family for family, _, _ in both] == ["grid"] * 3 + ["ed"]
    assert [c.tolist() for _, c, _ in both] == [[0] * 3, [1] * 3, [2] * 3, [-1] * 3]
    assert [eta["lr"] for eta in both[1][2]] == [0.2] * 3
    targets = grid_columns(best, 3, "targets")
    assert [(f, c.tolist()) for f, c, _ in targets] == [("grid", [0, 1, 2]), ("ed", [-1] * 3)]
    assert [eta["lr"] for eta in targets[0][2]] == [0.1, 0.2, 0.3]
    assert [eta["lr"] for eta in targets[1][2]] == [1.0, 2.0, 3.0]
    attacker = grid_columns(best, 3, "attacker")
    assert [f for f, _, _ in attacker] == ["grid"] * 3
    with pytest.raises(ValueError, match="unknown role"):
        grid_columns(best, 3, "oracle")
