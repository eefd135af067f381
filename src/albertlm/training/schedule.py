"""Learning rate: linear warmup, then polynomial decay to zero (google-research `optimization.py`).

A pure function of the step, so resuming needs no scheduler state: `lr_at(step)` is the rate of the
optimizer update number `step` (0-based).
"""
from __future__ import annotations

WARMUP_STYLES = ("albertlm", "google")      # `OptimConfig.warmup_style`


def lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int, power: float = 1.0,
          warmup_style: str = "albertlm") -> float:
    """Warmup ramps (step+1)/warmup * lr, so the last warmup update has the full lr; after it, lr * (1 -
    step/total)^power, as the reference decays over the whole run, not after warmup. The reference's warmup is
    step/warmup * lr: its first update has rate 0 (it only fills the Adam moments) and every warmup update is lr/warmup
    below ours; from the end of the warmup on the two are the same (docs/training.md). `warmup_style="google"` is
    the reference's warmup, computed as its `init_lr * (global_step / num_warmup_steps)`, so that every step's rate
    is google's formula's (in float64; TF's is float32)."""
    if warmup_style not in WARMUP_STYLES:
        raise ValueError(f"warmup_style={warmup_style!r}: must be one of {', '.join(WARMUP_STYLES)}")
    if step < warmup_steps:
        if warmup_style == "google":
            return base_lr * (step / warmup_steps)
        return base_lr * (step + 1) / warmup_steps
    remaining = max(0.0, 1.0 - step / max(1, total_steps))
    return base_lr * remaining ** power


def set_lr(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
