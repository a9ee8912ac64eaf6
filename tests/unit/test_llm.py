"""Language-model attacks: token statistics against transformers, ReCaLL's prefix rule, the
split table, neighbours, and the direction of every score on a model that memorised its members."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import toy_texts
from sklearn.metrics import roc_auc_score

from miaflow.attacks.llm import LLMInputs, run_llm_attack
from miaflow.attacks.registry import ATTACKS, LLM
from miaflow.data import load_dataset
from miaflow.llm import conditional, corpus, models, neighbors, tokens
from miaflow.llm.tokens import TokenStats

RECIPE = {
    "kind": "scratch",
    "layers": 2,
    "width": 64,
    "heads": 2,
    "context": 64,
    "vocab_size": 400,
    "epochs": 40,
    "lr": 3e-3,
    "weight_decay": 0.0,
    "batch_size": 8,
    "block_size": 32,
}


@pytest.fixture(scope="module")
def texts() -> list[str]:
    generated = load_dataset("synthetic_text", {"n_samples": 64}, 7).features
    return [t[0].upper() + t[1:] for t in generated]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, texts):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(models.train_tokenizer(texts, RECIPE["vocab_size"]))
    return models.load_tokenizer(path)


@pytest.fixture(scope="module")
def untrained(tokenizer):
    return models.build_scratch(RECIPE, tokenizer, seed=3).eval()


@pytest.fixture(scope="module")
def memorised(tokenizer, texts):
    """A tiny GPT-2 trained to memorise texts 0..15 (members); 16..31 are non-members."""
    torch.set_num_threads(1)
    model = models.build_scratch(RECIPE, tokenizer, seed=1)
    models.train(model, tokenizer, texts[:16], RECIPE, seed=1)
    return model


def stats(model, tokenizer, texts, **options) -> TokenStats:
    computed = tokens.token_statistics(model, tokenizer, texts, max_length=64, **options)
    return TokenStats(
        np.arange(len(texts)),
        *[[s[k] for s in computed] for k in (1, 2, 3)],
        [np.asarray(s[0]) for s in computed],
    )


def test_token_logprobs_equal_the_transformers_loss_and_vocabulary_statistics(
    untrained, tokenizer, texts
):
    [(ids, logprob, mean, variance)] = tokens.token_statistics(
        untrained, tokenizer, texts[:1], max_length=64
    )
    batch = torch.tensor([ids])
    with torch.no_grad():
        output = untrained(input_ids=batch, labels=batch)
    assert logprob.size == len(ids) - 1  # the first token is never scored
    assert -logprob.mean() == pytest.approx(float(output.loss), abs=1e-5)
    logp = torch.log_softmax(output.logits[0, :-1].double(), -1)
    expected_mean = (logp.exp() * logp).sum(-1)
    expected_var = (logp.exp() * logp.square()).sum(-1) - expected_mean.square()
    np.testing.assert_allclose(mean, expected_mean.numpy(), atol=1e-5)
    np.testing.assert_allclose(variance, expected_var.numpy(), atol=1e-5)


def test_batching_does_not_change_statistics(untrained, tokenizer, texts, monkeypatch):
    one_by_one = tokens.token_statistics(
        untrained, tokenizer, texts[:6], max_length=64, max_tokens=64
    )
    together = tokens.token_statistics(
        untrained, tokenizer, texts[:6], max_length=64, max_tokens=4096
    )
    monkeypatch.setattr(tokens, "LOGITS_BUDGET", 400 * 30)  # 30 logit rows of the vocabulary
    few_rows = tokens.token_statistics(
        untrained, tokenizer, texts[:6], max_length=64, max_tokens=4096
    )
    for a, b, c in zip(one_by_one, together, few_rows):
        np.testing.assert_allclose(a[1], b[1], atol=1e-5)
        np.testing.assert_allclose(c[1], b[1], atol=1e-5)


def test_sliding_windows_score_every_token_once_and_truncation_keeps_the_head(
    untrained, tokenizer, texts
):
    long_text = " ".join(texts[:4])
    n_tokens = len(tokenizer(long_text)["input_ids"])
    assert n_tokens > 40
    [(_, windowed, _, _)] = tokens.token_statistics(
        untrained, tokenizer, [long_text], max_length=24, stride=12
    )
    [(ids, truncated, _, _)] = tokens.token_statistics(
        untrained, tokenizer, [long_text], max_length=24
    )
    assert windowed.size == n_tokens - 1 and truncated.size == 23 and len(ids) == 24
    np.testing.assert_allclose(windowed[:23], truncated, atol=1e-5)  # first window = truncation
    segments = tokens.text_segments(list(range(50)), max_length=20, stride=10)
    scored = [i for ids_, first in segments for i in ids_[first:]]
    assert scored == list(range(1, 50))


def test_conditional_likelihood_scores_the_target_tokens_after_the_prefix(
    untrained, tokenizer, texts
):
    target = tokenizer(texts[0])["input_ids"]
    [plain] = conditional.conditional_log_likelihood(
        untrained, tokenizer, [[]], [target], context=64
    )
    [(_, logprob, _, _)] = tokens.token_statistics(untrained, tokenizer, texts[:1], max_length=64)
    assert plain == pytest.approx(logprob.mean(), abs=1e-6)  # empty prefix: the unconditional LL
    rows = conditional.pair_rows(untrained, tokenizer, texts[:4], [1, 3], separator=" ", context=64)
    separator = tokenizer(" ", add_special_tokens=False)["input_ids"]
    prefix = tokenizer(texts[3])["input_ids"] + separator
    [direct] = conditional.conditional_log_likelihood(
        untrained, tokenizer, [prefix], [tokenizer(texts[2])["input_ids"]], context=64
    )
    assert rows.shape == (2, 4) and rows[1, 2] == pytest.approx(direct, abs=1e-6)


@pytest.mark.parametrize("stride", [1, 3, 9, 10])
def test_any_stride_up_to_max_length_scores_every_token_but_the_first_once(stride):
    segments = tokens.text_segments(list(range(104)), max_length=10, stride=stride)
    assert all(len(ids) <= 10 and 1 <= first < len(ids) for ids, first in segments)
    assert [i for ids, first in segments for i in ids[first:]] == list(range(1, 104))


def test_a_stride_of_max_length_scores_the_whole_text(untrained, tokenizer, texts):
    long_text = " ".join(texts[:8])
    n_tokens = len(tokenizer(long_text)["input_ids"])
    assert n_tokens > 100
    [(_, by_max_length, _, _)] = tokens.token_statistics(
        untrained, tokenizer, [long_text], max_length=10, stride=10
    )
    [(_, by_one, _, _)] = tokens.token_statistics(
        untrained, tokenizer, [long_text], max_length=10, stride=9
    )
    assert by_max_length.size == n_tokens - 1  # stride 10 advances by 9: the same windows
    np.testing.assert_allclose(by_max_length, by_one, atol=1e-6)


def test_token_logprobs_are_those_of_the_models_own_forward_pass():
    """Gemma-2 soft-caps its logits after the output head: the head alone is not the model."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    config = Gemma2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
        initializer_range=1.0,
        final_logit_softcapping=2.0,
        pad_token_id=0,
    )
    model = Gemma2ForCausalLM(config).eval()
    ids = torch.randint(1, 64, (2, 20)).tolist()
    segments = [(ids[0], 1), (ids[1][:12], 4)]
    scored = tokens.score_segments(model, segments, vocab_stats=True)
    for (segment, first), (logprob, mean, variance) in zip(segments, scored):
        with torch.no_grad():
            logits = model(torch.tensor([segment])).logits[0, first - 1 : -1].double()
            uncapped = model.get_output_embeddings()(model.model(torch.tensor([segment]))[0])[
                0, first - 1 : -1
            ].double()
        logp = torch.log_softmax(logits, -1)
        expected = logp.gather(1, torch.tensor(segment[first:])[:, None])[:, 0]
        expected_mean = (logp.exp() * logp).sum(-1)
        expected_var = (logp.exp() * (logp - expected_mean[:, None]).square()).sum(-1)
        np.testing.assert_allclose(logprob, expected.numpy(), atol=1e-5)
        np.testing.assert_allclose(mean, expected_mean.numpy(), atol=1e-5)
        np.testing.assert_allclose(variance, expected_var.numpy(), atol=1e-5)
        head_only = torch.log_softmax(uncapped, -1).gather(
            1, torch.tensor(segment[first:])[:, None]
        )[:, 0]
        assert (head_only - expected).abs().max() > 1.0  # the test would see a missed cap


