"""LAMB (You et al. 2019) as in google-research/albert `lamb_optimizer.py`, plus the parameter groups.

For each tensor w with gradient g (no bias correction in the reference; `bias_correction=True` adds Adam's):
    m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
    u = m / (sqrt(v) + eps) + wd w                      (wd only where the group decays)
    r = ||w|| / ||u||  if both norms > 0 else 1         (only where the group uses the trust ratio)
    w = w - lr r u
Every step is a handful of `torch._foreach_*` calls over a whole group (one kernel launch per op per group).

The trust ratio is per TF variable in the reference. A tensor of ours that holds k of google's variables stacked
along dim 0 (the attention's fused (3H, H) Q/K/V weight: google's query, key and value kernels) is given to the
optimizer in `trust_ratio_splits` ({tensor: k}, `trust_ratio_splits(model)`), and gets one ratio per row block, as
google's three variables do. One ratio over the three moved them by other amounts: at initialisation Q's and K's
gradients are far smaller than V's, so their normalised steps were a fraction of google's.

Under fp16 loss scaling the optimizer takes the scaler's `found_inf` itself (`_step_supports_amp_scaling`, as
torch's fused Adam does), so a step with an overflowed gradient is skipped on the device: the moments and the
weights are left exactly as they were, and the host never waits to learn whether it was skipped (GradScaler's
default path reads `found_inf` with `.item()` before every step, a sync between backward and the update). Only
`bias_correction=True` still reads it, since its step count lives on the host.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import torch
from torch import nn


class Lamb(torch.optim.Optimizer):
    """Groups may set `weight_decay` and `trust_ratio` (bool); the caller decides which tensors go where.
    `trust_ratio_splits`: {tensor: k} for tensors that stack k of the reference's variables along dim 0, each
    of which gets its own trust ratio (not part of the state dict: the model says it, `trust_ratio_splits`)."""

    # GradScaler.step hands this optimizer `found_inf` and `grad_scale` (attributes set for the call) instead of
    # reading found_inf on the host and skipping the call.
    _step_supports_amp_scaling = True

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01, trust_ratio: bool = True,
                 bias_correction: bool = False, trust_ratio_splits: Mapping[torch.Tensor, int] | None = None):
        # written `not x > 0` so that NaN is refused too (`nan <= 0` is False: a NaN lr made every weight NaN at
        # the first step); betas must be a pair, as torch's optimizers check (one beta failed at the first step)
        if (not lr > 0 or not eps > 0 or not weight_decay >= 0 or len(tuple(betas)) != 2
                or not all(0 <= b < 1 for b in betas)):
            raise ValueError(f"bad LAMB hyper-parameters: lr={lr}, betas={betas}, eps={eps}, wd={weight_decay} "
                             "(lr and eps must be > 0, weight_decay >= 0, betas two numbers in [0, 1))")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, trust_ratio=trust_ratio,
                        bias_correction=bias_correction)
        super().__init__(params, defaults)
        self.trust_ratio_splits = dict(trust_ratio_splits or {})
        for tensor, k in self.trust_ratio_splits.items():
            if k < 1 or tensor.shape[0] % k:
                raise ValueError(f"trust_ratio_splits: a tensor of shape {tuple(tensor.shape)} does not split "
                                 f"into {k} equal blocks along dim 0")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        found_inf, grad_scale = getattr(self, "found_inf", None), getattr(self, "grad_scale", None)
        if found_inf is not None and any(g["bias_correction"] for g in self.param_groups) and found_inf.item():
            return loss                       # skipped; the host-side step count must not advance (one sync)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if any(p.grad.is_sparse for p in params):   # else "Could not run 'aten::lerp_.Scalar' ... 'SparseCPU'"
                raise RuntimeError("Lamb does not support sparse gradients (an nn.Embedding(sparse=True)?); "
                                   "use dense gradients, or torch.optim.SparseAdam for those parameters")
            if params:
                self._update_group(group, params, found_inf, grad_scale)
        return loss

    def _state_lists(self, params: list[torch.Tensor]):
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
        exp_avg = [self.state[p]["exp_avg"] for p in params]
        exp_avg_sq = [self.state[p]["exp_avg_sq"] for p in params]
        return exp_avg, exp_avg_sq, [self.state[p]["step"] for p in params]

    def _update_group(self, group: dict, params: list[torch.Tensor], found_inf: torch.Tensor | None = None,
                      grad_scale: torch.Tensor | None = None) -> None:
        beta1, beta2 = group["betas"]
        grads = [p.grad for p in params]
        exp_avg, exp_avg_sq, steps = self._state_lists(params)
        keep = None
        if grad_scale is not None:                                       # grads still scaled (no unscale_ call)
            grads = torch._foreach_div(grads, grad_scale.to(params[0].device))
        if found_inf is None or group["bias_correction"]:   # (bias correction read found_inf in step(): finite)
            torch._foreach_lerp_(exp_avg, grads, 1 - beta1)              # m = b1 m + (1-b1) g
            torch._foreach_mul_(exp_avg_sq, beta2)
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
        else:
            # Skipped on the device when found_inf > 0: zero gradients, moment factors 1, update times 0.
            skip = found_inf.to(params[0].device) > 0
            keep = (~skip).to(params[0].dtype)
            grads = [torch.where(skip, 0.0, g) for g in grads]            # inf/nan gradients never reach m, v
            weight = keep * (1 - beta1)
            torch._foreach_lerp_(exp_avg, grads, [weight] * len(grads))  # m = b1 m + (1-b1) g, or m
            torch._foreach_mul_(exp_avg_sq, torch.where(skip, 1.0, beta2).to(params[0].dtype))
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
        if group["bias_correction"]:
            # each tensor's own count, as torch's Adam: a tensor without a gradient at a step skips it (it took
            # the group's first tensor's count, so one that joined later was corrected as though it had its steps)
            denom = torch._foreach_sqrt(torch._foreach_div(exp_avg_sq, [1 - beta2 ** s for s in steps]))
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(torch._foreach_div(exp_avg, [1 - beta1 ** s for s in steps]), denom)
        else:
            denom = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(exp_avg, denom)
        if group["weight_decay"]:
            torch._foreach_add_(update, params, alpha=group["weight_decay"])
        if group["trust_ratio"]:
            splits = [self.trust_ratio_splits.get(p, 1) for p in params]
            update = [u.contiguous() if k > 1 else u for u, k in zip(update, splits)]   # so blocks are views
            pieces_w = [w for p, k in zip(params, splits) for w in _blocks(p, k)]
            pieces_u = [u for t, k in zip(update, splits) for u in _blocks(t, k)]   # views: scaled in place
            torch._foreach_mul_(pieces_u, _trust_ratios(pieces_w, pieces_u))
        if keep is not None:
            torch._foreach_mul_(update, keep)                            # 0 on a skipped step: w unchanged
        torch._foreach_add_(params, update, alpha=-group["lr"])


def _blocks(tensor: torch.Tensor, k: int) -> list[torch.Tensor]:
    """The tensor itself, or its k equal blocks along dim 0 (views when it is contiguous)."""
    return [tensor] if k == 1 else list(tensor.reshape(k, -1).unbind(0))


def _trust_ratios(params: list[torch.Tensor], update: list[torch.Tensor]) -> list[torch.Tensor]:
    """||w|| / ||u|| per tensor, 1 where either norm is 0 (the reference's nested tf.where)."""
    w_norm = torch.stack(torch._foreach_norm(params))
    u_norm = torch.stack(torch._foreach_norm(update))
    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm.clamp_min(1e-38), torch.ones_like(w_norm))
    return list(ratio.unbind())


