"""The training loop shared by pretraining and fine-tuning: for each step, accumulate micro-batches, clip,
update, then log / evaluate / save.

The global batch is fixed by `train.batch_size`: each of the W processes reads its share of every step,
in micro-batches of at most `train.micro_batch_size` examples (`StepData`). Losses are normalised by counts
summed over the *whole* global batch (an all-reduce of a few numbers per step), so the gradient is the
same whatever W and the micro-batch size are; DDP's averaging is undone by scaling the local loss by W.

What a task plugs in is an `Objective` (`pretrain.PretrainingObjective`, `tasks.finetune.TaskObjective`)
and its data as a `StepData`; `training.trainer.build_loop` is the one set-up around it.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import numpy as np
import torch
from torch import nn

from albertlm.config.run import TrainConfig
from albertlm.errors import UserError
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import (DistInfo, PeerFailed, all_reduce_sum, any_rank, failing_together,
                                           my_share, peer_failures, reports_here)
from albertlm.training.metrics import LR_AT
from albertlm.training.precision import autocast
from albertlm.training.schedule import lr_at, set_lr

Batch = dict[str, torch.Tensor]

# `TrainState.extra` key of a checkpoint saved while its step's evaluation was interrupted (a second Ctrl-C during
# it): the step whose evaluation the resumed run does first (`Loop._redo_evaluation`)
UNEVALUATED = "unevaluated_step"
# `TrainState.extra` key of the logging window a checkpoint was saved in the middle of (--save-every not a multiple
# of --log-every): the resumed run goes on with it, so its next record covers the same steps as without the stop (a
# run killed after that checkpoint had those steps' numbers in no record)
UNLOGGED = "unlogged_window"
# key of the micro-batch a rank trains on, weighted 0, at a step whose global batch left it no examples
# (`StepData`): it joins DDP's gradient all-reduce and adds nothing to the gradient, the loss or the counts
STAND_IN = "_albertlm_stand_in"
# the checkpoint's data-state key of the layout it was trained on (processes, micro-batches per process and step):
# not part of what must match to resume (`StepData.check_resume`); another one is said (`StepData.layout_note`)
LAYOUT = "layout"
# `TrainState.extra` key of what the run's parts ran on, one entry per part that ran on something else than the one
# before: [{"from_step": 0, "device": "cpu", "compile": "none"}, {"from_step": 400, "device": "cuda (NVIDIA H100
# ...)", ...}] (`Loop._resume_notes`). A --resume may change these (`config.run.RESUME_MAY_CHANGE`), and the
# run's config records `dist.device` as given ("auto"), not the device it picked
RAN_WITH = "ran_with"
# `TrainState.extra` key of the schedule a checkpoint was saved under, {"total_steps", "warmup_steps"}: a --resume
# with another --max-steps (--epochs, a warmup ratio) follows the new schedule from there, which is said
PLANNED = "planned"


class TrainingDiverged(UserError):
    """The loss (or the gradient, or the weights) became NaN or infinite; the message names the step and the last
    good checkpoint."""

    exit_code = 3


class Objective(Protocol):
    def denominators(self, batches: list[Batch]) -> torch.Tensor:
        """Per-rank counts that normalise the loss (summed over ranks by the loop)."""

    def forward(self, model: nn.Module, batch: Batch, denominators: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss of this micro-batch already divided by the global denominators, vector of summed stats)."""

    def summarize(self, stats: torch.Tensor) -> dict[str, float]:
        """Readable metrics (must include "loss") from stats summed over micro-batches and ranks."""

    def empty_stats(self, device: torch.device) -> torch.Tensor:
        """The zero stats vector (a rank with no evaluation batches still joins the all-reduce)."""


# ------------------------------------------------------------------------------------------------ data
def shuffled_batches(num_examples: int, batch_size: int, seed: int) -> Callable[[int], list[np.ndarray]]:
    """Epoch -> a seeded permutation cut into global batches (the remainder is dropped): pretraining's order."""
    def epoch_batches(epoch: int) -> list[np.ndarray]:
        order = np.random.default_rng([seed, epoch]).permutation(num_examples)
        return [order[k:k + batch_size] for k in range(0, num_examples - batch_size + 1, batch_size)]
    return epoch_batches


@dataclass
class StepData:
    """The one sampler. A deterministic global order (`epoch_batches(epoch)`: the global batches of an
    epoch), this rank's contiguous share of each, cut into at most `micro_batches` micro-batches. The
    position is just the step number, which makes resuming exact, with any number of processes: the global
    batches, and so the steps of an epoch, do not depend on it.

    A global batch with fewer examples than processes (a fine-tuning epoch's last bucket batch) leaves some
    ranks no share: each of those reads the batch's first example as a stand-in (`STAND_IN`), whose loss the
    loop weights 0, so that every rank still meets the others in DDP's gradient all-reduce. Such a batch was
    skipped: under torchrun its examples were never trained on (every epoch), an epoch had fewer steps than
    with one process (`--epochs` ran another schedule), and a run resumed on another number of processes went on
    from another place in the data.

    The dataset is indexed by plain indices, or by `(epoch, index)` keys when `epoch_keys` is set (a
    dynamically masked `data.loader.PretrainingDataset` draws new masks per epoch)."""
    dataset: Any
    collate: Callable[[list], Batch]
    epoch_batches: Callable[[int], list[np.ndarray]]
    micro_batches: int                  # per rank and step (`TrainConfig.micro_batches`)
    rank: int = 0
    world_size: int = 1
    num_workers: int = 0
    epoch_keys: bool = False
    identity: dict = field(default_factory=dict)   # what must match to resume exactly (batch size, seed)

    def __post_init__(self) -> None:
        self.steps_per_epoch = len(self.batches(0))
        if self.steps_per_epoch < 1:
            raise UserError(f"the data has {len(self.dataset)} examples, fewer than one global batch "
                            f"({self.identity.get('batch_size')}); lower --batch-size or build more data")

    def batches(self, epoch: int) -> list[np.ndarray]:
        """The epoch's global batches (the same for any number of processes)."""
        return self.epoch_batches(epoch)

    def _shares(self, start_step: int) -> Iterator[tuple[list[list], bool]]:
        """For each step from `start_step` on, (this rank's micro-batches as lists of dataset keys, whether they
        are a stand-in: the global batch's first example, for a rank the batch left no share)."""
        step, cached = start_step, (-1, [])
        while True:
            epoch, k = divmod(step, self.steps_per_epoch)
            if cached[0] != epoch:
                cached = (epoch, self.batches(epoch))
            batch = cached[1][k]
            mine = np.array_split(batch, self.world_size)[self.rank]
            stand_in = len(mine) == 0
            parts = [batch[:1]] if stand_in else np.array_split(mine, min(self.micro_batches, len(mine)))
            yield [[(epoch, int(i)) if self.epoch_keys else int(i) for i in part] for part in parts], stand_in
            step += 1

    def plan(self, start_step: int) -> Iterator[list[list]]:
        """For each step from `start_step` on, this rank's micro-batches as lists of dataset keys ([] for a step
        whose global batch leaves this rank no share: it trains on a stand-in weighted 0, see the class)."""
        for parts, stand_in in self._shares(start_step):
            yield [] if stand_in else parts

    def steps(self, start_step: int) -> Iterator[list[Batch]]:
        """Yields, for every optimizer step from `start_step` on, this rank's list of collated micro-batches (a
        stand-in's one micro-batch carries `STAND_IN`, which `Loop.train_step` takes out)."""
        layout = ((len(parts), stand_in) for parts, stand_in in self._shares(start_step))
        loader = torch.utils.data.DataLoader(
            self.dataset, batch_sampler=(part for parts, _ in self._shares(start_step) for part in parts),
            collate_fn=self.collate, num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(0),     # never draws from the global RNG
            prefetch_factor=4 if self.num_workers else None)
        it = iter(loader)
        for size, stand_in in layout:
            try:
                micro_batches = [next(it) for _ in range(size)]
            except UserError as exc:        # a damaged or changed shard, found by a DataLoader worker
                raise worker_error(exc) from None
            if stand_in:
                micro_batches[0][STAND_IN] = True
            yield micro_batches

    def state_dict(self, step: int) -> dict:
        return {"step": step, "num_examples": len(self.dataset), **self.identity,
                LAYOUT: {"processes": self.world_size, "micro_batches": self.micro_batches}}

    def check_resume(self, state: dict) -> None:
        if not state:
            return
        mine = self.state_dict(state.get("step", 0))
        for key in mine:
            if key not in ("step", LAYOUT) and key in state and state[key] != mine[key]:
                changed = "; the training data changed since the run started (rebuilt in place?)" \
                    if key == "num_examples" or key.startswith("data_") else ""
                raise UserError(f"cannot resume exactly: the checkpoint's {key} is {state[key]}, now "
                                f"{mine[key]}{changed}")

    def layout_note(self, state: dict) -> str | None:
        """One line when a run resumes on another layout than the checkpoint's (`LAYOUT`: 4 GPUs before, 2 now with
        twice the accumulation): allowed, since the global batches and their order depend on neither (`batches`), so
        the steps are the same; but the gradient's sums are added in another order, so the numbers follow the
        uninterrupted run to rounding, not bit for bit, and dropout draws other masks (`SeededDropout`). None when
        the layout is the same, or the checkpoint (an older one) did not record it."""
        was = state.get(LAYOUT) if state else None
        now = self.state_dict(0)[LAYOUT]
        if not isinstance(was, dict) or was == now:
            return None

        def said(layout: dict) -> str:
            processes, micro = layout.get("processes"), layout.get("micro_batches")
            return (f"{processes} process{'es' if processes != 1 else ''} x {micro} micro-batch"
                    f"{'es' if micro != 1 else ''} per step")

        batch = self.identity.get("batch_size")
        return (f"note: resuming on another layout ({said(was)} when step {state.get('step')} was saved, {said(now)} "
                f"now): the same global batch{f' of {batch} examples' if batch else ''} and the same data "
                "order, so the same steps; the sums are added in another order, so the numbers follow the "
                "uninterrupted run to rounding, not bit for bit (and dropout, if on, draws other masks)")