def test_recall_compares_the_same_tokens_with_and_without_the_prefix(untrained, tokenizer, texts):
    """With a stride, LL(x) covers every token of a long text; LL(x ; P) only those that fit in
    the context after P: ReCaLL and EM-MIA divide by LL(x) over x's tokens up to the same K."""
    long_texts = [" ".join(texts[i : i + 4]) for i in (0, 4)]
    computed = tokens.token_statistics(untrained, tokenizer, long_texts, max_length=24, stride=12)
    assert all(len(ids) > 24 for ids, *_ in computed)
    target = TokenStats(np.arange(2), *[[s[k] for s in computed] for k in (1, 2, 3)])
    # an empty prefix conditions on nothing, so the ratio of the same tokens is exactly 1
    unconditioned = conditional.conditional_log_likelihood(
        untrained, tokenizer, [[], []], [ids for ids, *_ in computed], context=24
    )
    inputs = LLMInputs(
        texts=long_texts,
        target=target,
        is_member=np.array([True, False]),
        recall=unconditioned,
        pairs=np.tile(unconditioned, (2, 1)),
        conditioned_tokens=conditional.target_lengths(tokenizer, long_texts, 24),
    )
    np.testing.assert_allclose(run_llm_attack("llm-recall", inputs), 1.0, atol=1e-6)
    np.testing.assert_allclose(inputs.ratio_matrix(), 1.0, atol=1e-6)


