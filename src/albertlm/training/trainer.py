"""The one training set-up shared by pretraining and fine-tuning, in the order the pieces need:

    model -> prepare_model (activation checkpointing, CPU fast paths) -> .to(device) -> optimizer, loss scaler
          -> resume (weights, optimizer, scaler, RNG, data position) -> DDP -> compile_model -> Loop

The callers (`pretrain.make_loop`, `tasks.finetune.make_finetune_loop`) build the model, the objective and
the data; everything about *how* it trains happens here and in `loop.Loop`.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn

from albertlm.config.run import OptimConfig, TrainConfig
from albertlm.errors import UserError
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import DistInfo, failing_together, wrap_model
from albertlm.training.lamb import build_optimizer
from albertlm.training.loop import Batch, Loop, Objective, Plan, StepData
from albertlm.training.precision import check_precision, compile_model, grad_scaler, prepare_model

# given the model as trained (maybe DDP-wrapped and compiled), the raw model and the run's state (as
# loaded on resume), returns the evaluation the loop runs every `eval_every` steps (or None)
Evaluator = Callable[[nn.Module, nn.Module, ckpt.TrainState], "Callable[[], dict] | None"]


def build_loop(model: nn.Module, objective: Objective, data: StepData, train: TrainConfig, optim: OptimConfig,
               info: DistInfo, run_dir: str | Path, saved_config: dict, *, resume: bool = False,
               evaluator: Evaluator | None = None, find_unused_parameters: bool = False, logger=None) -> Loop:
    """Everything `Loop.run()` needs, from a freshly built model on the CPU. A rank that fails here (a
    checkpoint it cannot read) stops the others, waiting in DDP's first broadcast, with its message."""
    with failing_together(info, lambda: " while setting up"):
        run_dir = Path(run_dir)
        check_precision(train.precision, info.device)
        last = resume_checkpoint(run_dir, remove_leftovers=info.is_main) if resume else None
        state = ckpt.TrainState()
        if last is not None:
            state = ckpt.load_train_state(last)
            data.check_resume(state.data)           # other data (rebuilt in place) before a weight-shape error
            ckpt.load_model_weights(model, last)    # before any module swap, in the saved layout
        prepare_model(model, precision=train.precision, device=info.device,   # a compiled model stays plain:
                      activation_checkpointing=train.activation_checkpointing,  # inductor does its own fusion
                      fast_paths="auto" if train.compile == "none" else "off")
        model.to(info.device)
        optimizer = build_optimizer(model, optim)
        scaler = grad_scaler(train.precision, info.device)
        if last is not None:
            optimizer.load_state_dict(state.optimizer)
            if scaler is not None and state.scaler:
                scaler.load_state_dict(state.scaler)
            ckpt.restore_rng(state.rng)
        total = train.total_steps(data.steps_per_epoch)
        if state.step > total:
            raise UserError(f"the run in {run_dir} is already at step {state.step}, past the {total} steps asked for; "
                            f"pass --max-steps {state.step} or more to continue it")
        trained = compile_model(wrap_model(model, info, find_unused_parameters), train.compile)
        plan = Plan(total_steps=total, warmup_steps=optim.warmup(total),
                    eval_every=train.eval_every or data.steps_per_epoch, lr=optim.lr, decay_power=optim.decay_power,
                    warmup_style=optim.warmup_style)
        seeded = SeededDropout(objective, train.seed, info.rank)     # dropout: per rank, per step
        loop = Loop(model=trained, raw_model=model, optimizer=optimizer, objective=seeded, data=data, train=train,
                    plan=plan, clip_norm=optim.clip_norm, info=info, run_dir=run_dir, saved_config=saved_config,
                    state=state, scaler=scaler, evaluate_fn=evaluator(trained, model, state) if evaluator else None,
                    logger=logger)
        seeded.state = loop.state
        return loop


# the last word of every dropout seed: a non-zero constant, so this stream is no other (numpy's SeedSequence
# pads short entropy with zeros, so a prefix of these numbers would otherwise give the same stream)
DROPOUT_STREAM = 0x64726F70   # "drop"


def dropout_seed(seed: int, rank: int, step: int, micro_batch: int) -> int:
    """torch's seed for the dropout of `rank`'s `micro_batch`-th forward (from 0) in the update `step` (from 0)."""
    entropy = [seed, rank, step, micro_batch, DROPOUT_STREAM]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0])