def worker_error(exc: UserError) -> UserError:
    """A UserError raised in a DataLoader worker, as its one line: torch raises it again in the main process with
    "Caught UserError in DataLoader worker process 0." and the worker's whole traceback as its message, which the
    CLI printed as one long error line."""
    text = str(exc)
    name = f"{type(exc).__module__}.{type(exc).__qualname__}: "
    at = text.rfind(name)
    if "in DataLoader worker process" not in text.split("\n", 1)[0] or at < 0:
        return exc
    return type(exc)(text[at + len(name):].strip())


def eval_micro_batches(dataset, collate, micro_batch_size: int, info: DistInfo, max_batches: int,
                       max_examples: int = 0) -> Iterator[Batch]:
    """The held-out data in order; micro-batch j goes to rank j % W; at most `max_batches` micro-batches and
    the first `max_examples` examples (0 = all, for either)."""
    size = min(len(dataset), max_examples) if max_examples else len(dataset)
    count = math.ceil(size / micro_batch_size)
    if max_batches:
        count = min(count, max_batches)
    many = getattr(dataset, "__getitems__", None)    # a micro-batch in one call (the loader's: one check, one mask)
    for j in my_share(count, info):
        items = range(j * micro_batch_size, min(size, (j + 1) * micro_batch_size))
        yield collate(many(list(items)) if many is not None else [dataset[i] for i in items])


def to_device(batch: Batch, device: torch.device) -> Batch:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


# ------------------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterator[Batch], objective: Objective, precision: str,
             info: DistInfo) -> dict[str, float]:
    """Summed stats over this rank's batches, summed over ranks, summarised once."""
    was_training = model.training
    model.eval()
    total = None
    for batch in batches:
        batch = to_device(batch, info.device)
        ones = torch.ones_like(objective.denominators([batch]))
        with autocast(precision, info.device):
            _, stats = objective.forward(model, batch, ones)
        total = stats if total is None else total + stats
    if total is None:
        total = objective.empty_stats(info.device)
    model.train(was_training)
    return objective.summarize(all_reduce_sum(total))


# ---------------------------------------------------------------------------------------------- the loop
@dataclass(frozen=True)
class Plan:
    """The run's numbers, resolved once from the configs and the data (the configs are never changed)."""
    total_steps: int
    warmup_steps: int
    eval_every: int
    lr: float
    decay_power: float = 1.0
    warmup_style: str = "albertlm"      # `optim.warmup_style`: "google" warms up one update later (schedule.lr_at)

    def lr_at(self, step: int) -> float:
        return lr_at(step, self.lr, self.warmup_steps, self.total_steps, self.decay_power, self.warmup_style)

    def lr_knots(self) -> frozenset[int]:
        """The steps (from 1) where the schedule's line bends inside the run: the first update, the warmup's last
        and the one after it (the decay starts there: a step down from the peak under either warmup style). A
        line through these and the training records' lr (the rate of each record's last step) is the schedule
        exactly, where the decay is linear (`decay_power` 1). The record of the window holding one that is not a
        record's own step has its lr too (`metrics.LR_AT`, "lr@3125"): with --log-every at or above the warmup,
        every record's lr came after the warmup, and `albertlm plot` drew a schedule without one. None without a
        warmup ending inside the run (a warmup as long as the run is one line, which the records follow)."""
        if not 0 < self.warmup_steps < self.total_steps:
            return frozenset()
        return frozenset({1, self.warmup_steps, self.warmup_steps + 1})


@dataclass
class StepResult:
    """What one optimizer update reports (all summed over the global batch)."""
    stats: torch.Tensor                 # the objective's stats
    tokens: float                       # non-padding tokens
    examples: float                     # examples (rows of the micro-batches)
    loss: float
    lr: float
    grad_norm: float | None             # before clipping; None when clipping is off