def test_recall_compat_reproduces_the_recall_repository(tokenizer, texts):
    """compat: the shots joined with no separator, and the target's first token scored after
    them; the plain LL is the causal-LM loss of the target alone (ReCaLL's src/run.py)."""
    model = models.build_scratch({**RECIPE, "context": 128}, tokenizer, seed=3).eval()
    shots, target = texts[40:42], texts[5]
    prefix_ids = tokenizer("".join(shots))["input_ids"]
    target_ids = tokenizer(target)["input_ids"]
    joined = torch.tensor([prefix_ids + target_ids])
    labels = joined.clone()
    labels[:, : len(prefix_ids)] = -100
    assert joined.shape[1] <= 128
    with torch.no_grad():
        after_shots = -float(model(joined, labels=labels).loss)
        plain_ids = torch.tensor([target_ids])
        plain = -float(model(plain_ids, labels=plain_ids).loss)
    values = {
        compat: conditional.recall_conditional(
            model, tokenizer, [target], shots, separator=" ", context=128, compat=compat
        )
        for compat in (False, True)
    }
    inputs = LLMInputs(
        texts=[target],
        target=stats(model, tokenizer, [target]),
        is_member=np.array([True]),
        recall=values[False],
        recall_compat=values[True],
        conditioned_tokens=conditional.target_lengths(tokenizer, [target], 128),
        attack_options={"llm-recall": {"compat": True}},
    )
    assert values[True][0] == pytest.approx(after_shots, abs=1e-5)
    assert run_llm_attack("llm-recall", inputs)[0] == pytest.approx(after_shots / plain, rel=1e-5)
    default = dataclasses.replace(inputs, attack_options={})
    assert run_llm_attack("llm-recall", default)[0] == pytest.approx(
        values[False][0] / plain, rel=1e-5
    )
    assert values[False][0] != pytest.approx(after_shots, abs=1e-3)


def test_recall_prefix_drops_the_oldest_shots_and_logs_when_none_fits(tokenizer, texts, caplog):
    shots = texts[:3]
    lengths = [len(tokenizer(s)["input_ids"]) for s in shots]
    separator = tokenizer(" ", add_special_tokens=False)["input_ids"]
    everything = conditional.prefix_ids(tokenizer, shots, " ", 5, context=1000)
    assert len(everything) == sum(lengths) + 3 * len(separator)
    room = lengths[1] + lengths[2] + 2 * len(separator) + 5
    newest_two = conditional.prefix_ids(tokenizer, shots, " ", 5, context=room)
    assert newest_two == everything[lengths[0] + len(separator) :]
    with caplog.at_level(logging.WARNING):
        assert conditional.prefix_ids(tokenizer, shots, " ", 5, context=6) == []
    assert "empty prefix" in caplog.text


