"""miaflow.models.optimizers: the same updates as torch.optim, bit for bit, without importing
torch._dynamo."""

import subprocess
import sys

import pytest
import torch
from torch import nn

from miaflow.models import optimizers


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3), nn.Linear(3, 3))


def _train(model: nn.Module, optimizer, steps: int, frozen_last: bool) -> list[torch.Tensor]:
    """A few steps on random batches; the last layer gets no gradient if `frozen_last`."""
    data = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, y = torch.randn(16, 5, generator=data), torch.randint(0, 3, (16,), generator=data)
        hidden = model[:3](x)
        out = hidden if frozen_last else model[3](hidden)
        optimizer.zero_grad()
        nn.functional.cross_entropy(out, y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("frozen_last", [False, True])
@pytest.mark.parametrize(
    "make_ours, make_torch",
    [
        (lambda p: optimizers.Adam(p, lr=1e-2), lambda p: torch.optim.Adam(p, lr=1e-2)),
        (
            lambda p: optimizers.Adam(p, lr=1e-2, weight_decay=5e-4),
            lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=5e-4),
        ),
        (
            lambda p: optimizers.AdamW(p, lr=1e-2, weight_decay=0.1),
            lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
        ),
        (
            lambda p: optimizers.SGD(p, lr=0.1, momentum=0.9, weight_decay=5e-4),
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=5e-4),
        ),
        (lambda p: optimizers.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    ],
    ids=["adam", "adam-l2", "adamw", "sgd-momentum", "sgd"],
)
def test_updates_equal_torch_optim(make_ours, make_torch, frozen_last):
    ours, theirs = _model(1), _model(1)
    got = _train(ours, make_ours(ours.parameters()), 7, frozen_last)
    expected = _train(theirs, make_torch(theirs.parameters()), 7, frozen_last)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert not torch.equal(got[0], _model(1)[0].weight.detach())  # it did train


def test_learning_rate_set_between_steps_is_used():
    ours, theirs = _model(2), _model(2)
    mine, reference = (
        optimizers.SGD(ours.parameters(), lr=0.1, momentum=0.9),
        torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9),
    )
    for lr in (0.1, 0.05, 0.01):
        mine.lr = lr
        for group in reference.param_groups:
            group["lr"] = lr
        got, expected = _train(ours, mine, 2, False), _train(theirs, reference, 2, False)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


@pytest.mark.parametrize("lr, epochs", [(0.1, 1), (0.1, 2), (0.05, 7), (0.1, 50), (3e-4, 200)])
def test_cosine_annealing_equals_torch_scheduler(lr, epochs):
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    expected = []
    for _ in range(epochs):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert optimizers.cosine_annealing(lr, epochs) == expected


def test_training_does_not_import_torch_dynamo():
    """The reason the module exists: torch.optim's constructor imports torch._dynamo."""
    probe = """
import sys, torch
from miaflow.models import optimizers
model = torch.nn.Linear(3, 2)
for make in (optimizers.Adam, optimizers.AdamW, optimizers.SGD):
    optimizer = make(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
print('torch._dynamo' in sys.modules)
torch.optim.SGD(model.parameters(), lr=0.1)
print('torch._dynamo' in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
