"""The inputs of the recent language-model attacks (`miaflow.llm.recent`, `miaflow.llm.camia`)
that the token-statistics cache does not hold: PAC's word-swap augmentations, Con-ReCall's
member shots, SaMIA's sampled continuations, CAMIA's repeated texts and EZ-MIA's top-1 flags.

Text edits and draws are seeded per text (`miaflow.seeding.rng(seed, name, sample_id)`), so a
text's inputs do not depend on which other texts are processed with it; the model passes keep
the cache's conventions (`miaflow.llm.tokens`: the tokenizer's default special tokens, the
first token never scored, texts cut to `max_length` tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from miaflow.llm.tokens import score_segments
from miaflow.progress import tracked
from miaflow.seeding import derive_seed, rng


def swap_augment(
    texts: Sequence[str],
    sample_ids: Sequence[int],
    *,
    n_augment: int = 5,
    alpha: float = 0.3,
    seed: int,
) -> list[list[str]]:
    """PAC's augmentations: `n_augment` copies of each text, each with max(1, floor(alpha * n))
    swaps of two words at distinct positions drawn uniformly (EDA's random swap, as PAC's
    src/eda.py at cd7121f4 with its defaults alpha = 0.3, 5 texts). Words are split on single
    spaces and joined back the same way, so other whitespace stays inside its word. The code's
    retries, which may leave a swap out, are dropped: every swap here swaps; a one-word text
    stays as it is."""
    augmented = []
    for text, sample_id in zip(texts, sample_ids, strict=True):
        generator = rng(seed, "pac", int(sample_id))
        words = text.split(" ")
        swaps = max(1, int(alpha * len(words)))
        own = []
        for _ in range(n_augment):
            edited = list(words)
            for _ in range(swaps if len(words) > 1 else 0):
                first, second = generator.choice(len(words), size=2, replace=False)
                edited[first], edited[second] = edited[second], edited[first]
            own.append(" ".join(edited))
        augmented.append(own)
    return augmented


def member_shots(
    members: Sequence[int], scored: Sequence[int], n_shots: int, seed: int
) -> np.ndarray:
    """Con-ReCall's member prefix: `n_shots` sample ids drawn (seeded, in draw order, oldest shot
    first) from the known members that are NOT scored. In the trained workflow the members are
    a repeat's `train` set and the scored texts its `eval` set (`miaflow.llm.corpus.select`),
    so the shots come from the members outside `eval`; a scored text in the prefix would see
    itself in the context."""
    candidates = np.setdiff1d(np.asarray(members, dtype=np.int64), np.asarray(scored))
    if candidates.size < n_shots:
        raise ValueError(
            f"Con-ReCall needs {n_shots} member shots outside the scored texts, "
            f"only {candidates.size} members are not scored"
        )
    return rng(seed, "con-recall", "member-shots").choice(candidates, n_shots, replace=False)


def _context(model: Any) -> int | None:
    config = model.config
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def sample_continuations(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    sample_ids: Sequence[int],
    *,
    n_samples: int = 10,
    max_length: int = 1024,
    temperature: float = 1.0,
    top_k: int = 50,
    top_p: float = 1.0,
    seed: int,
    max_new_tokens: int | None = None,
    batch_size: int = 1,
) -> list[list[str]]:
    """SaMIA's samples: `n_samples` continuations of each prompt (`recent.split_prefix`), drawn
    from a Hugging Face causal LM, decoded without the prompt and without special tokens.
    Sampling follows nlp-titech/samia src/sampling.py (at a2d955ae): temperature 1, top-k 50,
    top-p 1, at most `max_length` = 1024 tokens with the prompt (cut to the model's context),
    stopping at the end-of-text token; `max_new_tokens` bounds the new tokens as well.

    With `batch_size` 1, each prompt's draws use torch's generator seeded with derive_seed(seed,
    "samia", sample_id), so a text's samples do not depend on the others. With more, prompts
    are sampled `batch_size` at a time (left-padded, in the order given), each batch seeded by
    its first sample id: the same prompts in the same order give the same samples, and a CPU
    samples many times faster. The global generator's state is restored after. An empty prompt
    (a one-word text) starts from the BOS (or EOS) token. Cost: n_samples decoded sequences per
    text."""
    import torch

    device = next(model.parameters()).device
    context = _context(model)
    limit = min(max_length, context) if context else max_length
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    encoded = [
        ((tokenizer(prompt)["input_ids"] if prompt else []) or [start])[-(limit - 1) :]
        for prompt in prompts
    ]  # room for at least one new token
    samples: list[list[str]] = []
    batches = range(0, len(encoded), max(1, batch_size))
    with torch.no_grad():
        for first in tracked(batches, "SaMIA samples", "batches", len(batches)):
            chunk = encoded[first : first + max(1, batch_size)]
            width = max(len(ids) for ids in chunk)
            batch = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros_like(batch)
            for row, ids in enumerate(chunk):  # left padding: every prompt ends at `width`
                batch[row, width - len(ids) :] = torch.as_tensor(ids)
                mask[row, width - len(ids) :] = 1
            new = limit - width if max_new_tokens is None else min(max_new_tokens, limit - width)
            forked = [device] if device.type == "cuda" else []
            with torch.random.fork_rng(devices=forked):
                torch.manual_seed(derive_seed(seed, "samia", int(sample_ids[first])))
                generated = model.generate(
                    input_ids=batch.to(device),
                    attention_mask=mask.to(device),
                    do_sample=True,
                    temperature=temperature,
                    top_k=top_k,
                    top_p=top_p,
                    max_new_tokens=max(1, new),
                    num_return_sequences=n_samples,
                    pad_token_id=pad,
                )
            for row in range(len(chunk)):
                rows = generated[row * n_samples : (row + 1) * n_samples, width:]
                samples.append([tokenizer.decode(r, skip_special_tokens=True) for r in rows])
    return samples


def _encode(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[list[int]]:
    return [list(ids[:max_length]) for ids in tokenizer(list(texts))["input_ids"]] if texts else []


def repeated_logprobs(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    copies: int = 6,
    max_length: int,
    max_tokens: int = 4096,
) -> list[np.ndarray]:
    """CAMIA's repeated texts: per text an array (copies, n) of l_t over its scored tokens
    x_2..x_K (K = min(T, max_length), the cache's tokens), row k when the text follows k copies
    of itself. The copies are joined at the token level (a leading BOS kept once), so every
    row scores the same tokens; row 0 is the cache's l_t up to rounding. The code repeats the
    text 6 times, joined by spaces, and finds the copies again in the tokens.

    One forward pass over copies * K tokens per text, as many copies as fit in `max_length`;
    a text too long for the 3 copies the repeat signals compare is cut to max_length // 3
    tokens, so its rows cover only its first tokens (`camia.camia_signals` accepts that)."""
    bos = tokenizer.bos_token_id
    segments, shapes = [], []
    for ids in _encode(tokenizer, texts, max_length):
        lead = 1 if bos is not None and ids and ids[0] == bos else 0
        if lead + 3 * (len(ids) - lead) > max_length:  # 3 copies must fit
            ids = ids[: max_length // 3]
        body = ids[lead:]
        fit = min(copies, (max_length - lead) // max(1, len(body)))
        segments.append((ids + body * (fit - 1), 1))
        shapes.append((fit, len(ids) - 1, len(body)))
    scored = score_segments(
        model,
        segments,
        vocab_stats=False,
        max_tokens=max_tokens,
        pad_id=tokenizer.pad_token_id or 0,
    )
    rows = []
    for (values, _, _), (fit, n, body) in zip(scored, shapes):
        first = values[:n]
        # a later copy scores all of its tokens: its first is left out unless copy 0 scores it
        later = values[n:].reshape(fit - 1, body)[:, body - n :]
        rows.append(np.vstack([first, later]))
    return rows


def top1_flags(
    model: Any, tokenizer: Any, texts: Sequence[str], *, max_length: int, batch_size: int = 16
) -> list[np.ndarray]:
    """EZ-MIA's error zone: per text, whether each scored token x_2..x_K (K = min(T,
    max_length)) is the model's argmax, from one forward pass (padded batches, as the cache's
    truncation). The cache keeps l_t but not the argmax; a `top1` column in
    `tokens.score_segments` would make this pass unnecessary."""
    import torch

    device = next(model.parameters()).device
    encoded = _encode(tokenizer, texts, max_length)
    flags: list[Any] = [None] * len(encoded)
    order = np.argsort([-len(ids) for ids in encoded], kind="stable")
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            width = len(encoded[batch[0]])
            ids = torch.full((len(batch), width), tokenizer.pad_token_id or 0, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, index in enumerate(batch):
                ids[row, : len(encoded[index])] = torch.as_tensor(encoded[index])
                mask[row, : len(encoded[index])] = 1
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            argmax = logits[:, :-1].argmax(dim=-1).cpu()
            for row, index in enumerate(batch):
                n = len(encoded[index]) - 1
                flags[index] = (argmax[row, :n] == ids[row, 1 : n + 1]).numpy()
    return flags
