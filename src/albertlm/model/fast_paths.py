"""CPU fast paths, applied from outside the model (like activation checkpointing), only where this CPU and
this torch build support them and they pay.

`apply_fast_paths(model, device, precision)` changes the class of each `Attention` and `FeedForward` module,
the QKV linears and the E -> H projection to a subclass whose linears run in oneDNN with the bias, the residual add and (in
inference) the activation inside the GEMM (`model/fused.py`). Parameters, state-dict keys and results stay
those of the plain model (tests compare both paths, forward and backward); `remove_fast_paths` undoes it.

`choose_fast_path(device, precision)` is the probe, per dtype:
- bf16 (autocast): only where bf16 GEMMs run in hardware (`fused.bf16_supported()`: oneDNN has bf16 GEMMs,
  `torch.ops.mkldnn._is_mkldnn_bf16_supported()`, and the CPU has bf16 instructions, AVX512_BF16 or AMX). On an
  AVX2-only CPU the fused bf16 linear cannot even be built; on AVX-512 without bf16 instructions oneDNN emulates
  it, as slow as the plain ops there (2.4x slower than fp32), and bf16 gets the emulation warning.
- fp32: only on CPUs whose ATen kernels run AVX-512 (`torch.backends.cpu.get_cpu_capability()`). With AVX2
  MKL's `addmm` was faster than the fused oneDNN linear in our A/B runs (docs/model.md, Speed).
- anything else (CUDA, fp16, no oneDNN, a torch without the private ops): the plain model.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from albertlm.model import fused
from albertlm.model.albert import Attention, Embeddings, FeedForward

FP32_CAPABILITIES = ("AVX512", "AVX512_BF16", "AMX")  # get_cpu_capability() values where fp32 fused pays


def cpu_capability() -> str:
    """The vector ISA torch's CPU kernels run with here ("AVX2", "AVX512", ...; "DEFAULT" if unknown)."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except Exception:  # an older torch without the query
        return "DEFAULT"


def choose_fast_path(device: torch.device | str, precision: str) -> torch.dtype | None:
    """The dtype the CPU fast path runs in for this device and precision, or None for the plain model."""
    if torch.device(device).type != "cpu" or not fused.AVAILABLE:
        return None
    if precision == "bf16":
        return torch.bfloat16 if fused.BF16 else None
    if precision == "fp32":
        return torch.float32 if cpu_capability() in FP32_CAPABILITIES else None
    return None


class FusedLinear(nn.Linear):
    """x W^T + b with the bias inside the GEMM (no broadcast copy of the bias first, as `addmm` does)."""
    fused_dtype: torch.dtype

    def forward(self, x: Tensor) -> Tensor:
        return fused.linear(x, self, None, self.fused_dtype)


class FusedAttention(Attention):
    """The output projection with the residual add inside the GEMM (QKV is a `FusedLinear`)."""
    fused_dtype: torch.dtype

    def output(self, residual: Tensor, y: Tensor) -> Tensor:
        return self.norm(fused.residual_linear(residual, y, self.out, self.dropout, self.fused_dtype))


class FusedFeedForward(FeedForward):
    """Up projection with the activation (in inference) and down projection with the residual add fused."""
    fused_dtype: torch.dtype

    def forward(self, x: Tensor) -> Tensor:
        h = fused.linear(x, self.up, self.activation, self.fused_dtype)  # (B, T, I)
        return self.norm(fused.residual_linear(x, h, self.down, self.dropout, self.fused_dtype))


SWAPS = {Attention: FusedAttention, FeedForward: FusedFeedForward, nn.Linear: FusedLinear}
PLAIN = {fast: plain for plain, fast in SWAPS.items()}


def _targets(model: nn.Module) -> list[nn.Module]:
    """The modules swapped: attention and FFN blocks, the QKV linears and the E -> H projection."""
    out = []
    for module in model.modules():
        if isinstance(module, (Attention, FeedForward)):
            out += [module, module.qkv] if isinstance(module, Attention) else [module]
        elif isinstance(module, Embeddings) and module.project is not None:
            out.append(module.project)
    return out


def apply_fast_paths(model: nn.Module, device: torch.device | str, precision: str) -> torch.dtype | None:
    """In place: the fused CPU linears where `choose_fast_path` picks them; returns the dtype chosen (None:
    the model is left plain). A swapped model compiled with `torch.compile` (or exported) runs the plain ops in
    the compiled graph (inductor fuses on its own), so compile a plain model rather than swap one in first."""
    dtype = choose_fast_path(device, precision)
    if dtype is not None:
        swap_in(model, dtype)
    return dtype


def swap_in(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """In place, unprobed: the fused linears in `dtype` (float32, or bfloat16 for bf16 autocast)."""
    for module in _targets(model):
        module.__class__ = SWAPS.get(type(module), type(module))
        module.fused_dtype = dtype
    if dtype == torch.bfloat16 and not hasattr(model, "_fast_path_hooks"):  # cast each weight once per forward
        model._fast_path_hooks = (model.register_forward_pre_hook(_open_cast_scope),
                                  model.register_forward_hook(_close_cast_scope, always_call=True))
    return model


def remove_fast_paths(model: nn.Module) -> nn.Module:
    """In place: back to the plain model."""
    for module in _targets(model):
        if type(module) in PLAIN:
            module.__class__ = PLAIN[type(module)]
            del module.fused_dtype
    for hook in getattr(model, "_fast_path_hooks", ()):
        hook.remove()
    model.__dict__.pop("_fast_path_hooks", None)
    return model


def fast_path_dtype(model: nn.Module) -> torch.dtype | None:
    """The dtype the model's fast paths run in, None if it is plain."""
    return next((m.fused_dtype for m in model.modules() if type(m) in PLAIN), None)


def _open_cast_scope(module: nn.Module, args) -> None:
    if torch.compiler.is_compiling():   # traced, the fused linears take the plain ops (`fused._compute_dtype`)
        return
    module._cast_scope = fused._CASTS.set({})


def _close_cast_scope(module: nn.Module, args, output) -> None:
    if torch.compiler.is_compiling():
        return
    token = module.__dict__.pop("_cast_scope", None)
    if token is not None:
        fused._CASTS.reset(token)
