"""DP-SGD (Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar and Zhang, "Deep Learning with
Differential Privacy", ACM CCS 2016) for the training stage's torch targets, through Opacus.

Everything private is Opacus' own machinery: `PrivacyEngine.make_private` wraps the model, the
optimizer and the data loader; the loader draws Poisson batches (each sample joins a batch with
probability q = 1 / batches per epoch, as `make_private_with_epsilon` sets it, i.e.
batch_size / n when the batch size divides n), the optimizer clips every per-sample gradient to
`max_grad_norm`, sums, adds Gaussian noise of std σ·max_grad_norm and divides by the expected batch
size, and the accountant records every step. σ is calibrated as `make_private_with_epsilon` does
(`opacus.accountants.utils.get_noise_multiplier`) for the planned steps = epochs × batches per
epoch, counted exactly rather than as `int(epochs / q)`; ε is what the accountant says was spent,
so fewer epochs (early stopping) report a smaller ε.

Per-sample clipping defaults to Opacus' ghost clipping (`grad_sample_mode="ghost"`, Li et al.
2022, Bu et al. 2023): the per-sample gradient norms of linear layers come from activations and
output gradients without materialising per-sample gradients, and a second backward pass on the
loss reweighted by the clipping factors gives the sum of clipped gradients. It is the same
flat clipping as the `"hooks"` mode, which stores every per-sample gradient (tests compare both
with gradients computed one sample at a time), and about 15 times faster for the benchmark's MLP
on one CPU thread.

The training recipe is that of `miaflow.models.training._fit_torch`: cross-entropy, Adam or SGD
(the recipe's momentum, default 0.9) under the recipe's learning-rate schedule, which training
passes as one rate per epoch (by default constant for Adam, torch's cosine annealing per epoch for
SGD; every schedule is fixed in advance, so it costs no privacy). Models with batch norm are
rejected: it mixes the samples of a batch, so per-sample clipping would not bound one sample's
influence.

Randomness: the Poisson sampler and the noise draw from their own generators seeded from `seed`
(`secure_mode=False`: torch's pseudo-random generator, reproducible; a release that needs a
cryptographically strong guarantee would retrain with `secure_mode=True`), and training runs
inside `torch.random.fork_rng` with the global generator seeded too (dropout, if any), so the same
seed gives the same weights bit for bit and the caller's global random state is left untouched.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from miaflow.accounting import shared_rdp
from miaflow.seeding import derive_seed

log = logging.getLogger(__name__)

OPTIMIZERS = ("adam", "sgd")
ACCOUNTANTS = ("prv", "rdp", "gdp")
GRAD_SAMPLE_MODES = ("ghost", "hooks")


@dataclass(frozen=True)
class DPResult:
    """What a DP training run spent: σ, ε at δ from the accountant, and the sampling it assumed."""

    noise_multiplier: float
    epsilon: float  # ε spent, from the accountant, at `delta`
    delta: float
    steps: int
    sample_rate: float


@dataclass
class Private:
    """The objects `PrivacyEngine.make_private` returns, and the criterion to train with."""

    engine: Any  # opacus.PrivacyEngine
    module: nn.Module  # the model wrapped by a GradSampleModule
    optimizer: Any  # opacus DPOptimizer
    criterion: Callable[..., Any]  # cross-entropy; under ghost clipping Opacus' two-pass loss
    loader: Any  # opacus DPDataLoader (Poisson sampling)
    accountant: str

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        """One DP-SGD step on a Poisson batch: per-sample clipping, noise, accounting, update."""
        with quiet_opacus(self.accountant):
            self.optimizer.zero_grad()
            loss = self.criterion(self.module(inputs), labels)
            loss.backward()
            self.optimizer.step()

    def release(self) -> nn.Module:
        """The model without Opacus' hooks and per-parameter attributes (grad samples, norms,
        summed gradients), with its own state-dict keys."""
        model = self.module.to_standard_module()
        for module in model.modules():  # the hooks' per-layer stashes (empty after a step)
            for name in ("activations", "max_batch_len"):
                if hasattr(module, name):
                    delattr(module, name)
        for p in model.parameters():
            if hasattr(p, "summed_grad"):  # set by DPOptimizer, not removed by the module's cleanup
                del p.summed_grad
            p.grad = None
        return model


@contextlib.contextmanager
def quiet_opacus(accountant: str = "prv") -> Iterator[None]:
    """Silences the warnings Opacus raises on every run that are known not to matter here:

    - "Secure RNG turned off" (PrivacyEngine with secure_mode=False): deliberate, the run must be
      reproducible from its seed (see the module docstring);
    - torch's "Full backward hook is firing when gradients are computed with respect to module
      outputs since no inputs require gradients", raised once per step by the hook Opacus puts
      on the first layer: Opacus needs only the gradients w.r.t. the layer's outputs.

    With the PRV accountant also a third: "Optimal order is the largest alpha", from the RDP
    bound that the PRV accountant uses only to size its discretisation domain
    (`opacus.accountants.analysis.prv.domain`), not for ε. Under the RDP accountant the same
    warning says ε is looser than it could be, so there it still shows, as does everything else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Secure RNG turned off", category=UserWarning)
        warnings.filterwarnings(
            "ignore", message="Full backward hook is firing when gradients", category=UserWarning
        )
        if accountant == "prv":
            warnings.filterwarnings(
                "ignore", message="Optimal order is the largest alpha", category=UserWarning
            )
        yield


