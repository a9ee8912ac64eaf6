"""Attacks on language models, in the attack registry (family "llm", text only).

They read `LLMInputs`: cached token statistics of the target (and reference) model on the
scored texts and on their lower-cased copies and neighbours, ReCaLL's conditional likelihoods and
EM-MIA's pairwise matrix; never a model. The blind baselines (`llm-blind-*`) read none of the
target's outputs: only the texts, the shots and their sentence embeddings. Every score is higher =
more likely a member (docs/algorithms.md#language-model-attacks). `LLM_ATTACKS` says what each
one needs (`reads`, so the workflow computes only those artifacts) and what it knows
(`knowledge`): "none" (label free), "shots" (known non-member texts: ReCaLL's prefix, the blind
baselines' contrast) or "oracle" (true membership labels).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from miaflow.attacks.registry import register
from miaflow.llm import blind, scores
from miaflow.llm.tokens import TokenStats

KNOWLEDGE = ("none", "shots", "oracle")
# What an attack may read beside the target's token statistics.
READS = ("reference", "lowercase", "neighbors", "recall", "pairs", "embeddings")
MINK_SWEEP = (0.1, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # k = 0.2 is llm-mink itself
EM_INITS = ("loss", "ref", "zlib", "mink", "minkpp")
EM_DEFAULT = {"init": "minkpp", "scoring": "auroc", "iterations": 10}


@dataclass(frozen=True)
class LLMInputs:
    """What the language-model attacks read for one target model and its scored texts."""

    texts: Sequence[str]
    target: TokenStats
    is_member: np.ndarray  # read only by attacks whose knowledge is "oracle"
    reference: TokenStats | None = None
    lowercase: TokenStats | None = None
    neighbors: np.ndarray | None = None  # (n, J) LL of the target on each text's neighbours
    recall: np.ndarray | None = None  # (n,) LL(x ; P), P the non-member shots
    recall_compat: np.ndarray | None = None  # (n,) the same as the ReCaLL code computes it
    pairs: np.ndarray | None = None  # (n, n) LL(x ; p), p row, x column
    conditioned_tokens: np.ndarray | None = None  # (n,) K: LL(x ; ·) is over x_1..x_K only
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # by attack name
    seed: int = 0
    shots: Sequence[str] = ()  # ReCaLL's known non-member texts (never scored)
    embeddings: np.ndarray | None = None  # (n, D) sentence embeddings of the scored texts
    shot_embeddings: np.ndarray | None = None  # (n_shots, D) those of the shots

    @property
    def ll(self) -> np.ndarray:
        return scores.mean_log_likelihood(self.target.logprobs)

    @property
    def conditioned_ll(self) -> np.ndarray:
        """LL(x) over tokens 2..K, the tokens a conditional likelihood covers: all of LL(x)'s
        unless a stride scored more of a long text than fits in the context."""
        if self.conditioned_tokens is None:
            return self.ll
        return scores.mean_log_likelihood(
            [lp[: k - 1] for lp, k in zip(self.target.logprobs, self.conditioned_tokens)]
        )

    def ratio_matrix(self) -> np.ndarray:
        """EM-MIA's R[p, x] = LL(x ; p) / LL(x), both over the same tokens of x."""
        return self.pairs / self.conditioned_ll[None, :]


@dataclass(frozen=True)
class LLMAttack:
    name: str
    knowledge: str
    reads: tuple[str, ...]


LLM_ATTACKS: dict[str, LLMAttack] = {}


def _register(
    name: str, knowledge: str = "none", reads: tuple[str, ...] = ()
) -> Callable[[Callable[[LLMInputs], np.ndarray]], Callable[[LLMInputs], np.ndarray]]:
    def decorate(score: Callable[[LLMInputs], np.ndarray]) -> Callable[[LLMInputs], np.ndarray]:
        LLM_ATTACKS[name] = LLMAttack(name, knowledge, reads)
        return register(name, "llm", modalities=("text",))(score)

    return decorate


