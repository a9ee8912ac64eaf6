"""The architecture kinds: one table that validation, training, queries and attacks all read.

An `architectures` entry of params.yaml names its `kind`; everything the workflow needs to know
about a kind before any model exists is a column here: which data it trains on, how it trains,
whether a shard trains as one vectorised ensemble, and which of the artifacts that query attacks
read its models can produce. This module imports nothing heavy: the Snakefile reads it to
validate params.
"""

from __future__ import annotations

from dataclasses import dataclass

# Artifacts that query attacks read beside the signal store (`Attack.reads`), by name: each is
# also the folder results/queries/<name>/ and the rule query_<name> that writes it.
QUERY_OUTPUTS = "outputs"  # the models' outputs on the dataset's query set (numeric features)
DISTANCES = "distances"  # HopSkipJump boundary distances (images)
SURROGATES = "surrogates"  # Query-transfer: surrogates trained on the target's predicted labels
REGRESSORS = "regressors"  # Query-qrm: (mu, log sigma) of a regressor fitted on known non-members
CANARIES = "canaries"  # Query-ref: canaries optimised on the reference models (input gradients)

# How Query-qrm regresses the target's score, and which signal it regresses (the hinge on the
# neural path, phi on the GBDT/LR path, as TDDBench does).
QRM_SIGNAL = {"network": "margin", "catboost": "phi", "linear": "phi"}


@dataclass(frozen=True)
class Kind:
    """What one architecture kind is and supports."""

    name: str
    trainer: (
        str  # "torch" (modules of miaflow.models.architectures), "transformer", "lr", "catboost"
    )
    modalities: frozenset[str]  # datasets it trains on; "text" means embedded text unless raw_text
    batched: bool = False  # a shard trains as one vectorised ensemble (miaflow.models.ensemble)
    qrm: str | None = None  # Query-qrm's regressor: "network" (same net, 2 outputs), "catboost",
    #                         "linear", or None when there is none for this kind
    summary: str = ""

    @property
    def torch(self) -> bool:
        """Trained and run with torch: GPU rules, compute sessions."""
        return self.trainer in ("torch", "transformer")

    @property
    def raw_text(self) -> bool:
        """Reads text as strings (a dataset's `representation: text`), not as embeddings."""
        return self.trainer == "transformer"

    @property
    def qrm_signal(self) -> str | None:
        return QRM_SIGNAL.get(self.qrm) if self.qrm else None

    @property
    def builds(self) -> frozenset[str]:
        """The query-attack artifacts its models can produce."""
        built = {DISTANCES, SURROGATES}
        if not self.raw_text:  # query sets perturb numeric features
            built.add(QUERY_OUTPUTS)
        if self.qrm:
            built.add(REGRESSORS)
        if self.trainer == "torch":  # canaries need input gradients
            built.add(CANARIES)
        return frozenset(built)


ALL = frozenset({"image", "tabular", "text"})
IMAGE = frozenset({"image"})

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in [
        Kind(
            "mlp",
            "torch",
            ALL,
            batched=True,
            qrm="network",
            summary="fully connected (TDDBench tabular MLP [512, 256, 128, 64], tanh)",
        ),
        Kind(
            "cnn",
            "torch",
            IMAGE,
            batched=True,
            qrm="network",
            summary="small conv net for the CPU default",
        ),
        Kind(
            "torch_lr",
            "torch",
            ALL,
            batched=True,
            qrm="network",
            summary="logistic regression as one linear layer with L2 penalty `weight_decay`",
        ),
        Kind(
            "wrn28_2",
            "torch",
            IMAGE,
            batched=True,
            qrm="network",
            summary="WideResNet-28-2 (LiRA/TDDBench)",
        ),
        Kind("resnet18", "torch", IMAGE, batched=True, qrm="network", summary="CIFAR ResNet18"),
        Kind(
            "vgg11",
            "torch",
            IMAGE,
            batched=True,
            qrm="network",
            summary="CIFAR VGG11 with batch norm",
        ),
        Kind(
            "mobilenetv2", "torch", IMAGE, batched=True, qrm="network", summary="CIFAR MobileNetV2"
        ),
        Kind(
            "transformer",
            "transformer",
            frozenset({"text"}),
            summary="Hugging Face sequence classifier, fully fine-tuned on raw text",
        ),
        Kind("lr", "lr", ALL, qrm="linear", summary="scikit-learn logistic regression"),
        Kind(
            "catboost", "catboost", ALL, qrm="catboost", summary="CatBoost gradient-boosted trees"
        ),
    ]
}
