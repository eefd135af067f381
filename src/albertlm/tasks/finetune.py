"""The fine-tuning driver shared by every task family.

A task family supplies a `TaskSpec`: the head class, train features, evaluation sets, and how to turn
model outputs into metrics and prediction files. The driver runs the steps (AdamW with the training
layer's decay exemptions, warmup + linear decay from `training.schedule`, autocast from
`training.precision`), evaluates on dev, and keeps the best dev checkpoint in `RUN_DIR/best/`.

It does not use `training.loop.Loop`: that loop is built around fixed-length pretraining shards and a
resumable per-example cursor; fine-tuning wants length-bucketed batches re-drawn each epoch and dev
evaluation with best-checkpoint selection, which fit in the ~100 lines below.
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from albertlm.config.run import OptimConfig
from albertlm.config.task import FinetuneConfig
from albertlm.errors import UserError
from albertlm.tasks.features import Feature, bucket_batches, collate
from albertlm.tasks.tables import Problems
from albertlm.training.lamb import build_optimizer
from albertlm.training.precision import autocast, grad_scaler
from albertlm.training.schedule import lr_at, set_lr

TASK_FILE = "task.json"  # beside the best checkpoint: what `predict` / `evaluate` need to know


@dataclass
class EvalSet:
    name: str
    features: list[Feature]
    score: Callable[[dict[str, np.ndarray]], dict[str, float]] | None  # None: no labels (test)
    write: Callable[[dict[str, np.ndarray], Path], None] | None = None  # prediction files


@dataclass
class TaskSpec:
    family: str                         # glue | squad | race | classify
    model_class: type
    model_overrides: dict[str, Any]     # e.g. num_labels
    train: list[Feature]
    eval_sets: list[EvalSet]
    main_metric: str                    # key in the first eval set's metrics; higher is better
    label_dtype: Any = None
    info: dict[str, Any] = field(default_factory=dict)   # written to task.json
    problems: Problems = field(default_factory=Problems)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_model(spec: TaskSpec, model_path: str | Path, cfg: FinetuneConfig):
    """The task head on a checkpoint (ours or a transformers ALBERT directory); dropout from the config."""
    overrides = dict(spec.model_overrides)
    for name in ("hidden_dropout", "attention_dropout", "classifier_dropout"):
        if getattr(cfg, name) is not None:
            overrides[name] = getattr(cfg, name)
    return spec.model_class.from_pretrained(model_path, **overrides)


def model_inputs(batch: dict, family: str) -> dict:
    """Rename the collated `labels` to what each head takes (spans: start/end positions)."""
    batch = dict(batch)
    labels = batch.pop("labels", None)
    if labels is not None:
        if family == "squad":
            batch["start_positions"], batch["end_positions"] = labels[:, 0], labels[:, 1]
        else:
            batch["labels"] = labels
    return batch


@torch.no_grad()
def predict(model, features: Sequence[Feature], family: str, pad_id: int, batch_size: int,
            device: torch.device, precision: str = "fp32") -> dict[str, np.ndarray]:
    """Outputs for every feature, in feature order: `logits`, or `start_logits` / `end_logits`
    (padded positions cut off: a list of per-feature arrays)."""
    model.eval()
    keys = ("start_logits", "end_logits") if family == "squad" else ("logits",)
    out: dict[str, list] = {k: [None] * len(features) for k in keys}
    for index in bucket_batches([f.length for f in features], batch_size, rng=None):
        batch = collate([features[i] for i in index], pad_id)
        batch.pop("labels", None)
        with autocast(precision, device):
            result = model(**{k: v.to(device) for k, v in batch.items()})
        for key in keys:
            values = result[key].float().cpu().numpy()
            for row, i in zip(values, index):
                out[key][i] = row[: features[i].length] if family == "squad" else row
    return {k: (v if family == "squad" else np.stack(v)) for k, v in out.items()}


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def save_best(model, tokenizer, spec: TaskSpec, directory: Path) -> None:
    model.save_pretrained(directory)
    tokenizer.save(directory)
    _write_json(directory / TASK_FILE, {"family": spec.family, **spec.info})


@dataclass
class RunResult:
    best: dict[str, Any]
    history: list[dict[str, Any]]
    losses: list[float]
    out_dir: Path


class Finetuner:
    """Train one task head; evaluate every `eval_every` steps (or epoch) and keep the best on dev."""

    def __init__(self, spec: TaskSpec, model, tokenizer, cfg: FinetuneConfig, out_dir: str | Path,
                 log=print):
        self.spec, self.model, self.tokenizer, self.cfg = spec, model, tokenizer, cfg
        self.out_dir = Path(out_dir)
        self.device = pick_device(cfg.device)
        self.scaler = grad_scaler(cfg.precision, self.device)  # fp16 only; checks the precision too
        self.log = log
        if not spec.train:
            raise UserError("no training examples")

    def _optimizer(self):
        optim = OptimConfig(name="adamw", lr=self.cfg.lr, weight_decay=self.cfg.weight_decay,
                            eps=self.cfg.adam_eps, clip_norm=self.cfg.clip_norm, warmup_steps=0)
        return build_optimizer(self.model, optim)

    def _epoch_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.cfg.seed, epoch])
        return bucket_batches([f.length for f in self.spec.train], self.cfg.batch_size, rng)

    def run(self) -> RunResult:
        cfg, spec = self.cfg, self.spec
        torch.manual_seed(cfg.seed)
        self.model.to(self.device)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        steps_per_epoch = math.ceil(len(spec.train) / cfg.batch_size)
        total = cfg.total_steps(steps_per_epoch)
        warmup = cfg.warmup(total)
        eval_every = cfg.eval_every or steps_per_epoch
        optimizer = self._optimizer()
        self.log(f"finetune {spec.family}: {len(spec.train)} train features, {total} steps "
                 f"(batch {cfg.batch_size}, warmup {warmup}), lr {cfg.lr}, device {self.device}")
        if not any(s.score is not None for s in spec.eval_sets):
            self.log("no labelled dev set: the last model is kept as best/")
        history, losses, best = [], [], None
        step, epoch, start = 0, 0, time.perf_counter()
        while step < total:
            for index in self._epoch_batches(epoch):
                if step >= total:
                    break
                losses.append(self._train_step(optimizer, index, lr_at(step, cfg.lr, warmup, total)))
                step += 1
                if step % cfg.log_every == 0 or step == total:
                    recent = float(np.mean(losses[-cfg.log_every:]))
                    self.log(f"step {step}/{total} loss {recent:.4f} ({time.perf_counter() - start:.0f}s)")
                if step % eval_every == 0 or step == total:
                    best = self._evaluate(step, history, best)
            epoch += 1
        _write_json(self.out_dir / "train_log.json", {"losses": losses, "history": history})
        return RunResult(best or {}, history, losses, self.out_dir)

    def _micro_loss(self, index: np.ndarray, weight: float, lr: float) -> float:
        """Forward + backward of one micro-batch; its mean loss counts `weight` of the step's loss."""
        batch = collate([self.spec.train[i] for i in index], self.tokenizer.pad_id, self.spec.label_dtype)
        batch = {k: v.to(self.device) for k, v in model_inputs(batch, self.spec.family).items()}
        with autocast(self.cfg.precision, self.device):
            loss = self.model(**batch)["loss"]
        if not torch.isfinite(loss):
            raise UserError(f"the loss became {loss.item()} at a step with lr {lr:g}; "
                            "lower --lr (v2 models on RACE: use --recipe race-v2)")
        scaled = loss * weight
        (scaled if self.scaler is None else self.scaler.scale(scaled)).backward()
        return float(loss.detach()) * weight

    def _train_step(self, optimizer, index: np.ndarray, lr: float) -> float:
        self.model.train()
        set_lr(optimizer, lr)
        optimizer.zero_grad(set_to_none=True)
        # the batch is length-bucketed already, so its micro-batches pad alike
        loss = sum(self._micro_loss(part, len(part) / len(index), lr)
                   for part in np.array_split(index, min(self.cfg.grad_accum, len(index))))
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        if self.cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()
        return loss

    def _evaluate(self, step: int, history: list, best: dict | None) -> dict | None:
        scored = [s for s in self.spec.eval_sets if s.score is not None]
        if not scored:  # no dev data: the last model is the one kept
            save_best(self.model, self.tokenizer, self.spec, self.out_dir / "best")
            return {"step": step}
        record: dict[str, Any] = {"step": step}
        outputs = {}
        for eval_set in scored:
            outputs[eval_set.name] = predict(self.model, eval_set.features, self.spec.family,
                                             self.tokenizer.pad_id, self.cfg.eval_batch_size, self.device,
                                             self.cfg.precision)
            record[eval_set.name] = eval_set.score(outputs[eval_set.name])
        history.append(record)
        value = record[scored[0].name][self.spec.main_metric]
        self.log(f"step {step} dev: " + json.dumps({k: v for k, v in record.items() if k != "step"},
                                                   sort_keys=True))
        if best is None or value > best[scored[0].name][self.spec.main_metric]:
            save_best(self.model, self.tokenizer, self.spec, self.out_dir / "best")
            for eval_set in scored:
                if eval_set.write is not None:
                    eval_set.write(outputs[eval_set.name], self.out_dir)
            return record
        return best


