"""torch's Adam, AdamW and SGD updates and cosine schedule, without `torch.optim.Optimizer`.

Constructing any `torch.optim.Optimizer` imports `torch._dynamo` (about 1.5 s on the 2-core
machine), a start-up cost of every job that trains even a tiny model, although no job compiles
one. These classes hold the same state and call torch's own update kernels
(`torch.optim.adam.adam`, `torch.optim.sgd.sgd`) with the same defaults, so every update is
bit-identical to the `torch.optim` class it stands for (tests compare them step by step).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # torch's defaults


class _Optimizer:
    """Parameters and `zero_grad`, as in `torch.optim` (gradients set to None)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float) -> None:
        self.params = list(params)
        self.lr = lr

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _with_grads(self) -> list[int]:
        """Indices of the parameters that have a gradient: torch.optim skips the others."""
        return [i for i, p in enumerate(self.params) if p.grad is not None]


class Adam(_Optimizer):
    """`torch.optim.Adam(params, lr, weight_decay=...)`; `decoupled=True` is `torch.optim.AdamW`."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        weight_decay: float = 0.0,
        decoupled: bool = False,
        betas: tuple[float, float] = ADAM_BETAS,
        eps: float = ADAM_EPS,
    ) -> None:
        import torch

        super().__init__(params, lr)
        self.weight_decay, self.decoupled, self.betas, self.eps = (
            weight_decay,
            decoupled,
            betas,
            eps,
        )
        self.exp_avgs = [
            torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params
        ]
        self.exp_avg_sqs = [
            torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params
        ]
        self.steps = [torch.tensor(0.0) for _ in self.params]  # on the host, as torch keeps them

    def step(self) -> None:
        import torch
        from torch.optim.adam import adam

        live = self._with_grads()
        with torch.no_grad():
            adam(
                [self.params[i] for i in live],
                [self.params[i].grad for i in live],
                [self.exp_avgs[i] for i in live],
                [self.exp_avg_sqs[i] for i in live],
                [],
                [self.steps[i] for i in live],
                decoupled_weight_decay=self.decoupled,
                amsgrad=False,
                beta1=self.betas[0],
                beta2=self.betas[1],
                lr=self.lr,
                weight_decay=self.weight_decay,
                eps=self.eps,
                maximize=False,
            )


class AdamW(Adam):
    """`torch.optim.AdamW(params, lr, weight_decay)`: Adam with decoupled weight decay."""

    def __init__(
        self, params: Iterable[torch.Tensor], lr: float, weight_decay: float = 1e-2
    ) -> None:
        super().__init__(params, lr, weight_decay, decoupled=True)


class SGD(_Optimizer):
    """`torch.optim.SGD(params, lr, momentum=..., weight_decay=...)`."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr)
        self.momentum, self.weight_decay = momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)  # set by the first step

    def step(self) -> None:
        import torch
        from torch.optim.sgd import sgd

        live = self._with_grads()
        buffers = [self.buffers[i] for i in live]
        with torch.no_grad():
            sgd(
                [self.params[i] for i in live],
                [self.params[i].grad for i in live],
                buffers,
                weight_decay=self.weight_decay,
                momentum=self.momentum,
                lr=self.lr,
                dampening=0.0,
                nesterov=False,
                maximize=False,
            )
        if self.momentum:
            for i, buffer in zip(live, buffers):
                self.buffers[i] = buffer


def cosine_annealing(lr: float, epochs: int) -> list[float]:
    """Learning rate of each epoch under `torch.optim.lr_scheduler.CosineAnnealingLR(T_max=epochs)`
    stepped once per epoch: torch's recursive form, float for float."""
    eta_min = 0.0
    rates = [lr]
    for epoch in range(1, epochs):
        rates.append(
            (1 + math.cos(math.pi * epoch / epochs))
            / (1 + math.cos(math.pi * (epoch - 1) / epochs))
            * (rates[-1] - eta_min)
            + eta_min
        )
    return rates
