"""Fine-tuning run settings (typed; no torch): the training sections shared with pretraining plus the
task-level ones. Recipes in `albertlm.tasks.recipes` fill them per task."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from albertlm.config.model import Config, require
from albertlm.config.overrides import check_types
from albertlm.config.run import DistConfig, OptimConfig, TrainConfig


def finetune_optim(**changes: Any) -> OptimConfig:
    """AdamW with google-research's epsilon, warmup over 10% of the steps."""
    return OptimConfig(**{**dict(name="adamw", lr=2e-5, weight_decay=0.01, eps=1e-6, clip_norm=1.0,
                                 warmup_steps=-1, warmup_ratio=0.1), **changes})


def finetune_train(**changes: Any) -> TrainConfig:
    """3 epochs of batch 32, a dev evaluation per epoch, one checkpoint kept."""
    return TrainConfig(**{**dict(max_steps=0, epochs=3.0, batch_size=32, seed=42, log_every=20, eval_every=0,
                                 save_every=0, keep_last=1), **changes})


@dataclass
class FinetuneConfig(Config):
    optim: OptimConfig = field(default_factory=finetune_optim)    # optimizer and learning-rate schedule
    train: TrainConfig = field(default_factory=finetune_train)    # the training loop (shared with pretraining)
    dist: DistConfig = field(default_factory=DistConfig)          # processes and devices
    max_seq_length: int = 128            # tokens per example; longer ones are truncated (SQuAD: cut into windows)
    eval_batch_size: int = 64            # examples per forward pass when evaluating or predicting
    hidden_dropout: float | None = None  # dropout of the encoder; none = keep the checkpoint's
    attention_dropout: float | None = None  # dropout on attention probabilities; none = keep the checkpoint's
    classifier_dropout: float | None = None  # dropout before the task head; none = keep the checkpoint's
    squad_head: Literal["bert", "xlnet"] = "bert"  # SQuAD's answer head: bert (start/end logits: BERT's, transformers') or xlnet (google's run_squad_v2.py head: start/end beam, answer_class for no-answer; v2.0 only; picked by --recipe squad2.0 and by a --model holding it)

    def __post_init__(self) -> None:
        check_types(self)
        require(self.max_seq_length >= 8, "max_seq_length", self.max_seq_length, "must be >= 8")
        require(self.eval_batch_size >= 1, "eval_batch_size", self.eval_batch_size, "must be >= 1")
        for name in ("hidden_dropout", "attention_dropout", "classifier_dropout"):
            value = getattr(self, name)
            require(value is None or 0.0 <= value < 1.0, name, value, "must be in [0, 1)")