def no_decay_names(model: nn.Module) -> set[str]:
    """Names of LayerNorm weights and of all biases: the reference excludes them from weight decay and
    from the trust ratio (`exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]`)."""
    names = set()
    for module_name, module in model.named_modules():
        for param_name, _ in module.named_parameters(recurse=False):
            if isinstance(module, nn.LayerNorm) or param_name == "bias":
                names.add(f"{module_name}.{param_name}" if module_name else param_name)
    return names


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed + trust ratio, and the exempt LayerNorm weights and biases."""
    exempt = no_decay_names(model)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [
        {"params": [p for n, p in named if n not in exempt], "weight_decay": weight_decay, "trust_ratio": True},
        {"params": [p for n, p in named if n in exempt], "weight_decay": 0.0, "trust_ratio": False},
    ]


def trust_ratio_splits(model: nn.Module) -> dict[torch.Tensor, int]:
    """The tensors of `model` that hold several of google-research's variables: each attention's fused QKV weight
    (google's query, key and value kernels) -> 3. Its bias is exempt from the trust ratio anyway."""
    from albertlm.model.albert import Attention

    return {m.qkv.weight: 3 for m in model.modules() if isinstance(m, Attention) and m.qkv.weight.requires_grad}


def build_optimizer(model: nn.Module, optim) -> torch.optim.Optimizer:
    """LAMB, AdamW or google's AdamWeightDecay from an `OptimConfig`, with the same decay exemptions for all."""
    groups = [g for g in param_groups(model, optim.weight_decay) if g["params"]]
    betas = (optim.beta1, optim.beta2)
    if optim.name == "adamweightdecay":
        # google-research's optimization.AdamWeightDecayOptimizer (run_classifier, run_squad, run_race): Adam's
        # moments without bias correction, eps added to sqrt(v), the decay added to the update. That is this LAMB
        # with no trust ratio anywhere (tests/test_google_finetune_audit24.py); its steps early in a run are several
        # times torch AdamW's (docs/finetuning.md)
        return Lamb([{**g, "trust_ratio": False} for g in groups], lr=optim.lr, betas=betas, eps=optim.eps,
                    bias_correction=False)
    if optim.name == "adamw":
        # On CUDA torch's fused kernel: one launch per step, and under fp16 loss scaling it takes found_inf on
        # the device (no sync in GradScaler.step). Elsewhere foreach (the CPU numbers of every recorded run).
        on_cuda = all(p.is_cuda for g in groups for p in g["params"])
        kind = {"fused": True} if on_cuda else {"foreach": True}
        return torch.optim.AdamW(groups, lr=optim.lr, betas=betas, eps=optim.eps, **kind)
    return Lamb(groups, lr=optim.lr, betas=betas, eps=optim.eps, bias_correction=optim.bias_correction,
                trust_ratio_splits=trust_ratio_splits(model))
