"""The training loop: for each step, accumulate micro-batches, clip, update, then log / evaluate / save.

The global batch is fixed by `train.batch_size`: each of the W processes reads its own B/W examples of
every step, in micro-batches of `micro_batch_size`. Losses are normalised by counts summed over the
*whole* global batch (an all-reduce of a few numbers per step), so the gradient is the same whatever W and
the micro-batch size are; DDP's averaging is undone by scaling the local loss by W.

What a task plugs in is an `Objective` (see `pretrain.PretrainingObjective`).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import numpy as np
import torch
from torch import nn

from albertlm.config.run import RunConfig
from albertlm.errors import UserError
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import DistInfo, all_reduce_sum, any_rank, unwrap
from albertlm.training.precision import autocast
from albertlm.training.schedule import lr_at, set_lr

Batch = dict[str, torch.Tensor]


class TrainingDiverged(UserError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""

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
class _EpochItems(torch.utils.data.Dataset):
    """Maps (epoch, index) to an example; a dynamically masked dataset is asked for `ds[(index, epoch)]`
    (the `albertlm.data.loader.PretrainingDataset` convention) so each epoch gets a fresh mask."""

    def __init__(self, dataset, dynamic: bool):
        self.dataset, self.dynamic = dataset, dynamic

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        epoch, index = key
        return self.dataset[(index, epoch)] if self.dynamic else self.dataset[index]


@dataclass
class StepData:
    """Deterministic global order (a seeded permutation per epoch), cut into global batches; this rank's
    share of each global batch, as `accumulation` micro-batches. The position is just the step number,
    which makes resuming exact."""
    dataset: Any
    collate: Callable[[list], Batch]
    batch_size: int                     # global
    micro_batch_size: int               # per rank and forward pass
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    num_workers: int = 0
    dynamic_masking: bool = False

    def __post_init__(self) -> None:
        self.steps_per_epoch = len(self.dataset) // self.batch_size
        if self.steps_per_epoch < 1:
            raise UserError(f"the data has {len(self.dataset)} examples, fewer than one global batch "
                            f"({self.batch_size}); lower --batch-size or build more data")
        self.accumulation = self.batch_size // (self.world_size * self.micro_batch_size)

    def epoch_order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.dataset))

    def micro_batch_indices(self, start_step: int) -> Iterator[list[tuple[int, int]]]:
        per_rank = self.batch_size // self.world_size
        step, order, order_epoch = start_step, None, -1
        while True:
            epoch, k = divmod(step, self.steps_per_epoch)
            if epoch != order_epoch:
                order, order_epoch = self.epoch_order(epoch), epoch
            lo = k * self.batch_size + self.rank * per_rank
            mine = order[lo:lo + per_rank]
            for i in range(0, per_rank, self.micro_batch_size):
                yield [(epoch, int(j)) for j in mine[i:i + self.micro_batch_size]]
            step += 1

    def steps(self, start_step: int) -> Iterator[list[Batch]]:
        """Yields, for every optimizer step from `start_step` on, this rank's list of micro-batches."""
        loader = torch.utils.data.DataLoader(
            _EpochItems(self.dataset, self.dynamic_masking), batch_sampler=self.micro_batch_indices(start_step),
            collate_fn=self.collate, num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(self.seed),   # never draws from the global RNG
            prefetch_factor=4 if self.num_workers else None)
        it = iter(loader)
        while True:
            yield [next(it) for _ in range(self.accumulation)]

    def state_dict(self, step: int) -> dict:
        return {"step": step, "num_examples": len(self.dataset), "batch_size": self.batch_size, "seed": self.seed}

    def check_resume(self, state: dict) -> None:
        if not state:
            return
        mine = self.state_dict(state.get("step", 0))
        for key in ("num_examples", "batch_size", "seed"):
            if state.get(key) != mine[key]:
                raise UserError(f"cannot resume exactly: the checkpoint's {key} is {state.get(key)}, now {mine[key]}")