def seed_generators(seed: int) -> None:
    """What `torch.manual_seed(seed)` does for the generators dropout can draw from (the CPU's and, once CUDA is
    in use, every GPU's), without its per-call cost: it also queues a lazy seed for each accelerator type not in
    use (XPU, MTIA, CUDA before it starts), each with a formatted Python stack, ~1.7 ms per call on a CPU."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        for generator in torch.cuda.default_generators:
            generator.manual_seed(seed)


class SeededDropout:
    """An `Objective` around another: before each forward in training mode it seeds torch's RNG (CPU and CUDA,
    which dropout draws from) with `dropout_seed(seed, rank, step, micro-batch)`. So ranks draw different
    dropout masks (seeded alike, W ranks would drop the same units of their different examples), and a
    run's dropout is a function of the step, not of the RNG's history: `--resume` draws what an uninterrupted
    run would, with any number of processes. Dropout masks still depend on the layout (a mask is drawn for a
    micro-batch's tensor), so with dropout on, runs of different layouts are statistically alike, not equal.
    Evaluation (eval mode) draws nothing and seeds nothing. `state` is the loop's `TrainState` (set by
    `build_loop` once the loop exists); without it nothing is seeded."""

    def __init__(self, objective, seed: int, rank: int):
        self.objective, self.seed, self.rank = objective, seed, rank
        self.state: ckpt.TrainState | None = None
        self._last = (-1, -1)     # (step, micro-batch) of the last seeded forward

    def denominators(self, batches: list[Batch]) -> torch.Tensor:
        return self.objective.denominators(batches)

    def forward(self, model: nn.Module, batch: Batch, denominators: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if model.training and self.state is not None:
            step, (last_step, last_micro) = self.state.step, self._last
            self._last = (step, last_micro + 1 if step == last_step else 0)
            seed_generators(dropout_seed(self.seed, self.rank, *self._last))
        return self.objective.forward(model, batch, denominators)

    def summarize(self, stats: torch.Tensor) -> dict[str, float]:
        return self.objective.summarize(stats)

    def empty_stats(self, device: torch.device) -> torch.Tensor:
        return self.objective.empty_stats(device)



def resume_checkpoint(run_dir: Path, remove_leftovers: bool = True) -> Path | None:
    """The newest complete checkpoint of a run; with `remove_leftovers` (rank 0 only, which holds the run
    directory's lock by then) the leftovers of a killed save are removed first. The other ranks never remove
    them: a second torchrun launched on a run that is still saving would otherwise delete, from its rank 1,
    the checkpoint being written, before its rank 0 is refused by the lock."""
    if remove_leftovers:
        ckpt.remove_stale_tmp(run_dir)
    return ckpt.latest_checkpoint(run_dir)


def open_logger(loop: Loop) -> None:
    """Rank 0: metrics.jsonl + TensorBoard + the progress bar in the run directory."""
    from albertlm.training.metrics import MetricsLogger

    if not loop.info.is_main:
        return
    loop.logger = MetricsLogger(loop.run_dir, loop.plan.total_steps, loop.state.step, loop.train.tensorboard,
                                loop.train.progress)
    if loop.state.step:
        loop.logger.note(f"resuming from {ckpt.latest_checkpoint(loop.run_dir)} (step {loop.state.step})")


def seed_everything(seed: int) -> None:
    """The same initial weights (and head initialisation) on every rank. This seeds torch's global generators;
    `callers_rng_kept` around a library call puts the caller's back after it."""
    torch.manual_seed(seed)


def rng_devices(device: torch.device) -> list[int]:
    """The CUDA device whose generator work on `device` draws from ([] for a CPU: `fork_rng` would otherwise
    start CUDA, and warn, on a machine with several GPUs)."""
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


@contextlib.contextmanager
def callers_rng_kept(device: torch.device) -> Iterator[None]:
    """Around a library call that seeds or draws from torch's global generators (a run's seed, its dropout,
    a resumed run's saved generator state, a model built and then loaded): the CPU's generator and that of the
    CUDA device `device` are as they were after it, so a program's or notebook's own random numbers do not
    depend on whether it called albertlm. What happens inside is unchanged (the state on entry is the same)."""
    with torch.random.fork_rng(devices=rng_devices(device)):
        yield
