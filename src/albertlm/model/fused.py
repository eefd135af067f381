"""Linear layers with the bias, the residual add and (without autograd) the activation computed inside
oneDNN's GEMM on CPU. Same results as `act(F.linear(x, W, b))` / `residual + dropout(F.linear(x, W, b))`.

Why: on CPU, `addmm` first copies the broadcast bias into its output, and the activation and the
residual add are further passes over (B, T, I) / (B, T, H) tensors. Each such op is a parallel
region, which costs a lot more than its bytes when other processes share the cores; at albert-base
sizes they took as long as the matmuls in bf16 (torch.profiler, benchmarks/model_speed.py).

Used for CPU tensors in fp32, or under bf16 autocast; anything else takes the plain ops. Under
autocast the weights are cast to bf16 as autocast would, once per `cast_once()` scope (one model
forward), so a weight shared by 12 layers is cast once and its gradient accumulates in bf16.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _bf16_supported() -> bool:
    """oneDNN bf16 GEMMs need AVX-512 (bf16 instructions) or AMX; on AVX2-only CPUs they fail to build."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # an older or newer torch without the probe behaves as "not supported"
        return False


BF16 = AVAILABLE and _bf16_supported()
# our activation name -> oneDNN post-op (name, algorithm)
POST_OPS = {None: ("none", ""), "gelu": ("gelu", "none"), "gelu_new": ("gelu", "tanh"), "relu": ("relu", "")}
PLAIN = {None: lambda x: x, "gelu": F.gelu, "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}
_CASTS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("albertlm_casts", default=None)


@contextlib.contextmanager
def cast_once() -> Iterator[None]:
    """Inside, each parameter is cast to the autocast dtype at most once (like autocast's own cache)."""
    token = _CASTS.set({})
    try:
        yield
    finally:
        _CASTS.reset(token)


def _compute_dtype(x: Tensor, layer: nn.Linear) -> torch.dtype | None:
    """The dtype the fused op runs in, or None for the plain path."""
    if not AVAILABLE or x.device.type != "cpu" or layer.bias is None or layer.weight.dtype != torch.float32:
        return None
    if torch.is_autocast_enabled("cpu"):
        return torch.bfloat16 if BF16 and torch.get_autocast_dtype("cpu") == torch.bfloat16 else None
    return torch.float32 if x.dtype == torch.float32 else None


def _cast(t: Tensor, dtype: torch.dtype) -> Tensor:
    """A parameter in `dtype`, cached for the current `cast_once` scope."""
    if t.dtype == dtype:
        return t
    cache = _CASTS.get()
    if cache is None:
        return t.to(dtype)
    if id(t) not in cache:
        cache[id(t)] = (t, t.to(dtype))  # keep t alive so its id stays unique
    return cache[id(t)][1]


def _needs_grad(*tensors: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


class _BiasLinear(torch.autograd.Function):
    """y = x W^T + b (+ residual) in one oneDNN call; the backward is the usual matmuls and sums."""

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
    dtype = _compute_dtype(x, layer)
    if dtype is None:
        return PLAIN[activation](layer(x))
    x, w, b = x.to(dtype), _cast(layer.weight, dtype), _cast(layer.bias, dtype)
    if not _needs_grad(x, w, b):  # inference: the activation is fused too
        attr, algorithm = POST_OPS[activation]
        return torch.ops.mkldnn._linear_pointwise(x, w, b, attr, [], algorithm)
    return PLAIN[activation](_BiasLinear.apply(x, w, b, None))


def residual_linear(residual: Tensor, x: Tensor, layer: nn.Linear, dropout: nn.Dropout) -> Tensor:
    """residual + dropout(x W^T + b); fused when the dropout is inactive (eval, or p = 0 as in v2)."""
    dtype = _compute_dtype(x, layer)
    if dtype is None or (dropout.training and dropout.p > 0) or residual.dtype != dtype:
        return residual + dropout(layer(x))
    x, w, b = x.to(dtype), _cast(layer.weight, dtype), _cast(layer.bias, dtype)
    if not _needs_grad(x, residual, w, b):
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, w, b, "add")
    return _BiasLinear.apply(x, w, b, residual)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> Tensor:
    """SDPA; when training in bf16 on CPU with short sequences (T <= 128) it runs in fp32, because
    there the bf16 flash-attention backward is slower than the fp32 one (measured: 26 vs 15 ms per
    albert-base layer at 8x128, a 1.12x faster training step; even at 4x256, bf16 faster at 2x512)."""
    if q.dtype == torch.bfloat16 and q.device.type == "cpu" and q.shape[-2] <= 128 and _needs_grad(q, k, v):
        with torch.autocast("cpu", enabled=False):
            y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout_p)
        return y.to(torch.bfloat16)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
