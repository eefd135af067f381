"""Numeric precision policy and activation checkpointing, applied from outside the model.

fp32: nothing. bf16: autocast (CPU and CUDA); weights, optimizer state and losses stay fp32.
fp16: autocast + dynamic loss scaling (`torch.amp.GradScaler`), CUDA only.
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from albertlm.errors import UserError, say_warning
from albertlm.training.distributed import reports_here


def autocast(precision: str, device: torch.device):
    """The forward-pass context for a precision; fp32 is a no-op context."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def check_precision(precision: str, device: torch.device, training: bool = True) -> None:
    """A precision the run can use on `device`: fp16 is CUDA's. `training=False` for a command that only runs a
    model (predict, evaluate), which scales no loss: its refusal gave training's reason (loss scaling on CPU)."""
    if precision not in ("fp32", "bf16", "fp16"):
        raise UserError(f"--precision must be fp32, bf16 or fp16, not {precision!r}")
    if precision == "fp16" and device.type != "cuda":
        if not training:
            raise UserError("fp16 needs a CUDA device; use --precision fp32 or bf16 on CPU")
        raise UserError("fp16 needs a CUDA device (loss scaling on CPU is not supported); "
                        "use --precision bf16 on CPU")


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A loss scaler for fp16; None for fp32/bf16 (bf16 has fp32's exponent range, no scaling needed)."""
    check_precision(precision, device)
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def enable_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Recompute each encoder block in the backward pass instead of storing its activations; the model's
    own hook (`albertlm.model.albert.enable_activation_checkpointing`) swaps its block runner from outside."""
    from albertlm.model.albert import enable_activation_checkpointing as hook

    return hook(model)


def prepare_model(model: nn.Module, *, precision: str, device: torch.device, activation_checkpointing: bool = False,
                  fast_paths: str = "auto", warn: bool = True) -> nn.Module:
    """In place, before `.to(device)`: activation checkpointing, and (`fast_paths="auto"`) the CPU fast paths
    where `model.fast_paths.choose_fast_path` says this CPU supports them ("off": the plain model, e.g. for
    torch.compile), and on a GPU with flash attention the packed attention kernel (`enable_packed_attention`).
    bf16 on a CPU without bf16 hardware gets a one-line warning: it runs, emulated and slow (`warn=False`: a
    process that said it already, fine-tuning's best model after its run)."""
    from albertlm.model.albert import enable_packed_attention, packed_attention_supported
    from albertlm.model.fast_paths import apply_fast_paths

    if fast_paths not in ("auto", "off"):
        raise UserError(f"fast_paths must be auto or off, not {fast_paths!r}")
    if activation_checkpointing:
        enable_activation_checkpointing(model)
    if warn:
        warn_emulated_bf16(precision, device)
    if fast_paths == "auto":
        apply_fast_paths(model, device, precision)
    if packed_attention_supported(device):  # flash attention over the real tokens when the padding is skipped
        enable_packed_attention(model)
    return model


def warn_emulated_bf16(precision: str, device: torch.device | str) -> None:
    """bf16 on a CPU or GPU without bf16 hardware: one line on stderr (the first rank's) saying it runs emulated,
    slower than fp32 (CPU) or fp16 (a GPU before Ampere: T4, V100). Training, `predict` and `evaluate` say it through
    `prepare_model`."""
    if precision != "bf16" or not reports_here():
        return
    device = torch.device(device)
    if device.type == "cpu" and not cpu_has_bf16():
        from albertlm.model.fused import isa_limit_without_bf16

        limit = isa_limit_without_bf16()
        why = (f"ONEDNN_MAX_CPU_ISA={limit} keeps oneDNN from bf16 instructions" if limit else
               "this CPU has no bf16 instructions (AVX-512 BF16 or AMX)")
        say_warning(f"{why}; --precision bf16 runs emulated and is slower than fp32 here")
    elif device.type == "cuda" and not gpu_has_bf16(device):
        major, minor = torch.cuda.get_device_capability(device)
        say_warning(f"{device} has compute capability {major}.{minor}, without bf16 hardware (8.0, Ampere, and newer "
                    "have it); --precision bf16 runs emulated and is slower than fp16 here: use --precision fp16")


def gpu_has_bf16(device: torch.device | str) -> bool:
    """Whether this CUDA GPU computes bf16 in hardware: compute capability 8.0 (Ampere) or newer, as
    `torch.cuda.is_bf16_supported(including_emulation=False)` says of the current GPU (on T4 and V100 torch runs
    bf16 emulated). ROCm GPUs, and a machine whose CUDA cannot be asked, count as having it (nothing to say)."""
    if torch.version.hip or not torch.cuda.is_available():
        return True
    try:
        return tuple(torch.cuda.get_device_capability(device)) >= (8, 0)
    except Exception:  # noqa: BLE001 (a device torch cannot describe: not ours to warn about)
        return True


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 matmuls in hardware: oneDNN has bf16 GEMMs and the CPU bf16 instructions
    (`model.fused.bf16_supported`; oneDNN alone also says yes on AVX-512 without them, where it emulates bf16)."""
    from albertlm.model import fused

    return fused.bf16_supported()


def compile_model(model: nn.Module, mode: str) -> nn.Module:
    """torch.compile with a mode ("default", "reduce-overhead", "max-autotune"); "none" returns the model.
    (torch compiles lazily: the first steps pay the compile time, which the loop logs.)"""
    if mode == "none":
        return model
    return torch.compile(model, mode=None if mode == "default" else mode)