@dataclass
class Loop:
    """Everything one training run holds; `run()` is the loop itself, read top-down."""
    model: nn.Module                    # as trained: maybe DDP-wrapped and compiled
    raw_model: nn.Module                # as saved
    optimizer: torch.optim.Optimizer
    objective: Objective
    data: StepData
    train: TrainConfig
    plan: Plan
    clip_norm: float
    info: DistInfo
    run_dir: Path
    saved_config: dict                  # written beside every checkpoint (run_config.json)
    state: ckpt.TrainState = field(default_factory=ckpt.TrainState)
    scaler: Any = None                  # torch.amp.GradScaler for fp16
    evaluate_fn: Callable[[], dict[str, float]] | None = None
    logger: Any = None                  # metrics.MetricsLogger (rank 0) or None
    on_step: Callable[[int, dict], None] | None = None   # called after each update (tests, the demo)
    _evaluated: int = field(default=-1, repr=False)      # the last step evaluated and the last saved, so a
    _saved: int = field(default=-1, repr=False)          # budget stop on such a step does neither twice
    # for the run's summary (`summary`): the last training loss and evaluation as (step, numbers)
    _last_train: tuple[int, float] | None = field(default=None, repr=False)
    _last_eval: tuple[int, dict] | None = field(default=None, repr=False)
    _first_step: int = field(default=0, repr=False)       # the step this invocation started at
    _began: float = field(default=0.0, repr=False)        # and when (time.monotonic)
    _window: "Window | None" = field(default=None, repr=False)   # its training time, tokens and examples
    # while an evaluation runs: `state.extra` as it was before it (what the evaluator records there, a fine-tuning's
    # history and best, is put back when the evaluation is interrupted, and the resumed run does it again)
    _before_eval: dict | None = field(default=None, repr=False)
    _said_first_step: bool = field(default=False, repr=False)   # the long first step's note (`_note_a_long_first_step`)
    # fp16: the loss scale after the last step and how many steps in a row the scaler skipped (`_count_overflows`)
    _last_scale: float | None = field(default=None, repr=False)
    _overflows: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        # every path the run says (saved ..., the summary's checkpoint, an error's last good checkpoint) and records
        # (the summary in metrics.jsonl) is absolute: one relative to the launch directory led a user who had `cd`-ed
        # elsewhere, or who read the log later, to a path that is not there
        self.run_dir = Path(self.run_dir).absolute()

    def run(self) -> str:
        """Train to the plan's last step; returns "done", "interrupted" (a stop signal, after saving) or
        "budget" (`train.max_minutes` ran out, after saving). A signal during the last step lets the run finish
        and save as planned, and still returns "interrupted": the caller was asked to stop, and must not take
        "done" as leave to go on (the next job of a suite).

        SIGINT, SIGTERM, SIGUSR1 and SIGHUP (`stop_signals`: Ctrl-C, a scheduler's notice, `kill`, a closed ssh
        session, torchrun passing one on) ask to stop: the step in progress finishes, every rank agrees on that
        step, the checkpoint is written, and the run returns
        "interrupted"; `--resume` continues exactly. A second signal stops at once (KeyboardInterrupt; one that
        comes while a checkpoint is written leaves that checkpoint unwritten, not written again; one during an
        evaluation saves the step as it was before that evaluation, marked `UNEVALUATED`, and `--resume`
        evaluates it before training on and records that in the checkpoint), and a KeyboardInterrupt raised by
        code between steps (`on_step`) saves too. No checkpoint holds NaN or infinite weights: a NaN loss or
        gradient norm stops the run before its step is counted (`TrainingDiverged`), and `save` refuses such
        weights.

        Under several processes an error on one rank stops all of them with one line that names it
        (`distributed.failing_together`), instead of a gloo traceback on each of the others.

        A run that trained at least one step ends with its summary (`summary`, rank 0, through the logger:
        printed, and recorded in metrics.jsonl when the step it ends at is saved; a run without a logger, such
        as the demo's timing probe, prints none). An error (a NaN loss, a full disk) is said instead."""
        with failing_together(self.info, lambda: f" at step {self.state.step + 1}"):
            try:
                status = self._run()
                if self.logger is not None and self.state.step > self._first_step:
                    summary = self.summary(status)
                    # a record of a step that is not saved would outlive the resume that trains it again only
                    # until `metrics.drop_records_after`, and would make an unstarted run look started
                    self.logger.finish(summary, record=summary["saved"])
            except BaseException:
                if self.logger is not None:
                    self.logger.close(failed=True)   # the run's own error is the one said, not the logs' after it
                raise
            if self.logger is not None:
                self.logger.close()
            return status

    def _run(self) -> str:
        deadline = time.monotonic() + self.train.max_minutes * 60 if self.train.max_minutes else math.inf
        self._first_step, self._began = self.state.step, time.monotonic()
        # fp16: the loss scale the first step starts from (a host number until the scaler's first step; a resumed
        # run's is the checkpoint's), so that a skip of the very first step is counted too (`_count_overflows`)
        self._last_scale, self._overflows = (float(self.scaler.get_scale()) if self.scaler is not None else None), 0
        if self.logger is not None:
            self.logger.deadline = deadline     # the log lines' ETA is no later than the budget's end
        if 0 < self.plan.total_steps <= self.state.step:   # a resumed run that had already finished
            self._print(f"the run is already at step {self.state.step} of {self.plan.total_steps}: nothing to "
                        f"train (a larger --max-steps or --train.epochs goes on from here)")
        note = self.data.layout_note(self.state.data) if self.state.step else None
        for line in filter(None, (note, *self._resume_notes())):
            self._print(line)
        self.model.train()
        batches = self.data.steps(self.state.step)
        rng_at_boundary = ckpt.capture_rng()   # the RNG as it was when `state.step` updates were done
        window, first_steps = Window(), []
        window.resume(self._carried_window(), self.info.device)
        self._window = window
        # True from the optimizer's update until the step is counted (`state.step += 1`): the weights are then
        # ahead of `state.step`, so a checkpoint of them would make a resumed run do that update twice
        self._updating = False
        self._saving = False                   # True while a checkpoint is being written (`save`)
        fetched: list = []                     # the next step's batches, read on the host while the device works

        def fetch_next() -> None:
            if self.state.step + 1 < self.plan.total_steps:
                with window.waiting():
                    fetched.append(next(batches))

        try:
            with stop_on_signals(self.info, lambda: f" at step {self.state.step + 1}") as request:
                with window.paused():
                    redone = self._redo_evaluation()
                if redone and self.state.step >= self.plan.total_steps and request.name is not None:
                    return "interrupted"      # a stop asked for while the finished run's evaluation was redone
                while self.state.step < self.plan.total_steps:
                    with window.waiting():
                        micro_batches = [to_device(b, self.info.device) for b in (fetched.pop() if fetched
                                                                                  else next(batches))]
                    started = time.perf_counter()
                    result = self.train_step(micro_batches, before_sync=fetch_next)
                    self.state.step += 1
                    rng_at_boundary = ckpt.capture_rng()
                    self._updating = False
                    self.state.extra["tokens"] = self.state.extra.get("tokens", 0.0) + result.tokens
                    window.add(result)
                    self._last_train = (self.state.step, result.loss)
                    if self.train.compile != "none" and len(first_steps) < 2 and self.info.device.type == "cuda":
                        torch.cuda.synchronize(self.info.device)   # CUDA is asynchronous: time the GPU work too
                    self._report_compile(first_steps, time.perf_counter() - started)
                    if self.logger is not None:
                        self.logger.advance(self.state.step, result.loss, window.rate())
                    if self.on_step is not None:
                        self.on_step(self.state.step, self.objective.summarize(result.stats))
                    self.after_step(window)
                    if self.state.step < self.plan.total_steps:
                        reason = self._stop_reason(request, deadline)
                        if reason is not None:
                            self._log_unlogged(window)
                        if reason == "budget":
                            with window.paused():
                                self._stop_for_budget()
                            return "budget"
                        if reason == "interrupted":
                            with window.paused():
                                path = self._save_at_boundary(rng_at_boundary)
                            self._print(f"stopped by {request.name or 'a signal on another rank'} at step "
                                        f"{self.state.step}: saved {path}; `--resume` continues from there")
                            return "interrupted"
                    elif self._stop_reason(request, math.inf) == "interrupted":
                        # A stop asked for during the last step: that step is trained, evaluated and saved as
                        # planned (`after_step`), so the run is complete; it still reports "interrupted" (exit 130)
                        # so a caller that would go on to other work (the next job of `albertlm ablate`,
                        # fine-tuning) stops instead. A `--resume` then finds nothing left to train and says so.
                        self._print(f"stopped by {request.name or 'a signal on another rank'} during the last step "
                                    f"({self.state.step} of {self.plan.total_steps}): the run is complete and "
                                    f"saved ({ckpt.latest_checkpoint(self.run_dir)}); stopping here, as asked")
                        return "interrupted"
        except KeyboardInterrupt:
            if self._saving and not self.info.enabled:
                # a second Ctrl-C while the first one's checkpoint (or a scheduled one) was being written: stop at
                # once, as asked; writing it again from the start made that Ctrl-C cost a whole second save
                last = ckpt.latest_checkpoint(self.run_dir)
                self._print(f"interrupted while saving step {self.state.step}: not saved; "
                            f"{f'the newest checkpoint is {last}' if last else 'no checkpoint was saved'}")
                return "interrupted"
            if self._updating or self.info.enabled:
                # the weights may be half-updated, or the other ranks are inside a collective: not saved
                last = ckpt.latest_checkpoint(self.run_dir)
                self._print(f"interrupted during step {self.state.step + 1}: not saved; "
                            f"{f'the newest checkpoint is {last}' if last else 'no checkpoint was saved'}")
                return "interrupted"
            self._log_unlogged(window)
            evaluating = self._before_eval is not None
            if evaluating:
                # the step's evaluation did not finish: what it recorded is put back, and the checkpoint says so,
                # so the resumed run evaluates this step before training on (its history, best model and eval
                # record were missing for good: the resume starts after the step's evaluation)
                self.state.extra.clear()
                self.state.extra.update(self._before_eval)
                self.state.extra[UNEVALUATED] = self.state.step
                self._before_eval = None
            with window.paused():
                path = self._save_at_boundary(rng_at_boundary)
            if evaluating:
                self._print(f"interrupted during the evaluation of step {self.state.step}: saved {path} without it; "
                            "`--resume` evaluates that step first")
            else:
                self._print(f"interrupted at step {self.state.step}: saved {path}")
            return "interrupted"
        return "done"

    def summary(self, status: str) -> dict:
        """What this invocation did (`metrics.summary_lines` prints it): the step reached of the total, the steps,
        examples and tokens trained since it started (a resumed run: since the resume) in how much wall time, the
        mean training tokens/s (the training time only: evaluations and checkpoints between steps are left out,
        as in the records' tokens_per_s; the first step's compiling is in), the last training loss (the last
        record's window mean, or the last step's without records), the last evaluation and the newest
        checkpoint. No MFU: the loop counts no FLOPs and knows no device peak (`benchmarks/train_speed.py`
        measures both)."""
        tokens, train_s, examples = self._window.totals()
        step_loss = self._last_train
        out = {"step": self.state.step, "status": status, "total_steps": self.plan.total_steps,
               "first_step": self._first_step + 1, "steps_trained": self.state.step - self._first_step,
               "wall_s": round(time.monotonic() - self._began, 3), "train_s": round(train_s, 3),
               "examples_trained": examples, "tokens_trained": tokens,
               "tokens_per_s": tokens / max(train_s, 1e-9),
               "loss": step_loss[1] if step_loss else None, "loss_step": step_loss[0] if step_loss else None}
        if self._last_eval is not None:
            out["eval_step"], out["eval"] = self._last_eval
        last = ckpt.latest_checkpoint(self.run_dir)
        out["checkpoint"] = str(last) if last is not None else None
        out["saved"] = self._saved == self.state.step
        return out

    def runs_on(self) -> dict[str, str]:
        """What this invocation runs on that a --resume may change and that changes the numbers' rounding: the
        device (its kind, and a GPU's name), `train.compile`'s mode, and under several processes the process group's
        backend. (`train.activation_checkpointing` recomputes the same numbers; the layout is
        `StepData.layout_note`'s.)"""
        device = self.info.device
        where = f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else device.type
        out = {"device": where, "compile": self.train.compile}
        if self.info.enabled and torch.distributed.is_initialized():
            out["backend"] = str(torch.distributed.get_backend())
        return out

    def _resume_notes(self) -> list[str]:
        """The lines a resumed run says of what it changed that changes its numbers, and the record of it in the
        state its checkpoints save (`RAN_WITH`, `PLANNED`). Settings that change nothing a run computes (--log-every,
        --save-every, --keep-last, the time budget, TensorBoard, the progress bar, --data.num_workers, the
        evaluation's data and size, activation checkpointing) are taken without a word; the learning settings are
        refused before the run starts (`cli.train_commands._check_resume_changes`). Allowed and said here:

        - another device, `--train.compile` or process-group backend: the same steps, the numbers to rounding (a
          resume from cuda to cpu was silent, and the run's run_config.json said "auto" for both);
        - another length (`--max-steps`, `--epochs`; a warmup ratio stretches with it): the learning rate follows
          the new schedule from the step resumed at (docs/training.md), which is said with the rates."""
        notes, step, extra = [], self.state.step, self.state.extra
        now = self.runs_on()
        history = [part for part in extra.get(RAN_WITH, []) if isinstance(part, dict)] \
            if isinstance(extra.get(RAN_WITH), list) else []
        was = history[-1] if history else None
        changed = [key for key in now if was is not None and key in was and was[key] != now[key]]
        if step and changed:
            names = {"device": "device", "compile": "train.compile", "backend": "dist.backend"}
            said = ", ".join(f"{names[key]} {now[key]} (step {step} was saved under {was[key]})" for key in changed)
            notes.append(f"note: resuming with another {said}: the same steps and data, so the numbers follow the "
                         "uninterrupted run to rounding, not bit for bit (and dropout, if on, may draw other masks); "
                         f"the checkpoints from here record it (trainer_state.pt's {RAN_WITH!r})")
        if was is None or any(was.get(key) != value for key, value in now.items()):
            history.append({"from_step": step, **now})
        extra[RAN_WITH] = history

        planned = {"total_steps": self.plan.total_steps, "warmup_steps": self.plan.warmup_steps}
        old = extra.get(PLANNED)
        if step and step < self.plan.total_steps and isinstance(old, dict) and old != planned and \
                all(isinstance(old.get(key), int) for key in planned):
            then = dataclasses.replace(self.plan, **{key: old[key] for key in planned})
            warmup = (f" and a warmup of {self.plan.warmup_steps} (was {old['warmup_steps']})"
                      if old["warmup_steps"] != self.plan.warmup_steps else "")
            ended = f" (it ended at step {old['total_steps']})" if step >= old["total_steps"] else ""
            notes.append(f"note: resuming with {self.plan.total_steps} steps in all{warmup}, where step {step} was "
                         f"saved in a run of {old['total_steps']}: the learning rate follows the new schedule from "
                         f"here, {self.plan.lr_at(step):.6g} at step {step + 1} where the old one had "
                         f"{then.lr_at(step):.6g}{ended}")
        extra[PLANNED] = planned
        return notes

    def _stop_reason(self, request: "StopRequest", deadline: float) -> str | None:
        """"interrupted" (a signal on any rank), "budget" (time is up on any rank) or None; under several
        processes one all-reduce per step, so all of them stop after the same step."""
        signalled = request.name is not None
        spent = time.monotonic() > deadline
        if self.info.enabled:
            flags = all_reduce_sum(torch.tensor([float(signalled), float(spent)], device=self.info.device))
            signalled, spent = bool(flags[0] > 0), bool(flags[1] > 0)
        return "interrupted" if signalled else "budget" if spent else None

    def train_step(self, micro_batches: list[Batch], before_sync: Callable[[], None] | None = None) -> StepResult:
        """One optimizer update over this rank's micro-batches. `before_sync` runs once the step's work is
        queued and before the host waits for it (the loop reads the next batch there)."""
        lr = self.plan.lr_at(self.state.step)
        set_lr(self.optimizer, lr)
        # a rank the global batch left no examples trains on a stand-in (`StepData`), weighted 0 throughout
        stand_in = bool(micro_batches[0].pop(STAND_IN, False)) if micro_batches else False
        weight = 0.0 if stand_in else 1.0
        # (the stand-in's weight 0 is multiplied in only where there is one: a `* 1.0` was an aten op, on a GPU a
        # kernel launch, per step and micro-batch for every other step)
        denominators = self.objective.denominators(micro_batches)
        denominators = all_reduce_sum(denominators * weight if stand_in else denominators)
        stats, tokens = None, torch.zeros((), device=self.info.device)
        started = time.monotonic()
        for i, batch in enumerate(micro_batches):
            if i and not self._said_first_step:
                self._note_a_long_first_step(i, micro_batches, started)
            last = i == len(micro_batches) - 1
            sync = contextlib.nullcontext() if last or not self.info.enabled else self.model.no_sync()
            with sync:
                with autocast(self.train.precision, self.info.device):
                    loss, micro_stats = self.objective.forward(self.model, batch, denominators)
                if stand_in or self.info.world_size != 1:  # DDP averages gradients over ranks; we want the sum
                    loss = loss * (self.info.world_size * weight)
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            if stand_in:
                micro_stats = torch.zeros_like(micro_stats)
            stats = micro_stats if stats is None else stats + micro_stats
            tokens = tokens + (count_tokens(batch) * weight if stand_in else count_tokens(batch))
        # the examples counted on the host (shapes), put on the device by a fill: no copy, no sync
        examples = tokens.new_full((1,), weight * float(sum(len(b["input_ids"]) for b in micro_batches)))
        summed = all_reduce_sum(torch.cat([stats, tokens.to(stats)[None], examples.to(stats)]))   # one all-reduce
        self._updating = True                # until the loop counts the step (see `_run`)
        grad_norm = self._clip_and_update()
        # The step's one host-device sync, once all of its work is queued (a sync between backward and the
        # update would leave the GPU idle while the host queues the clipping and the optimizer's kernels).
        values = torch.cat([summed, grad_norm.to(summed)[None]]) if grad_norm is not None else summed
        scale = self._scale_tensor()          # fp16: the loss scale after the update, read in the same transfer
        if scale is not None:
            values = torch.cat([values, scale.to(summed).reshape(1)])
        if before_sync is not None:
            before_sync()
        values = values.tolist()
        n = len(summed) - 2
        norm = values[n + 2] if grad_norm is not None else None
        loss = self._check_finite(torch.tensor(values[:n]), norm)
        if self.scaler is not None:
            # without the scale in the step's transfer, the scaler's public read, now that the device has done the
            # step's work (`_scale_tensor`)
            self._count_overflows(values[-1] if scale is not None else float(self.scaler.get_scale()))
        return StepResult(summed[:n], values[n], values[n + 1], loss, lr, norm)

    def _scale_tensor(self) -> torch.Tensor | None:
        """The fp16 loss scale as the scaler holds it on the device (no read), to go with the step's one transfer; or
        None: no scaler, or a torch whose GradScaler lacks the private `_get_scale_async` (every torch from 2.4 to
        2.13 has it) or returns no tensor from it. Then `train_step` reads the public `get_scale()` after that
        transfer: a second copy of one number to the host, which waits for nothing (the device has no work queued
        then), not a second sync in the middle of the step. Overflows were not counted at all in that case, so a run
        whose every step was skipped trained nothing for as long as it ran."""
        read = getattr(self.scaler, "_get_scale_async", None) if self.scaler is not None else None
        try:
            scale = read() if read is not None else None
        except Exception:  # noqa: BLE001 (another torch's private method: its public read instead)
            scale = None
        return scale if isinstance(scale, torch.Tensor) and scale.numel() == 1 else None

    def _count_overflows(self, scale: float) -> None:
        """fp16: the scaler skips a step whose gradients overflowed and halves the loss scale (the step is still
        counted: its batch is used up and the lr schedule goes on, as in google's global step and torch's amp
        recipe). A run whose gradients are infinite or NaN at every scale (a NaN made in the backward pass) was
        skipped silently for good while its loss stayed finite; `MAX_OVERFLOWS` skipped steps in a row stop it."""
        ran_at = self._last_scale            # the scale this step ran at (`scale` is the one after its update)
        skipped = ran_at is not None and scale < ran_at
        self._last_scale = scale
        self._overflows = self._overflows + 1 if skipped else 0
        if self._overflows >= MAX_OVERFLOWS:
            raise self._diverged(f"fp16 loss scaling skipped {self._overflows} steps in a row (steps "
                                 f"{self.state.step + 2 - self._overflows} to {self.state.step + 1}): their gradients "
                                 f"were infinite or NaN at every loss scale down to {ran_at:g}; --precision bf16 (or "
                                 "fp32) has no such overflow")

    def _note_a_long_first_step(self, done: int, micro_batches: list[Batch], started: float) -> None:
        """One line when this invocation's first step has run `FIRST_STEP_NOTE_S` and still has micro-batches to
        go: the bar (or the first log line) moves only once a step is done, so a paper-sized step of many
        micro-batches on few devices (minutes, compiling included) showed nothing at all until then. Said once per
        invocation, between micro-batches; later steps have the bar's rate and ETA."""
        if self.state.step != self._first_step:
            self._said_first_step = True        # past the first step: nothing to say any more
            return
        elapsed = time.monotonic() - started
        if elapsed < FIRST_STEP_NOTE_S:
            return
        from albertlm.training.metrics import duration

        self._said_first_step = True
        count = len(micro_batches)
        compiling = " (torch.compile's compiling included)" if self.train.compile != "none" else ""
        self._print(f"step {self.state.step + 1}: {done} of {count} micro-batches done in {duration(elapsed)}"
                    f"{compiling}, about {duration(elapsed / done * count)} for the step at this pace; each process "
                    f"accumulates {count} micro-batches of {len(micro_batches[0]['input_ids'])} examples per step, "
                    "and the progress is shown once a step is done")

    def _check_finite(self, stats: torch.Tensor, grad_norm: float | None = None) -> float:
        """The step's loss, if it and the gradient norm (before clipping) are finite; else the run stops. A NaN or
        infinite gradient under a finite loss (an overflow in the backward pass) made the update NaN weights, which
        the step's checkpoint then saved, named "the last good checkpoint" when the next step's loss was NaN. Under
        fp16 loss scaling an infinite gradient is the scaler's to skip, not an error."""
        loss = self.objective.summarize(stats)["loss"]
        bad_norm = grad_norm is not None and not math.isfinite(grad_norm) and self.scaler is None
        if math.isfinite(loss) and not bad_norm:
            return loss
        what = f"loss is {loss}" if not math.isfinite(loss) else f"the gradient norm is {grad_norm} (loss {loss:.4g})"
        raise self._diverged(f"{what} at step {self.state.step + 1} (lr {self.plan.lr_at(self.state.step):g})")

    def _diverged(self, what: str) -> TrainingDiverged:
        last = ckpt.latest_checkpoint(self.run_dir)
        where = f"the last good checkpoint is {last}" if last else "no checkpoint was saved yet"
        return TrainingDiverged(f"{what}; stopped, and that step is not saved ({where}); a lower --lr may help")

    def _weights_finite(self) -> bool:
        """Whether every weight is a finite number (one host sync; run before a checkpoint is written)."""
        flags = [torch.isfinite(p).all() for p in self.raw_model.parameters() if p.is_floating_point()]
        return bool(torch.stack(flags).all()) if flags else True

    def _clip_and_update(self) -> torch.Tensor | None:
        """Clip and update, all queued on the device: the gradient norm (before clipping) stays a tensor."""
        grad_norm = None
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.clip_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm, foreach=True)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def after_step(self, window: "Window") -> None:
        step, final = self.state.step, self.state.step == self.plan.total_steps
        if self.train.log_every and (step % self.train.log_every == 0 or final):
            self.log_train(window)
        elif self.train.log_every and step in self.plan.lr_knots():
            window.knots[step] = window.lr      # this step's rate (`Window.add`), for the window's record
        # evaluating and saving are not training: their time is left out of the window's tokens/s
        if self.evaluate_fn is not None and (step % self.plan.eval_every == 0 or final):
            with window.paused():
                self._evaluate()
        if (self.train.save_every and step % self.train.save_every == 0) or final:
            with window.paused():
                self.state.rng = ckpt.capture_rng()
                self.save()

    def _log_unlogged(self, window: "Window") -> None:
        """A run stopping before the end (signal, time budget) logs the steps since the last training record:
        the resumed run starts a new window, so without this their numbers would be in no record.
        (A checkpoint this step's schedule saved before keeps the window too; `_carried_window` leaves it then.)"""
        if self.train.log_every and window.steps:
            self.log_train(window)

    def _carried_window(self) -> dict | None:
        """The logging window the checkpoint resumed from kept (`UNLOGGED`), for the resumed run to go on with;
        None when there is none, or when metrics.jsonl has a training record of that very step: a run stopped (a
        signal, the time budget) at a step its schedule had just saved in the middle of a window (--save-every not a
        multiple of --log-every) logs that window as it stops (`_log_unlogged`), after the checkpoint kept it, and
        the resumed run went on with it, so its next record counted those steps a second time (records at 6,
        covering steps 5-6, and at 8, covering 5-8). Records are rank 0's (the others' windows are never logged);
        the resume has dropped those after the step (`metrics.drop_records_after`), so a record of the step is one
        logged before the stop, never one of a later run."""
        saved = self.state.extra.pop(UNLOGGED, None)
        if saved and self._logged(self.state.step, "train"):
            return None
        return saved

    def _logged(self, step: int, split: str) -> bool:
        """Whether this rank's logger has a `split` record of `step` in its metrics.jsonl (False without a logger)."""
        if self.logger is None:
            return False
        return has_record(Path(getattr(self.logger, "run_dir", self.run_dir)) / "metrics.jsonl", step, split)

    def _evaluate(self, log: bool = True) -> None:
        """Evaluate the step reached and log it (unless not `log`). Until its record is written, a KeyboardInterrupt
        (a second signal) puts `state.extra` back as it was before (`_before_eval`) and saves the step as not
        evaluated."""
        self._before_eval = copy.deepcopy(self.state.extra)
        metrics = self.evaluate_fn()
        if metrics:
            self._last_eval = (self.state.step, dict(metrics))
        if self.logger is not None and metrics and log:  # nothing to evaluate on (no labelled dev set): no line
            self.logger.log(self.state.step, "eval", metrics)
        self._before_eval = None
        self.state.extra.pop(UNEVALUATED, None)
        self._evaluated = self.state.step

    def _redo_evaluation(self) -> bool:
        """A run resumed from a checkpoint whose step's evaluation was interrupted (`UNEVALUATED`) evaluates that
        step before it trains on, as the uninterrupted run did; returns whether it did. Every rank reads the same
        checkpoint, so all of them evaluate (pretraining's evaluation is collective).

        An earlier resume killed after it logged that evaluation and before it recorded it in the checkpoint (a kill
        -9 during `_record_evaluated`'s rewrite of the optimizer state) left its record, which the resume keeps (it
        is of the step resumed at): the evaluation is done again (a fine-tuning's history and best with it) and not
        logged a second time (metrics.jsonl and TensorBoard had two evaluations of the step)."""
        pending = self.state.extra.pop(UNEVALUATED, None)
        if pending != self.state.step or self.evaluate_fn is None:
            return False              # a run resumed without its evaluation data evaluates nothing
        logged = self._logged(self.state.step, "eval")
        self._print(f"evaluating step {self.state.step} first: its evaluation was interrupted before the checkpoint "
                    f"was saved{' (its record is in metrics.jsonl already)' if logged else ''}")
        self._evaluate(log=not logged)
        self._record_evaluated()
        return True

    def _record_evaluated(self) -> None:
        """The checkpoint of the step just evaluated again gets the state after that evaluation (not marked
        `UNEVALUATED`; a fine-tuning's history and best with it), as the uninterrupted run saved it: else every
        later `--resume` of a finished run evaluated the step again (and logged it again), and a run killed
        before its next save did too. Only trainer_state.pt is rewritten: an evaluation changes no weight. Rank 0
        writes; a failed write stops every rank, as a failed save does."""
        self._written_by_rank_0(lambda: ckpt.rewrite_train_state(ckpt.step_dir(self.run_dir, self.state.step),
                                                                 self.state),
                                f"record the evaluation of step {self.state.step} in its checkpoint")
        self._saved = self.state.step

    def _written_by_rank_0(self, write: Callable[[], Any], what: str) -> Any:
        """`write()` on rank 0 (what it returns there; None elsewhere). An error there stops every rank: rank 0
        with its own error, the others, which learn of it from the all-reduce they wait in (not a hang), with
        "rank 0 could not WHAT"."""
        result, error = None, None
        if self.info.is_main:
            try:
                result = write()
            except Exception as exc:  # noqa: BLE001 (re-raised below, after the other ranks know)
                error = exc
        failed = any_rank(error is not None, self.info.device) if self.info.enabled else error is not None
        if error is not None:
            raise error
        if failed:
            raise UserError(f"rank 0 could not {what} (its error says why); rank {self.info.rank} stopped with it")
        return result

    def log_train(self, window: "Window") -> None:
        metrics = {**self.objective.summarize(window.stats), **window.read(),
                   "tokens": self.state.extra.get("tokens", 0.0)}
        self._last_train = (self.state.step, metrics["loss"])
        if self.logger is not None:
            self.logger.log(self.state.step, "train", metrics)

    def _report_compile(self, first_steps: list[float], seconds: float) -> None:
        """With train.compile, the first step holds the compilation: log it against the second step (each
        timed to its GPU work's end: CUDA runs asynchronously). A first step no slower than the second
        (inductor's cache held the kernels, or a later step compiled for a new input shape, as fine-tuning's
        length buckets do) is reported as no measurable compile time, never as a negative one."""
        if self.train.compile == "none" or len(first_steps) >= 2:
            return
        first_steps.append(seconds)
        if len(first_steps) == 2 or self.state.step == self.plan.total_steps:
            first, then = first_steps[0], first_steps[-1] if len(first_steps) == 2 else 0.0
            compile_s = max(0.0, first - then)
            if compile_s >= 0.05:  # below that, step-to-step noise, not compiling
                said = f"so about {compile_s:.1f} s went to compiling"
            else:
                said = "so no compile time was measurable (a cache hit, or compiling came later, for new shapes)"
            self._print(f"torch.compile (mode {self.train.compile}): the first step took {first:.2f} s, "
                        f"the next {then:.2f} s, {said}")
            if self.logger is not None:
                self.logger.log(self.state.step, "compile", {"first_step_s": first, "next_step_s": then,
                                                            "compile_s": compile_s})

    def _stop_for_budget(self) -> None:
        """Evaluate and save the step reached, unless the step's own schedule just did (the demo's budget ran
        out on an eval step and logged the same evaluation and wrote the same checkpoint twice)."""
        if self.evaluate_fn is not None and self._evaluated != self.state.step:
            self._evaluate()
        if self._saved == self.state.step:
            path = ckpt.latest_checkpoint(self.run_dir)
        else:
            self.state.rng = ckpt.capture_rng()
            path = self.save()
        self._print(f"time budget of {self.train.max_minutes:g} min used up at step {self.state.step}: saved {path}; "
                    f"`--resume` goes on from there, for another {self.train.max_minutes:g} min unless "
                    "--train.max_minutes says otherwise (0 = no budget)")

    def _save_at_boundary(self, rng: dict) -> Path | None:
        """A stop's checkpoint of the step reached, with the RNG as it was when that step was counted (a half-done
        step is redone from its start on resume); a step its schedule saved already is not saved (nor said) again."""
        if self._saved == self.state.step:
            return ckpt.latest_checkpoint(self.run_dir) if self.info.is_main else None
        self.state.rng = rng
        return self.save()

    def save(self) -> Path | None:
        """Rank 0 writes; the others wait so no rank races ahead of a checkpoint. A failed save (a full
        disk) stops every rank: the others learn of it from the same all-reduce they wait in, not a hang."""
        if not self._weights_finite():
            # (every rank holds the same weights, so every rank stops here.) Without gradient clipping, a NaN
            # gradient under a finite loss is seen nowhere else before the next step's loss
            raise self._diverged(f"the weights of step {self.state.step} hold NaN or infinite values")
        self._saving = True                  # until written: a KeyboardInterrupt before then is not saved again
        self.state.optimizer = self.optimizer.state_dict()
        self.state.scaler = self.scaler.state_dict() if self.scaler is not None else {}
        self.state.data = self.data.state_dict(self.state.step)
        unlogged = self._window.unlogged() if self._window is not None and self.train.log_every else None
        if unlogged:
            self.state.extra[UNLOGGED] = unlogged
        else:
            self.state.extra.pop(UNLOGGED, None)
        path = self._written_by_rank_0(
            lambda: ckpt.save_checkpoint(self.run_dir, self.raw_model, self.state, self.raw_model.config,
                                         self.saved_config, self.train.keep_last),
            f"write the checkpoint of step {self.state.step}")
        self._saved, self._saving = self.state.step, False
        if self.logger is not None and path is not None:
            self.logger.note(f"saved {path}")
        return path

    def _print(self, message: str) -> None:
        if self.logger is not None:
            self.logger.note(message)          # above the progress bar, not through it
        elif self.info.is_main:
            print(message, flush=True)


