"""Attacks on language models (family "llm", text only) and their runner, `run_llm_attack`.

They read `LLMInputs`: cached token statistics of the target (and reference) model on the
scored texts and on their lower-cased copies and neighbours, ReCaLL's conditional likelihoods and
EM-MIA's pairwise matrix; never a model. The blind baselines (`llm-blind-*`) read none of the
target's outputs: only the texts, the shots and their sentence embeddings. The recent attacks
(DC-PDD, PAC, Con-ReCall, SaMIA, CAMIA, EZ-MIA: `miaflow.llm.recent`, `miaflow.llm.camia`) read
the extra tables the statistics jobs make for them (`miaflow.llm.statistics`). Every score is
higher = more likely a member (docs/algorithms.md#language-model-attacks). What each one reads and
knows (`reads`, `knowledge`: "none", label free; "shots", known non-member texts: ReCaLL's prefix,
the blind baselines' contrast, CAMIA's population, DC-PDD's token frequencies; "members", known
member texts: Con-ReCall's prefix; "oracle", true membership labels) is in its catalogue entry
(`miaflow.attacks.registry`), where the Min-K% k sweep and the EM-MIA variants are generated: they
are the functions below with some options fixed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from miaflow.attacks.registry import ATTACKS, attack_options, em_initial_attack
from miaflow.attacks.running import run
from miaflow.llm import blind, camia, recent, scores
from miaflow.llm.tokens import TokenStats


@dataclass(frozen=True)
class LLMInputs:
    """What the language-model attacks read for one target model and its scored texts.

    One `LLMInputs` serves every attack of a scored set: `attack_options` holds the configured
    overrides of all of them (llm.attack_options), and `run_llm_attack` sets `options` to those of
    the attack it runs.
    """

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
    attack_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # by attack id
    options: Any = None  # the options of the attack being run (`run_llm_attack`)
    seed: int = 0
    shots: Sequence[str] = ()  # ReCaLL's known non-member texts (never scored)
    embeddings: np.ndarray | None = None  # (n, D) sentence embeddings of the scored texts
    shot_embeddings: np.ndarray | None = None  # (n_shots, D) those of the shots
    # The recent attacks' inputs (miaflow.llm.statistics), on the scored texts in their order:
    top1: list[np.ndarray] | None = None  # per scored token: the target's argmax (EZ-MIA)
    augmented: list[list[np.ndarray]] | None = None  # l_t of PAC's word-swapped copies
    member_recall: np.ndarray | None = None  # (n,) LL(x ; P_m), P_m known members (Con-ReCall)
    samples: list[list[str]] | None = None  # SaMIA's sampled continuations
    repeated: list[np.ndarray] | None = None  # (copies, n) l_t of the repeated text (CAMIA)
    population: TokenStats | None = None  # known non-members never scored, with token ids
    population_repeated: list[np.ndarray] | None = None  # their repeated texts' l_t
    signals: Any = None  # CAMIA's signals of the scored texts (computed once per scored set)
    population_signals: Any = None  # and of the population (once per repeat)
    vocab_size: int | None = None  # the target tokenizer's (DC-PDD's smoothing)

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


def loss(inputs: LLMInputs) -> np.ndarray:
    """Loss (Yeom et al.): the mean token log-likelihood LL(x)."""
    return scores.loss(inputs.target.logprobs)


def zlib(inputs: LLMInputs) -> np.ndarray:
    """Zlib (Carlini et al. 2021): LL(x) over the zlib-compressed byte length of x."""
    return scores.zlib(inputs.target.logprobs, inputs.texts)


def lowercase(inputs: LLMInputs) -> np.ndarray:
    """Lowercase (Carlini et al. 2021): LL(lower(x)) / LL(x)."""
    return scores.lowercase(inputs.lowercase.logprobs, inputs.target.logprobs)


def min_k(inputs: LLMInputs) -> np.ndarray:
    """Min-K% (Shi et al. 2024): mean of the k% lowest token log-probabilities (`MinKOptions`)."""
    return scores.min_k(inputs.target.logprobs, inputs.options.k, inputs.options.compat)


def min_k_plus_plus(inputs: LLMInputs) -> np.ndarray:
    """Min-K%++ (Zhang et al. 2025): mean of the k% lowest standardised log-probabilities
    (`MinKOptions`)."""
    return scores.min_k_plus_plus(
        inputs.target.logprobs,
        inputs.target.means,
        inputs.target.variances,
        inputs.options.k,
        inputs.options.compat,
    )


def reference(inputs: LLMInputs) -> np.ndarray:
    """Reference (Carlini et al. 2021): LL under the target minus LL under a reference model."""
    return scores.reference(inputs.ll, scores.mean_log_likelihood(inputs.reference.logprobs))


def neighbor(inputs: LLMInputs) -> np.ndarray:
    """Neighbor (Mattern et al. 2023): LL(x) minus the mean LL of x's neighbour texts."""
    return scores.neighbor(inputs.ll, inputs.neighbors)


def recall(inputs: LLMInputs) -> np.ndarray:
    """ReCaLL (Xie et al. 2024): LL(x ; P) / LL(x), P a prefix of known non-member texts;
    option `compat` takes LL(x ; P) as the ReCaLL code computes it."""
    conditional = inputs.recall_compat if inputs.options.compat else inputs.recall
    return scores.recall(conditional, inputs.conditioned_ll)


def recall_avg(inputs: LLMInputs) -> np.ndarray:
    """ReCaLL-Avg (Kim et al.): R[p, x] averaged over every text p as a one-shot prefix."""
    return scores.recall_avg(inputs.ratio_matrix())


def recall_avgp(inputs: LLMInputs) -> np.ndarray:
    """ReCaLL-AvgP (Kim et al.): text p scored by its mean effect R[p, x] as a prefix."""
    return scores.recall_avgp(inputs.ratio_matrix())


