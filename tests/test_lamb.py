"""LAMB against an independent float64 reference of the update rule (google-research lamb_optimizer.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from albertlm.config.run import OptimConfig
from albertlm.training.lamb import Lamb, build_optimizer, no_decay_names, param_groups


def reference_lamb(w, grads, lr, b1, b2, eps, wd, trust, bias_correction):
    """Plain numpy float64, one tensor, several steps: the paper's / reference's formula written out."""
    w = np.array(w, dtype=np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = (m / (1 - b1 ** t), v / (1 - b2 ** t)) if bias_correction else (m, v)
        u = m_hat / (np.sqrt(v_hat) + eps) + wd * w
        ratio = 1.0
        if trust:
            wn, un = np.linalg.norm(w), np.linalg.norm(u)
            ratio = wn / un if wn > 0 and un > 0 else 1.0
        w = w - lr * ratio * u
    return w


@pytest.mark.parametrize("bias_correction", [False, True])
def test_lamb_matches_float64_reference(bias_correction):
    rng = np.random.default_rng(0)
    shapes = [(7, 5), (11,), (3, 4, 2)]
    init = [rng.normal(size=s) for s in shapes] + [np.zeros((4,))]       # a zero tensor: ratio falls back to 1
    steps = 6
    grads = [[rng.normal(size=w.shape) * (1 + i) for _ in range(steps)] for i, w in enumerate(init)]
    hp = dict(lr=0.05, b1=0.9, b2=0.999, eps=1e-6)
    params = [nn.Parameter(torch.tensor(w)) for w in init]              # float64 tensors
    decayed, exempt = params[:2], params[2:]
    opt = Lamb([{"params": decayed, "weight_decay": 0.01, "trust_ratio": True},
                {"params": exempt, "weight_decay": 0.0, "trust_ratio": False}],
               lr=hp["lr"], betas=(hp["b1"], hp["b2"]), eps=hp["eps"], bias_correction=bias_correction)
    for k in range(steps):
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g[k])
        opt.step()
    for i, p in enumerate(params):
        wd, trust = (0.01, True) if i < 2 else (0.0, False)
        expected = reference_lamb(init[i], grads[i], wd=wd, trust=trust, bias_correction=bias_correction, **hp)
        np.testing.assert_allclose(p.detach().numpy(), expected, rtol=1e-12, atol=1e-14)


def test_trust_ratio_changes_the_step():
    """The layer-wise ratio makes the step size ~ lr * ||w|| whatever the gradient scale."""
    w0 = torch.full((10,), 3.0, dtype=torch.float64)
    for scale in (1e-3, 1e3):
        p = nn.Parameter(w0.clone())
        opt = Lamb([p], lr=0.1, weight_decay=0.0)
        p.grad = torch.linspace(-1, 1, 10, dtype=torch.float64) * scale + 0.5 * scale
        opt.step()
        assert torch.linalg.norm(p.detach() - w0).item() == pytest.approx(0.1 * torch.linalg.norm(w0).item(), rel=1e-6)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(4, 5)
        self.LayerNorm = nn.LayerNorm(5)
        self.norm = nn.LayerNorm(5)
        self.free = nn.Parameter(torch.zeros(3))        # a 1-d weight that is neither bias nor LayerNorm
        self.bias = nn.Parameter(torch.zeros(5))         # a bare bias on the module itself


def test_layernorm_weights_and_biases_are_exempt():
    model = _Block()
    assert no_decay_names(model) == {"dense.bias", "LayerNorm.weight", "LayerNorm.bias", "norm.weight",
                                     "norm.bias", "bias"}
    decay, exempt = param_groups(model, 0.01)
    assert {id(p) for p in decay["params"]} == {id(model.dense.weight), id(model.free)}
    assert decay["weight_decay"] == 0.01 and decay["trust_ratio"]
    assert exempt["weight_decay"] == 0.0 and not exempt["trust_ratio"]


def test_build_optimizer_adamw_keeps_exemptions():
    model = _Block()
    opt = build_optimizer(model, OptimConfig(name="adamw", lr=1e-3, weight_decay=0.1))
    assert isinstance(opt, torch.optim.AdamW)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    lamb = build_optimizer(model, OptimConfig())
    assert isinstance(lamb, Lamb) and lamb.defaults["betas"] == (0.9, 0.999) and lamb.defaults["eps"] == 1e-6