def _k(inputs: LLMInputs, name: str) -> float:
    return float(inputs.options.get(name, {}).get("k", 0.2))


def _compat(inputs: LLMInputs, name: str) -> bool:
    return bool(inputs.options.get(name, {}).get("compat", False))


@_register("llm-loss")
def loss(inputs: LLMInputs) -> np.ndarray:
    """Loss (Yeom et al.): the mean token log-likelihood LL(x)."""
    return scores.loss(inputs.target.logprobs)


@_register("llm-zlib")
def zlib(inputs: LLMInputs) -> np.ndarray:
    """Zlib (Carlini et al. 2021): LL(x) over the zlib-compressed byte length of x."""
    return scores.zlib(inputs.target.logprobs, inputs.texts)


@_register("llm-lowercase", reads=("lowercase",))
def lowercase(inputs: LLMInputs) -> np.ndarray:
    """Lowercase (Carlini et al. 2021): LL(lower(x)) / LL(x)."""
    return scores.lowercase(inputs.lowercase.logprobs, inputs.target.logprobs)


@_register("llm-mink")
def min_k(inputs: LLMInputs) -> np.ndarray:
    """Min-K% (Shi et al. 2024): mean of the k% lowest token log-probabilities (k = 0.2)."""
    return scores.min_k(inputs.target.logprobs, _k(inputs, "llm-mink"), _compat(inputs, "llm-mink"))


@_register("llm-minkpp")
def min_k_plus_plus(inputs: LLMInputs) -> np.ndarray:
    """Min-K%++ (Zhang et al. 2025): mean of the k% lowest standardised log-probabilities."""
    return scores.min_k_plus_plus(
        inputs.target.logprobs,
        inputs.target.means,
        inputs.target.variances,
        _k(inputs, "llm-minkpp"),
        _compat(inputs, "llm-minkpp"),
    )


def _register_sweep(k: float) -> None:
    percent = int(round(k * 100))

    @_register(f"llm-mink-k{percent}")
    def sweep_min_k(inputs: LLMInputs) -> np.ndarray:
        """Min-K% at another k (the k sweep)."""
        return scores.min_k(inputs.target.logprobs, k, _compat(inputs, "llm-mink"))

    @_register(f"llm-minkpp-k{percent}")
    def sweep_min_k_plus_plus(inputs: LLMInputs) -> np.ndarray:
        """Min-K%++ at another k (the k sweep)."""
        return scores.min_k_plus_plus(
            inputs.target.logprobs,
            inputs.target.means,
            inputs.target.variances,
            k,
            _compat(inputs, "llm-minkpp"),
        )


for _k_value in MINK_SWEEP:
    _register_sweep(_k_value)


@_register("llm-ref", reads=("reference",))
def reference(inputs: LLMInputs) -> np.ndarray:
    """Reference (Carlini et al. 2021): LL under the target minus LL under a reference model."""
    return scores.reference(inputs.ll, scores.mean_log_likelihood(inputs.reference.logprobs))


@_register("llm-neighbor", reads=("neighbors",))
def neighbor(inputs: LLMInputs) -> np.ndarray:
    """Neighbor (Mattern et al. 2023): LL(x) minus the mean LL of x's neighbour texts."""
    return scores.neighbor(inputs.ll, inputs.neighbors)


@_register("llm-recall", knowledge="shots", reads=("recall",))
def recall(inputs: LLMInputs) -> np.ndarray:
    """ReCaLL (Xie et al. 2024): LL(x ; P) / LL(x), P a prefix of known non-member texts;
    `compat` takes LL(x ; P) as the ReCaLL code computes it."""
    conditional = inputs.recall_compat if _compat(inputs, "llm-recall") else inputs.recall
    return scores.recall(conditional, inputs.conditioned_ll)


@_register("llm-recall-avg", reads=("pairs",))
def recall_avg(inputs: LLMInputs) -> np.ndarray:
    """ReCaLL-Avg (Kim et al.): R[p, x] averaged over every text p as a one-shot prefix."""
    return scores.recall_avg(inputs.ratio_matrix())