def check_compatible(model: nn.Module) -> None:
    """Raise ValueError naming every layer Opacus cannot train privately (e.g. batch norm).

    Validation only: Opacus' `ModuleValidator.fix` would replace batch norm with group norm, a
    different architecture from the one the study names, so that is left to the caller."""
    from opacus.utils.module_utils import trainable_modules
    from opacus.validators import ModuleValidator

    was_training = model.training
    model.train()  # the validator also rejects a model in eval mode; DP training puts it in train
    try:
        errors = ModuleValidator.validate(model, strict=False)
    finally:
        model.train(was_training)
    if not errors:
        return
    named = []
    for name, module in trainable_modules(model):
        validator = ModuleValidator.VALIDATORS.get(type(module))
        if validator is not None and validator(module):
            named.append(f"{name or '<root>'} ({type(module).__name__})")
    reasons = sorted({type(e).__name__ + ": " + str(e).split(". ")[0] for e in errors})
    raise ValueError(
        f"model is not compatible with DP-SGD (Opacus): layers {', '.join(named) or '?'}; "
        + "; ".join(reasons)
    )


@functools.lru_cache(maxsize=256)
def noise_multiplier(
    epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str = "prv"
) -> float:
    """σ such that `steps` Poisson-sampled steps at `sample_rate` are (ε, δ)-DP, by Opacus'
    binary search (`get_noise_multiplier`, as in `make_private_with_epsilon`).

    Cached: a search takes seconds (the PRV and RDP accountants evaluate ε a dozen times or more,
    and PRV at a large ε for over ten seconds), and every model of a shard asks the same."""
    from opacus.accountants.utils import get_noise_multiplier

    with quiet_opacus(accountant), shared_rdp():
        return float(
            get_noise_multiplier(
                target_epsilon=epsilon,
                target_delta=delta,
                sample_rate=sample_rate,
                steps=steps,
                accountant=accountant,
            )
        )


def privatize(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: torch.utils.data.DataLoader,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    noise_generator: torch.Generator,
    accountant: str = "prv",
    grad_sample_mode: str = "ghost",
) -> Private:
    """`PrivacyEngine.make_private` (Poisson sampling, flat clipping, mean loss reduction) with
    a seeded noise generator; the loader's own generator drives the Poisson sampler."""
    from opacus import PrivacyEngine

    if grad_sample_mode not in GRAD_SAMPLE_MODES:
        raise ValueError(
            f"grad_sample_mode must be one of {GRAD_SAMPLE_MODES}, got {grad_sample_mode!r}"
        )
    criterion = nn.CrossEntropyLoss()
    with quiet_opacus(accountant):
        engine = PrivacyEngine(accountant=accountant, secure_mode=False)
        made = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            criterion=criterion,
            noise_multiplier=noise_multiplier,
            max_grad_norm=max_grad_norm,
            poisson_sampling=True,
            noise_generator=noise_generator,
            grad_sample_mode=grad_sample_mode,
        )
    if grad_sample_mode == "ghost":
        module, dp_optimizer, criterion, dp_loader = made
    else:
        module, dp_optimizer, dp_loader = made
    return Private(engine, module, dp_optimizer, criterion, dp_loader, accountant)


class _Tensors(torch.utils.data.TensorDataset):
    """A TensorDataset that hands the DataLoader a whole batch at once (`__getitems__`: one
    indexing per tensor instead of a tuple per sample and a stack; about a seventh of a step of
    the benchmark's MLP). The batch is a list of tensors, so the loader collates with `_as_is`;
    an empty Poisson batch is the tensors indexed by no sample, of length 0."""

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long, device=self.tensors[0].device)
        return [t[index] for t in self.tensors]


