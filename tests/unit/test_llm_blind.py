"""Blind baselines of the language-model attacks: at chance when members and non-members are a
random draw from one corpus, high when the selection shifts one side; they never read the target
model's outputs."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from miaflow.attacks.llm import LLMInputs, run_llm_attack
from miaflow.attacks.registry import ATTACKS
from miaflow.data import load_dataset
from miaflow.llm.blind import EMBEDDING_MODEL, bag_of_words, shot_distance
from miaflow.pretrained import embed
from miaflow.seeding import rng

BLIND = ("llm-blind-shots", "llm-blind-bow")
N_SHOTS = 8


class Untouchable:
    """Stands for the target's token statistics: any read fails the test."""

    def __getattr__(self, name: str):
        raise AssertionError(f"a blind baseline read the target model's {name}")


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray]:
    """1,200 generated sentences and their template (the topic a selection can shift on)."""
    dataset = load_dataset("synthetic_text", {"n_samples": 1200}, 11)
    return dataset.features, dataset.labels


@pytest.fixture(scope="module")
def embeddings(corpus) -> np.ndarray:
    return embed(list(corpus[0]), EMBEDDING_MODEL)


def blind_inputs(texts, embedded, members, non_members, shots) -> tuple[LLMInputs, np.ndarray]:
    scored = np.concatenate([members, non_members])
    is_member = np.arange(scored.size) < members.size
    inputs = LLMInputs(
        texts=list(texts[scored]),
        target=Untouchable(),
        is_member=Untouchable(),
        shots=list(texts[shots]),
        embeddings=embedded[scored],
        shot_embeddings=embedded[shots],
    )
    return inputs, is_member


def test_blind_baselines_are_at_chance_on_a_random_draw(corpus, embeddings):
    texts, _ = corpus
    order = rng(5, "blind", "random").permutation(texts.size)
    members, non_members, shots = order[:500], order[500:1000], order[1000 : 1000 + N_SHOTS]
    inputs, is_member = blind_inputs(texts, embeddings, members, non_members, shots)
    for name in BLIND:
        auroc = roc_auc_score(is_member, run_llm_attack(name, inputs))
        assert abs(auroc - 0.5) < 0.1, f"{name}: AUROC {auroc:.3f} on a random draw"


def test_blind_baselines_see_a_shifted_selection(corpus, embeddings):
    """Members from two templates, non-members and shots from the other two (a topic shift, as
    an "easy" selection makes): a model-free score separates them."""
    texts, template = corpus
    order = rng(5, "blind", "shifted").permutation(texts.size)
    member_side = order[template[order] < 2]
    non_member_side = order[template[order] >= 2]
    members, non_members = member_side[:250], non_member_side[:250]
    shots = non_member_side[250 : 250 + N_SHOTS]
    inputs, is_member = blind_inputs(texts, embeddings, members, non_members, shots)
    for name in BLIND:
        auroc = roc_auc_score(is_member, run_llm_attack(name, inputs))
        assert auroc > 0.9, f"{name}: AUROC {auroc:.3f} on a shifted selection"


def test_blind_baselines_know_only_the_shots():
    assert {ATTACKS[name].knowledge for name in BLIND} == {"shots"}
    assert ATTACKS["llm-blind-shots"].reads == ("embeddings",)
    assert ATTACKS["llm-blind-bow"].reads == ()


def test_shot_distance_by_hand():
    texts = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    shots = np.array([[3.0, 0.0], [1.0, 0.0]])
    # cosine to both shots: 1, 0 and 1/sqrt(2); distance 1 - that
    assert shot_distance(texts, shots) == pytest.approx([0.0, 1.0, 1 - 2**-0.5])
    with pytest.raises(ValueError, match="at least one shot"):
        shot_distance(texts, np.empty((0, 2)))


def test_bag_of_words_scores_texts_unlike_the_shots_higher():
    shots = ["the old train left the station", "the old train was late again"]
    texts = ["the old train left early", "a parrot sang in the garden"]
    scores = bag_of_words(texts, shots)
    assert scores[1] > scores[0]
    assert bag_of_words(texts, shots) == pytest.approx(scores)  # deterministic
    with pytest.raises(ValueError, match="at least one shot"):
        bag_of_words(texts, [])
