"""Every attack's options: one frozen dataclass per attack that has options, the one definition of
their names, types, bounds and defaults.

The params schema's `attack_options` and `llm.attack_options` sections, the defaults the workflow
runs with and the options table of docs/parameters.md are all derived from these classes
(`miaflow.attacks.schema`), so adding an option touches its class only. A field's default is what
runs when params.yaml does not set it; `option` puts its JSON-schema constraints (bounds, a
description shown with the schema's messages, a `Shared` definition several attacks refer to)
and its documentation (what it means, the paper's value) in the field's metadata. A field typed
`Literal[...]` is an enum; `X | None` is nullable only with `nullable=True` (otherwise None is a
default that params.yaml cannot write, e.g. `queries_used`: all queries).

The families read these objects (`AttackInputs.options`, `LLMInputs.options`), filled from the
config's overrides by `miaflow.attacks.registry.attack_options`; the queries stage's jobs read
the query attacks' ones. Importing this module imports no attack family.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

EmInit = Literal["loss", "ref", "zlib", "mink", "minkpp"]  # EM-MIA's initial scores
EmScoring = Literal["auroc", "kendall", "rankdist"]  # EM-MIA's prefix scores


@dataclass(frozen=True)
class Shared:
    """Constraints that fields of several attacks share: one entry `name` of the schema's
    `$defs`, which each of them refers to; `kind` is the type of their values."""

    name: str
    description: str
    bounds: Mapping[str, Any]
    kind: type = int


def option(
    default: Any,
    *,
    doc: str | None = None,
    description: str | None = None,
    paper: Any = None,
    shared: Shared | None = None,
    nullable: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: float | None = None,
    exclusive_maximum: float | None = None,
) -> Any:
    """A dataclass field with `default` and, in its metadata, its schema constraints and docs.

    `description` goes into the schema (validation shows it with an upper bound's message);
    `doc` (default: the description) explains the option in docs/parameters.md, beside `paper`,
    the value of the paper the attack follows where the default is cut for the CPU run.
    """
    bounds = {
        "minimum": minimum,
        "maximum": maximum,
        "exclusiveMinimum": exclusive_minimum,
        "exclusiveMaximum": exclusive_maximum,
    }
    metadata = {
        "doc": doc or description or (shared.description if shared else None),
        "description": description,
        "paper": paper,
        "shared": shared,
        "nullable": nullable,
        "bounds": {key: value for key, value in bounds.items() if value is not None},
    }
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Options:
    """Base of every attack's options; `schema_description` (a class attribute) describes the
    whole entry in the schema."""

    schema_description: ClassVar[str | None] = None

    @classmethod
    def filled(cls, overrides: Mapping[str, Any]) -> Self:
        """The defaults with `overrides` (an attack's entry of `attack_options`) applied, numbers
        cast to the field's type; an unknown key is an error (a typo fails loudly)."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(overrides) - set(names))
        if unknown:
            raise ValueError(f"unknown options {unknown}; accepted: {sorted(names)}")
        hints = typing.get_type_hints(cls)
        return cls(**{key: _cast(hints[key], value) for key, value in overrides.items()})


def value_type(hint: Any) -> Any:
    """The type a field's value has when set: its annotation without `| None`."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        [kept] = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return kept
    return hint


def _cast(hint: Any, value: Any) -> Any:
    kind = value_type(hint)
    if value is None or isinstance(value, bool) or kind not in (int, float):
        return value
    return kind(value)


# --- definitions several attacks share (the schema's $defs) ---------------------------------------

QUERIES_USED = Shared(
    "queries_used",
    "Use only the first k extra queries (scaling studies); at most n_queries.",
    {"minimum": 1, "maximum": 1000},
)
N_QUERIES = Shared(
    "n_queries",
    "Extra queries per sample, at most 1,000 (the query set holds all of them for every sample "
    "of T).",
    {"minimum": 1, "maximum": 1000},
)
BOUNDARY_EVA_NUM = Shared(
    "boundary_eva_num",
    "At most this many points of T evaluated (after a seeded shuffle); TDDBench's 1e8 means all.",
    {"minimum": 1, "maximum": 100000000},
)
ALL_QUERIES = f"{QUERIES_USED.description} Unset: all of them."


# --- attacks on a model's signals -----------------------------------------------------------------


@dataclass(frozen=True)
class ModelRobustOptions(Options):
    """RMIA online (`model-robust`)."""

    gamma: float = option(
        2.0,
        exclusive_minimum=0,
        doc="γ: x outscores a population point z when r(x)/r(z) > γ.",
    )


@dataclass(frozen=True)
class RmiaOfflineOptions(Options):
    """RMIA offline (`rmia-offline`)."""

    gamma: float = option(
        2.0,
        exclusive_minimum=0,
        doc="γ: x outscores a population point z when r(x)/r(z) > γ.",
    )
    a: float = option(
        0.4,
        minimum=0,
        maximum=1,
        doc="Offline correction p̄ = ½((1+a)·mean OUT p_y + (1−a)); TDDBench fixes it per "
        "dataset: cifar10/cinic10 0.3, cifar100 0.6, imagenet 1.0, purchase100 0.2, "
        "otherwise 0.4.",
    )


@dataclass(frozen=True)
class LearnMergeOptions(Options):
    """Learn-merge's features (`learn-merge`)."""

    uld: Literal["compat", "corrected"] = option(
        "compat",
        doc="compat: TDDBench's ULD (true-label logit filled with −1); corrected: the max over "
        "the other classes only.",
    )


@dataclass(frozen=True)
class SmRiskOptions(Options):
    """Song & Mittal's privacy risk score (`sm-risk`)."""

    bins: int = option(
        5,
        minimum=1,
        maximum=10000,
        description="At most 10,000 histogram bins.",
        doc="Histogram bins per class, at most 10,000.",
    )
    log_bins: bool = option(True, doc="Log-spaced bins (values clamped to 1e-10 first).")
    prior: float = option(
        0.5,
        exclusive_minimum=0,
        exclusive_maximum=1,
        doc="Prior π of membership in P(member | signal).",
    )
    signal: Literal["mentr", "loss", "entropy"] = option(
        "mentr", doc="The one-dimensional output the histograms bin."
    )


# --- query attacks (their artifacts are made by the queries stage) --------------------------------


@dataclass(frozen=True)
class QueryTransferOptions(Options):
    """Query-transfer's surrogates (`query-transfer`)."""

    val_ratio: float = option(
        0.1,
        exclusive_minimum=0,
        exclusive_maximum=1,
        description="Bernoulli share of pool T held out as the surrogate's validation split.",
    )


@dataclass(frozen=True)
class QueryQrmOptions(Options):
    """Query-qrm's quantile regressors (`query-qrm`)."""

    epochs: int = option(
        10,
        minimum=1,
        maximum=10000,
        description="Epochs of the neural regressor (torch architectures), at most 10,000.",
        paper=30,
    )
    catboost_iterations: int = option(
        50,
        minimum=1,
        maximum=1000000,
        description="Iterations of the CatBoost regressor, at most 1,000,000.",
        paper="10000 (lr 0.05)",
    )


@dataclass(frozen=True)
class QueryRefOptions(Options):
    """Query-ref's canaries (`query-ref`)."""

    boundary_eva_num: int = option(200, shared=BOUNDARY_EVA_NUM, paper=1000)
    n_canaries: int = option(
        4, minimum=1, maximum=1000, description="At most 1,000 canaries per point.", paper=10
    )
    steps: int = option(
        10,
        minimum=1,
        maximum=10000,
        description="AdamW steps per canary batch, at most 10,000.",
        paper=30,
    )


@dataclass(frozen=True)
class QueryNeighborOptions(Options):
    """Query-neighbor's noisy neighbours (`query-neighbor`), also the noisy queries of query-adv
    and query-augment off images (`miaflow.plan.query_count_option`)."""

    schema_description: ClassVar[str] = (
        "Neighbour queries, shared with query-adv on tabular/text data."
    )

    queries_used: int | None = option(None, shared=QUERIES_USED, doc=ALL_QUERIES)
    n_queries: int = option(10, shared=N_QUERIES, paper=10)
    magnitude: float = option(
        0.01,
        exclusive_minimum=0,
        description="Noise magnitude λ (raw text: share of tokens refilled).",
        paper=0.01,
    )
    masked_lm: str | None = option(
        None,
        nullable=True,
        description="Raw text: a masked-LM checkpoint directory or hub name (null: one trained "
        "on the auxiliary pool).",
        paper="bert-base-uncased",
    )


@dataclass(frozen=True)
class QueryAugmentOptions(Options):
    """Query-augment's augmentations (`query-augment`)."""

    queries_used: int | None = option(None, shared=QUERIES_USED, doc=ALL_QUERIES)
    n_queries: int = option(10, shared=N_QUERIES, paper=10)
    compat: bool = option(
        False, description="Separate augmentation draw for the shadow model, as TDDBench."
    )


@dataclass(frozen=True)
class QueryAdvOptions(Options):
    """Query-adv: HopSkipJump's budget on images (`query-adv`); off images it reads
    query-neighbor's neighbours."""

    schema_description: ClassVar[str] = (
        "HopSkipJump budget (images); batch_size = points attacked in lockstep."
    )

    queries_used: int | None = option(None, shared=QUERIES_USED, doc=ALL_QUERIES)
    max_iter: int = option(
        2,
        minimum=1,
        maximum=1000,
        description="At most 1,000 iterations (paper: 50).",
        paper=50,
    )
    max_eval: int = option(
        200,
        minimum=1,
        maximum=1000000,
        description="At most 1,000,000 gradient samples (paper: 10,000).",
        paper=10000,
    )
    init_eval: int = option(
        20,
        minimum=1,
        maximum=1000000,
        description="At most max_eval (which caps it).",
        doc="Initial gradient samples, at most max_eval (which caps it).",
        paper=100,
    )
    init_size: int = option(
        100,
        minimum=1,
        maximum=100000,
        description="At most 100,000 initial draws (paper: 100).",
        paper=100,
    )
    boundary_eva_num: int = option(50, shared=BOUNDARY_EVA_NUM, paper=1000)
    batch_size: int = option(
        100,
        minimum=1,
        maximum=100000,
        description="At most 100,000 points in lockstep.",
        doc="Points attacked in lockstep, at most 100,000 (ART's batch of 64 only batches "
        "model calls).",
    )

    def hopskipjump(self) -> dict[str, int]:
        """The HopSkipJump settings, as the distances artifact records them."""
        return {
            "max_iter": self.max_iter,
            "max_eval": self.max_eval,
            "init_eval": self.init_eval,
            "init_size": self.init_size,
            "boundary_eva_num": self.boundary_eva_num,
            "batch_size": self.batch_size,
        }


# --- attacks on language models -------------------------------------------------------------------


@dataclass(frozen=True)
class MinKOptions(Options):
    """Min-K% and Min-K%++ (`llm-mink`, `llm-minkpp`; their k-sweep variants fix k)."""

    k: float = option(
        0.2,
        exclusive_minimum=0,
        maximum=1,
        doc="Share of a text's tokens whose lowest (standardised) log-probabilities are averaged.",
    )
    compat: bool = option(False, doc="The originals' n_k = ⌊k·n⌋ (NaN → 0 at 0).")


@dataclass(frozen=True)
class RecallOptions(Options):
    """ReCaLL (`llm-recall`)."""

    compat: bool = option(
        False,
        description="true: LL(x ; P) as the ReCaLL code computes it (shots joined with no "
        "separator, the target's first token scored after them); false: llm.separator after "
        "every shot, target tokens 2..K like LL(x).",
    )


@dataclass(frozen=True)
class EmMiaOptions(Options):
    """EM-MIA (`em-mia`; its variants fix init and scoring)."""

    init: EmInit = option(
        "minkpp",
        doc="The start: the scores of the attack named llm- and this value, with its options.",
    )
    scoring: EmScoring = option(
        "auroc", doc="How a prefix is scored against the current membership scores."
    )
    iterations: int = option(
        10, minimum=1, maximum=1000, description="At most 1,000 EM iterations."
    )


CamiaMethod = Literal["edgington", "fisher", "pearson", "mudholkar_george"]  # p-value combinations


@dataclass(frozen=True)
class DcPddOptions(Options):
    """DC-PDD (`llm-dcpdd`)."""

    a: float = option(
        0.01,
        exclusive_minimum=0,
        doc="Upper bound on each token's calibrated probability p(x_t; M)·log(1/p(x_t; D')).",
        paper=0.01,
    )


@dataclass(frozen=True)
class PacOptions(Options):
    """PAC (`llm-pac`): its augmentations are made by the statistics jobs."""

    n_augment: int = option(
        5,
        minimum=1,
        maximum=100,
        description="Word-swapped copies of each text, at most 100.",
        paper=5,
    )
    alpha: float = option(
        0.3,
        exclusive_minimum=0,
        maximum=1,
        doc="Swaps per copy: max(1, ⌊alpha·words⌋).",
        paper=0.3,
    )
    ratio_local: float = option(
        0.3,
        exclusive_minimum=0,
        maximum=1,
        doc="Share of the least likely tokens in the polarized distance.",
        paper=0.3,
    )
    ratio_far: float = option(
        0.05,
        exclusive_minimum=0,
        maximum=1,
        doc="Share of the likeliest tokens in the polarized distance.",
        paper=0.05,
    )


@dataclass(frozen=True)
class ConRecallOptions(Options):
    """Con-ReCall (`llm-conrecall`)."""

    gamma: float = option(
        0.5,
        minimum=0,
        doc="Weight γ of the member prefix: (LL(x ; P_nm) − γ·LL(x ; P_m)) / LL(x).",
        paper="tuned per benchmark (Fast-MIA's default 0.5)",
    )


@dataclass(frozen=True)
class SamiaOptions(Options):
    """SaMIA (`llm-samia`; `llm-samia-zlib` fixes zlib): its samples are drawn by the
    statistics jobs."""

    n_samples: int = option(
        4,
        minimum=1,
        maximum=1000,
        description="Continuations sampled per text, at most 1,000.",
        paper=10,
    )
    max_new_tokens: int = option(
        16,
        minimum=1,
        maximum=100000,
        description="New tokens per continuation, at most 100,000 (and llm.max_length with the "
        "prompt).",
        doc="New tokens per continuation (with the prompt at most llm.max_length); 16 holds the "
        "default corpus' continuations of 6-8 words, its sampling time grows with it.",
        paper="1024 with the prompt",
    )
    prefix_ratio: float = option(
        0.5,
        exclusive_minimum=0,
        exclusive_maximum=1,
        doc="Share of a text's words given as the prompt; the rest is the reference.",
        paper=0.5,
    )
    temperature: float = option(1.0, exclusive_minimum=0, doc="Sampling temperature.", paper=1.0)
    top_k: int = option(
        50, minimum=1, maximum=1000000, description="Top-k sampling, at most 1,000,000.", paper=50
    )
    zlib: bool = option(False, doc="SaMIA*zlib: each recall times its sample's zlib bytes.")


@dataclass(frozen=True)
class CamiaOptions(Options):
    """CAMIA (`llm-camia`; `llm-camia-fisher` fixes method): the repeated texts are scored by
    the statistics jobs."""

    method: CamiaMethod = option(
        "edgington",
        doc="How the signals' p-values under the population combine: edgington (minus their "
        "mean) or scipy's fisher, pearson, mudholkar_george statistic.",
    )
    copies: int = option(
        6,
        minimum=3,
        maximum=100,
        description="Copies of a text in its repeated form (3 to 100; as many as fit in "
        "llm.max_length).",
        paper=6,
    )


@dataclass(frozen=True)
class EzMiaOptions(Options):
    """EZ-MIA (`llm-ezmia`)."""

    min_errors: int = option(
        2,
        minimum=1,
        maximum=100000,
        description="Fewer error-zone tokens leave a text's ratio undefined (NaN, or 0 with "
        "compat); at most 100,000.",
        paper=2,
    )
    compat: bool = option(False, doc="The code's 0 for undefined and unbounded ratios.")
