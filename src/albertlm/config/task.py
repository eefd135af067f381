"""Fine-tuning run settings (typed; no torch). Recipes in `albertlm.tasks.recipes` fill them per task."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from albertlm.config.model import ConfigError


@dataclass
class FinetuneConfig:
    lr: float = 2e-5
    batch_size: int = 32                 # examples per optimizer step
    grad_accum: int = 1                  # micro-batches per step (batch_size / grad_accum each): less memory
    epochs: float = 3.0                  # used when max_steps is 0
    max_steps: int = 0                   # 0 = epochs * steps per epoch
    warmup_steps: int = -1               # -1 = warmup_ratio * total steps
    warmup_ratio: float = 0.1
    max_seq_length: int = 128
    weight_decay: float = 0.01           # not on LayerNorm weights and biases
    clip_norm: float = 1.0
    adam_eps: float = 1e-6               # google-research's AdamW epsilon
    hidden_dropout: float | None = None  # None = keep the checkpoint's
    attention_dropout: float | None = None
    classifier_dropout: float | None = None
    seed: int = 42
    precision: str = "fp32"              # fp32 | bf16 | fp16 (CUDA)
    eval_batch_size: int = 64
    eval_every: int = 0                  # steps between dev evaluations; 0 = once per epoch
    log_every: int = 20
    device: str = "auto"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, name: str, why: str) -> None:
            if not ok:
                raise ConfigError(f"finetune.{name}={getattr(self, name)!r}: {why}")

        need(self.lr > 0, "lr", "must be positive")
        need(self.batch_size >= 1, "batch_size", "must be >= 1")
        need(1 <= self.grad_accum <= self.batch_size, "grad_accum", "must be in [1, batch_size]")
        need(self.eval_batch_size >= 1, "eval_batch_size", "must be >= 1")
        need(self.epochs > 0 or self.max_steps > 0, "epochs", "must be positive (or set max_steps)")
        need(self.max_steps >= 0, "max_steps", "must be >= 0 (0 = from epochs)")
        need(0.0 <= self.warmup_ratio < 1.0, "warmup_ratio", "must be in [0, 1)")
        need(self.max_seq_length >= 8, "max_seq_length", "must be >= 8")
        need(self.precision in ("fp32", "bf16", "fp16"), "precision", "must be fp32, bf16 or fp16")
        for name in ("hidden_dropout", "attention_dropout", "classifier_dropout"):
            value = getattr(self, name)
            need(value is None or 0.0 <= value < 1.0, name, "must be in [0, 1)")

    def total_steps(self, steps_per_epoch: int) -> int:
        return self.max_steps or max(1, round(self.epochs * steps_per_epoch))

    def warmup(self, total_steps: int) -> int:
        return self.warmup_steps if self.warmup_steps >= 0 else int(self.warmup_ratio * total_steps)

    def replace(self, **changes: Any) -> "FinetuneConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