def recall_top_prefix(inputs: LLMInputs) -> np.ndarray:
    """ReCaLL-TopPref (oracle): the row of the non-member prefix that separates best."""
    return scores.recall_top_prefix(inputs.ratio_matrix(), inputs.is_member)


def recall_random_member(inputs: LLMInputs) -> np.ndarray:
    """RandM (label-using): ReCaLL with one random member text as the prefix."""
    return scores.recall_random_prefix(inputs.ratio_matrix(), inputs.is_member, True, inputs.seed)


def recall_random_non_member(inputs: LLMInputs) -> np.ndarray:
    """RandNM (label-using): ReCaLL with one random non-member text as the prefix."""
    return scores.recall_random_prefix(inputs.ratio_matrix(), inputs.is_member, False, inputs.seed)


def blind_shots(inputs: LLMInputs) -> np.ndarray:
    """Blind (Das et al.): mean cosine distance of x's MiniLM embedding to the non-member shots'."""
    return blind.shot_distance(inputs.embeddings, inputs.shot_embeddings)


def blind_bag_of_words(inputs: LLMInputs) -> np.ndarray:
    """Blind (Das et al.): word n-gram logistic regression, scored texts against the shots."""
    return blind.bag_of_words(inputs.texts, inputs.shots)


def dc_pdd(inputs: LLMInputs) -> np.ndarray:
    """DC-PDD (Zhang et al. 2024): the calibrated probabilities of each distinct token, the
    reference frequencies from the known non-members' tokens (`DcPddOptions`)."""
    frequencies = recent.token_frequencies(inputs.population.token_ids, inputs.vocab_size)
    return recent.dc_pdd(
        inputs.target.logprobs, inputs.target.token_ids, frequencies, inputs.options.a
    )


def pac(inputs: LLMInputs) -> np.ndarray:
    """PAC (Ye et al. 2024): the word-swapped copies' mean polarized distance minus the text's
    own (`PacOptions`)."""
    options = inputs.options
    return recent.pac(
        inputs.target.logprobs, inputs.augmented, options.ratio_local, options.ratio_far
    )


def con_recall(inputs: LLMInputs) -> np.ndarray:
    """Con-ReCall (Wang et al. 2024): (LL(x ; P_nm) − γ·LL(x ; P_m)) / LL(x), ReCaLL's
    non-member prefix and a prefix of known members, over the same tokens (`ConRecallOptions`)."""
    return recent.con_recall(
        inputs.recall, inputs.member_recall, inputs.conditioned_ll, inputs.options.gamma
    )


def samia(inputs: LLMInputs) -> np.ndarray:
    """SaMIA (Kaneko et al. 2024): the sampled continuations' mean ROUGE-1 recall of the
    text's true continuation (`SamiaOptions`; `zlib`: SaMIA*zlib)."""
    options = inputs.options
    return recent.samia(inputs.texts, inputs.samples, options.prefix_ratio, options.zlib)


def camia_score(inputs: LLMInputs) -> np.ndarray:
    """CAMIA (Chang et al. 2025): each loss-dynamics signal's p-value under the known
    non-members' (the population), combined (`CamiaOptions.method`)."""
    population, signals = inputs.population, inputs.population_signals
    if signals is None:
        repeated = inputs.population_repeated
        signals = camia.camia_signals(population.logprobs, population.token_ids, repeated)
    own = inputs.signals
    if own is None:
        own = camia.camia_signals(inputs.target.logprobs, inputs.target.token_ids, inputs.repeated)
    return camia.camia(own, signals, inputs.options.method)


def ez_mia(inputs: LLMInputs) -> np.ndarray:
    """EZ-MIA (Ilic et al. 2026): on the tokens the target does not predict top-1, the positive
    over the negative target−reference log-probability shifts (`EzMiaOptions`)."""
    return recent.ez_mia(
        inputs.target.logprobs,
        inputs.reference.logprobs,
        inputs.top1,
        inputs.options.min_errors,
        inputs.options.compat,
    )


def em_mia(inputs: LLMInputs) -> np.ndarray:
    """EM-MIA (Kim et al.): membership and prefix scores refined in turn, no labels
    (`EmMiaOptions`)."""
    return em_mia_run(inputs, inputs.options)[0]


def em_mia_run(inputs: LLMInputs, options: Any) -> tuple[np.ndarray, np.ndarray]:
    """EM-MIA with `options` (`EmMiaOptions`: its start, prefix score and iterations): the final
    scores and every iterate. It starts from attack llm-<init>, with that attack's options."""
    start = em_initial_attack(options.init)
    initial = score_function(start)(_with_options(start, inputs))
    return scores.em_mia(inputs.ratio_matrix(), initial, options.scoring, options.iterations)


def score_function(name: str) -> Callable[[LLMInputs], np.ndarray]:
    """The function that scores language-model attack `name` (its catalogue entry's `score`)."""
    attack = ATTACKS[name]
    if attack.module != __name__:
        raise ValueError(
            f"attack {name!r} ({attack.score}) is no language-model attack: attacks on a "
            "model's signals run from miaflow.attacks.scoring"
        )
    return globals()[attack.function]


def _with_options(name: str, inputs: LLMInputs) -> LLMInputs:
    return dataclasses.replace(inputs, options=attack_options(name, inputs.attack_options))


def run_llm_attack(name: str, inputs: LLMInputs) -> np.ndarray:
    """Scores of language-model attack `name` on `inputs`, its options from
    `inputs.attack_options` (`miaflow.attacks.running.run`: ±inf and NaN replaced)."""
    return run(ATTACKS[name], score_function(name), _with_options(name, inputs))