def _as_is(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    return batch


def _optimizer(
    model: nn.Module, name: str, lr: float, weight_decay: float, momentum: float
) -> torch.optim.Optimizer:
    """torch.optim's Adam or SGD (DPOptimizer wraps a `torch.optim.Optimizer`, so not the
    lighter classes of `miaflow.models.optimizers`), with `_fit_torch`'s settings."""
    if name == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay
        )
    return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)


@contextlib.contextmanager
def _seeded_global_rng(seed: int, device: torch.device) -> Iterator[None]:
    """The global generators (CPU and the model's GPU) seeded for the block and restored after."""
    cuda = (
        [device.index if device.index is not None else torch.cuda.current_device()]
        if device.type == "cuda"
        else []
    )
    with torch.random.fork_rng(devices=cuda):
        torch.random.default_generator.manual_seed(seed)
        for index in cuda:
            torch.cuda.default_generators[index].manual_seed(seed)
        yield


def train_dp(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epsilon: float,
    delta: float,
    max_grad_norm: float,
    epochs: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    optimizer: str,
    seed: int,
    accountant: str = "prv",
    on_epoch: Callable[[int], bool] | None = None,
    grad_sample_mode: str = "ghost",
    momentum: float = 0.9,
    learning_rates: Sequence[float] | None = None,
) -> DPResult:
    """Train `model` in place with DP-SGD to (ε, δ)-DP over `epochs` epochs of Poisson batches
    (expected size `batch_size`); `model.state_dict()` keeps its own keys afterwards.

    `on_epoch(epoch)` (1-based) is called after every epoch, with the model in place (wrapped
    hooks are inactive in eval mode or under no_grad, so it may evaluate it); returning True stops
    training, and the ε reported is then what the steps taken spent. `momentum` (SGD) and
    `learning_rates`, the rate of each epoch (None: `lr` throughout), are the recipe's: training
    passes its schedule (`miaflow.models.recipe.learning_rates`)."""
    from torch.utils.data import DataLoader

    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    if not (epsilon > 0 and 0 < delta < 1 and max_grad_norm > 0 and epochs > 0 and batch_size > 0):
        raise ValueError(
            f"need epsilon > 0, 0 < delta < 1, max_grad_norm > 0, epochs > 0, batch_size > 0; "
            f"got {epsilon}, {delta}, {max_grad_norm}, {epochs}, {batch_size}"
        )
    rates = [lr] * epochs if learning_rates is None else list(learning_rates)
    if len(rates) != epochs:
        raise ValueError(f"need a learning rate for each of the {epochs} epochs, got {len(rates)}")
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(
            f"need as many labels as samples, at least one: {len(x)} samples, {len(y)} labels"
        )
    check_compatible(model)

    device = next(model.parameters()).device
    dataset = _Tensors(x.to(device), y.to(device))
    sampler = torch.Generator().manual_seed(derive_seed(seed, "dpsgd", "poisson"))
    noise = torch.Generator(device=device).manual_seed(derive_seed(seed, "dpsgd", "noise"))
    loader = DataLoader(dataset, batch_size=batch_size, generator=sampler, collate_fn=_as_is)
    sample_rate = 1 / len(loader)  # make_private_with_epsilon's and the DPDataLoader's q
    planned = epochs * len(loader)
    sigma = noise_multiplier(epsilon, delta, sample_rate, planned, accountant)
    was_training = model.training
    model.train()  # Opacus refuses a model in eval mode
    private = privatize(
        model,
        _optimizer(model, optimizer, lr, weight_decay, momentum),
        loader,
        noise_multiplier=sigma,
        max_grad_norm=max_grad_norm,
        noise_generator=noise,
        accountant=accountant,
        grad_sample_mode=grad_sample_mode,
    )
    steps = 0
    try:
        with _seeded_global_rng(derive_seed(seed, "dpsgd", "global"), device):
            for epoch, rate in enumerate(rates, start=1):
                for group in private.optimizer.param_groups:
                    group["lr"] = rate
                model.train()  # on_epoch may have evaluated it
                for inputs, labels in private.loader:
                    private.step(inputs, labels)
                    steps += 1
                if on_epoch is not None and on_epoch(epoch):
                    log.info("DP-SGD stopped early after epoch %d of %d", epoch, epochs)
                    break
    finally:
        private.release()
        model.train(was_training)
    with quiet_opacus(accountant):
        spent = float(private.engine.get_epsilon(delta))
    log.info(
        "DP-SGD: sigma %.4f, q %.5f, %d steps: epsilon %.4f at delta %.2g (target %.4g)",
        sigma,
        sample_rate,
        steps,
        spent,
        delta,
        epsilon,
    )
    return DPResult(
        noise_multiplier=sigma, epsilon=spent, delta=delta, steps=steps, sample_rate=sample_rate
    )
