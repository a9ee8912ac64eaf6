"""DP-SGD through Opacus (miaflow.defenses.dpsgd): clipping and noise against hand computations,
σ and ε against Opacus' accountants, determinism, the unwrapped model, batch-norm rejection, and
the defense's effect on a memorisable toy."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset

from miaflow.defenses.dpsgd import DPResult, check_compatible, privatize, train_dp

# Tests whose subject is not the accountant use Opacus' GDP accountant, which is instantaneous
# (PRV and RDP take seconds per σ search); its "experimental" warning is expected there, and
# train_dp leaves it visible on purpose.
pytestmark = [
    pytest.mark.filterwarnings("ignore:GDP accounting is experimental:UserWarning"),
    pytest.mark.usefixtures("one_torch_thread"),
]
FAST = "gdp"
EPOCHS, BATCH = 40, 20  # the memorisation toy's: 100 samples, q = 1/5

TRAIN = dict(delta=1e-5, max_grad_norm=1.0, lr=0.05, weight_decay=0.0, optimizer="adam")


def mlp(d: int = 6, hidden: int = 5, classes: int = 3, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, hidden), nn.Tanh(), nn.Linear(hidden, classes))


def toy(
    n: int = 64, d: int = 6, classes: int = 3, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, classes, (n,), generator=g)


def per_sample_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """∇ loss_i for each sample, by torch.func (no Opacus involved)."""
    params = {k: v.detach().clone() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        return F.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)


def one_private_step(
    mode: str, clip: float, noise: float, model: nn.Module, x, y
) -> dict[str, torch.Tensor]:
    """Plain SGD (lr 1) through `privatize` on one Poisson batch of rate 1 (every sample): the
    parameter change is minus the privatised mean gradient."""
    loader = DataLoader(
        TensorDataset(x, y), batch_size=len(x), generator=torch.Generator().manual_seed(0)
    )
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    private = privatize(
        model,
        torch.optim.SGD(model.parameters(), lr=1.0),
        loader,
        noise_multiplier=noise,
        max_grad_norm=clip,
        noise_generator=torch.Generator().manual_seed(1),
        grad_sample_mode=mode,
    )
    assert private.loader.sample_rate == 1.0 and private.optimizer.expected_batch_size == len(x)
    ((inputs, labels),) = list(private.loader)
    assert torch.equal(inputs, x) and torch.equal(labels, y)  # rate 1: the whole set, in order
    private.step(inputs, labels)
    if mode == "hooks":  # Opacus' own per-sample gradients, kept until the next zero_grad
        opacus_view = {
            k: p.grad_sample.detach().clone() for k, p in private.module._module.named_parameters()
        }
    else:  # ghost clipping computes only the per-sample norms
        opacus_view = {"norms": private.module.per_sample_gradient_norms.detach().clone()}
    private.release()
    update = {k: before[k] - v.detach() for k, v in model.named_parameters()}
    return update | {f"opacus/{k}": v for k, v in opacus_view.items()}


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_clipping_and_update_equal_the_mean_of_clipped_per_sample_gradients(mode):
    x, y = toy(16)
    x = x * torch.linspace(0.05, 20, 16)[:, None]  # per-sample gradient norms over a wide range
    model = mlp()
    reference = per_sample_grads(model, x, y)
    flat = torch.cat([g.reshape(16, -1) for g in reference.values()], dim=1)
    norms = flat.norm(dim=1)
    clip = float(norms.median())
    assert (norms > 1.2 * clip).sum() >= 3 and (norms < clip / 1.2).sum() >= 3  # both regimes
    factors = (clip / (norms + 1e-6)).clamp(max=1.0)  # Opacus' flat clipping factor
    clipped = {k: g * factors.view(-1, *[1] * (g.dim() - 1)) for k, g in reference.items()}
    clipped_norms = torch.cat([g.reshape(16, -1) for g in clipped.values()], dim=1).norm(dim=1)
    assert torch.all(clipped_norms <= clip * (1 + 1e-5))

    update = one_private_step(mode, clip, 0.0, model, x, y)
    if mode == "hooks":
        for k, g in reference.items():
            torch.testing.assert_close(update[f"opacus/{k}"], g, rtol=1e-5, atol=1e-6)
    opacus_norms = (
        torch.cat([update[f"opacus/{k}"].reshape(16, -1) for k in reference], dim=1).norm(dim=1)
        if mode == "hooks"
        else update["opacus/norms"]
    )
    torch.testing.assert_close(opacus_norms, norms, rtol=1e-4, atol=1e-6)
    assert torch.all(
        opacus_norms * (clip / (opacus_norms + 1e-6)).clamp(max=1.0) <= clip * (1 + 1e-5)
    )
    for k in reference:  # noise 0: the update is exactly the mean of the clipped gradients
        torch.testing.assert_close(update[k], clipped[k].mean(0), rtol=1e-4, atol=1e-6)
        assert not torch.allclose(
            update[k], reference[k].mean(0), rtol=1e-2, atol=1e-4
        )  # clipping mattered


def test_noise_has_std_sigma_times_clip_over_expected_batch():
    x, y = toy(32, d=200, classes=50)
    model = nn.Linear(200, 50)
    clean = one_private_step("ghost", 0.5, 0.0, copy.deepcopy(model), x, y)
    noisy = one_private_step("ghost", 0.5, 3.0, model, x, y)
    noise = torch.cat([(noisy[k] - clean[k]).flatten() for k in ("weight", "bias")])
    assert abs(float(noise.mean())) < 0.05 * 3.0 * 0.5 / 32
    assert float(noise.std()) == pytest.approx(3.0 * 0.5 / 32, rel=0.03)  # 10,050 draws


def test_noise_multiplier_is_opacus_for_the_steps_and_epsilon_is_spent():
    from opacus.accountants.utils import get_noise_multiplier

    x, y = toy(100)  # the default PRV accountant, at the memorisation test's ε, δ, q and steps
    result = train_dp(
        mlp(),
        x,
        y,
        epsilon=1.0,
        delta=1e-3,
        max_grad_norm=1.0,
        epochs=EPOCHS,
        batch_size=BATCH,
        lr=0.01,
        weight_decay=0.0,
        optimizer="sgd",
        seed=0,
    )
    assert isinstance(result, DPResult)
    assert (result.steps, result.sample_rate, result.delta) == (EPOCHS * 5, 1 / 5, 1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = get_noise_multiplier(
            target_epsilon=1.0,
            target_delta=1e-3,
            sample_rate=1 / 5,
            steps=EPOCHS * 5,
            accountant="prv",
        )
    assert result.noise_multiplier == expected
    assert 1.0 - 0.05 <= result.epsilon <= 1.0 + 1e-3


def test_sigma_is_make_private_with_epsilon_and_early_stopping_reports_what_was_spent():
    from opacus import PrivacyEngine

    x, y = toy(60)
    kw = dict(epsilon=1.0, batch_size=7, seed=0, accountant=FAST, **TRAIN)  # 9 batches, q = 1/9
    full = train_dp(mlp(), x, y, epochs=3, **kw)
    loader = DataLoader(TensorDataset(x, y), batch_size=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant=FAST)
        model = mlp()
        _, optimizer, _ = engine.make_private_with_epsilon(
            module=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=loader,
            target_epsilon=1.0,
            target_delta=1e-5,
            epochs=3,
            max_grad_norm=1.0,
        )
    assert full.noise_multiplier == optimizer.noise_multiplier
    assert full.sample_rate == 1 / len(loader) and full.steps == 3 * len(loader)

    seen = []
    stopped = train_dp(mlp(), x, y, epochs=3, on_epoch=lambda e: seen.append(e) or e == 1, **kw)
    assert seen == [1] and stopped.steps == len(loader)
    assert stopped.noise_multiplier == full.noise_multiplier  # calibrated for the planned 3 epochs
    assert stopped.epsilon < 0.75 * full.epsilon
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant=FAST)
        engine.accountant.history = [(full.noise_multiplier, 1 / 9, len(loader))]
        assert stopped.epsilon == pytest.approx(engine.get_epsilon(1e-5), rel=1e-9)


def test_smaller_epsilon_needs_more_noise():
    x, y = toy(40)
    sigmas = [
        train_dp(
            mlp(), x, y, epsilon=eps, epochs=1, batch_size=10, seed=0, accountant=FAST, **TRAIN
        ).noise_multiplier
        for eps in (4.0, 2.0, 1.0)
    ]
    assert sigmas[0] < sigmas[1] < sigmas[2]


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_same_seed_same_weights_whatever_the_global_rng_and_model_is_unwrapped(mode):
    x, y = toy(50)
    runs = []
    for global_seed, seed in ((1, 7), (2, 7), (1, 8)):
        torch.manual_seed(global_seed)
        state = torch.get_rng_state()
        model = mlp().eval()  # same initial weights every time (mlp seeds itself)
        keys = list(model.state_dict())
        torch.manual_seed(global_seed)
        train_dp(
            model,
            x,
            y,
            epsilon=4.0,
            epochs=2,
            batch_size=5,
            seed=seed,
            accountant=FAST,
            grad_sample_mode=mode,
            **TRAIN,
        )
        assert torch.equal(torch.get_rng_state(), state)  # the caller's stream is untouched
        assert list(model.state_dict()) == keys  # no `_module.` prefix
        assert not model.training  # the caller's mode is restored
        for module in model.modules():  # no Opacus hooks or parameter attributes left behind
            assert not module._forward_hooks and not module._backward_hooks
            assert not module._forward_pre_hooks and not hasattr(module, "activations")
        for p in model.parameters():
            assert (
                not any(
                    hasattr(p, a)
                    for a in ("grad_sample", "_forward_counter", "_norm_sample", "summed_grad")
                )
                and p.grad is None
            )
        runs.append({k: v.clone() for k, v in model.state_dict().items()})
    initial = mlp().state_dict()
    assert any(not torch.equal(runs[0][k], initial[k]) for k in initial)  # it trained
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in initial)  # bit for bit
    assert any(not torch.equal(runs[0][k], runs[2][k]) for k in initial)  # another seed differs


def test_empty_poisson_batches_are_steps_too_and_both_clipping_modes_train_alike(monkeypatch):
    from miaflow.defenses import dpsgd

    sizes = []
    step = dpsgd.Private.step
    monkeypatch.setattr(
        dpsgd.Private, "step", lambda self, i, labels: sizes.append(len(i)) or step(self, i, labels)
    )
    x, y = toy(8)  # q = 1/8: a batch is empty with probability (7/8)^8 ≈ 0.34
    weights = {}
    for mode in ("ghost", "hooks"):
        sizes.clear()
        model = mlp()
        result = train_dp(
            model,
            x,
            y,
            epsilon=4.0,
            epochs=4,
            batch_size=1,
            seed=3,
            accountant=FAST,
            grad_sample_mode=mode,
            **TRAIN,
        )
        assert result.steps == len(sizes) == 32 and sizes.count(0) >= 3 and max(sizes) >= 2
        weights[mode] = model.state_dict()
        assert all(torch.isfinite(v).all() for v in weights[mode].values())
    for k, v in weights["ghost"].items():  # same batches, same noise, same clipping up to rounding
        torch.testing.assert_close(v, weights["hooks"][k], rtol=1e-4, atol=1e-5)


def test_batch_norm_is_rejected_naming_the_layer():
    model = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.Tanh(), nn.Linear(5, 3))
    model.eval()
    x, y = toy(20)
    with pytest.raises(ValueError, match=r"1 \(BatchNorm1d\)"):
        train_dp(model, x, y, epsilon=1.0, epochs=1, batch_size=5, seed=0, **TRAIN)
    assert not model.training and not model[0]._forward_hooks  # left as it was
    check_compatible(mlp())  # a plain MLP passes
    with pytest.raises(ValueError, match="optimizer"):
        train_dp(
            mlp(),
            x,
            y,
            epsilon=1.0,
            epochs=1,
            batch_size=5,
            seed=0,
            **(TRAIN | {"optimizer": "lbfgs"}),
        )


def _mean_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float(F.cross_entropy(model(x), y))


def test_dp_narrows_the_train_test_loss_gap_of_a_memorising_model():
    """Random labels: all a model can learn is the training set itself."""
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(200, 10, generator=g), torch.randint(0, 2, (200,), generator=g)
    (x_train, x_test), (y_train, y_test) = x.split(100), y.split(100)
    epochs, batch, lr = EPOCHS, BATCH, 0.01
    plain = mlp(10, 64, 2, seed=1)
    dp = copy.deepcopy(plain)
    optimizer = torch.optim.Adam(plain.parameters(), lr=lr)
    order = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for idx in torch.randperm(100, generator=order).split(batch):
            optimizer.zero_grad()
            F.cross_entropy(plain(x_train[idx]), y_train[idx]).backward()
            optimizer.step()
    result = train_dp(
        dp,
        x_train,
        y_train,
        epsilon=1.0,
        delta=1e-3,
        max_grad_norm=1.0,
        epochs=epochs,
        batch_size=batch,
        lr=lr,
        weight_decay=0.0,
        optimizer="adam",
        seed=0,
    )
    assert result.epsilon <= 1.0 + 1e-3
    gap_plain = _mean_loss(plain, x_test, y_test) - _mean_loss(plain, x_train, y_train)
    gap_dp = _mean_loss(dp, x_test, y_test) - _mean_loss(dp, x_train, y_train)
    assert gap_plain > 0.5
    assert gap_dp < 0.2 * gap_plain