def has_record(path: Path, step: int, split: str) -> bool:
    """Whether the metrics.jsonl at `path` has a `split` record ("train", "eval") of `step` (False where it cannot
    be read). Read from its end, and only back to the first record of an earlier step: the loop writes its records
    in the order of their steps, and a resume first drops those after the step it resumes at
    (`metrics.drop_records_after`), so a record of `step` is among the last ones. It read the whole file at every
    --resume, line by line in memory (hundreds of MB for a long run logged at every step)."""
    try:
        with open(path, "rb") as f:
            for raw in _lines_from_end(f):
                # (as the whole file's `splitlines` had it: a line of another newline character is split there too)
                for line in reversed(raw.decode("utf-8", errors="replace").splitlines()):
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(record, dict):
                        continue
                    if record.get("step") == step and record.get("split") == split:
                        return True
                    if type(record.get("step")) is int and record["step"] < step:
                        return False      # the records before this one are of earlier steps still
    except OSError:
        return False
    return False


def _lines_from_end(f, block: int = 1 << 16) -> Iterator[bytes]:
    """The lines of the binary file `f` (split at b"\\n", without it), last first, read a block at a time."""
    end = f.seek(0, os.SEEK_END)
    carried: list[bytes] = []     # the pieces of a line begun in a block before, its last piece first
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        data = f.read(end - start)
        end = start
        if start > 0 and b"\n" not in data:    # all of it inside that line: joined once, at its start (a line
            carried.append(data)                # of MBs without a newline was copied again for every block)
            continue
        lines = data.split(b"\n")
        lines[-1] += b"".join(reversed(carried))
        carried = [lines.pop(0)] if start > 0 else []
        yield from reversed(lines)


