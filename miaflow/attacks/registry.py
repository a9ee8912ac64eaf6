"""The attack catalogue: one static entry per attack id (docs/algorithms.md#attack-index).

Each entry says what the attack is (family, one-line description), what it needs to run (model
sets, data modalities, the artifacts it reads, for language-model attacks what they know), which
function scores it (by dotted name) and which options it takes (its `miaflow.attacks.options`
class, or the attack whose options it shares, with the fields a generated variant fixes).

Importing this module imports no family module: validation, the plan and the report read ids and
metadata here, so their code closures (`miaflow.plan.code`) stay clear of the attacks' code. The
runners import the families they run statically: `miaflow.attacks.scoring` the attacks on a
model's signals, `miaflow.attacks.llm` the language-model ones. Adding an attack is its function
in a family module, its entry here and its line in docs/attacks.md (or language-models.md); the
params schema's attack ids and option sections are generated from this catalogue
(`miaflow.attacks.schema`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from miaflow.attacks.options import (
    CamiaOptions,
    ConRecallOptions,
    DcPddOptions,
    EmInit,
    EmMiaOptions,
    EmScoring,
    EzMiaOptions,
    LearnMergeOptions,
    MinKOptions,
    ModelRobustOptions,
    Options,
    PacOptions,
    QueryAdvOptions,
    QueryAugmentOptions,
    QueryNeighborOptions,
    QueryQrmOptions,
    QueryRefOptions,
    QueryTransferOptions,
    RecallOptions,
    RmiaOfflineOptions,
    SamiaOptions,
    SmRiskOptions,
)
from miaflow.data.dataset import MODALITIES
from miaflow.models.kinds import CANARIES, DISTANCES, QUERY_OUTPUTS, REGRESSORS, SURROGATES

NEEDS = frozenset({"reference", "population"})
FAMILIES = ("metric", "learning", "model", "query", "lira", "song-mittal", "llm")
LLM = "llm"  # the language-model family: LLMInputs, its own stage and runner
# Artifacts of the queries stage an attack on a model's signals may read (`Attack.reads`).
ARTIFACTS = (QUERY_OUTPUTS, DISTANCES, SURROGATES, REGRESSORS, CANARIES)
# What a language-model attack may read beside the target's token statistics (`Attack.reads`):
# the existing attacks' tables, and the recent ones' (miaflow.llm.statistics): the token
# statistics of the known non-members (population), EZ-MIA's top-1 flags, PAC's word-swapped
# copies (augmented), the likelihoods after known member texts, SaMIA's samples and CAMIA's
# repeated texts.
LLM_READS = (
    "reference",
    "lowercase",
    "neighbors",
    "recall",
    "pairs",
    "embeddings",
    "population",
    "top1",
    "augmented",
    "member_recall",
    "samples",
    "repeated",
)
# What a language-model attack knows: nothing (label free), known non-member texts, known member
# texts (Con-ReCall's prefix), or labels.
KNOWLEDGE = ("none", "shots", "members", "oracle")
# The options of the recent attacks that the statistics jobs read to make their inputs (the
# attack, the table it reads, its fields): changing one reruns those jobs, not the others.
INPUT_OPTIONS = {
    "llm-pac": ("augmented", ("n_augment", "alpha")),
    "llm-samia": (
        "samples",
        ("n_samples", "max_new_tokens", "prefix_ratio", "temperature", "top_k"),
    ),
    "llm-camia": ("repeated", ("copies",)),
}
MINK_SWEEP = (0.1, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # k = 0.2 is llm-mink itself
EM_INITS: tuple[str, ...] = get_args(EmInit)
EM_SCORINGS: tuple[str, ...] = get_args(EmScoring)
CAMIA_VARIANTS = ("fisher",)  # CAMIA's variants beside its default (edgington) combination
PACKAGE = "miaflow.attacks"  # the family modules' package (`Attack.score` names a function there)


@dataclass(frozen=True)
class Attack:
    """One attack of the catalogue.

    `score`: the dotted name of its function (from `AttackInputs`, or `LLMInputs` for family
    "llm", to one score per sample, higher = member). `subset`: it scores only some samples,
    NaN marks the others, which the score table leaves out. `modalities`: the data it applies
    to; the workflow does not run it on other datasets. `reads`: for family "llm" what it reads
    beside the target's token statistics (LLM_READS), for the others the queries stage's
    artifacts it reads from `AttackInputs.extra` (ARTIFACTS). `options`: its options class (None:
    it has none); `options_of`: the attack whose entry of `attack_options` it reads (itself if
    None); `settings`: the fields it fixes over those (a generated variant's k, init, scoring).
    """

    name: str
    family: str
    score: str
    doc: str  # the one-line description in reports
    needs: frozenset[str] = frozenset()  # model sets (NEEDS) that must be non-empty
    subset: bool = False
    modalities: frozenset[str] = frozenset(MODALITIES)
    reads: tuple[str, ...] = ()
    options: type[Options] | None = None
    options_of: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    knowledge: str = "none"  # KNOWLEDGE, of a language-model attack

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"attack {self.name!r}: unknown family {self.family!r}")
        if not self.needs <= NEEDS:
            raise ValueError(f"attack {self.name!r}: unknown needs {set(self.needs) - NEEDS}")
        if not self.modalities or not self.modalities <= set(MODALITIES):
            raise ValueError(
                f"attack {self.name!r}: modalities must be a non-empty subset of {MODALITIES}"
            )
        known = LLM_READS if self.family == LLM else ARTIFACTS
        if not set(self.reads) <= set(known):
            raise ValueError(f"attack {self.name!r}: unknown reads {set(self.reads) - set(known)}")
        if self.knowledge not in KNOWLEDGE:
            raise ValueError(f"attack {self.name!r}: unknown knowledge {self.knowledge!r}")
        if self.settings and self.options is None:
            raise ValueError(f"attack {self.name!r}: settings without options")
        unknown = set(self.settings) - {f.name for f in dataclasses.fields(self.options or Options)}
        if unknown:
            raise ValueError(f"attack {self.name!r}: settings of no option: {sorted(unknown)}")

    @property
    def module(self) -> str:
        """The module its score function is in."""
        return self.score.rpartition(".")[0]

    @property
    def function(self) -> str:
        """The name of its score function in that module."""
        return self.score.rpartition(".")[2]


def _attack(
    name: str,
    family: str,
    score: str,
    needs: Iterable[str],
    doc: str,
    modalities: Iterable[str] = MODALITIES,
    **fields: Any,
) -> Attack:
    """An entry; `score` is relative to this package (e.g. "metric.metric_loss")."""
    return Attack(
        name,
        family,
        f"{PACKAGE}.{score}",
        doc,
        frozenset(needs),
        modalities=frozenset(modalities),
        **fields,
    )


def _llm(name: str, function: str, doc: str, **fields: Any) -> Attack:
    return _attack(name, LLM, f"llm.{function}", (), doc, ("text",), **fields)


def em_initial_attack(init: str) -> str:
    """The attack whose scores EM-MIA starts from when its option `init` is `init`."""
    return f"llm-{init}"


NONE, REF, POP = (), ("reference",), ("reference", "population")

# fmt: off
# The attacks on a model's signals, in the order of docs/algorithms.md#attack-index.
_SIGNAL_ATTACKS = [
    _attack("metric-loss", "metric", "metric.metric_loss", NONE,
        "Negative cross-entropy loss of the target model."),
    _attack("metric-conf", "metric", "metric.metric_conf", NONE,
        "Target model's true-label probability p_y."),
    _attack("metric-corr", "metric", "metric.metric_corr", NONE,
        "1 if the target model classifies the sample correctly, else 0."),
    _attack("metric-ent", "metric", "metric.metric_ent", NONE,
        "Negative prediction entropy (base 2) of the target model."),
    _attack("metric-ment", "metric", "metric.metric_ment", NONE,
        "Negative modified entropy (Song & Mittal) of the target model."),
    _attack("model-loss", "model", "reference.model_loss", REF,
        "Sablayrolles: midpoint of IN and OUT median reference losses minus the target loss."),
    _attack("model-calibration", "model", "reference.model_calibration", REF,
        "Watson: median OUT reference loss minus the target loss."),
    _attack("model-lira", "model", "reference.model_lira", REF,
        'TDDBench LiRA on phi: median locations, global IN and OUT spreads ("tdd" fixed '
        "variance)."),
    _attack("model-robust", "model", "reference.model_robust", POP,
        "RMIA (online): share of population points z with r(x)/r(z) > gamma, r = p_y / mean "
        "ref p_y.", options=ModelRobustOptions),
    _attack("lira-online", "lira", "reference.lira_online", REF,
        "Online LiRA: Gaussian likelihood ratio of IN vs OUT phi, per-example variance."),
    _attack("lira-online-fixvar", "lira", "reference.lira_online_fixvar", REF,
        "Online LiRA with Carlini's fixed variance: both spreads are the std of all IN phi "
        "values."),
    _attack("lira-online-residual", "lira", "reference.lira_online_residual", REF,
        "Online LiRA with TF-Privacy's fixed variance: spreads of phi around each sample's "
        "median."),
    _attack("lira-offline", "lira", "reference.lira_offline", REF,
        "Offline LiRA (two-sided pdf form): −log N(phi; OUT median, per-example OUT std)."),
    _attack("lira-offline-fixvar", "lira", "reference.lira_offline_fixvar", REF,
        "Offline LiRA (two-sided pdf form) with one global OUT std."),
    _attack("lira-offline-onesided", "lira", "reference.lira_offline_onesided", REF,
        "Offline LiRA, one-sided test of the paper: Phi((phi − OUT median) / per-example OUT "
        "std)."),
    _attack("learn-original", "learning", "learning.learn_original", REF,
        "Attack MLP on the probability vector (Shokri et al., one model for all classes)."),
    _attack("learn-top3", "learning", "learning.learn_top3", REF,
        "Attack MLP on the three largest probabilities (Salem et al.)."),
    _attack("learn-sorted", "learning", "learning.learn_sorted", REF,
        "Attack MLP on the probability vector sorted in descending order."),
    _attack("learn-label", "learning", "learning.learn_label", REF,
        "Attack MLP on the probability vector and the one-hot label (Nasr et al., one branch)."),
    _attack("learn-merge", "learning", "learning.learn_merge", REF,
        "Attack MLP on [onehot(y), loss, Mentr, ULD, −phi, predicted label] (TDDBench's mix).",
        options=LearnMergeOptions),
    _attack("model-fpr", "model", "reference.model_fpr", REF,
        "Ye et al. Attack R, parametric: Phi((phi − OUT median) / OUT std), the target's "
        "percentile."),
    _attack("rmia-offline", "model", "reference.rmia_offline", POP,
        "RMIA offline (corrected): as model-robust, with p̄ from OUT models only, for x and "
        "for z.", options=RmiaOfflineOptions),
    _attack("sm-corr", "song-mittal", "song_mittal.sm_corr", NONE,
        "Song & Mittal correctness attack: member iff correctly classified (score = "
        "correctness)."),
    _attack("sm-conf", "song-mittal", "song_mittal.sm_conf", REF,
        "Song & Mittal confidence attack, class-dependent thresholds: p_y − τ_y."),
    _attack("sm-ent", "song-mittal", "song_mittal.sm_ent", REF,
        "Song & Mittal entropy attack, class-dependent thresholds: −H − τ_y."),
    _attack("sm-ment", "song-mittal", "song_mittal.sm_ment", REF,
        "Song & Mittal modified-entropy attack, class-dependent thresholds: −Mentr − τ_y."),
    _attack("sm-conf-global", "song-mittal", "song_mittal.sm_conf_global", REF,
        "Song & Mittal confidence attack, one threshold for all classes: p_y − τ."),
    _attack("sm-ent-global", "song-mittal", "song_mittal.sm_ent_global", REF,
        "Song & Mittal entropy attack, one threshold for all classes: −H − τ."),
    _attack("sm-ment-global", "song-mittal", "song_mittal.sm_ment_global", REF,
        "Song & Mittal modified-entropy attack, one threshold for all classes: −Mentr − τ."),
    _attack("sm-risk", "song-mittal", "song_mittal.sm_risk", REF,
        "Song & Mittal privacy risk score: P(member | signal) from per-class shadow histograms.",
        options=SmRiskOptions),
    _attack("query-transfer", "query", "query.query_transfer", NONE,
        "Li & Zhang: negative true-label loss of a surrogate trained on the target's predicted "
        "labels.", reads=(SURROGATES,), options=QueryTransferOptions),
    _attack("query-qrm", "query", "query.query_qrm", NONE,
        "Bertran et al.: target score standardised by a regressor fitted on non-members, "
        "(s − μ)/σ.", reads=(REGRESSORS,), options=QueryQrmOptions),
    _attack("query-ref", "query", "query.query_ref", REF,
        "Wen et al.: mean over canaries of LiRA's fixed-variance LLR of the target's canary phi.",
        ("image",), subset=True, reads=(CANARIES,), options=QueryRefOptions),
    _attack("query-neighbor", "query", "query.query_neighbor", NONE,
        "Share of noisy neighbours with a higher loss than the sample (mean loss rise for text).",
        reads=(QUERY_OUTPUTS,), options=QueryNeighborOptions),
    _attack("query-augment", "query", "query.query_augment", REF,
        "Attack MLP on correctness under 10 augmentations, trained on the shadow model.",
        reads=(QUERY_OUTPUTS,), options=QueryAugmentOptions),
    _attack("query-adv", "query", "query.query_adv", NONE,
        "Distance to the decision boundary (HopSkipJump, images) or correctness under noise.",
        subset=True, reads=(QUERY_OUTPUTS, DISTANCES), options=QueryAdvOptions),
]
# The language-model attacks, in the order of docs/language-models.md (the generated variants
# below).
_LLM_ATTACKS = [
    _llm("llm-loss", "loss",
        "Loss (Yeom et al.): the mean token log-likelihood LL(x)."),
    _llm("llm-zlib", "zlib",
        "Zlib (Carlini et al. 2021): LL(x) over the zlib-compressed byte length of x."),
    _llm("llm-lowercase", "lowercase",
        "Lowercase (Carlini et al. 2021): LL(lower(x)) / LL(x).", reads=("lowercase",)),
    _llm("llm-mink", "min_k",
        "Min-K% (Shi et al. 2024): mean of the k% lowest token log-probabilities (k = 0.2).",
        options=MinKOptions),
    _llm("llm-minkpp", "min_k_plus_plus",
        "Min-K%++ (Zhang et al. 2025): mean of the k% lowest standardised log-probabilities.",
        options=MinKOptions),
    _llm("llm-ref", "reference",
        "Reference (Carlini et al. 2021): LL under the target minus LL under a reference model.",
        reads=("reference",)),
    _llm("llm-neighbor", "neighbor",
        "Neighbor (Mattern et al. 2023): LL(x) minus the mean LL of x's neighbour texts.",
        reads=("neighbors",)),
    _llm("llm-recall", "recall",
        "ReCaLL (Xie et al. 2024): LL(x ; P) / LL(x), P a prefix of known non-member texts.",
        knowledge="shots", reads=("recall",), options=RecallOptions),
    _llm("llm-recall-avg", "recall_avg",
        "ReCaLL-Avg (Kim et al.): R[p, x] averaged over every text p as a one-shot prefix.",
        reads=("pairs",)),
    _llm("llm-recall-avgp", "recall_avgp",
        "ReCaLL-AvgP (Kim et al.): text p scored by its mean effect R[p, x] as a prefix.",
        reads=("pairs",)),
    _llm("llm-recall-toppref", "recall_top_prefix",
        "ReCaLL-TopPref (oracle): the row of the non-member prefix that separates best.",
        knowledge="oracle", reads=("pairs",)),
    _llm("llm-recall-randm", "recall_random_member",
        "RandM (label-using): ReCaLL with one random member text as the prefix.",
        knowledge="oracle", reads=("pairs",)),
    _llm("llm-recall-randnm", "recall_random_non_member",
        "RandNM (label-using): ReCaLL with one random non-member text as the prefix.",
        knowledge="oracle", reads=("pairs",)),
    _llm("em-mia", "em_mia",
        "EM-MIA (Kim et al.): membership and prefix scores refined in turn, no labels.",
        reads=("pairs",), options=EmMiaOptions),
    _llm("llm-blind-shots", "blind_shots",
        "Blind (Das et al.): mean cosine distance of x's MiniLM embedding to the non-member "
        "shots'.", knowledge="shots", reads=("embeddings",)),
    _llm("llm-blind-bow", "blind_bag_of_words",
        "Blind (Das et al.): word n-gram logistic regression, scored texts against the shots.",
        knowledge="shots"),
    # The recent attacks (docs/algorithms.md#recent-language-model-attacks).
    _llm("llm-dcpdd", "dc_pdd",
        "DC-PDD (Zhang et al. 2024): mean over first occurrences of min(p(x_t)·log(1/f(x_t)), "
        "a), f the known non-members' token frequencies.",
        knowledge="shots", reads=("population",), options=DcPddOptions),
    _llm("llm-pac", "pac",
        "PAC (Ye et al. 2024): mean polarized distance of word-swapped copies minus the text's "
        "own.", reads=("augmented",), options=PacOptions),
    _llm("llm-conrecall", "con_recall",
        "Con-ReCall (Wang et al. 2024): (LL(x ; P_nm) − γ·LL(x ; P_m)) / LL(x), P_m known "
        "member texts.", knowledge="members", reads=("recall", "member_recall"),
        options=ConRecallOptions),
    _llm("llm-samia", "samia",
        "SaMIA (Kaneko et al. 2024): mean ROUGE-1 recall of sampled continuations against the "
        "text's own.", reads=("samples",), options=SamiaOptions),
    _llm("llm-camia", "camia_score",
        "CAMIA (Chang et al. 2025): loss-dynamics signals' p-values under known non-members, "
        "combined (Edgington).", knowledge="shots", reads=("population", "repeated"),
        options=CamiaOptions),
    _llm("llm-ezmia", "ez_mia",
        "EZ-MIA (Ilic et al. 2026): positive over negative target−reference shifts on the "
        "tokens the target misses.", reads=("reference", "top1"), options=EzMiaOptions),
]
# fmt: on


def _generated(attacks: Sequence[Attack]) -> list[Attack]:
    """`attacks` with their generated variants after the attack they vary: the Min-K% and
    Min-K%++ k sweep (compat: llm-mink's, llm-minkpp's) and EM-MIA from every start with every
    prefix score (iterations: em-mia's; each reads what its start reads)."""
    by_name = {attack.name: attack for attack in attacks}
    variants: dict[str, list[Attack]] = {
        "llm-minkpp": [
            dataclasses.replace(
                by_name[base],
                name=f"{base}-k{round(k * 100)}",
                doc=f"{doc} at another k (the k sweep).",
                options_of=base,
                settings={"k": k},
            )
            for k in MINK_SWEEP
            for base, doc in (("llm-mink", "Min-K%"), ("llm-minkpp", "Min-K%++"))
        ],
        "em-mia": [
            dataclasses.replace(
                by_name["em-mia"],
                name=f"em-mia-{init}-{scoring}",
                reads=("pairs", *by_name[em_initial_attack(init)].reads),
                options_of="em-mia",
                settings={"init": init, "scoring": scoring},
            )
            for init in EM_INITS
            for scoring in EM_SCORINGS
        ],
        "llm-samia": [
            dataclasses.replace(
                by_name["llm-samia"],
                name="llm-samia-zlib",
                doc="SaMIA*zlib: each sample's ROUGE-1 recall times its zlib bytes.",
                options_of="llm-samia",
                settings={"zlib": True},
            )
        ],
        "llm-camia": [
            dataclasses.replace(
                by_name["llm-camia"],
                name=f"llm-camia-{method}",
                doc=f"CAMIA with the signals' p-values combined by {method}'s statistic.",
                options_of="llm-camia",
                settings={"method": method},
            )
            for method in CAMIA_VARIANTS
        ],
    }
    return [made for attack in attacks for made in (attack, *variants.get(attack.name, ()))]


def catalogue(attacks: Sequence[Attack]) -> dict[str, Attack]:
    """The attacks by id, after checking that ids are unique and that every attack sharing
    another's options names an attack with options of the same class."""
    found: dict[str, Attack] = {}
    for attack in attacks:
        if attack.name in found:
            raise ValueError(f"attack {attack.name!r} is in the catalogue twice")
        found[attack.name] = attack
    for attack in found.values():
        source = found.get(attack.options_of or attack.name)
        if source is None or source.options is not attack.options or source.options_of:
            raise ValueError(
                f"attack {attack.name!r} shares the options of {attack.options_of!r}, "
                "which is no attack with options of its class"
            )
    return found


ATTACKS: dict[str, Attack] = catalogue([*_SIGNAL_ATTACKS, *_generated(_LLM_ATTACKS)])

# The 21 algorithms of the TDDBench benchmark (docs/algorithms.md#attack-index), in the paper's
# order.
TDDBENCH_ALGORITHMS = (
    "metric-loss",
    "metric-conf",
    "metric-corr",
    "metric-ent",
    "metric-ment",
    "learn-original",
    "learn-top3",
    "learn-sorted",
    "learn-label",
    "learn-merge",
    "model-loss",
    "model-calibration",
    "model-lira",
    "model-fpr",
    "model-robust",
    "query-augment",
    "query-transfer",
    "query-adv",
    "query-neighbor",
    "query-qrm",
    "query-ref",
)


def attack_options(name: str, section: Mapping[str, Mapping[str, Any]]) -> Options | None:
    """The options attack `name` runs with: its class filled from its entry of `section` (the
    config's `attack_options` or `llm.attack_options`, overrides only; or from the entry of the
    attack whose options it shares), with the fields it fixes; None if it has no options."""
    attack = ATTACKS[name]
    if attack.options is None:
        return None
    filled = attack.options.filled(section.get(attack.options_of or name, {}))
    return dataclasses.replace(filled, **attack.settings)


def llm_input_options(
    attacks: Sequence[str], section: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The options the statistics jobs need to make the recent attacks' inputs (INPUT_OPTIONS),
    filled from `section` (llm.attack_options), for those of them a configured attack reads."""
    needed = llm_reads(attacks, section)
    return {
        name: {key: getattr(attack_options(name, section), key) for key in fields}
        for name, (read, fields) in INPUT_OPTIONS.items()
        if read in needed
    }


def llm_reads(attacks: Sequence[str], section: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """What the configured language-model attacks read (LLM_READS), so that the workflow makes
    only those artifacts: each one's `reads`, and for EM-MIA also what its start reads."""
    needed = {read for name in attacks for read in ATTACKS[name].reads}
    for name in attacks:
        options = attack_options(name, section)
        if isinstance(options, EmMiaOptions):
            needed.update(ATTACKS[em_initial_attack(options.init)].reads)
    return needed
