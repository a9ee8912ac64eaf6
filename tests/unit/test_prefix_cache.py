"""EM-MIA's pair matrix and ReCaLL's conditional likelihoods with each prefix run once (its
key/value cache shared by packed rows of targets) equal the pair-by-pair computation, on a GPT-2
and a Llama (SmolLM2's architecture, with grouped key/value heads) built from configs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from miaflow.data import load_dataset
from miaflow.llm import conditional, models, prefix_cache, tokens

TOLERANCE = 1e-4  # per entry of the matrix


@pytest.fixture(scope="module")
def texts() -> list[str]:
    generated = list(load_dataset("synthetic_text", {"n_samples": 40}, 3).features)
    # different lengths: a one-word text, a two-word one, one longer than every context below
    return generated[:9] + ["Yes", "Why not", " ".join(generated[9:14])]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, texts):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(models.train_tokenizer(texts, 1000))
    return models.load_tokenizer(path)


def gpt2(tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=2, n_head=4,
        initializer_range=0.2,  # logits far from uniform: a wrong position or mask shows
    )  # fmt: skip
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval()


def llama(tokenizer, attention: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        initializer_range=0.2, tie_word_embeddings=True, attn_implementation=attention,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module", params=["gpt2", "llama-sdpa", "llama-eager"])
def model(request, tokenizer):
    if request.param == "gpt2":
        return gpt2(tokenizer)
    return llama(tokenizer, request.param.removeprefix("llama-"))


@pytest.mark.parametrize(
    ("context", "max_tokens"),
    [(128, 4096), (128, 64), (24, 4096)],  # 24: prefixes cut to fit, the long text cut too
)
def test_pair_matrix_with_reused_prefixes_equals_pair_by_pair(
    model, tokenizer, texts, context, max_tokens
):
    options = dict(separator=" ", context=context, max_tokens=max_tokens)
    rows = [0, 3, 9, 10, 11]  # a typical text, the shortest ones, the longest one
    reused = conditional.pair_rows(model, tokenizer, texts, rows, **options)
    plain = conditional.pair_rows(model, tokenizer, texts, rows, reuse_prefix=False, **options)
    assert reused.shape == (len(rows), len(texts))
    np.testing.assert_array_equal(np.isnan(reused), np.isnan(plain))  # "Yes": nothing scored
    np.testing.assert_allclose(reused, plain, atol=TOLERANCE, rtol=0)
    unconditional = conditional.conditional_log_likelihood(
        model, tokenizer, [[]] * len(texts), tokenizer(texts)["input_ids"], context=context
    )
    assert np.nanmax(np.abs(reused - unconditional)) > 100 * TOLERANCE  # the prefix matters


@pytest.mark.parametrize("context", [128, 16])
def test_first_target_token_after_the_prefix_matches_the_joined_sequence(
    model, tokenizer, texts, context
):
    """ReCaLL's `compat` form scores x_1 from the prefix's last logits; mixed prefixes, repeats."""
    encoded = tokenizer(texts)["input_ids"]
    shots = [encoded[1] + encoded[2], encoded[4], []]
    prefixes = [shots[i % 3] for i in range(len(encoded))] + [shots[0]] * 3
    targets = encoded + encoded[:3]  # three pairs twice
    values = {
        reuse: conditional.conditional_log_likelihood(
            model,
            tokenizer,
            prefixes,
            targets,
            context=context,
            first_token=True,
            reuse_prefix=reuse,
        )  # fmt: skip
        for reuse in (True, False)
    }
    np.testing.assert_allclose(values[True], values[False], atol=TOLERANCE, rtol=0)
    without_first = conditional.conditional_log_likelihood(
        model, tokenizer, prefixes, targets, context=context
    )
    assert np.nanmax(np.abs(values[True] - without_first)) > 100 * TOLERANCE


def test_logit_budget_splits_rows_without_changing_values(model, tokenizer, texts, monkeypatch):
    reused = conditional.pair_rows(model, tokenizer, texts, [0, 5], separator=" ", context=128)
    monkeypatch.setattr(tokens, "LOGITS_BUDGET", len(tokenizer) * 8)  # 8 logit rows a batch
    few_rows = conditional.pair_rows(model, tokenizer, texts, [0, 5], separator=" ", context=128)
    np.testing.assert_allclose(few_rows, reused, atol=TOLERANCE, rtol=0)


def test_each_prefix_runs_once_and_each_target_once_per_prefix(tokenizer, texts):
    lm = gpt2(tokenizer)
    calls: list[tuple[int, int]] = []
    lm.register_forward_pre_hook(
        lambda _, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    conditional.pair_rows(lm, tokenizer, texts[:8], [0, 1, 2], separator=" ", context=128)
    lengths = [len(ids) for ids in tokenizer(texts[:8])["input_ids"]]
    prefix_runs = [shape for shape in calls if shape[0] == 1]
    assert len(prefix_runs) == 3  # one per row; the targets fit one packed batch per row
    run = sum(rows * width for rows, width in calls) - sum(width for _, width in prefix_runs)
    assert sum(lengths) - 8 <= run / 3 <= 1.25 * (sum(lengths) - 8)  # x_K not run, little padding


def test_packed_rows_deal_every_item_once_into_evenly_filled_rows():
    lengths = [5, 1, 9, 3, 3, 12, 0, 7, 2, 11, 4]
    rows = prefix_cache.packed_rows(lengths, capacity=16)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    fills = [sum(lengths[i] for i in row) for row in rows]
    assert len(rows) == int(np.ceil(sum(lengths) / 16)) and max(fills) - min(fills) <= 2
    assert rows[0][0] == 5 and all(lengths[row[0]] == max(lengths[i] for i in row) for row in rows)
