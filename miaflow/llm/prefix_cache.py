"""Conditional log-likelihoods of many targets after one prefix, the prefix run once.

ReCaLL and EM-MIA score a target x after a prefix p; EM-MIA's N × N matrix has each text as
the prefix of all N texts. Running every (prefix, target) pair as one sequence computes each
prefix N times. Here a prefix runs once, with `use_cache=True`, and its key/value cache is
expanded over rows of its targets, whose positions continue after the prefix: the same values
(`miaflow.llm.conditional.conditional_log_likelihood`, `reuse_prefix`) up to rounding.

Several targets share a row, each attending to the prefix and to its own earlier tokens only
(a block mask), so rows need almost no padding; a target's last token predicts nothing scored
and is not run.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import numpy as np

from miaflow.progress import Progress

# Target tokens per row (at least twice the longest target, so that fills even out): longer
# rows cost attention, shorter ones padding.
PACKED_ROW = 64


def packed_rows(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices of `lengths` dealt into as few rows as `capacity` tokens a row allows, longest
    first, each to the row with the fewest tokens so far: fills even out, so a batch padded to
    its fullest row holds little padding."""
    n_rows = max(1, -(-sum(lengths) // capacity))
    rows: list[list[int]] = [[] for _ in range(n_rows)]
    fills = [(0, row) for row in range(n_rows)]  # a heap: the emptiest row first
    for index in np.argsort(-np.asarray(lengths), kind="stable"):
        fill, row = heapq.heappop(fills)
        rows[row].append(int(index))
        heapq.heappush(fills, (fill + lengths[index], row))
    return rows


def _target_logprobs(logits: Any, labels: Any, head_chunk: int) -> Any:
    """ℓ of each row's label: float32 log-softmax, `head_chunk` rows at a time."""
    import torch

    parts = [
        torch.log_softmax(logits[start : start + head_chunk].float(), dim=-1).gather(
            1, labels[start : start + head_chunk, None]
        )[:, 0]
        for start in range(0, logits.shape[0], head_chunk)
    ]
    return torch.cat(parts) if parts else logits.new_empty(0, dtype=torch.float32)


def _packed_batch(
    rows: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], offset: int
) -> tuple[Any, Any, Any, Any]:
    """Input ids, next-token labels, positions (from `offset`, the prefix length) and the index
    of the target each position belongs to (-1: padding) of rows of targets packed end to end."""
    import torch

    width = max(sum(len(targets[i]) - 1 for i in row) for row in rows)
    ids, labels, positions = (torch.zeros((len(rows), width), dtype=torch.long) for _ in range(3))
    owner = torch.full((len(rows), width), -1, dtype=torch.long)
    for r, row in enumerate(rows):
        start = 0
        for i in row:
            target = targets[i]
            end = start + len(target) - 1
            ids[r, start:end] = torch.as_tensor(target[:-1])
            labels[r, start:end] = torch.as_tensor(target[1:])
            positions[r, start:end] = torch.arange(offset, offset + end - start)
            owner[r, start:end] = i
            start = end
    return ids, labels, positions, owner


def _block_mask(owner: Any, prefix_length: int, dtype: Any) -> Any:
    """Additive attention mask (rows, 1, width, prefix + width): every position sees the whole
    prefix, and the earlier positions of its own target (padding sees only the prefix)."""
    import torch

    width = owner.shape[1]
    own = (owner[:, :, None] == owner[:, None, :]) & (owner[:, None, :] >= 0)
    own &= torch.ones(width, width, dtype=torch.bool).tril()
    prefix = torch.ones((owner.shape[0], width, prefix_length), dtype=torch.bool)
    allowed = torch.cat([prefix, own], dim=2)[:, None]
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


def score_after_prefixes(
    model: Any,
    prefixes: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    *,
    first_token: bool,
    max_tokens: int,
    max_scored: int,
    head_chunk: int,
) -> list[np.ndarray]:
    """ℓ of target tokens 2..K (1..K with `first_token`, x_1's from the prefix's last logits) of
    each pair of a non-empty prefix and a non-empty target, each distinct prefix run once. A
    batch holds at most `max_tokens` tokens, the prefix counted in every row, and `max_scored`
    scored positions (logit rows, log-softmax `head_chunk` rows at a time)."""
    import torch
    from transformers import DynamicCache

    parameter = next(model.parameters())
    device = parameter.device
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, prefix in enumerate(prefixes):
        groups.setdefault(tuple(prefix), []).append(index)
    results: list[Any] = [None] * len(targets)
    with torch.no_grad(), Progress(len(targets), "conditional likelihoods", "pairs") as progress:
        for prefix, members in groups.items():
            output = model(
                input_ids=torch.tensor([prefix], device=device), use_cache=True, logits_to_keep=1
            )
            cache = [(layer.keys, layer.values) for layer in output.past_key_values.layers]
            after_prefix = torch.log_softmax(output.logits[0, -1].float(), dim=-1).cpu()
            for index in members:
                first = [float(after_prefix[targets[index][0]])] if first_token else []
                results[index] = np.array(first, dtype=np.float64)
            run = [len(targets[index]) - 1 for index in members]  # tokens x_1..x_(K-1)
            longest = max(run)
            row_size = min(max(PACKED_ROW, 2 * longest), max_tokens - len(prefix))
            capacity = max(1, longest, row_size)
            rows = [[members[i] for i in row] for row in packed_rows(run, capacity) if run[row[0]]]
            per_batch = max(1, min(max_tokens // (len(prefix) + capacity), max_scored // capacity))
            for start in range(0, len(rows), per_batch):
                batch = rows[start : start + per_batch]
                ids, labels, positions, owner = _packed_batch(batch, targets, len(prefix))
                past = DynamicCache(
                    ddp_cache_data=[
                        (keys.expand(len(batch), -1, -1, -1), values.expand(len(batch), -1, -1, -1))
                        for keys, values in cache
                    ],
                    config=model.config,
                )
                real = owner >= 0
                kept = model(
                    input_ids=ids.to(device),
                    attention_mask=_block_mask(owner, len(prefix), parameter.dtype).to(device),
                    position_ids=positions.to(device),
                    past_key_values=past,
                    use_cache=True,
                    logits_to_keep=real.to(device),
                ).logits
                logprob = _target_logprobs(kept, labels[real].to(device), head_chunk)
                del kept, past
                owners = owner[real].numpy()
                order = np.argsort(owners, kind="stable")  # a target's positions, in order
                cuts = np.flatnonzero(np.diff(owners[order])) + 1
                values = np.split(logprob.double().cpu().numpy()[order], cuts)
                for index, scored in zip(np.unique(owners), values):
                    results[index] = np.concatenate([results[index], scored])
            progress.advance(len(members))
    return results
