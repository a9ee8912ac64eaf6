"""The recent language-model attacks on tiny GPT-2s trained here on generated sentences with
exact membership: each ranks members higher; and the model passes that feed them (repeated
texts, top-1 flags, sampled continuations) keep the token cache's alignment and are seeded."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from miaflow.data import load_dataset
from miaflow.llm import camia, conditional, models, recent, recent_inputs, tokens
from miaflow.llm.scores import finite

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONTEXT = 128
RECIPE = {
    "kind": "scratch",
    "layers": 2,
    "width": 64,
    "heads": 2,
    "context": CONTEXT,
    "vocab_size": 400,
    "epochs": 80,
    "lr": 3e-3,
    "weight_decay": 0.0,
    "batch_size": 8,
    "block_size": 64,
}
MEMBERS = range(24)  # the target trains on texts 0..23
SCORED = [*range(16), *range(24, 40)]  # 16 members, then 16 non-members
IS_MEMBER = np.arange(32) < 16
SHOTS = range(40, 44)  # known non-members, never scored (ReCaLL's prefix)
POPULATION = range(40, 72)  # known non-members for CAMIA's p-values and DC-PDD's frequencies


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return list(load_dataset("synthetic_text", {"n_samples": 120}, 7).features)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, texts):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(models.train_tokenizer(texts, RECIPE["vocab_size"]))
    return models.load_tokenizer(path)


@pytest.fixture(scope="module")
def target(tokenizer, texts):
    """A tiny GPT-2 trained from scratch until it memorises its 24 member texts."""
    model = models.build_scratch(RECIPE, tokenizer, seed=1)
    models.train(model, tokenizer, [texts[i] for i in MEMBERS], RECIPE, seed=1)
    return model.eval()


def _statistics(model, tokenizer, texts, vocab_stats=False):
    return tokens.token_statistics(
        model, tokenizer, texts, max_length=CONTEXT, vocab_stats=vocab_stats
    )


@pytest.fixture(scope="module")
def scored(texts) -> list[str]:
    return [texts[i] for i in SCORED]


@pytest.fixture(scope="module")
def cached(target, tokenizer, scored):
    """The token cache of the scored texts: token ids and l_t."""
    computed = _statistics(target, tokenizer, scored)
    return [s[0] for s in computed], [s[1] for s in computed]


def _auroc(scores: np.ndarray) -> float:
    return roc_auc_score(IS_MEMBER, finite(scores))


def test_dc_pdd_ranks_members_higher_with_frequencies_of_unscored_non_members(
    tokenizer, texts, cached
):
    reference = tokenizer([texts[i] for i in range(48, 120)])["input_ids"]
    frequencies = recent.token_frequencies(reference, len(tokenizer))
    assert _auroc(recent.dc_pdd(cached[1], cached[0], frequencies)) > 0.8


def test_pac_ranks_members_higher(target, tokenizer, scored, cached):
    augmented = recent_inputs.swap_augment(scored, SCORED, seed=0)
    flat = _statistics(target, tokenizer, [t for group in augmented for t in group])
    groups = [[s[1] for s in flat[5 * i : 5 * i + 5]] for i in range(len(scored))]
    assert _auroc(recent.pac(cached[1], groups)) > 0.8


def test_con_recall_ranks_members_higher_with_member_shots_outside_the_scored_set(
    target, tokenizer, texts, scored, cached
):
    member_ids = recent_inputs.member_shots(MEMBERS, SCORED, 4, seed=0)
    assert set(member_ids) <= set(range(16, 24))  # members that are not scored
    after_prefix = {
        name: conditional.recall_conditional(
            target, tokenizer, scored, [texts[i] for i in ids], separator=" ", context=CONTEXT
        )
        for name, ids in (("non-member", SHOTS), ("member", member_ids))
    }
    ll = np.array([lp.mean() for lp in cached[1]])
    score = recent.con_recall(after_prefix["non-member"], after_prefix["member"], ll)
    assert _auroc(score) > 0.7


def test_samia_ranks_members_higher(target, tokenizer, scored):
    prompts = [recent.split_prefix(text)[0] for text in scored]
    samples = recent_inputs.sample_continuations(
        target, tokenizer, prompts, SCORED, n_samples=5, seed=0
    )
    assert _auroc(recent.samia(scored, samples)) > 0.7
    zipped = recent.samia(scored, samples, zlib=True)
    assert zipped[IS_MEMBER].mean() > zipped[~IS_MEMBER].mean()


def test_camia_ranks_members_higher_against_a_non_member_population(
    target, tokenizer, texts, cached
):
    population = _statistics(target, tokenizer, [texts[i] for i in POPULATION])
    reference = camia.camia_signals([s[1] for s in population], [s[0] for s in population])
    signals = camia.camia_signals(cached[1], cached[0])
    assert _auroc(camia.camia(signals, reference)) > 0.8
    assert _auroc(camia.camia(signals, reference, "fisher")) > 0.8


def test_camia_with_repeats_scores_every_text(target, tokenizer, texts, scored, cached):
    """The tiny GPT-2 cannot copy from its context, the premise of the repeat signals, so
    only that they run and give a finite score per text is checked on it."""
    population_texts = [texts[i] for i in POPULATION]
    population = _statistics(target, tokenizer, population_texts)
    reference = camia.camia_signals(
        [s[1] for s in population],
        [s[0] for s in population],
        recent_inputs.repeated_logprobs(target, tokenizer, population_texts, max_length=CONTEXT),
    )
    repeated = recent_inputs.repeated_logprobs(target, tokenizer, scored, max_length=CONTEXT)
    signals = camia.camia_signals(cached[1], cached[0], repeated)
    assert signals.shape[1] == reference.shape[1] > 60
    assert np.isfinite(camia.camia(signals, reference)).all()


@pytest.fixture(scope="module")
def fine_tuned(tokenizer, texts):
    """EZ-MIA's setting: a reference trained on other texts, and the target, the reference
    fine-tuned on the members for a few epochs."""
    reference = models.build_scratch(RECIPE, tokenizer, seed=2)
    models.train(reference, tokenizer, texts[48:96], {**RECIPE, "epochs": 40}, seed=2)
    target = copy.deepcopy(reference)
    models.train(target, tokenizer, [texts[i] for i in MEMBERS], {**RECIPE, "epochs": 5}, seed=3)
    return target.eval(), reference.eval()


def test_ez_mia_ranks_members_higher(fine_tuned, tokenizer, scored):
    target, reference = fine_tuned
    flags = recent_inputs.top1_flags(target, tokenizer, scored, max_length=CONTEXT)
    score = recent.ez_mia(
        [s[1] for s in _statistics(target, tokenizer, scored)],
        [s[1] for s in _statistics(reference, tokenizer, scored)],
        flags,
    )
    assert _auroc(score) > 0.8


def test_repeated_copies_score_the_cached_tokens_and_fit_the_context(target, tokenizer, scored):
    cut = 64  # at most 2 copies of the longest texts fit: they are cut to 64 // 3 tokens
    full = recent_inputs.repeated_logprobs(target, tokenizer, scored, max_length=CONTEXT)
    short = recent_inputs.repeated_logprobs(target, tokenizer, scored, max_length=cut)
    for i, stats in enumerate(_statistics(target, tokenizer, scored)):
        n = stats[1].size
        assert full[i].shape == (min(6, CONTEXT // (n + 1)), n)  # no BOS: copies of n + 1 tokens
        np.testing.assert_allclose(full[i][0], stats[1], atol=1e-5)
        assert short[i].shape[0] * (short[i].shape[1] + 1) <= cut and short[i].shape[0] >= 3
        np.testing.assert_allclose(short[i][0], stats[1][: short[i].shape[1]], atol=1e-5)


def test_top1_flags_mark_the_argmax_in_any_batch(target, tokenizer, scored):
    flags = recent_inputs.top1_flags(target, tokenizer, scored, max_length=CONTEXT)
    assert [f.tolist() for f in flags] == [
        f.tolist()
        for f in recent_inputs.top1_flags(
            target, tokenizer, scored, max_length=CONTEXT, batch_size=1
        )
    ]
    for (_, logprob, mean, _), top1 in zip(_statistics(target, tokenizer, scored, True), flags):
        assert top1.size == logprob.size
        assert top1[logprob > np.log(0.5)].all()  # p > 1/2: no other token can be likelier
        assert (logprob[top1] >= mean[top1] - 1e-6).all()  # log p_max >= sum_v p log p


def test_sampled_continuations_are_seeded_per_text(target, tokenizer, scored):
    prompts = [recent.split_prefix(text)[0] for text in scored[:3]]
    first = recent_inputs.sample_continuations(target, tokenizer, prompts, [5, 6, 7], seed=1)
    assert [len(samples) for samples in first] == [10, 10, 10]
    state = torch.random.get_rng_state()
    alone = recent_inputs.sample_continuations(target, tokenizer, prompts[1:2], [6], seed=1)
    assert torch.equal(state, torch.random.get_rng_state())  # the global generator untouched
    assert alone == first[1:2]
    assert recent_inputs.sample_continuations(target, tokenizer, prompts[1:2], [6], seed=2) != alone
    empty = recent_inputs.sample_continuations(target, tokenizer, [""], [0], n_samples=2, seed=1)
    assert len(empty[0]) == 2