@pytest.mark.parametrize("compat", [False, True])
def test_prefix_shots_counts_the_shots_the_prefix_keeps(tokenizer, texts, compat):
    shots, targets = texts[:3], texts[3:9]
    assert (
        conditional.prefix_shots(tokenizer, targets, shots, " ", 1000, compat=compat) == 3
    ).all()
    assert (conditional.prefix_shots(tokenizer, targets, shots, " ", 6, compat=compat) == 0).all()
    lengths = [len(ids) for ids in tokenizer(targets)["input_ids"]]
    seen = set()
    for context in range(20, 160, 3):
        kept = conditional.prefix_shots(tokenizer, targets, shots, " ", context, compat=compat)
        seen.update(kept.tolist())
        for length, count in zip(lengths, kept):
            target = min(length, context)
            prefix = conditional.prefix_ids(tokenizer, shots, " ", target, context, compat=compat)
            newest = shots[len(shots) - count :]
            assert prefix == (
                conditional.prefix_ids(tokenizer, newest, " ", 0, 10**6, compat=compat)
                if count
                else []
            )
    assert seen == {0, 1, 2, 3}


def test_split_table_draws_disjoint_balanced_sets():
    table = corpus.draw_splits(200, repeats=2, n_eval=20, n_shots=4, reference_ratio=0.25, seed=1)
    reference = set(corpus.select(table, -1, "reference")["sample_id"])
    assert len(reference) == 50
    for repeat in (0, 1):
        train = set(corpus.select(table, repeat, "train")["sample_id"])
        scored = corpus.select(table, repeat, "eval")
        shots = set(corpus.select(table, repeat, "shot")["sample_id"])
        assert len(train) == 75 and not train & reference and not shots & train
        assert scored["is_member"].sum() == 10 and len(scored) == 20
        assert set(scored.loc[scored["is_member"], "sample_id"]) <= train
        assert not set(scored.loc[~scored["is_member"], "sample_id"]) & train
        assert len(shots) == 4 and not shots & set(scored["sample_id"])
    labels = np.array([1, 0] * 50)
    by_label = corpus.draw_splits(
        100,
        repeats=1,
        n_eval=10,
        n_shots=3,
        reference_ratio=0.5,
        seed=1,
        membership_labels=labels,
        subset=60,
    )
    scored = corpus.select(by_label, 0, "eval")
    assert (labels[scored["sample_id"]] == scored["is_member"]).all()
    assert (labels[corpus.select(by_label, 0, "shot")["sample_id"]] == 0).all()
    with pytest.raises(ValueError, match="non-members"):
        corpus.draw_splits(20, repeats=1, n_eval=8, n_shots=4, reference_ratio=0.5, seed=1)


def test_word_swap_neighbours_are_seeded_per_text(texts):
    first = neighbors.word_swap(
        texts[:3], [0, 1, 2], texts[10:], n_neighbors=4, fraction=0.2, seed=5
    )
    again = neighbors.word_swap(texts[2:3], [2], texts[10:], n_neighbors=4, fraction=0.2, seed=5)
    assert again[0] == first[2]  # a text's neighbours do not depend on the others
    for text, own in zip(texts[:3], first):
        assert len(own) == 4
        for neighbour in own:
            changed = sum(a != b for a, b in zip(text.split(), neighbour.split()))
            assert len(neighbour.split()) == len(text.split()) and changed >= 1


@pytest.fixture(scope="module")
def masked_lm(tiny_masked_lm) -> neighbors.MaskedLM:
    return neighbors.load_masked_lm(str(tiny_masked_lm), [], seed=0)


TRAIN_MASKED_LM = """
import hashlib, json
from miaflow.llm.neighbors import train_masked_lm
texts = [f"the {c} cat sat on the {m} mat, number {i}"
         for i, (c, m) in enumerate(zip(["red", "blue", "green", "big"] * 10, ["old", "new"] * 20))]
model, tokenizer = train_masked_lm(texts, seed=7)
digest = hashlib.sha256(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
for parameter in model.parameters():
    digest.update(parameter.detach().numpy().tobytes())
print(digest.hexdigest())
"""


def test_the_scratch_masked_lm_is_the_same_in_every_process(repo):
    """Vocabulary and weights repeat across processes: the `tokenizers` WordPiece trainer numbered
    tokens of equal count in a per-process hash order, which changed the neighbours run to run."""
    digests = {
        subprocess.run(
            [sys.executable, "-c", TRAIN_MASKED_LM],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        ).stdout.strip()
        for _ in range(3)
    }
    assert len(digests) == 1, digests


