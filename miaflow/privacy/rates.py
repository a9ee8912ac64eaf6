"""The DP sample rate that canaries must leave alone, torch-free: validation checks a privacy
audit's sizes with it before any job starts, and `miaflow.privacy.experiments` trains with them.

DP-SGD through Opacus and the heads' DP-Adam sample each step with rate 1 / (batches per epoch),
ceil(n / batch size) for n training samples. If the canaries included changed that count, a
canary's presence would change how every sample is sampled, and the trained model would not be
the mechanism the accountant analysed: an audit of it would test something else.
"""

from __future__ import annotations

import math


def batch_count_kept(train_size: int, extra: int, batch_size: int) -> bool:
    """Whether `extra` canaries on top of `train_size` samples leave the number of batches per
    epoch (so the sample rate) as it is without them."""
    return math.ceil(train_size / batch_size) == math.ceil((train_size + extra) / batch_size)