def write_test_predictions(spec: TaskSpec, model, tokenizer, cfg: FinetuneConfig, out_dir: Path) -> list[str]:
    """Predictions of the (best) model for every unlabelled eval set; returns the files written."""
    device = pick_device(cfg.device)
    model.to(device)
    written = []
    for eval_set in spec.eval_sets:
        if eval_set.score is None and eval_set.write is not None:
            outputs = predict(model, eval_set.features, spec.family, tokenizer.pad_id, cfg.eval_batch_size,
                              device, cfg.precision)
            eval_set.write(outputs, out_dir)
            written.append(eval_set.name)
    return written


def run_finetune(spec: TaskSpec, model_path: str | Path, tokenizer, cfg: FinetuneConfig, out_dir: str | Path,
                 log=print) -> dict:
    """Fine-tune, keep the best dev checkpoint, write metrics.json and test predictions from the best model."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)  # the new head's initialisation is part of the run
    model = load_model(spec, model_path, cfg)
    result = Finetuner(spec, model, tokenizer, cfg, out_dir, log).run()
    best_model = spec.model_class.from_pretrained(out_dir / "best")
    tests = write_test_predictions(spec, best_model, tokenizer, cfg, out_dir)
    metrics = {"family": spec.family, **spec.info, "best": result.best, "config": cfg.to_dict(),
               "train_loss_first": result.losses[0], "train_loss_last": float(np.mean(result.losses[-5:])),
               "problems": spec.problems.to_dict(), "test_predictions": tests}
    _write_json(out_dir / "metrics.json", metrics)
    spec.problems.report(sys.stderr)
    return metrics


def run_evaluation(spec: TaskSpec, model_dir: str | Path, tokenizer, cfg: FinetuneConfig,
                   out_dir: str | Path | None) -> dict:
    """Score a fine-tuned checkpoint on the labelled eval sets (and write prediction files if out_dir)."""
    device = pick_device(cfg.device)
    model = spec.model_class.from_pretrained(model_dir).to(device)
    metrics: dict[str, Any] = {}
    for eval_set in spec.eval_sets:
        outputs = predict(model, eval_set.features, spec.family, tokenizer.pad_id, cfg.eval_batch_size,
                          device, cfg.precision)
        if eval_set.score is not None:
            metrics[eval_set.name] = eval_set.score(outputs)
        if out_dir is not None and eval_set.write is not None:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            eval_set.write(outputs, Path(out_dir))
            metrics.setdefault("predictions_written", []).append(eval_set.name)
    if spec.problems.counts:
        metrics["problems"] = spec.problems.to_dict()
    return metrics
