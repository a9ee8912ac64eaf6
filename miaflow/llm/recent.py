"""Membership scores of five recent language-model attacks: DC-PDD, PAC, Con-ReCall, SaMIA and
EZ-MIA (CAMIA's signals are in `miaflow.llm.camia`, the model work they need in
`miaflow.llm.recent_inputs`). Each is a pure function of per-text arrays that the LLM stage
caches or can cache, so, like `miaflow.llm.scores`, none runs a model. Higher = more likely a
member.

Arrays follow `miaflow.llm.scores`: `logprobs[i]` holds l_t = log p(x_t | x_<t) over the scored
tokens t = 2..T of text i; `token_ids[i]` its tokens x_1..x_T (the `token_ids` column of the
`tokens` cache), so `token_ids[i][1:]` are the tokens that `logprobs[i]` scores.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

import numpy as np

from miaflow.llm.scores import k_count, zlib_bytes

log = logging.getLogger("miaflow.llm")


# --- DC-PDD ---------------------------------------------------------------------------------------


def token_frequencies(token_ids: Sequence[Sequence[int]], vocab_size: int) -> np.ndarray:
    """DC-PDD's reference distribution p(v; D') = (c_v + 1) / (N' + |V|) over the vocabulary: the
    Laplace-smoothed frequency of each token among the N' tokens of a reference corpus D'.

    The paper counts a large public corpus (C4); offline, D' is the experiment's own texts known
    to be non-members and never scored (e.g. ReCaLL's shots, or non-members outside the scored
    set): a scored text counted in D' would raise its own rare tokens' frequencies and lower its
    score, which separates non-members for the wrong reason.
    """
    flat = np.fromiter((t for ids in token_ids for t in ids), dtype=np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= vocab_size):
        raise ValueError(f"token ids outside a vocabulary of {vocab_size}")
    counts = np.bincount(flat, minlength=vocab_size)
    return (counts + 1.0) / (flat.size + vocab_size)


def first_occurrences(ids: Sequence[int]) -> np.ndarray:
    """Positions, in order, where each distinct token of `ids` appears first."""
    _, first = np.unique(np.asarray(ids, dtype=np.int64), return_index=True)
    return np.sort(first)


def _scored_ids(lp: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    """The tokens x_2..x_T that `lp` scores; their count must match (same tokenizer and cut)."""
    scored = np.asarray(ids, dtype=np.int64)[1:]
    if scored.size != len(lp):
        raise ValueError(f"{len(lp)} log-probabilities for {scored.size} scored tokens")
    return scored


def dc_pdd(
    logprobs: Sequence[np.ndarray],
    token_ids: Sequence[Sequence[int]],
    frequencies: np.ndarray,
    a: float = 0.01,
) -> np.ndarray:
    """DC-PDD (Zhang et al., EMNLP 2024, "Pretraining Data Detection for Large Language Models: A
    Divergence-based Calibration Method"): the mean over the first occurrence of each distinct
    scored token of min(alpha_t, a), alpha_t = p(x_t; M) * log(1 / p(x_t; D')).

    A token the model predicts well although it is rare in the reference distribution weighs
    most: a text full of common words, likely for any model, is calibrated down. Repeated
    tokens count once (later copies are easy through the context alone), and the bound `a`
    keeps a few rare tokens from dominating; a = 0.01 is the default of the authors' code
    (zhang-wei-chao/DC-PDD com_det_sco.py at 8461d441). `frequencies` comes from
    `token_frequencies` with the target's tokenizer, smoothed as the paper says (that code
    computes the smoothed distribution but indexes the raw counts; Fast-MIA, Nikkei/fast-mia
    src/methods/dcpdd.py at 3eb9cbc7, takes log(1 / (count + 1e-10)) of raw C4 counts).
    Higher = member: the mean itself (both codes return -mean; Fast-MIA ranks by that as it is,
    so on raw counts the two codes rank in opposite directions). NaN for a text with no scored
    token.
    """
    frequencies = np.asarray(frequencies, dtype=np.float64)
    out = np.full(len(logprobs), np.nan)
    for i, (lp, ids) in enumerate(zip(logprobs, token_ids, strict=True)):
        lp = np.asarray(lp, dtype=np.float64)
        scored = _scored_ids(lp, ids)
        if not lp.size:
            continue
        first = first_occurrences(scored)
        alpha = np.exp(lp[first]) * -np.log(frequencies[scored[first]])
        out[i] = np.minimum(alpha, a).mean()
    return out


# --- PAC ------------------------------------------------------------------------------------------


def polarized_distance(
    logprobs: Sequence[np.ndarray], ratio_local: float = 0.3, ratio_far: float = 0.05
) -> np.ndarray:
    """PAC's polarized distance: the mean of the max(1, floor(ratio_far * n)) largest l_t minus
    the mean of the max(1, floor(ratio_local * n)) smallest, the two tails of a text's token
    likelihoods (Ye et al. 2024; yyy01/PAC attack.py at cd7121f4). NaN with no token."""
    out = np.full(len(logprobs), np.nan)
    for i, lp in enumerate(logprobs):
        ordered = np.sort(np.asarray(lp, dtype=np.float64))
        if ordered.size:
            far = ordered[-k_count(ordered.size, ratio_far) :].mean()
            out[i] = far - ordered[: k_count(ordered.size, ratio_local)].mean()
    return out


def pac(
    logprobs: Sequence[np.ndarray],
    augmented_logprobs: Sequence[Sequence[np.ndarray]],
    ratio_local: float = 0.3,
    ratio_far: float = 0.05,
) -> np.ndarray:
    """PAC (Ye et al., ACL 2024, "Data Contamination Calibration for Black-box LLMs"): the mean
    polarized distance of a text's augmentations minus its own, mean_j PD(x~_j) - PD(x).

    A member's tokens are all likely, so its distance is small, and swapping its words
    (`recent_inputs.swap_augment`, the paper's EDA swaps: 5 texts, alpha = 0.3) breaks what was
    memorised and widens it; a non-member's is wide already. The code's PAC is PD(x) - mean
    PD(x~) and it ranks by -PAC (roc_auc_score on [-_ for _ in PAC_list]), which is this score;
    Fast-MIA (Nikkei/fast-mia src/methods/pac.py at 3eb9cbc7) returns the same -PAC.
    """
    own = polarized_distance(logprobs, ratio_local, ratio_far)
    if len(augmented_logprobs) != own.size:
        raise ValueError(f"augmentations for {len(augmented_logprobs)} of {own.size} texts")
    augmented = np.array(
        [
            np.nanmean(polarized_distance(group, ratio_local, ratio_far))
            for group in augmented_logprobs
        ]
    )
    return augmented - own


# --- Con-ReCall -----------------------------------------------------------------------------------


def con_recall(
    ll_nonmember_prefix: np.ndarray,
    ll_member_prefix: np.ndarray,
    ll: np.ndarray,
    gamma: float = 0.5,
) -> np.ndarray:
    """Con-ReCall (Wang et al. 2024, arXiv 2409.03363, "Con-ReCall: Detecting Pre-training Data
    in LLMs via Contrastive Decoding"): (LL(x ; P_nm) - gamma * LL(x ; P_m)) / LL(x).

    ReCaLL's non-member prefix P_nm lowers a member's likelihood more than a non-member's; a
    member prefix P_m shifts the two asymmetrically too, and contrasting the two conditionals
    widens the gap. All three LLs are negative means over the same target tokens
    (`tokens.conditional_log_likelihood`, as for ReCaLL, whose cached LL(x ; P_nm) this reuses
    with the same shots). gamma weighs the member side, a hyperparameter of the paper; 0.5 is
    Fast-MIA's default (Nikkei/fast-mia src/methods/conrecall.py at 3eb9cbc7), which computes
    the same ratio from the losses (-LL). KNOWN MEMBERS: P_m's texts are members, so they must
    never be among the scored texts (a scored text in P_m sees itself in the context); draw
    them with `recent_inputs.member_shots`, which leaves the scored ids out.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return (
            np.asarray(ll_nonmember_prefix, dtype=np.float64)
            - gamma * np.asarray(ll_member_prefix, dtype=np.float64)
        ) / np.asarray(ll, dtype=np.float64)


# --- SaMIA ----------------------------------------------------------------------------------------


def split_prefix(text: str, prefix_ratio: float = 0.5) -> tuple[str, list[str]]:
    """SaMIA's prompt and reference: the first floor(prefix_ratio * n) whitespace words of the
    text, and its remaining words, the continuation the samples are compared with. The code
    cuts the prompt at int(n * ratio) but the reference at round(L * ratio) of the nominal
    length L; both at one cut here, so that reference and prompt never overlap or leave a gap."""
    words = text.split()
    cut = int(len(words) * prefix_ratio)
    return " ".join(words[:cut]), words[cut:]


def rouge_1(candidate: Sequence[str], reference: Sequence[str]) -> tuple[float, float, float]:
    """ROUGE-1 (Lin 2004) of two word lists: (recall, precision, F1) of their unigram overlap,
    each word matched at most as often as it occurs in both; 0 if either list is empty.

    Words as given (SaMIA splits on whitespace, case kept): the `rouge-score` package would
    lower-case and drop punctuation first, so its values differ on such texts."""
    if not candidate or not reference:
        return 0.0, 0.0, 0.0
    overlap = sum((Counter(candidate) & Counter(reference)).values())
    recall, precision = overlap / len(reference), overlap / len(candidate)
    f1 = 2 * recall * precision / (recall + precision) if overlap else 0.0
    return recall, precision, f1


def samia(
    texts: Sequence[str],
    continuations: Sequence[Sequence[str]],
    prefix_ratio: float = 0.5,
    zlib: bool = False,
) -> np.ndarray:
    """SaMIA (Kaneko et al. 2024, "Sampling-based Pseudo-Likelihood for Membership Inference
    Attacks"): the mean ROUGE-1 recall of a text's sampled continuations against its true
    continuation (`split_prefix`); with `zlib`, each recall times the zlib bytes of its
    sample's words (SaMIA*zlib), which discounts degenerate, repetitive samples.

    A model that saw the text continues its prefix with the text's own words. Needs only
    generated text (`recent_inputs.sample_continuations`: 10 samples, temperature 1, top-k 50,
    as nlp-titech/samia src/sampling.py at a2d955ae); the scoring follows src/eval_samia.py
    there, recall over the sample's whitespace words after the prompt. Fast-MIA
    (src/methods/samia.py at 3eb9cbc7) scores otherwise: it cuts the prompt's share of words
    off the continuation alone, which often leaves no word to score."""
    if len(continuations) != len(texts):
        raise ValueError(f"continuations for {len(continuations)} of {len(texts)} texts")
    out = np.full(len(texts), np.nan)
    for i, (text, samples) in enumerate(zip(texts, continuations)):
        reference = split_prefix(text, prefix_ratio)[1]
        values = []
        for sample in samples:
            words = sample.split()
            recall = rouge_1(words, reference)[0]
            values.append(recall * zlib_bytes(" ".join(words)) if zlib else recall)
        if values:
            out[i] = np.mean(values)
    return out


# --- EZ-MIA ---------------------------------------------------------------------------------------


def ez_mia(
    target_logprobs: Sequence[np.ndarray],
    reference_logprobs: Sequence[np.ndarray],
    target_top1: Sequence[np.ndarray],
    min_errors: int = 2,
    compat: bool = False,
) -> np.ndarray:
    """EZ-MIA (Ilic, Stanojevic and Cvejoski 2026, "Powerful Training-Free Membership Inference
    Against Autoregressive Language Models"; JetBrains-Research/ez-mia mia/ez_score.py at
    aa0b6b74): the error-zone ratio P / N, with d_t = l_t(target) - l_t(reference) over the
    error zone E, the scored tokens the target does not predict top-1 (the first scored token
    left out, as the code's `ignore_bos`), P the sum of the positive d_t and N of |negative d_t|.

    Where the fine-tuned target still errs, training has nonetheless raised a member's true
    token over the pretrained reference; on a non-member the shifts go both ways. Two forward
    passes, target and reference, with one tokenizer: `target_top1[i]` says per scored token
    whether it is the target's argmax (`recent_inputs.top1_flags`).

    Degenerate texts: the code returns 0 when E has fewer than `min_errors` tokens or N = 0.
    Here N = 0 with P > 0 is the ratio's limit, +inf; so is a text with fewer than `min_errors`
    errors, which the target predicts top-1 almost everywhere: memorised, the strongest case of
    membership (the code's 0 ranks a memorised trap below its twins). P = N = 0 leaves the
    ratio undefined: NaN (`scores.finite` maps it to 0, the code's value). `compat` returns the
    code's zeros. Every case is logged.
    """
    out = np.full(len(target_logprobs), np.nan)
    few = unbounded = undefined = 0
    for i, (lt, lr, top1) in enumerate(
        zip(target_logprobs, reference_logprobs, target_top1, strict=True)
    ):
        lt, lr, top1 = np.asarray(lt, np.float64), np.asarray(lr, np.float64), np.asarray(top1)
        if not lt.size == lr.size == top1.size:
            raise ValueError(
                f"text {i}: {lt.size} target, {lr.size} reference and {top1.size} top-1 values; "
                "EZ-MIA needs one tokenizer for both models"
            )
        errors = ~top1.astype(bool)
        errors[:1] = False
        delta = (lt - lr)[errors]
        positive, negative = delta[delta > 0].sum(), -delta[delta < 0].sum()
        if errors.sum() < min_errors:
            few += 1
            out[i] = 0.0 if compat else np.inf
        elif positive == negative == 0:
            undefined += 1
            out[i] = 0.0 if compat else np.nan
        elif negative == 0:
            unbounded += 1
            out[i] = 0.0 if compat else np.inf
        else:
            out[i] = positive / negative
    if few or unbounded or undefined:
        log.warning(
            "EZ-MIA: %d of %d texts with fewer than %d error tokens and %d with only positive "
            "shifts, scored %s; %d with no shift, scored %s",
            few,
            len(out),
            min_errors,
            unbounded,
            "0 (compat)" if compat else "+inf",
            undefined,
            "0 (compat)" if compat else "NaN",
        )
    return out
