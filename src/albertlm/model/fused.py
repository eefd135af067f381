"""Linear layers with the bias, the residual add and (without autograd) the activation computed inside
oneDNN's GEMM on CPU. Same results as `act(F.linear(x, W, b))` / `residual + dropout(F.linear(x, W, b))`.

Why: on CPU, `addmm` first copies the broadcast bias into its output, and the activation and the
residual add are further passes over (B, T, I) / (B, T, H) tensors. Each such op is a parallel
region, which costs a lot more than its bytes when other processes share the cores; at albert-base
sizes they took as long as the matmuls in bf16 (torch.profiler, benchmarks/model_speed.py).

The model never calls these: `model/fast_paths.py` swaps them in from outside, only where a probe of this
CPU and torch build says the dtype is supported (and pays: bf16 only with bf16 instructions, `bf16_supported`).
Each call still checks its inputs and takes the plain ops for anything else (CUDA tensors, another dtype, active
dropout, a torch.compile / torch.export trace), so a swapped model never crashes.
Under bf16 autocast the weights are cast to bf16 as autocast would, once per `cast_once()` scope (one model
forward, opened by the fast paths' forward hooks), so a weight shared by 12 layers is cast once.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def bf16_supported() -> bool:
    """bf16 GEMMs run in hardware here: oneDNN builds them (`onednn_bf16`) and the CPU has bf16 instructions
    (`cpu_bf16_instructions`). On AVX-512 without bf16 instructions (Skylake to Ice Lake) oneDNN builds them too
    but emulates them with fp32 FMAs, 2.4x slower than fp32 (albert-base sizes, measured under
    ONEDNN_MAX_CPU_ISA=AVX512_CORE): there bf16 is emulated as on AVX2, no fused path, and a warning."""
    return onednn_bf16() and cpu_bf16_instructions()


def onednn_bf16() -> bool:
    """oneDNN builds bf16 GEMMs (`torch.ops.mkldnn._is_mkldnn_bf16_supported()`): on x86 from AVX-512 on, with
    bf16 instructions or without; on AVX2-only CPUs they fail to build."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # an older or newer torch without the probe behaves as "not supported"
        return False


# oneDNN's names of the x86 instruction sets without bf16 instructions (ONEDNN_MAX_CPU_ISA holds oneDNN below them)
ISAS_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI")


def isa_limit_without_bf16() -> str | None:
    """ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) where it names an instruction set without bf16 instructions."""
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""
    return isa if isa.strip().upper() in ISAS_WITHOUT_BF16 else None


def cpu_bf16_instructions() -> bool:
    """Whether an x86 CPU has bf16 instructions oneDNN uses (AVX512_BF16, AMX-BF16, AVX-NE-CONVERT; from torch's
    cpuinfo) and ONEDNN_MAX_CPU_ISA does not hold oneDNN below them. Elsewhere (ARM) oneDNN's own probe already
    asks the CPU for bf16, so this says True; so does a torch that cannot tell (the probe alone decides)."""
    try:
        caps = dict(torch.cpu.get_capabilities())
    except Exception:  # an older torch without get_capabilities: its private queries
        try:
            caps = {"avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
                    "amx_bf16": torch.cpu._is_amx_tile_supported()}
        except Exception:
            return True
    if "avx512_bf16" not in caps:  # not x86
        return True
    if isa_limit_without_bf16() is not None:
        return False
    return any(bool(caps.get(name)) for name in ("avx512_bf16", "amx_bf16", "avx_ne_convert", "avx10_1"))


BF16 = AVAILABLE and bf16_supported()
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


def _compute_dtype(x: Tensor, layer: nn.Linear, fused: torch.dtype) -> torch.dtype | None:
    """`fused` (the dtype the fast path was chosen for) when this call can run fused in it, else None. Never while
    torch.compile / torch.export traces: the private oneDNN ops have no fake-tensor kernels (a swapped model failed
    `torch.compile(fullgraph=True)`), and inductor does its own fusion; the plain ops give one graph."""
    if torch.compiler.is_compiling():
        return None
    if x.device.type != "cpu" or layer.bias is None or layer.weight.dtype != torch.float32:
        return None
    if torch.is_autocast_enabled("cpu"):  # bf16 only where oneDNN has bf16 GEMMs (a forced `swap_in` elsewhere)
        return fused if fused == torch.bfloat16 and torch.get_autocast_dtype("cpu") == torch.bfloat16 and BF16 else None
    return fused if fused == torch.float32 and x.dtype == torch.float32 else None


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


def linear(x: Tensor, layer: nn.Linear, activation: str | None, fused: torch.dtype) -> Tensor:
    """activation(x W^T + b)."""
    dtype = _compute_dtype(x, layer, fused)
    if dtype is None:
        return PLAIN[activation](F.linear(x, layer.weight, layer.bias))
    x, w, b = x.to(dtype), _cast(layer.weight, dtype), _cast(layer.bias, dtype)
    if not _needs_grad(x, w, b):  # inference: the activation is fused too
        attr, algorithm = POST_OPS[activation]
        return torch.ops.mkldnn._linear_pointwise(x, w, b, attr, [], algorithm)
    return PLAIN[activation](_BiasLinear.apply(x, w, b, None))


def residual_linear(residual: Tensor, x: Tensor, layer: nn.Linear, dropout: nn.Dropout,
                    fused: torch.dtype) -> Tensor:
    """residual + dropout(x W^T + b); fused when the dropout is inactive (eval, or p = 0 as in v2)."""
    dtype = _compute_dtype(x, layer, fused)
    if dtype is None or (dropout.training and dropout.p > 0) or residual.dtype != dtype:
        return residual + dropout(F.linear(x, layer.weight, layer.bias))
    x, w, b = x.to(dtype), _cast(layer.weight, dtype), _cast(layer.bias, dtype)
    if not _needs_grad(x, residual, w, b):
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, w, b, "add")
    return _BiasLinear.apply(x, w, b, residual)
