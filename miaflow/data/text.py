"""Real text datasets: raw strings (for fine-tuning) or frozen sentence embeddings.

Option `representation`: `text` keeps the strings (a 1-D object array), `embedding` (default)
stores the sentence embeddings of `miaflow.pretrained.embed` (option `embedding_model`); both keep
modality "text".
"""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from miaflow.data.dataset import Dataset
from miaflow.data.sources import DatasetSize, RemoteFile, Sources
from miaflow.progress import Progress

REPRESENTATIONS = ("text", "embedding")


def _text_dataset(
    name: str, texts: Sequence[str], labels: Sequence[int], n_classes: int, opts: Mapping[str, Any]
) -> Dataset:
    """Raw strings, or their embeddings by `miaflow.pretrained.embed` (option `representation`)."""
    labels = np.asarray(labels, dtype=np.int64)
    if opts["representation"] not in REPRESENTATIONS:
        raise ValueError(
            f"{name}: representation must be one of {REPRESENTATIONS}, "
            f"got {opts['representation']!r}"
        )
    if opts["representation"] == "text":
        features = np.empty(len(texts), dtype=object)
        features[:] = list(texts)
        return Dataset(name, "text", features, labels, n_classes)
    from miaflow.pretrained import embed

    with Progress(len(texts), f"{name}: {opts['embedding_model']} embeddings", "texts") as progress:
        embedded = np.asarray(
            embed(list(texts), opts["embedding_model"], progress=progress), dtype=np.float32
        )
    return Dataset(name, "text", embedded, labels, n_classes)


