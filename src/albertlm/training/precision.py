"""Numeric precision policy and activation checkpointing, applied from outside the model.

fp32: nothing. bf16: autocast (CPU and CUDA); weights, optimizer state and losses stay fp32.
fp16: autocast + dynamic loss scaling (`torch.amp.GradScaler`), CUDA only.
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from albertlm.errors import UserError


def autocast(precision: str, device: torch.device):
    """The forward-pass context for a precision; fp32 is a no-op context."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def check_precision(precision: str, device: torch.device) -> None:
    if precision not in ("fp32", "bf16", "fp16"):
        raise UserError(f"--precision must be fp32, bf16 or fp16, not {precision!r}")
    if precision == "fp16" and device.type != "cuda":
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


# ---- STUBS until speed's precision.py lands (TEAM.md "Interfaces" 1); the lead replaces them at merge ----
def prepare_model(model: nn.Module, *, precision: str, device: torch.device, activation_checkpointing: bool = False,
                  fast_paths: str = "auto") -> nn.Module:
    """In place: activation checkpointing (and, in speed's version, the probed CPU fast paths)."""
    if activation_checkpointing:
        enable_activation_checkpointing(model)
    return model


def compile_model(model: nn.Module, mode: str) -> nn.Module:
    """torch.compile with a mode ("default", "reduce-overhead", "max-autotune"); "none" returns the model."""
    if mode == "none":
        return model
    return torch.compile(model, mode=None if mode == "default" else mode)
