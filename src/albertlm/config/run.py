"""Run configuration: everything about a training run that is not the model (layer 0, no torch).

`RunConfig` nests `model` (ModelConfig) + `optim` + `train` + `data` + `dist`; every field is a command-line
option (`--optim.weight_decay=0.0`, see `config/overrides.py`). `OptimConfig`, `TrainConfig` and `DistConfig`
are shared with fine-tuning (`config/task.py`); each config validates itself once, in `__post_init__`.
Recipes are functions returning a `RunConfig`: `paper_recipe()` is the ALBERT paper's pretraining run (google-research `run_pretraining.py` + Section 4.1).
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from albertlm.config.model import Config, ConfigError, ModelConfig, require
from albertlm.config.overrides import build, check_choices, check_keys, check_types, flatten

COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")
SEED_LIMIT = 2**32                      # seeds are 32-bit unsigned (numpy, sentencepiece)
STEP_LIMIT = 2**63                      # steps are counted in int64 (torch, numpy)
# --dist.timeout_minutes past this overflowed datetime.timedelta when the process group formed (a traceback
# on every rank under torchrun); 10**9 minutes (1900 years) is as good as no timeout
TIMEOUT_MINUTES_LIMIT = 10**9
# DataLoader worker processes per rank: each is a fork of the training process, so `--data.num_workers 100000`
# started forking until the machine ran out of processes or memory; no data loading here needs more than this
NUM_WORKERS_LIMIT = 256
# the `train.*` / `dist.*` settings a resumed run (pretraining or fine-tuning) may change: its length, and how
# it is run and logged, not what it learns
RESUME_MAY_CHANGE = frozenset({
    "train.max_steps", "train.epochs", "train.micro_batch_size", "train.compile", "train.activation_checkpointing",
    "train.log_every", "train.eval_every", "train.save_every", "train.keep_last", "train.max_minutes",
    "train.progress", "train.tensorboard", "dist.backend", "dist.device", "dist.timeout_minutes"})


def require_finite(config: Any, prefix: str) -> None:
    """Every float field is a finite number: the range checks below let infinity through (`--lr inf` trained a
    step, then stopped on a NaN loss; `--train.epochs inf` overflowed), and NaN fails them with a worse message."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            require(False, f"{prefix}{f.name}", value, "must be a finite number")


@dataclass
class OptimConfig(Config):
    IMPLIES: ClassVar[dict] = {"warmup_ratio": {"warmup_steps": -1}}
    # LAMB (the paper's pretraining optimizer), AdamW (torch's, bias-corrected: fine-tuning's default) or
    # adamweightdecay (google-research's fine-tuning AdamWeightDecayOptimizer: Adam without bias correction; the
    # paper recipes' choice)
    name: Literal["lamb", "adamw", "adamweightdecay"] = "lamb"
    lr: float = 0.00176                 # peak learning rate (paper: LAMB, 0.00176 for batch 4096)
    weight_decay: float = 0.01          # not applied to LayerNorm weights and biases
    beta1: float = 0.9                  # first-moment decay
    beta2: float = 0.999                # second-moment decay
    eps: float = 1e-6                   # added to the second-moment root
    bias_correction: bool = False       # LAMB only: google-research LAMB has none; adamw always corrects, adamweightdecay never
    clip_norm: float = 1.0              # clip the global gradient norm to this; 0 = off
    warmup_steps: int = 3125            # linear warmup from 0 to lr; -1 = warmup_ratio x total steps
    warmup_ratio: float = 0.0           # share of the total steps spent warming up, when warmup_steps is -1
    decay_power: float = 1.0            # polynomial decay to 0 at the last step (1 = linear)
    # warmup update k (from 0) gets lr x (k+1)/warmup_steps (albertlm: the last warmup update has the full lr) or
    # lr x k/warmup_steps (google: google-research optimization.py's global_step/num_warmup_steps, update 0 has rate
    # 0); after the warmup both are the same decay
    warmup_style: Literal["albertlm", "google"] = "albertlm"

    def __post_init__(self) -> None:
        check_types(self, "optim.")
        check_choices(self, "optim.")
        require_finite(self, "optim.")
        require(self.lr > 0, "optim.lr", self.lr, "must be positive")
        require(self.weight_decay >= 0, "optim.weight_decay", self.weight_decay, "must be >= 0")
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            require(0 <= value < 1, f"optim.{name}", value, "must be in [0, 1)")
        require(self.eps > 0, "optim.eps", self.eps, "must be positive")
        require(not (self.bias_correction and self.name == "adamweightdecay"), "optim.bias_correction",
                self.bias_correction, "google's adamweightdecay has none (torch's bias-corrected Adam is adamw)")
        require(self.clip_norm >= 0, "optim.clip_norm", self.clip_norm, "must be >= 0 (0 = off)")
        require(self.warmup_steps >= -1, "optim.warmup_steps", self.warmup_steps,
                "must be >= 0 (or -1 = warmup_ratio x total steps)")
        require(0 <= self.warmup_ratio < 1, "optim.warmup_ratio", self.warmup_ratio, "must be in [0, 1)")
        require(self.decay_power >= 0, "optim.decay_power", self.decay_power, "must be >= 0")

    def warmup(self, total_steps: int) -> int:
        return self.warmup_steps if self.warmup_steps >= 0 else int(self.warmup_ratio * total_steps)


