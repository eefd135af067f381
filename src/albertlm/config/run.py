"""Run configuration: everything about a training run that is not the model (layer 0, no torch).

`RunConfig` nests `model` (ModelConfig) + `optim` + `train` + `data` + `dist`; every field can be set with a
dotted override (`--optim.weight_decay=0.0`). Recipes are functions returning a `RunConfig`:
`paper_recipe()` is the ALBERT paper's pretraining run (google-research `run_pretraining.py` + Section 4.1).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from albertlm.config.model import ConfigError, ModelConfig

PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("lamb", "adamw")


def _need(ok: bool, section: str, name: str, value: Any, why: str) -> None:
    if not ok:
        raise ConfigError(f"{section}.{name}={value!r}: {why}")


@dataclass
class OptimConfig:
    name: Literal["lamb", "adamw"] = "lamb"
    lr: float = 0.00176                 # paper: LAMB, 0.00176 for batch 4096
    weight_decay: float = 0.01          # not applied to LayerNorm weights and biases
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-6
    bias_correction: bool = False       # google-research LAMB has none; AdamW always corrects
    clip_norm: float = 1.0              # global gradient norm; 0 = off
    warmup_steps: int = 3125
    decay_power: float = 1.0            # polynomial decay to 0 over train.max_steps (1 = linear)

    def validate(self) -> None:
        _need(self.name in OPTIMIZERS, "optim", "name", self.name, f"must be one of {', '.join(OPTIMIZERS)}")
        _need(self.lr > 0, "optim", "lr", self.lr, "must be positive")
        _need(self.weight_decay >= 0, "optim", "weight_decay", self.weight_decay, "must be >= 0")
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            _need(0 <= value < 1, "optim", name, value, "must be in [0, 1)")
        _need(self.eps > 0, "optim", "eps", self.eps, "must be positive")
        _need(self.clip_norm >= 0, "optim", "clip_norm", self.clip_norm, "must be >= 0 (0 = off)")
        _need(self.warmup_steps >= 0, "optim", "warmup_steps", self.warmup_steps, "must be >= 0")
        _need(self.decay_power >= 0, "optim", "decay_power", self.decay_power, "must be >= 0")


@dataclass
class TrainConfig:
    max_steps: int = 125_000
    batch_size: int = 4096              # global: summed over processes and accumulation micro-steps
    micro_batch_size: int = 0           # per process and forward pass; 0 = batch_size / world_size
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    activation_checkpointing: bool = False
    seed: int = 12345
    log_every: int = 10
    eval_every: int = 1000              # 0 = only at the end
    eval_batches: int = 20              # micro-batches of the held-out data per evaluation; 0 = all
    save_every: int = 1000              # 0 = only at the end (and on Ctrl-C)
    keep_last: int = 3                  # checkpoints kept in RUN_DIR/checkpoints
    max_minutes: float = 0.0            # wall-clock budget: stop (and save) when exceeded; 0 = none
    progress: bool = True               # tqdm bar on rank 0
    tensorboard: bool = True

    def validate(self) -> None:
        for name in ("max_steps", "batch_size"):
            value = getattr(self, name)
            _need(value >= 1, "train", name, value, "must be >= 1")
        for name in ("micro_batch_size", "log_every", "eval_every", "eval_batches", "save_every"):
            value = getattr(self, name)
            _need(value >= 0, "train", name, value, "must be >= 0")
        _need(self.max_minutes >= 0, "train", "max_minutes", self.max_minutes, "must be >= 0 (0 = no budget)")
        _need(self.keep_last >= 1, "train", "keep_last", self.keep_last, "must be >= 1")
        _need(self.precision in PRECISIONS, "train", "precision", self.precision,
              f"must be one of {', '.join(PRECISIONS)}")

    def accumulation_steps(self, world_size: int) -> int:
        """Micro-batches per process per optimizer step, so the global batch never depends on the layout."""
        micro = self.micro_batch_size or self.batch_size // world_size
        per_step = world_size * micro
        if micro < 1 or self.batch_size % per_step:
            raise ConfigError(f"train.batch_size={self.batch_size} is not a multiple of world_size "
                              f"({world_size}) x micro_batch_size ({micro})")
        return self.batch_size // per_step

    def local_micro_batch(self, world_size: int) -> int:
        return self.micro_batch_size or self.batch_size // world_size


@dataclass
class DataConfig:
    path: str = ""                       # a directory written by `albertlm data build` (meta.json + shards)
    eval_path: str = ""                  # held-out data; "" = the builder's held-out split inside `path`
    dynamic_masking: bool = False        # a new mask per epoch instead of the builder's static masks
    num_workers: int = 0                 # DataLoader worker processes per rank

    def validate(self) -> None:
        _need(self.num_workers >= 0, "data", "num_workers", self.num_workers, "must be >= 0")


@dataclass
class DistConfig:
    backend: Literal["auto", "gloo", "nccl"] = "auto"   # auto: nccl on CUDA, gloo on CPU
    device: str = "auto"                                # auto: cuda:LOCAL_RANK if available, else cpu
    timeout_minutes: int = 30

    def validate(self) -> None:
        _need(self.backend in ("auto", "gloo", "nccl"), "dist", "backend", self.backend,
              "must be auto, gloo or nccl")
        _need(self.timeout_minutes >= 1, "dist", "timeout_minutes", self.timeout_minutes, "must be >= 1")


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    preset: str = "albert-base"
    init_from: str = ""                  # checkpoint dir (ours or transformers') to start from

    def validate(self) -> None:
        for section in (self.model, self.optim, self.train, self.data, self.dist):
            section.validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        sections = {"model": ModelConfig, "optim": OptimConfig, "train": TrainConfig,
                    "data": DataConfig, "dist": DistConfig}
        kwargs = {k: sections[k](**v) if k in sections else v for k, v in data.items()}
        return cls(**kwargs)


def paper_recipe(model: ModelConfig | None = None) -> RunConfig:
    """ALBERT pretraining (Lan et al. 2020, Section 4.1): batch 4096, LAMB lr 0.00176, 125k steps,
    3125 warmup steps, sequences of 512 tokens (the data builder's max_seq_length)."""
    return RunConfig(
        model=model or ModelConfig(),
        optim=OptimConfig(name="lamb", lr=0.00176, weight_decay=0.01, warmup_steps=3125),
        train=TrainConfig(max_steps=125_000, batch_size=4096),
    )


PAPER_MAX_SEQ_LENGTH = 512
RECIPES = {"paper": paper_recipe}