def count_tokens(batch: Batch) -> torch.Tensor:
    """The batch's real tokens, on its device. Without a mask, every position: a fill from the shape, not a tensor
    made from a host number (`torch.tensor(n, device=cuda)` copies it over and waits for the GPU's queue, once per
    micro-batch)."""
    mask = batch.get("attention_mask")
    if mask is not None:
        return mask.sum().float()
    ids = batch["input_ids"]
    return ids.new_full((), float(ids.numel()), dtype=torch.float32)


class StopRequest:
    """Set by a stop signal (`stop_signals`): the name of the first one (and when it came), read by the loop after
    each step."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.signum: int | None = None
        self.at = 0.0                      # time.monotonic() of the first signal


# torchrun passes the signal it gets on to every worker, so a Ctrl-C in its terminal (the whole foreground process
# group gets SIGINT) or a scheduler's SIGTERM to every process of the job reaches each rank twice, milliseconds
# apart: the second is the same request, not "stop at once" (which lost the step's checkpoint whenever the rank
# ran Python code between the two). A deliberate second signal comes after the notice has been read.
RELAYED_S = 1.0
# fp16: this many steps in a row skipped by the loss scaler (infinite or NaN gradients) stop the run
# (`Loop._count_overflows`): from the scaler's initial 65536 the last of them ran at 2^-7, far below any
# scale at which fp16 gradients are still representable, so more skipping cannot help
MAX_OVERFLOWS = 24
# a first step still running after this many seconds, with micro-batches to go, is said (`Loop._note_a_long_first_step`)
FIRST_STEP_NOTE_S = 30.0


def relayed_twice(request: StopRequest, signum: int) -> bool:
    """Whether `signum` is torchrun's copy of the signal `request` already holds (under torchrun only)."""
    return ("TORCHELASTIC_RUN_ID" in os.environ and signum == request.signum
            and time.monotonic() - request.at < RELAYED_S)