@dataclass
class TrainConfig(Config):
    """The training loop's settings, shared by pretraining and fine-tuning."""
    IMPLIES: ClassVar[dict] = {"epochs": {"max_steps": 0}}
    max_steps: int = 125_000            # optimizer updates; 0 = epochs x steps per epoch
    epochs: float = 0.0                 # passes over the training data, used when max_steps is 0
    batch_size: int = 4096              # global batch: examples per optimizer step over all processes
    # examples per process and forward pass (less memory, same result: gradients accumulate);
    # 0 = the whole per-process batch at once
    micro_batch_size: int = 0
    # fp32; bf16 autocast (CPU and CUDA; fp32 weights); fp16 autocast with loss scaling (CUDA only)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    # torch.compile the model: none, default, reduce-overhead (CUDA graphs), max-autotune;
    # the first step's extra time (the compilation) is logged. Pretraining skips the padding tokens
    # (dynamic shapes) except under the two CUDA-graph modes, which keep every pass the padded shape
    compile: Literal["none", "default", "reduce-overhead", "max-autotune"] = "none"
    activation_checkpointing: bool = False  # recompute each layer in the backward pass: less memory, more time
    seed: int = 12345                   # initial weights, data order, dropout
    log_every: int = 10                 # steps between training records (metrics.jsonl, TensorBoard, stdout w/o bar); 0 = none
    eval_every: int = 1000              # steps between evaluations; 0 = once per epoch (and always at the end)
    eval_batches: int = 20              # pretraining: held-out batches of --batch-size per evaluation; 0 = all
    save_every: int = 1000              # steps between checkpoints; 0 = only at the end (and on Ctrl-C / SIGTERM)
    keep_last: int = 3                  # checkpoints kept in RUN_DIR/checkpoints
    max_minutes: float = 0.0            # wall-clock budget: stop (and save) when exceeded; 0 = none
    progress: bool = True               # a progress bar on rank 0 when stderr is a terminal (else a line per record)
    tensorboard: bool = True            # also write TensorBoard events (RUN_DIR/tensorboard)

    def __post_init__(self) -> None:
        check_types(self, "train.")
        check_choices(self, "train.")
        require_finite(self, "train.")
        for name in ("max_steps", "micro_batch_size", "log_every", "eval_every", "eval_batches", "save_every"):
            value = getattr(self, name)
            require(value >= 0, f"train.{name}", value, "must be >= 0")
        require(self.epochs >= 0, "train.epochs", self.epochs, "must be >= 0")
        require(self.max_steps > 0 or self.epochs > 0, "train.max_steps", self.max_steps,
                "must be >= 1 (or 0 with train.epochs > 0)")
        require(self.batch_size >= 1, "train.batch_size", self.batch_size, "must be >= 1")
        require(self.max_minutes >= 0, "train.max_minutes", self.max_minutes, "must be >= 0 (0 = no budget)")
        require(self.keep_last >= 1, "train.keep_last", self.keep_last, "must be >= 1")
        require(0 <= self.seed < SEED_LIMIT, "train.seed", self.seed, "must be in [0, 2**32)")

    # -- the per-step batch arithmetic, in one place ------------------------------------------------
    def process_batch(self, world_size: int) -> int:
        """Examples of each global batch one process reads."""
        if self.batch_size % world_size:
            raise ConfigError(f"--batch-size (train.batch_size) {self.batch_size} does not split evenly over the "
                              f"{_processes(world_size)} (torchrun's --nproc-per-node x nodes): give a multiple of "
                              f"{world_size}")
        return self.batch_size // world_size

    def forward_batch(self, world_size: int) -> int:
        """Examples per forward pass (at most): micro_batch_size, or the whole process batch."""
        return self.micro_batch_size or self.process_batch(world_size)

    def micro_batches(self, world_size: int) -> int:
        """Micro-batches (forward passes) per process per step: the process batch cut into pieces of at
        most micro_batch_size examples."""
        return -(-self.process_batch(world_size) // self.forward_batch(world_size))

    def check_equal_micro_batches(self, world_size: int) -> None:
        """Fixed-length data (pretraining) keeps every forward pass the same shape (compile, CUDA graphs)."""
        if not self.micro_batch_size:      # the whole per-process batch at once: it only has to split evenly
            self.process_batch(world_size)
            return
        step = world_size * self.micro_batch_size
        if self.batch_size % step:         # the user's settings, not a derived micro-batch size
            raise ConfigError(f"--batch-size (train.batch_size) {self.batch_size} is not a multiple of "
                              f"{_processes(world_size)} x "
                              f"--micro-batch-size (train.micro_batch_size) {self.micro_batch_size} = {step}: "
                              "each process accumulates equal micro-batches; give a --batch-size that is a "
                              f"multiple of {step}, or another --micro-batch-size")

    def total_steps(self, steps_per_epoch: int) -> int:
        """max_steps, or epochs x steps_per_epoch (at least 1). A product past what a step counter holds is a
        ConfigError (`--epochs 1e308` was an OverflowError traceback once the model was built)."""
        if self.max_steps:
            return self.max_steps
        steps = self.epochs * steps_per_epoch
        if not steps < STEP_LIMIT:          # also inf
            raise ConfigError(f"train.epochs={self.epochs:g}: {self.epochs:g} epochs of {steps_per_epoch} steps are "
                              "more steps than a run can count; give fewer --epochs (or --max-steps)")
        return max(1, round(steps))


def _processes(world_size: int) -> str:
    return f"{world_size} process{'es' if world_size > 1 else ''}"


@dataclass
class DataConfig(Config):
    path: str = ""                       # training data: a directory written by `albertlm data build`
    eval_path: str = ""                  # held-out data (another build) to evaluate on; "" = no evaluation
    dynamic_masking: bool = False        # draw new masks every epoch instead of the build's static masks
    num_workers: int = 0                 # DataLoader worker processes per rank

    def __post_init__(self) -> None:
        check_types(self, "data.")
        require(0 <= self.num_workers <= NUM_WORKERS_LIMIT, "data.num_workers", self.num_workers,
                f"must be in [0, {NUM_WORKERS_LIMIT}] (worker processes per rank)")


@dataclass
class DistConfig(Config):
    """Processes and devices (`torchrun` sets the ranks)."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"   # process group backend; auto: nccl on CUDA, gloo on CPU
    device: str = "auto"                                # auto (cuda:LOCAL_RANK if CUDA is available, else cpu), cpu, cuda (this process's GPU, cuda:LOCAL_RANK), cuda:N (one GPU: one process per node)
    timeout_minutes: int = 30                           # how long a collective may wait for the other ranks

    def __post_init__(self) -> None:
        check_types(self, "dist.")
        check_choices(self, "dist.")
        require(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"), "dist.device",
                self.device, "must be auto, cpu, cuda or cuda:N")
        require(1 <= self.timeout_minutes <= TIMEOUT_MINUTES_LIMIT, "dist.timeout_minutes", self.timeout_minutes,
                f"must be in [1, {TIMEOUT_MINUTES_LIMIT:,}]")


@dataclass
class RunConfig(Config):
    """A pretraining run: the model and everything about training it."""
    # the architecture (saved as config.json): --preset's, with --model.* changing its fields (the defaults below are
    # albert-base's, the default preset); --model.vocab_size left out is the vocabulary of --data's tokenizer, and
    # --init-from's checkpoint sets every field but the dropouts
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)     # optimizer and learning-rate schedule
    train: TrainConfig = field(default_factory=TrainConfig)     # the training loop
    data: DataConfig = field(default_factory=DataConfig)        # pretraining data
    dist: DistConfig = field(default_factory=DistConfig)        # processes and devices
    preset: str = "albert-base"          # model preset the run starts from (see `albertlm params`); --model.* change it
    init_from: str = ""                  # start from this checkpoint directory (ours or transformers', or a run directory: its newest checkpoint) instead of random weights
    # the random initial weights of a run from scratch: normal(0, model.initializer_range) (transformers') or
    # truncated_normal (google-research's tf.truncated_normal_initializer: the same normal redrawn beyond 2 std);
    # biases 0, LayerNorms 1 and 0 in both. Not with init_from (its weights are the start)
    initializer: Literal["normal", "truncated_normal"] = "normal"

    def __post_init__(self) -> None:
        check_types(self)        # the sections are their classes (each checks its own fields), the paths text
        check_choices(self)
        require(not (self.init_from and self.initializer != "normal"), "initializer", self.initializer,
                f"draws the weights of a run from scratch, and init_from {self.init_from} starts from that "
                "checkpoint's: drop --init-from, or give --initializer normal (the default) with it")

    def absolute_paths(self) -> "RunConfig":
        """A copy whose relative paths (PATH_KEYS) are absolute, taken from the current directory: what a run
        records in run_config.json, so that `--resume` (and a checkpoint's tokenizer lookup) works from any
        directory. A run recorded before holds relative ones, read from the current directory."""
        data = dataclasses.replace(self.data, **{k: _absolute(getattr(self.data, k)) for k in ("path", "eval_path")})
        return dataclasses.replace(self, data=data, init_from=_absolute(self.init_from))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        """A run config saved by `to_dict` (run_config.json), read like a `--config` file: an unknown key (with
        the nearest one) or a value of the wrong type (`"batch_size": 4.0`, which failed deep in the data
        order) is a UserError naming the key; a missing key keeps its default."""
        if not isinstance(data, dict):
            raise ConfigError(f"a run config must be a JSON object (section -> fields), got {type(data).__name__}")
        values = flatten(data)
        check_keys(cls, values)
        return build(cls, values)


# the run's settings that are paths (files or directories), recorded absolute (see RunConfig.absolute_paths)
PATH_KEYS = ("data.path", "data.eval_path", "init_from")


def _absolute(path: str) -> str:
    return os.path.abspath(path) if path else path


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
