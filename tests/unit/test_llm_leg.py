"""The language-model leg wired into the workflow: the recent attacks scored by their catalogue
ids from hand-made inputs (values by hand from each formula), their inputs read back from the
tables the statistics jobs write (top-1 flags from the token statistics' own pass), copyright
traps in a target's training texts, dataset inference's shifted validation sets, and the
config checks of both."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pandas as pd
import pytest
from conftest import problems_of

from miaflow import io
from miaflow.attacks import llm_inputs
from miaflow.attacks.llm import LLMInputs, run_llm_attack
from miaflow.attacks.registry import ATTACKS, llm_input_options, llm_reads
from miaflow.llm import camia, corpus, dataset_inference, scored, statistics, tables, traps
from miaflow.llm.tokens import TokenStats

RECENT = ("llm-dcpdd", "llm-pac", "llm-conrecall", "llm-samia", "llm-camia", "llm-ezmia")


def _stats(logprobs, token_ids=None, ids=None) -> TokenStats:
    n = len(logprobs)
    empty = [np.zeros(len(lp)) for lp in logprobs]
    return TokenStats(
        np.arange(n) if ids is None else np.asarray(ids),
        [np.asarray(lp, np.float64) for lp in logprobs],
        empty,
        empty,
        None if token_ids is None else [np.asarray(t) for t in token_ids],
    )


def _inputs(**fields) -> LLMInputs:
    base = {"texts": ["a b c d"], "target": _stats([[-1.0, -2.0, -0.5]], [[7, 1, 2, 3]])}
    return LLMInputs(**{"is_member": np.array([True]), **base, **fields})


def test_the_recent_attacks_read_what_the_statistics_jobs_write_and_know_what_they_say():
    assert {ATTACKS[name].knowledge for name in RECENT} == {"none", "shots", "members"}
    assert ATTACKS["llm-conrecall"].knowledge == "members"
    assert set(ATTACKS["llm-ezmia"].reads) == {"reference", "top1"}
    assert ATTACKS["llm-samia-zlib"].settings == {"zlib": True}
    assert ATTACKS["llm-camia-fisher"].settings == {"method": "fisher"}
    # only the input options of a configured attack reach the statistics jobs
    assert llm_input_options(["llm-loss", "llm-dcpdd"], {}) == {}
    assert llm_input_options(["llm-samia-zlib"], {"llm-samia": {"n_samples": 2}}) == {
        "llm-samia": {
            "n_samples": 2,
            "max_new_tokens": 16,
            "prefix_ratio": 0.5,
            "temperature": 1.0,
            "top_k": 50,
        }
    }
    assert llm_reads(["llm-camia"], {}) == {"population", "repeated"}


def test_dc_pdd_by_its_id_smooths_the_known_non_members_tokens():
    # population tokens 1 1 2 over |V| = 4: f = (1, 3, 2, 1) / 7; scored tokens x_2.. = 1, 2, 3
    inputs = _inputs(
        population=_stats([[-1.0, -1.0]], [[1, 1, 2]]),
        vocab_size=4,
        attack_options={"llm-dcpdd": {"a": 1.0}},
    )
    p = np.exp([-1.0, -2.0, -0.5])  # the third's p log(1/f) = 0.607 log 7 = 1.18 is cut to a = 1
    expected = np.mean([p[0] * math.log(7 / 3), p[1] * math.log(7 / 2), 1.0])
    np.testing.assert_allclose(run_llm_attack("llm-dcpdd", inputs), [expected])


def test_pac_con_recall_and_ez_mia_by_their_ids():
    # PAC: four tokens, the likeliest 1 and the least likely 1 of each copy: PD = -1 - (-4) = 3
    # for the text, -1 - (-5) = 4 for its one copy
    pac = _inputs(
        target=_stats([[-1.0, -2.0, -3.0, -4.0]]), augmented=[[np.array([-1.0, -1, -1, -5])]]
    )
    np.testing.assert_allclose(run_llm_attack("llm-pac", pac), [1.0])
    # Con-ReCall: (LL(x; P_nm) - 0.5 LL(x; P_m)) / LL(x), LL(x) = -3.5 / 3
    contrast = _inputs(recall=np.array([-2.0]), member_recall=np.array([-3.0]))
    np.testing.assert_allclose(run_llm_attack("llm-conrecall", contrast), [-0.5 / (-3.5 / 3)])
    # EZ-MIA: tokens 2 and 3 missed (the first scored one never counts): shifts -1.0 and +0.5
    ez = _inputs(reference=_stats([[-1.5, -1.0, -1.0]]), top1=[np.array([False, False, False])])
    np.testing.assert_allclose(run_llm_attack("llm-ezmia", ez), [0.5 / 1.0])


def test_samia_and_its_zlib_variant_by_their_ids():
    # "a b c d": prompt "a b", reference "c d"; recalls 1/2 and 2/2
    inputs = _inputs(samples=[["c x", "d c"]])
    np.testing.assert_allclose(run_llm_attack("llm-samia", inputs), [0.75])
    weighted = (0.5 * len(zlib.compress(b"c x")) + 1.0 * len(zlib.compress(b"d c"))) / 2
    np.testing.assert_allclose(run_llm_attack("llm-samia-zlib", inputs), [weighted])


def test_camia_by_its_id_is_the_library_score_and_its_cached_signals_change_nothing():
    gen = np.random.default_rng(0)
    logprobs = [-np.abs(gen.normal(1.0, 0.5, 12)) for _ in range(6)]
    token_ids = [gen.integers(0, 30, 13) for _ in range(6)]
    repeated = [np.vstack([lp] * 3) * [[1.0], [0.6], [0.5]] for lp in logprobs]
    target, population = _stats(logprobs[:3], token_ids[:3]), _stats(logprobs[3:], token_ids[3:])
    inputs = _inputs(
        texts=["x"] * 3,
        is_member=np.array([True, False, True]),
        target=target,
        repeated=repeated[:3],
        population=population,
        population_repeated=repeated[3:],
    )
    signals = camia.camia_signals(logprobs[:3], token_ids[:3], repeated[:3])
    reference = camia.camia_signals(logprobs[3:], token_ids[3:], repeated[3:])
    for name, method in (("llm-camia", "edgington"), ("llm-camia-fisher", "fisher")):
        expected = camia.camia(signals, reference, method)
        np.testing.assert_allclose(run_llm_attack(name, inputs), expected)
        cached = LLMInputs(
            **{**inputs.__dict__, "signals": signals, "population_signals": reference}
        )
        np.testing.assert_allclose(run_llm_attack(name, cached), expected)


def test_recent_inputs_read_back_in_the_order_of_the_scored_ids(tmp_path):
    ids = np.array([11, 4])
    io.write_parquet(
        tmp_path / "top1.parquet", tables.top1_table(ids, [np.array([1, 0]), np.array([0])])
    )
    io.write_parquet(
        tmp_path / "samples.parquet", tables.samples_table(ids, [["s0", "s1"], ["t0", "t1"]])
    )
    rows = [np.arange(6.0).reshape(3, 2), np.arange(3.0).reshape(3, 1)]
    io.write_parquet(tmp_path / "repeated.parquet", tables.repeated_table(ids, rows, "scored"))
    files = {name: tmp_path / f"{name}.parquet" for name in ("top1", "samples", "repeated")}
    fields = llm_inputs.recent_inputs(files, np.array([4, 11]))
    assert [list(f) for f in fields["top1"]] == [[False], [True, False]]
    assert fields["samples"] == [["t0", "t1"], ["s0", "s1"]]
    np.testing.assert_array_equal(fields["repeated"][1], rows[0])
    with pytest.raises(TypeError, match="unknown cached inputs"):
        llm_inputs.CachedFiles.named({"target_tokens": [], "tokenz": []}, 1)


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    """An untrained tiny GPT-2 (its scores do not matter here) and its tokenizer."""
    from conftest import toy_texts

    from miaflow.llm import models

    texts = toy_texts(40, seed=3)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(models.train_tokenizer(texts, 200))
    tokenizer = models.load_tokenizer(path)
    recipe = {"layers": 1, "width": 16, "heads": 2, "context": 64}
    lm = models.build_scratch(recipe, tokenizer, seed=1).eval()
    scoring = {"max_length": 64, "stride": None, "max_tokens": 4096, "separator": " "}
    return tables.ModelScorer(lm, tokenizer, "untrained", "target-0", "fp32", scoring), texts


@pytest.mark.usefixtures("one_torch_thread")
def test_top1_flags_come_from_the_token_statistics_pass_which_keeps_its_bytes(scorer, tmp_path):
    from miaflow.llm.recent_inputs import top1_flags

    model, texts = scorer
    ids = np.arange(8)
    alone = model.tokens(ids, texts[:8], "eval", vocab=True)
    table, flags = model.tokens_and_top1(ids, texts[:8], "eval")
    io.write_parquet(tmp_path / "a.parquet", alone)
    io.write_parquet(tmp_path / "b.parquet", table)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    expected = top1_flags(model.lm, model.tokenizer, texts[:8], max_length=64)
    assert [list(f) for f in flags["top1"]] == [list(f) for f in expected]
    with pytest.raises(TypeError, match="no statistics table"):
        list(statistics.tables(model, None, ["tokenz"], 0, 1))


@pytest.mark.usefixtures("one_torch_thread")
def test_batched_samples_are_seeded_and_as_many_as_asked(scorer):
    model, texts = scorer
    ids = np.arange(6)
    first = model.samples(ids, texts[:6], 5, 4, prefix_ratio=0.5, n_samples=3, max_new_tokens=6)
    again = model.samples(ids, texts[:6], 5, 4, prefix_ratio=0.5, n_samples=3, max_new_tokens=6)
    pd.testing.assert_frame_equal(first, again)
    assert first.groupby("sample_id").size().eq(3).all() and set(first["sample_id"]) == set(ids)


def test_known_members_and_non_members_of_a_trained_repeat():
    table = corpus.draw_splits(40, repeats=2, n_eval=4, n_shots=2, reference_ratio=0.25, seed=1)
    reference = table.loc[table["set"] == "reference", "sample_id"]
    shots = corpus.select(table, 1, "shot")["sample_id"]
    assert set(corpus.known_non_members(table, 1)) == {*reference, *shots}
    members = corpus.known_members(table, 1, None)
    pool = corpus.non_member_pool(table, 1, np.arange(40))
    assert len(members) == len(pool) == 15 and not set(members) & set(pool)
    assert not set(pool) & set(reference)
    # a pretrained target's corpus: its members are the texts labelled 1
    labels = np.arange(10) % 2
    assert list(corpus.known_members(table[table["set"] != "train"], 0, labels)) == [1, 3, 5, 7, 9]


def test_traps_are_inserted_into_targets_only_with_ids_after_the_corpus():
    texts = np.array([f"text number {i}" for i in range(40)], dtype=object)
    table = corpus.draw_splits(40, repeats=1, n_eval=4, n_shots=2, reference_ratio=0.25, seed=1)
    trap_table = traps.trap_table(list(texts), seed=3, repetitions=[1, 3], per_group=2)
    assert list(trap_table["sample_id"]) == list(40 + trap_table["trap_id"])
    trained, _ = scored.training_texts(table, texts, "target-0", trap_table, seed=9)
    for text, count in zip(trap_table["text"], trap_table["repetitions"]):
        assert trained.count(text) == count
    reference, _ = scored.training_texts(table, texts, "reference", trap_table, seed=9)
    assert not set(reference) & set(trap_table["text"])
    draws = traps.draws(trap_table)
    assert [d[0] for d in draws] == ["r1", "r3"]
    assert [list(d[2]) for d in draws] == [[True, True, False, False]] * 2
    assert traps.parse_group("gpt2_traps/r16") == ("gpt2_traps", 16)
    assert traps.parse_group("gpt2_tiny/easy") is None


def test_a_shifted_validation_set_never_holds_a_non_member_suspect():
    # one feature: members at 1, non-members at 0, the shifted half of the non-members at 5
    gen = np.random.default_rng(0)
    members = gen.normal(1.0, 1.0, (60, 1))
    shifted = np.arange(120) < 40
    non_members = gen.normal(0.0, 1.0, (120, 1)) + 5.0 * shifted[:, None]
    rows = dataset_inference.simulate(
        members, non_members, sizes=[10, 40], repeats=3, seed=2, shifted=shifted
    )
    # 40 shifted non-members minus those among the suspects leave fewer than 40: no shifted test
    assert set(rows.loc[~rows["iid"], "size"]) == {10}
    assert rows.groupby(["size", "iid"]).size().to_dict() == {
        (10, False): 6,
        (10, True): 6,
        (40, True): 6,
    }
    tests = dataset_inference.experiment_tests(
        [(members, non_members)] * 2,
        [shifted.astype(int)] * 2,
        np.array([0, 1]),
        sizes=[10],
        draws=2,
        seed=4,
    )
    assert list(tests["target_repeat"].unique()) == [0, 1] and len(tests) == 2 * 2 * 2 * 2


def test_dataset_inference_and_traps_are_checked_before_any_job(repo):
    import yaml

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["llm"]["dataset_inference"]["sizes"] = [10, 200]
    assert "a suspect set of 200 texts needs 200 members and 400 non-members" in problems_of(params)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["llm"]["models"]["gpt2_traps"] = {"kind": "pretrained", "model": "smollm2-135m"}
    assert "traps need a target trained or fine-tuned here" in problems_of(params)


def _trap_metrics() -> pd.DataFrame:
    """AUROC and TPR@1% of two attacks on two repetition groups of two targets."""
    rows = []
    for repeat in range(2):
        for count, auroc in ((1, 0.5), (16, 0.9)):
            for attack in ("llm-loss", "llm-conrecall"):
                for metric, value in (("auroc", auroc + 0.02 * repeat), ("tpr_at_1pct_fpr", 0.1)):
                    rows.append(
                        ("synthetic_text", f"gpt2_traps/r{count}", attack, repeat, metric, value)
                    )
    rows.append(("synthetic_text", "gpt2_tiny", "llm-loss", 0, "auroc", 0.7))  # no trap row
    columns = ["dataset", "target_model", "attack", "repeat", "metric", "value"]
    return pd.DataFrame(rows, columns=columns)


def test_the_traps_table_is_long_with_plain_numbers_per_repetition_count():
    from miaflow.evaluation.llm_traps_report import traps_markdown, traps_table

    knowledge = {"llm-loss": "none", "llm-conrecall": "members"}
    table = traps_table(_trap_metrics(), knowledge)
    assert list(table[["attack", "repetitions"]].itertuples(index=False, name=None)) == [
        ("llm-loss", 1),
        ("llm-loss", 16),
        ("llm-conrecall", 1),
        ("llm-conrecall", 16),
    ]
    assert set(table["target_model"]) == {"gpt2_traps"}
    np.testing.assert_allclose(table["auroc_mean"], [0.51, 0.91, 0.51, 0.91])
    np.testing.assert_allclose(table["auroc_std"], [0.02 / math.sqrt(2)] * 4)
    assert (table["repeats"] == 2).all() and table["auroc_mean"].dtype == np.float64
    markdown = traps_markdown(table)
    assert "| llm-conrecall§ | 0.510 ± 0.014 (0.10) | 0.910 ± 0.014 (0.10) |" in markdown
    assert traps_table(_trap_metrics().iloc[-1:], knowledge).empty


def test_dataset_inference_rejection_rates_per_kind_and_size():
    from miaflow.evaluation.llm_inference_report import (
        inference_markdown,
        inference_table,
        rejection_rates,
    )

    tests = pd.DataFrame(
        {
            "dataset": "synthetic_text",
            "target_model": "gpt2_tiny",
            "target_repeat": [0, 0, 1, 1, 0, 1],
            "suspect": ["members"] * 4 + ["non-members"] * 2,
            "size": [10, 10, 10, 10, 10, 10],
            "repeat": [0, 1, 0, 1, 0, 0],
            "iid": True,
            "p_value": [0.001, 0.2, 0.04, 0.01, 0.5, 0.03],
        }
    )
    table = inference_table(tests, alpha=0.05)
    rates = rejection_rates(table, 0.05).set_index("suspect")
    assert rates.at["members", "rejected"] == 0.75 and rates.at["members", "tests"] == 4
    assert rates.at["non-members", "rejected"] == 0.5
    assert "| members, IID     | 0.75 (4) |" in inference_markdown(table, 0.05)
    assert list(table.columns[:3]) == ["dataset", "target_model", "target_repeat"]


def test_the_defaults_trap_experiment_has_20_traps_at_four_counts_and_no_other_candidates(repo):
    import yaml

    from miaflow import config, plan

    effective = config.validate(yaml.safe_load((repo / "params.yaml").read_text()))
    [trapped] = plan.llm_trap_experiments(effective)
    assert trapped["traps"]["per_group"] >= 20 and trapped["traps"]["repetitions"] == [1, 4, 16, 64]
    # its own number of target models; the others take llm.repeats
    assert trapped["repeats"] == 1
    assert {e["repeats"] for e in plan.llm_scored_experiments(effective)} == {
        effective["llm"]["repeats"]
    }
    assert trapped["label"] not in {e["label"] for e in plan.llm_scored_experiments(effective)}
    assert [e["label"] for e in plan.llm_inference_experiments(effective)] == ["gpt2_tiny"]