def _say_in_handler(line: str) -> None:
    """A line on stderr from a signal handler: straight to the file descriptor, since the handler may run while
    the main thread is inside a write to sys.stderr (a progress bar's redraw), where printing raises "reentrant
    call inside <_io.BufferedWriter>"; through sys.stderr when it has no descriptor (a test's capture)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):
        print(line, file=sys.stderr, flush=True)
        return
    try:
        os.write(fd, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that ask a training loop to save after the step in progress and stop: SIGINT (Ctrl-C),
    SIGTERM (`kill`, a scheduler, torchrun's shutdown), SIGUSR1 (Slurm's pre-emption notice,
    `#SBATCH --signal=USR1@120`, and other clusters' "save and stop") and SIGHUP (the terminal of an ssh session
    closed under a run started without nohup: the run ends anyway, and saving first loses nothing; by default it
    ended at once, the steps since the last checkpoint lost). Those this platform lacks are left out, and so are
    SIGUSR1 and SIGHUP where the process ignores them (`nohup` sets SIGHUP so: a run started with it must outlive
    its session, not stop when the session closes)."""
    return tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGHUP")
                 if hasattr(signal, name) and not (name in IGNORABLE_STOP_SIGNALS
                                                   and signal.getsignal(getattr(signal, name)) == signal.SIG_IGN))