@_register("llm-recall-avgp", reads=("pairs",))
def recall_avgp(inputs: LLMInputs) -> np.ndarray:
    """ReCaLL-AvgP (Kim et al.): text p scored by its mean effect R[p, x] as a prefix."""
    return scores.recall_avgp(inputs.ratio_matrix())


@_register("llm-recall-toppref", knowledge="oracle", reads=("pairs",))
def recall_top_prefix(inputs: LLMInputs) -> np.ndarray:
    """ReCaLL-TopPref (oracle): the row of the non-member prefix that separates best."""
    return scores.recall_top_prefix(inputs.ratio_matrix(), inputs.is_member)


@_register("llm-recall-randm", knowledge="oracle", reads=("pairs",))
def recall_random_member(inputs: LLMInputs) -> np.ndarray:
    """RandM (label-using): ReCaLL with one random member text as the prefix."""
    return scores.recall_random_prefix(inputs.ratio_matrix(), inputs.is_member, True, inputs.seed)


@_register("llm-recall-randnm", knowledge="oracle", reads=("pairs",))
def recall_random_non_member(inputs: LLMInputs) -> np.ndarray:
    """RandNM (label-using): ReCaLL with one random non-member text as the prefix."""
    return scores.recall_random_prefix(inputs.ratio_matrix(), inputs.is_member, False, inputs.seed)


@_register("llm-blind-shots", knowledge="shots", reads=("embeddings",))
def blind_shots(inputs: LLMInputs) -> np.ndarray:
    """Blind (Das et al.): mean cosine distance of x's MiniLM embedding to the non-member shots'."""
    return blind.shot_distance(inputs.embeddings, inputs.shot_embeddings)


@_register("llm-blind-bow", knowledge="shots")
def blind_bag_of_words(inputs: LLMInputs) -> np.ndarray:
    """Blind (Das et al.): word n-gram logistic regression, scored texts against the shots."""
    return blind.bag_of_words(inputs.texts, inputs.shots)


INITIAL_SCORES: dict[str, Callable[[LLMInputs], np.ndarray]] = {
    "loss": loss,
    "ref": reference,
    "zlib": zlib,
    "mink": min_k,
    "minkpp": min_k_plus_plus,
}


def em_mia_run(
    inputs: LLMInputs, init: str, scoring: str, iterations: int
) -> tuple[np.ndarray, np.ndarray]:
    """EM-MIA (Kim et al.) from the named initial scores: final scores and every iterate."""
    return scores.em_mia(inputs.ratio_matrix(), INITIAL_SCORES[init](inputs), scoring, iterations)


def em_variant(init: str, scoring: str) -> str:
    return f"em-mia-{init}-{scoring}"


def em_settings(name: str, options: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """init, scoring and iterations of EM-MIA attack `name` (`em-mia` takes its options)."""
    settings = {**EM_DEFAULT, **options.get("em-mia", {})}
    if name != "em-mia":
        settings["init"], settings["scoring"] = name.removeprefix("em-mia-").split("-")
    return settings


def _register_em(name: str, init: str) -> None:
    reads = ("pairs", "reference") if init == "ref" else ("pairs",)

    @_register(name, reads=reads)
    def em_mia(inputs: LLMInputs) -> np.ndarray:
        """EM-MIA (Kim et al.): membership and prefix scores refined in turn, no labels."""
        settings = em_settings(name, inputs.options)
        return em_mia_run(inputs, settings["init"], settings["scoring"], settings["iterations"])[0]


_register_em("em-mia", EM_DEFAULT["init"])
for _init in EM_INITS:
    for _scoring in scores.SCORING_FUNCTIONS:
        _register_em(em_variant(_init, _scoring), _init)


def needs(attacks: Sequence[str], options: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The artifacts (READS) that the configured attacks need."""
    needed = {read for name in attacks for read in LLM_ATTACKS[name].reads}
    if "em-mia" in attacks and em_settings("em-mia", options)["init"] == "ref":
        needed.add("reference")
    return needed
