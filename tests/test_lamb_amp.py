"""LAMB under fp16 loss scaling: the optimizer takes GradScaler's found_inf itself, so an overflowed step is
skipped on the device (moments and weights untouched) with no `.item()` read before the update; every step
matches GradScaler's default path (read found_inf on the host, skip the call)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from albertlm.training.lamb import Lamb


class _HostSkip(Lamb):
    """The same LAMB through GradScaler's default path: found_inf read with .item(), the call skipped."""
    _step_supports_amp_scaling = False


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 3))


def _optimizer(cls, model: nn.Module, bias_correction: bool = False) -> Lamb:
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() == 2]
    exempt = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() == 2)]
    return cls([{"params": decay, "weight_decay": 0.01, "trust_ratio": True},
                {"params": exempt, "weight_decay": 0.0, "trust_ratio": False}],
               lr=0.01, bias_correction=bias_correction)


def _run(cls, steps: int = 6, overflow_at=(2, 4), unscale_first: bool = True, bias_correction: bool = False,
         on_step=None):
    """Train a few steps with loss scaling; at the steps in overflow_at one gradient is made inf (or nan)."""
    model = _model()
    opt = _optimizer(cls, model, bias_correction)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=3)
    gen = torch.Generator().manual_seed(1)
    for k in range(steps):
        x, y = torch.randn(5, 6, generator=gen), torch.randn(5, 3, generator=gen)
        scaler.scale(((model(x) - y) ** 2).mean()).backward()
        if k in overflow_at:
            model[0].weight.grad[0, 0] = float("inf") if k % 2 == 0 else float("nan")
        if unscale_first:
            scaler.unscale_(opt)
        if on_step is not None:
            on_step()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    return model, opt, scaler


def _moments(opt):
    return [(s["exp_avg"], s["exp_avg_sq"]) for s in opt.state.values()]


@pytest.mark.parametrize("unscale_first", [True, False])
def test_device_side_skip_matches_gradscalers_host_skip(unscale_first):
    ours, ours_opt, ours_scaler = _run(Lamb, unscale_first=unscale_first)
    ref, ref_opt, ref_scaler = _run(_HostSkip, unscale_first=True)
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    for (m, v), (rm, rv) in zip(_moments(ours_opt), _moments(ref_opt)):
        assert torch.isfinite(m).all() and torch.isfinite(v).all()
        torch.testing.assert_close(m, rm, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(v, rv, rtol=1e-6, atol=1e-12)
    assert ours_scaler.get_scale() == ref_scaler.get_scale() == 2.0 ** 10 / 4   # two backoffs (growth every 3 clean steps: none)


def test_an_overflowed_step_leaves_weights_and_moments_exactly_as_they_were():
    model = _model()
    opt = _optimizer(Lamb, model)
    scaler = torch.amp.GradScaler("cpu")
    for overflow in (False, True):
        scaler.scale(model(torch.ones(2, 6)).sum()).backward()
        if overflow:
            model[2].bias.grad[1] = float("nan")
            before = copy.deepcopy((list(model.parameters()), _moments(opt)))
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    for a, b in zip(model.parameters(), before[0]):
        assert torch.equal(a, b)
    for (m, v), (bm, bv) in zip(_moments(opt), before[1]):
        assert torch.equal(m, bm) and torch.equal(v, bv)


def test_the_step_reads_nothing_back_from_the_device(monkeypatch):
    """GradScaler's default path calls found_inf.item() before each update: a host-device sync on a GPU."""
    reads = []
    armed = []

    def arm():
        armed.append(True)

    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name,
                            lambda self, *a, _real=real, _name=name: (armed and reads.append(_name), _real(self, *a))[1])
    _run(Lamb, steps=3, overflow_at=(1,), on_step=arm)
    assert reads == []


def test_bias_correction_still_skips_on_the_host_and_keeps_its_step_count():
    ours, ours_opt, _ = _run(Lamb, bias_correction=True)
    ref, ref_opt, _ = _run(_HostSkip, bias_correction=True)
    assert {s["step"] for s in ours_opt.state.values()} == {4}            # 6 steps, 2 skipped
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