# the stop signals a process that ignores them keeps ignoring (`stop_signals`; nohup's SIGHUP)
IGNORABLE_STOP_SIGNALS = ("SIGUSR1", "SIGHUP")


@contextlib.contextmanager
def stop_on_signals(info: DistInfo | None = None, where: Callable[[], str] = lambda: ""):
    """A stop signal (`stop_signals`: Ctrl-C, SIGTERM, SIGUSR1, SIGHUP) asks the loop to stop after the step in
    progress, save and return; a second one raises KeyboardInterrupt at once. Outside the main thread (no
    signal handlers there) only the caller's KeyboardInterrupt stops the loop. The handlers it replaced come
    back when the block ends.

    The signal torchrun sends because another rank failed (`info`: the run's ranks; that rank left its message,
    `distributed.tell_peers`) stops this rank at once with that message (`PeerFailed`; `where()` says at which
    step): no collective can succeed any more, and waiting for the next one to fail let work that only this
    rank does (rank 0 scoring a fine-tuning's dev evaluation and writing best/ and a checkpoint, which can take
    longer than torchrun's 30-second grace before it kills) end in a kill -9 that said nothing."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def ask(signum, frame):
        if request.name is not None:
            if relayed_twice(request, signum):
                return
            raise KeyboardInterrupt
        told = peer_failures(info, wait_s=0) if info is not None and info.enabled else []
        if told:
            raise PeerFailed(f"{'; '.join(told)}; rank {info.rank} stopped too{where()}")
        request.name, request.signum, request.at = signal.Signals(signum).name, signum, time.monotonic()
        if reports_here():
            _say_in_handler(f"{request.name}: stopping after this step to save a checkpoint (send it again to "
                            "stop at once, without saving this step)")

    previous = {s: signal.signal(s, ask) for s in stop_signals()}
    try:
        yield request
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class Window:
    """Stats, tokens and wall time of one logging window; the time is split into waiting for data and the rest.
    `totals()` adds up every window since the first (the run's summary)."""

    def __init__(self) -> None:
        self._reset(time.perf_counter())
        self.done_tokens, self.done_s, self.examples = 0.0, 0.0, 0.0
        # what `resume` took over from a checkpoint (tokens, seconds): in the window's record, not in `totals`
        self.carried_tokens, self.carried_s = 0.0, 0.0

    def _reset(self, now: float) -> None:
        self.start, self.wait, self.tokens, self.stats, self.steps = now, 0.0, 0.0, None, 0
        self.window_examples = 0.0
        self.lr: float = 0.0
        self.grad_norm: float | None = None
        # the rate of the window's steps where the schedule bends (`Plan.lr_knots`), by step, for its record
        self.knots: dict[int, float] = {}

    @contextlib.contextmanager
    def waiting(self):
        t = time.perf_counter()
        yield
        self.wait += time.perf_counter() - t

    @contextlib.contextmanager
    def paused(self):
        """Work between steps (an evaluation, a checkpoint): its time is left out of the window, so tokens/s and
        the data-wait share are the training's (an evaluation of the held-out data halved the next record's
        tokens/s and drew a dip in the throughput curve at every --eval-every)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.start += time.perf_counter() - t

    def add(self, result: StepResult) -> None:
        self.stats = result.stats if self.stats is None else self.stats + result.stats
        self.steps += 1
        self.tokens += result.tokens
        self.examples += result.examples
        self.window_examples += result.examples
        self.lr, self.grad_norm = result.lr, result.grad_norm

    def rate(self) -> float:
        return self.tokens / max(time.perf_counter() - self.start, 1e-9)

    def unlogged(self) -> dict | None:
        """What a checkpoint keeps of a window no record has covered yet (None when it is empty): its summed stats
        (on the CPU), steps, tokens, examples, seconds so far, data wait, lr and gradient norm."""
        if not self.steps:
            return None
        return {"stats": self.stats.detach().cpu().clone(), "steps": self.steps, "tokens": float(self.tokens),
                "examples": float(self.window_examples), "seconds": max(time.perf_counter() - self.start, 0.0),
                "wait": self.wait, "lr": self.lr, "grad_norm": self.grad_norm, "knots": dict(self.knots)}

    def resume(self, saved: dict | None, device) -> None:
        """Go on with the window a checkpoint kept (`unlogged`), on `device`; nothing when it kept none. Its steps,
        tokens and seconds are the next record's (as in the run never stopped), not this invocation's `totals`:
        the summary of a resumed run counted the steps before the checkpoint since the last record, and its
        examples counted every step of the invocation that saved it (a checkpoint kept the running total)."""
        if not saved:
            return
        self.stats = saved["stats"].to(device)
        self.steps, self.tokens = int(saved["steps"]), saved["tokens"]
        self.window_examples = saved["examples"]
        self.start, self.wait = time.perf_counter() - saved["seconds"], saved["wait"]
        self.lr, self.grad_norm = saved["lr"], saved["grad_norm"]
        self.knots = dict(saved.get("knots", {}))       # (a checkpoint of an older version kept none)
        self.carried_tokens, self.carried_s = float(saved["tokens"]), float(saved["seconds"])

    def read(self) -> dict[str, float]:
        """The window's timing, lr and gradient norm; starts the next window."""
        now = time.perf_counter()
        elapsed = max(now - self.start, 1e-9)
        # the rates of the window's bends first, so that TensorBoard's train/lr gets its steps in order
        out = {**{f"{LR_AT}{step}": lr for step, lr in sorted(self.knots.items())}, "lr": self.lr,
               "tokens_per_s": self.tokens / elapsed, "data_wait_frac": self.wait / elapsed, "window_s": elapsed}
        if self.grad_norm is not None:
            out["grad_norm"] = self.grad_norm
        self.done_tokens += self.tokens
        self.done_s += elapsed
        self._reset(now)
        return out

    def totals(self) -> tuple[float, float, float]:
        """(tokens, training seconds, examples) since the window was made, pauses left out, and without what it
        took over from a checkpoint (`resume`: trained by the invocation that saved it)."""
        seconds = self.done_s + max(time.perf_counter() - self.start, 0.0) - self.carried_s
        return self.done_tokens + self.tokens - self.carried_tokens, max(seconds, 0.0), self.examples