def eval_micro_batches(dataset, collate, micro_batch_size: int, info: DistInfo, max_batches: int) -> Iterator[Batch]:
    """The held-out data in order; micro-batch j goes to rank j % W; at most `max_batches` (0 = all)."""
    count = math.ceil(len(dataset) / micro_batch_size)
    if max_batches:
        count = min(count, max_batches)
    for j in range(info.rank, count, info.world_size):
        items = range(j * micro_batch_size, min(len(dataset), (j + 1) * micro_batch_size))
        yield collate([dataset[i] for i in items])


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
@dataclass
class Loop:
    """Everything one training run holds; `run()` is the loop itself, read top-down."""
    model: nn.Module                    # maybe DDP-wrapped
    optimizer: torch.optim.Optimizer
    objective: Objective
    data: StepData
    run_config: RunConfig
    info: DistInfo
    run_dir: Path
    state: ckpt.TrainState = field(default_factory=ckpt.TrainState)
    scaler: Any = None                  # torch.amp.GradScaler for fp16
    evaluate_fn: Callable[[], dict[str, float]] | None = None
    logger: Any = None                  # metrics.MetricsLogger (rank 0) or None
    on_step: Callable[[int, dict], None] | None = None   # test hook: called after each update

    def run(self) -> str:
        """Train to `train.max_steps`; returns "done", "interrupted" (Ctrl-C, after saving) or "budget"
        (`train.max_minutes` ran out, after saving)."""
        train = self.run_config.train
        deadline = time.monotonic() + train.max_minutes * 60 if train.max_minutes else math.inf
        self.model.train()
        batches = self.data.steps(self.state.step)
        rng_at_boundary = ckpt.capture_rng()   # the RNG as it was when `state.step` updates were done
        window, timer = None, _Timer()
        try:
            while self.state.step < train.max_steps:
                with timer.waiting():
                    micro_batches = [to_device(b, self.info.device) for b in next(batches)]
                stats, loss = self.train_step(micro_batches)
                self.state.step += 1
                rng_at_boundary = ckpt.capture_rng()
                tokens = float(stats[-1])
                timer.tokens += tokens
                self.state.extra["tokens"] = self.state.extra.get("tokens", 0.0) + tokens
                window = stats if window is None else window + stats
                if self.logger is not None:
                    self.logger.advance(self.state.step, loss, timer.rate())
                if self.on_step is not None:
                    self.on_step(self.state.step, self.objective.summarize(stats[:-1]))
                window = self.after_step(window, timer)
                if train.max_minutes and self.state.step < train.max_steps and self._budget_spent(deadline):
                    self._stop_for_budget()
                    return "budget"
        except KeyboardInterrupt:
            self.state.rng = rng_at_boundary     # a half-done step is redone from its start on resume
            path = self.save()
            self._print(f"interrupted at step {self.state.step}: saved {path}")
            return "interrupted"
        finally:
            if self.logger is not None:
                self.logger.close()
        return "done"

    def _budget_spent(self, deadline: float) -> bool:
        """Every rank asks every step, so all of them stop at the same step."""
        spent = time.monotonic() > deadline
        return any_rank(spent, self.info.device) if self.info.enabled else spent

    def _stop_for_budget(self) -> None:
        if self.evaluate_fn is not None:
            metrics = self.evaluate_fn()
            if self.logger is not None:
                self.logger.log(self.state.step, "eval", metrics)
        self.state.rng = ckpt.capture_rng()
        path = self.save()
        self._print(f"time budget of {self.run_config.train.max_minutes} min used up at step "
                    f"{self.state.step}: saved {path}")

    def train_step(self, micro_batches: list[Batch]) -> tuple[torch.Tensor, float]:
        """One optimizer update over this rank's micro-batches. Returns (global stats + [tokens], loss)."""
        optim, train = self.run_config.optim, self.run_config.train
        lr = lr_at(self.state.step, optim.lr, optim.warmup_steps, train.max_steps, optim.decay_power)
        set_lr(self.optimizer, lr)
        denominators = all_reduce_sum(self.objective.denominators(micro_batches))
        total = None
        for i, batch in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            sync = contextlib.nullcontext() if last or not self.info.enabled else self.model.no_sync()
            with sync:
                with autocast(train.precision, self.info.device):
                    loss, stats = self.objective.forward(self.model, batch, denominators)
                loss = loss * self.info.world_size   # DDP averages gradients over ranks; we want the sum
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            tokens = _count_tokens(batch).to(stats)
            stats = torch.cat([stats.detach(), tokens[None]])
            total = stats if total is None else total + stats
        total = all_reduce_sum(total)
        loss = self._check_finite(total)
        self._clip_and_update()
        self._last_lr = lr
        return total, loss

    def _check_finite(self, stats: torch.Tensor) -> float:
        loss = self.objective.summarize(stats[:-1])["loss"]
        if math.isfinite(loss):
            return loss
        last = ckpt.latest_checkpoint(self.run_dir)
        where = f"the last good checkpoint is {last}" if last else "no checkpoint was saved yet"
        self.optimizer.zero_grad(set_to_none=True)
        raise TrainingDiverged(f"loss is {loss} at step {self.state.step + 1}; stopped without applying "
                               f"that update ({where})")

    def _clip_and_update(self) -> None:
        clip = self.run_config.optim.clip_norm
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if clip > 0:
            self._grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip, foreach=True)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def after_step(self, window: torch.Tensor, timer: "_Timer") -> torch.Tensor | None:
        train, step = self.run_config.train, self.state.step
        final = step == train.max_steps
        if train.log_every and (step % train.log_every == 0 or final):
            self.log_train(window, timer)
            window = None
        if self.evaluate_fn is not None and ((train.eval_every and step % train.eval_every == 0) or final):
            metrics = self.evaluate_fn()
            if self.logger is not None:
                self.logger.log(step, "eval", metrics)
        if (train.save_every and step % train.save_every == 0) or final:
            self.state.rng = ckpt.capture_rng()
            self.save()
        return window

    def log_train(self, window: torch.Tensor, timer: "_Timer") -> None:
        metrics = self.objective.summarize(window[:-1])
        metrics.update(lr=self._last_lr, **timer.read())
        if hasattr(self, "_grad_norm"):
            metrics["grad_norm"] = float(self._grad_norm)
        metrics["tokens"] = self.state.extra.get("tokens", 0.0)
        if self.logger is not None:
            self.logger.log(self.state.step, "train", metrics)

    def save(self) -> Path | None:
        """Rank 0 writes; the others wait so no rank races ahead of a checkpoint."""
        path = None
        self.state.optimizer = self.optimizer.state_dict()
        self.state.scaler = self.scaler.state_dict() if self.scaler is not None else {}
        self.state.data = self.data.state_dict(self.state.step)
        if self.info.is_main:
            raw = unwrap(self.model)
            path = ckpt.save_checkpoint(self.run_dir, raw, self.state, raw.config,
                                        self.run_config.to_dict(), self.run_config.train.keep_last)
            if self.logger is not None:
                self.logger.note(f"saved {path}")
        from albertlm.training.distributed import barrier

        barrier()
        return path

    def _print(self, message: str) -> None:
        if self.logger is not None:
            self.logger.note(message)          # above the progress bar, not through it
        elif self.info.is_main:
            print(message, flush=True)


def _count_tokens(batch: Batch) -> torch.Tensor:
    mask = batch.get("attention_mask")
    if mask is not None:
        return mask.sum().float()
    return torch.tensor(float(batch["input_ids"].numel()))


class _Timer:
    """Wall time per logging window, split into waiting for data and the rest."""

    def __init__(self) -> None:
        self.start, self.wait, self.tokens = time.perf_counter(), 0.0, 0.0

    @contextlib.contextmanager
    def waiting(self):
        t = time.perf_counter()
        yield
        self.wait += time.perf_counter() - t

    def rate(self) -> float:
        return self.tokens / max(time.perf_counter() - self.start, 1e-9)

    def read(self) -> dict[str, float]:
        now = time.perf_counter()
        elapsed = max(now - self.start, 1e-9)
        out = {"tokens_per_s": self.tokens / elapsed, "data_wait_frac": self.wait / elapsed,
               "window_s": elapsed}
        self.start, self.wait, self.tokens = now, 0.0, 0.0
        return out