def _lines(data: bytes, encoding: str = "utf-8") -> list[str]:
    """Lines of a one-record-per-line file; splits on \n only (tweets may hold other breaks)."""
    lines = data.decode(encoding).split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def load_rotten_tomatoes(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """Pang & Lee's sentence polarity v1.0: negative (0) then positive (1) sentences, one a
    line, cp1252-encoded (TDDBench uses the same 10,662 sentences from the HF copy)."""
    negative, positive = (_lines(path.read_bytes(), "cp1252") for path in sources())
    texts = [line.strip() for line in negative + positive]
    return _text_dataset(
        "rotten_tomatoes", texts, [0] * len(negative) + [1] * len(positive), 2, opts
    )


COLA_FILES = ("raw/in_domain_train.tsv", "raw/in_domain_dev.tsv", "raw/out_of_domain_dev.tsv")


def load_cola(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """CoLA v1.1: train, in-domain dev, out-of-domain dev (= GLUE train + validation, the splits
    TDDBench uses; GLUE's test has no labels). TSV rows `source, label, mark, sentence`, no
    quoting. `path` may be cola_public_1.1.zip or the unpacked cola_public directory."""
    paths = sources()
    if len(paths) == 1:  # the release zip
        with zipfile.ZipFile(paths[0]) as archive:
            tables = [archive.read(f"cola_public/{file}") for file in COLA_FILES]
    else:
        tables = [path.read_bytes() for path in paths]
    rows = [line.split("\t", 3) for table in tables for line in _lines(table) if line]
    if any(len(row) != 4 for row in rows):
        raise ValueError("cola: every TSV row needs 4 tab-separated columns")
    return _text_dataset("cola", [row[3] for row in rows], [int(row[1]) for row in rows], 2, opts)


TWEETEVAL_CLASSES = {
    "emoji": 20,
    "emotion": 4,
    "hate": 2,
    "irony": 2,
    "offensive": 2,
    "sentiment": 3,
    **{
        f"stance/{target}": 3
        for target in ("abortion", "atheism", "climate", "feminist", "hillary")
    },
}
TWEETEVAL_COMMIT = "4fbd22cd78421f05b1ecdb4fc5725bc7a7bd8f66"
# sha256 of the TDDBench task's files (hate) and of the fallback task (emotion), at that commit.
TWEETEVAL_SHA256 = {
    "hate/train_text.txt": "6572bb3a42143128a5dfa99af8debeb0668e637c34b2d1e3140dac47316fe2c2",
    "hate/train_labels.txt": "4e8fde025a453a25c94632794254131dedeac4e57228ad64157c41571cc88f71",
    "hate/val_text.txt": "1ff78b1ed4c5ce43284b9eba32eb7d60c6d45d0d1b3b4d6df456ae01640764f1",
    "hate/val_labels.txt": "5092badf1a0e70036ea6264bcd0b78afc07d0f4a512fa6af34c2c4973600656b",
    "hate/test_text.txt": "bc4762876a8dd8baa55c3cd7b03108e3231a5d691e80b8b1ef97c5be31b9da9a",
    "hate/test_labels.txt": "c14adca6b3627616a835c5ccea8a1cceb0235cd79417257f093eb0e16a69c62f",
    "emotion/train_text.txt": "2c62f67aeb3eac1aea0e5a9c3d0f4bc337992581f3f858061786a1fb4d79d95e",
    "emotion/train_labels.txt": "987e767d8679e18abdf7de37a6d2bcd0a40a296ddd704e8d515cf0e3033c8d9c",
    "emotion/val_text.txt": "e2e30c86b8cbb97944d6543aedc06eace3bb275cb2f381aba787b838b4f23ca5",
    "emotion/val_labels.txt": "313730630160b7e0a6b4235b800c76683f4aeeb72d094eb69646630cd5cfe338",
    "emotion/test_text.txt": "7e1070f5d3e3fcece5bc73680bff9981e90d8f7b2f1009bfe7a01d059d1c6091",
    "emotion/test_labels.txt": "245072348c711961785be6d395997f97cf7fcda3effeae7805664171dc75f913",
}


# Texts of each task (train + val + test) and of its rarest class, at TWEETEVAL_COMMIT; the
# sentiment task's train split was not counted (its size is left to loading).
TWEETEVAL_COUNTS = {
    "emoji": (100000, 2247),
    "emotion": (5052, 445),
    "hate": (12970, 5462),
    "irony": (4601, 2212),
    "offensive": (14100, 4640),
    "stance/abortion": (933, 167),
    "stance/atheism": (733, 124),
    "stance/climate": (564, 26),
    "stance/feminist": (949, 170),
    "stance/hillary": (984, 163),
}


def tweeteval_size(options: Mapping[str, Any]) -> DatasetSize | None:
    if options["task"] not in TWEETEVAL_COUNTS:
        return None
    n_texts, smallest = TWEETEVAL_COUNTS[options["task"]]
    return DatasetSize(n_texts, TWEETEVAL_CLASSES[options["task"]], smallest)


def tweeteval_files(options: Mapping[str, Any]) -> tuple[RemoteFile, ...]:
    task = options["task"]
    names = [
        f"{task}/{split}_{kind}.txt"
        for split in ("train", "val", "test")
        for kind in ("text", "labels")
    ]
    return tuple(
        RemoteFile(
            name,
            f"https://raw.githubusercontent.com/cardiffnlp/tweeteval/"
            f"{TWEETEVAL_COMMIT}/datasets/{name}",
            TWEETEVAL_SHA256.get(name),
        )
        for name in names
    )


def load_tweeteval(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """TweetEval task `task` (default `hate`, TDDBench's tweet_eval_hate): train, val and test
    concatenated; `{split}_text.txt` one tweet a line, `{split}_labels.txt` one label a line."""
    if opts["task"] not in TWEETEVAL_CLASSES:
        raise ValueError(
            f"tweeteval: task must be one of {sorted(TWEETEVAL_CLASSES)}, got {opts['task']!r}"
        )
    paths = iter(sources())
    texts: list[str] = []
    labels: list[int] = []
    for text_path, label_path in zip(paths, paths):
        split_texts = _lines(text_path.read_bytes())
        split_labels = [int(line) for line in _lines(label_path.read_bytes()) if line.strip()]
        if len(split_texts) != len(split_labels):
            raise ValueError(
                f"tweeteval: {text_path} has {len(split_texts)} lines but "
                f"{label_path} has {len(split_labels)} labels"
            )
        texts += split_texts
        labels += split_labels
    return _text_dataset("tweeteval", texts, labels, TWEETEVAL_CLASSES[opts["task"]], opts)


ECTHR_ARTICLES = ("2", "3", "5", "6", "8", "9", "10", "11", "14", "P1-1")  # LexGLUE's 10 labels
ECTHR_LABEL_COLUMNS = {"a": "violated_articles", "b": "allegedly_violated_articles"}


def load_ecthr(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """ECtHR cases (Chalkidis et al. 2021; LexGLUE's ecthr.tar.gz, `ecthr.jsonl` in file order),
    text = the facts paragraphs joined by newlines. LexGLUE's tasks are multi-label over 10
    articles (task a: violated, b: allegedly violated); this keeps the cases with exactly one
    such article, labelled by it, a single-label reduction of our own: TDDBench lists
    `ecthr_articles` but its repository has no code for it."""
    if opts["task"] not in ECTHR_LABEL_COLUMNS:
        raise ValueError(f"ecthr: task must be one of {sorted(ECTHR_LABEL_COLUMNS)}")
    [path] = sources()
    texts, labels = [], []
    with tarfile.open(path, "r:gz") as archive, archive.extractfile("ecthr.jsonl") as handle:
        for line in io.TextIOWrapper(handle, encoding="utf-8"):
            if not line.strip():
                continue
            case = json.loads(line)
            articles = set(case[ECTHR_LABEL_COLUMNS[opts["task"]]]) & set(ECTHR_ARTICLES)
            if len(articles) == 1:
                texts.append("\n".join(case["facts"]))
                labels.append(ECTHR_ARTICLES.index(articles.pop()))
    return _text_dataset("ecthr", texts, labels, len(ECTHR_ARTICLES), opts)


WIKIMIA_LENGTHS = (32, 64, 128, 256)


def wikimia_files(options: Mapping[str, Any]) -> tuple[RemoteFile, ...]:
    length = options["length"]
    return (
        RemoteFile(
            f"WikiMIA_length{length}.parquet",
            "https://huggingface.co/datasets/swj0419/WikiMIA/resolve/"
            f"refs%2Fconvert%2Fparquet/default/WikiMIA_length{length}/0000.parquet",
        ),
    )


def load_wikimia(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """WikiMIA (Shi et al. 2024) split `WikiMIA_length{length}`: Parquet with columns `input`
    (text) and `label` (1 = in the LLMs' pretraining data, 0 = not), in file order."""
    import pyarrow.parquet as pq

    if opts["length"] not in WIKIMIA_LENGTHS:
        raise ValueError(f"wikimia: length must be one of {WIKIMIA_LENGTHS}")
    [path] = sources()
    table = pq.read_table(path, columns=["input", "label"])
    return _text_dataset(
        "wikimia", table.column("input").to_pylist(), table.column("label").to_pylist(), 2, opts
    )