def test_masked_lm_refills_the_requested_share_of_tokens_never_with_the_original(masked_lm):
    # Every toy word is one token of the tiny tokenizer, so a refilled token is a changed word.
    texts = toy_texts(12, seed=1, words=(8, 13))
    made = neighbors.masked_lm_neighbours(
        texts, range(12), masked_lm, n_neighbors=4, fraction=0.25, seed=3
    )
    for text, own in zip(texts, made):
        words = text.split()
        assert len(own) == 4
        for neighbour in own:
            changed = [(a, b) for a, b in zip(words, neighbour.split()) if a != b]
            assert len(neighbour.split()) == len(words)
            assert len(changed) == math.ceil(0.25 * len(words))
            assert all(a.lower() != b.lower() and b for a, b in changed)


def test_masked_lm_neighbours_are_deterministic_and_seeded_per_text(masked_lm):
    texts = toy_texts(5, seed=2)
    first = neighbors.masked_lm_neighbours(
        texts, range(5), masked_lm, n_neighbors=3, fraction=0.2, seed=7
    )
    again = neighbors.masked_lm_neighbours(
        texts[4:], [4], masked_lm, n_neighbors=3, fraction=0.2, seed=7
    )
    other = neighbors.masked_lm_neighbours(
        texts, range(5), masked_lm, n_neighbors=3, fraction=0.2, seed=8
    )
    assert again[0] == first[4]  # a text's neighbours do not depend on the others
    assert other != first


def test_masked_lm_edits_keep_the_rest_of_the_text_and_reach_past_the_window(masked_lm):
    # Case, punctuation and spacing outside the refilled tokens stay as they were, and a text
    # longer than the model's window (128 tokens) is refilled window by window.
    text = "The  Film, was GOOD! " + " ".join(toy_texts(1, seed=3, words=(300, 301)))
    edits = neighbors.substitutions(masked_lm, text, 2, 0.05, seed=1, sample_id=0)
    for own in edits:
        assert len(own) == math.ceil(0.05 * len(masked_lm.tokenizer(text)["input_ids"][1:-1]))
        neighbour = neighbors.spliced(text, own)
        kept = [text[end:start] for (_, end, _), (start, _, _) in zip(own, own[1:])]
        assert all(piece in neighbour for piece in kept)
    assert max(start for own in edits for start, _, _ in own) > len(text) // 2


@pytest.mark.usefixtures("one_torch_thread")
def test_masked_lm_trained_in_the_job_when_none_is_named():
    made = neighbors.generate(
        toy_texts(3, seed=4),
        [0, 1, 2],
        toy_texts(60, seed=5),
        {"generator": "masked_lm", "n_neighbors": 2, "fraction": 0.3, "model": None},
        seed=1,
    )
    assert [len(own) for own in made] == [2, 2, 2]
    assert all(n != t for t, own in zip(toy_texts(3, seed=4), made) for n in own)


def test_every_label_free_score_ranks_memorised_members_higher(
    memorised, untrained, tokenizer, texts
):
    scored = texts[:32]
    member = np.arange(32) < 16
    separator = " "
    recall_ll = conditional.recall_conditional(
        memorised, tokenizer, scored, texts[40:44], separator=separator, context=64
    )
    own = neighbors.word_swap(scored, range(32), texts[32:], n_neighbors=4, fraction=0.3, seed=2)
    flat = [n for group in own for n in group]
    neighbour_ll = np.array(
        [s[1].mean() for s in tokens.token_statistics(memorised, tokenizer, flat, max_length=64)]
    ).reshape(32, 4)
    inputs = LLMInputs(
        texts=scored,
        target=stats(memorised, tokenizer, scored),
        is_member=member,
        reference=stats(untrained, tokenizer, scored),
        lowercase=stats(memorised, tokenizer, [t.lower() for t in scored]),
        neighbors=neighbour_ll,
        recall=recall_ll,
        pairs=conditional.pair_rows(
            memorised, tokenizer, scored, range(32), separator=separator, context=64
        ),
        shots=texts[40:44],
        embeddings=np.random.default_rng(0).normal(size=(32, 8)),  # stand-ins for MiniLM's
        shot_embeddings=np.random.default_rng(1).normal(size=(4, 8)),
        **_recent_inputs(memorised, tokenizer, texts, scored),
    )
    for name in (
        "llm-loss",
        "llm-zlib",
        "llm-lowercase",
        "llm-mink",
        "llm-minkpp",
        "llm-ref",
        "llm-neighbor",
        "llm-mink-k50",
        "llm-minkpp-k50",
    ):
        auroc = roc_auc_score(member, run_llm_attack(name, inputs))
        assert auroc > 0.8, f"{name}: AUROC {auroc:.2f} on a model that memorised its members"
    language_model = [name for name, attack in ATTACKS.items() if attack.family == LLM]
    for name in language_model:  # the rest run and give one finite score per text
        assert np.isfinite(run_llm_attack(name, inputs)).all()
        assert ATTACKS[name].knowledge in ("none", "shots", "members", "oracle")


