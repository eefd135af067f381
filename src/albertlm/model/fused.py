"""Linear layers with the bias, the residual add and (without autograd) the activation computed inside
oneDNN's GEMM on CPU. Same results as `act(F.linear(x, W, b))` / `residual + F.linear(x, W, b)`.

Why: on CPU, `addmm` first copies the broadcast bias into its output, and the activation and the
residual add are further passes over (B, T, I) / (B, T, H) tensors. At albert-base sizes these
memory passes cost as much as a third of the matmul time (torch.profiler, benchmarks/model_speed.py).
The fused path runs only for fp32 CPU tensors outside autocast (bf16 autocast keeps the plain ops,
whose weight casts autocast caches); everything else takes the plain path.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
# our activation name -> oneDNN post-op (name, algorithm)
POST_OPS = {None: ("none", ""), "gelu": ("gelu", "none"), "gelu_new": ("gelu", "tanh"), "relu": ("relu", "")}
PLAIN = {None: lambda x: x, "gelu": F.gelu, "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}


def _fusable(x: Tensor, layer: nn.Linear) -> bool:
    return (AVAILABLE and x.device.type == "cpu" and x.dtype == layer.weight.dtype == torch.float32
            and layer.bias is not None and not torch.is_autocast_enabled("cpu"))


def _needs_grad(*tensors: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


class _BiasLinear(torch.autograd.Function):
    """y = x W^T + b (+ residual) in one oneDNN call; the backward is the usual three matmuls/sums."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, residual: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_residual = residual is not None
        if residual is None:
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, bias, "add")

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        flat = grad.reshape(-1, grad.shape[-1])  # (B*T, out)
        need = ctx.needs_input_grad
        return (grad @ weight if need[0] else None,
                flat.t() @ x.reshape(-1, x.shape[-1]) if need[1] else None,
                flat.sum(0) if need[2] else None,
                grad if ctx.has_residual and need[3] else None)


def linear(x: Tensor, layer: nn.Linear, activation: str | None = None) -> Tensor:
    """activation(x W^T + b)."""
    if not _fusable(x, layer):
        return PLAIN[activation](layer(x))
    if not _needs_grad(x, layer.weight, layer.bias):  # inference: the activation is fused too
        attr, algorithm = POST_OPS[activation]
        return torch.ops.mkldnn._linear_pointwise(x, layer.weight, layer.bias, attr, [], algorithm)
    return PLAIN[activation](_BiasLinear.apply(x, layer.weight, layer.bias, None))


def residual_linear(residual: Tensor, x: Tensor, layer: nn.Linear, dropout: nn.Dropout) -> Tensor:
    """residual + dropout(x W^T + b); fused when the dropout is inactive (eval, or p = 0 as in v2)."""
    if not _fusable(x, layer) or (dropout.training and dropout.p > 0) or residual.dtype != x.dtype:
        return residual + dropout(layer(x))
    if not _needs_grad(x, residual, layer.weight, layer.bias):
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, layer.weight, layer.bias, "add")
    return _BiasLinear.apply(x, layer.weight, layer.bias, residual)