def _recent_inputs(model, tokenizer, texts, scored) -> dict:
    """The recent attacks' inputs for `scored` (tests/unit/test_llm_leg.py checks their values):
    top-1 flags, two word-swapped copies, a member prefix's likelihoods, stand-in samples, the
    repeated texts and a population of never-scored texts."""
    from miaflow.llm import recent_inputs

    flags = tokens.token_statistics(model, tokenizer, scored, max_length=64, top1=True)
    copies = recent_inputs.swap_augment(scored, range(32), n_augment=2, seed=3)
    augmented = stats(model, tokenizer, [c for own in copies for c in own]).logprobs
    population = texts[48:56]
    return {
        "top1": [s[4] for s in flags],
        "augmented": [augmented[2 * i : 2 * i + 2] for i in range(32)],
        "member_recall": conditional.recall_conditional(
            model, tokenizer, scored, texts[44:48], separator=" ", context=64
        ),
        "samples": [[text.split()[-1], "a b"] for text in scored],
        "repeated": recent_inputs.repeated_logprobs(model, tokenizer, scored, max_length=64),
        "population": stats(model, tokenizer, population),
        "population_repeated": recent_inputs.repeated_logprobs(
            model, tokenizer, population, max_length=64
        ),
        "vocab_size": len(tokenizer),
    }


def test_the_registry_holds_every_language_model_attack_with_its_knowledge():
    sweep = [
        "llm-mink-k10",
        "llm-mink-k30",
        "llm-mink-k40",
        "llm-mink-k50",
        "llm-mink-k60",
        "llm-mink-k70",
        "llm-mink-k80",
        "llm-mink-k90",
        "llm-mink-k100",
        "llm-minkpp-k10",
        "llm-minkpp-k30",
        "llm-minkpp-k40",
        "llm-minkpp-k50",
        "llm-minkpp-k60",
        "llm-minkpp-k70",
        "llm-minkpp-k80",
        "llm-minkpp-k90",
        "llm-minkpp-k100",
    ]
    em = [
        "em-mia-loss-auroc",
        "em-mia-loss-kendall",
        "em-mia-loss-rankdist",
        "em-mia-ref-auroc",
        "em-mia-ref-kendall",
        "em-mia-ref-rankdist",
        "em-mia-zlib-auroc",
        "em-mia-zlib-kendall",
        "em-mia-zlib-rankdist",
        "em-mia-mink-auroc",
        "em-mia-mink-kendall",
        "em-mia-mink-rankdist",
        "em-mia-minkpp-auroc",
        "em-mia-minkpp-kendall",
        "em-mia-minkpp-rankdist",
    ]
    named = {
        "llm-loss": "none",
        "llm-zlib": "none",
        "llm-lowercase": "none",
        "llm-mink": "none",
        "llm-minkpp": "none",
        "llm-ref": "none",
        "llm-neighbor": "none",
        "llm-recall": "shots",
        "llm-recall-avg": "none",
        "llm-recall-avgp": "none",
        "em-mia": "none",
        "llm-recall-toppref": "oracle",
        "llm-recall-randm": "oracle",
        "llm-recall-randnm": "oracle",
        "llm-blind-shots": "shots",
        "llm-blind-bow": "shots",
        "llm-dcpdd": "shots",
        "llm-pac": "none",
        "llm-conrecall": "members",
        "llm-samia": "none",
        "llm-samia-zlib": "none",
        "llm-camia": "shots",
        "llm-camia-fisher": "shots",
        "llm-ezmia": "none",
        **dict.fromkeys(sweep + em, "none"),
    }
    assert {name: a.knowledge for name, a in ATTACKS.items() if a.family == LLM} == named
    assert "reference" in ATTACKS["em-mia-ref-kendall"].reads
    assert ATTACKS["llm-recall"].reads == ("recall",)
