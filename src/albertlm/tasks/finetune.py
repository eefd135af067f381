"""The fine-tuning driver shared by every task family, on the training loop pretraining uses.

A task family supplies a `TaskSpec`: the head class, train features, evaluation sets, and how to turn
model outputs into metrics and prediction files. Training is `training.trainer.build_loop` +
`training.loop.Loop` with a `TaskObjective` (each head's own loss) and length-bucketed batches re-drawn
each epoch (`StepData` with `bucketed_batches`): accumulation, clipping, loss scaling, the NaN stop,
metrics.jsonl + TensorBoard, atomic checkpoints in OUT/checkpoints, exact `--resume`, Ctrl-C / SIGTERM
and `torchrun` all come from there. What is fine-tuning's own: dev evaluation (under torchrun each rank runs its
share of the batches and rank 0 scores the gathered outputs, `shared_predict`) that keeps the best model in OUT/best
(the best-so-far record rides in the checkpoint, so a resumed run picks the same), and the files written at the end
(metrics.json, train_log.json, test predictions, shared the same way).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from albertlm.config.task import FinetuneConfig
from albertlm.errors import UserError, json_object_or_empty, program_name, warning_line
from albertlm.tasks.features import PREDICT_WINDOW, Feature, FeatureWindows, bucket_batches, collate
from albertlm.tasks.tables import Problems
from albertlm.training import checkpoint as ckpt
from albertlm.training.checkpoint import TrainState
from albertlm.training.distributed import (DistInfo, check_shared_out, failing_together, init_distributed,
                                           pick_device, unwrap)
from albertlm.training.loop import Batch, Loop, StepData
from albertlm.training.metrics import _terminal
from albertlm.training.precision import autocast, check_precision, prepare_model
from albertlm.training.trainer import build_loop, callers_rng_kept, open_logger, seed_everything

TASK_FILE = "task.json"  # beside the best checkpoint: what `predict` / `evaluate` need to know
# the key of task.json (and of each checkpoints/step_N's run_config.json) naming the precision the run trained and
# evaluated its dev set in (`train.precision`): its recorded scores are that precision's, which `predict` / `evaluate`
# reproduce only when run in it (they run in fp32 unless told), and say so when they are not
RECORDED_PRECISION = "precision"


@dataclass
class EvalSet:
    name: str
    features: list[Feature] | FeatureWindows   # FeatureWindows: made a window at a time (predict classify)
    score: Callable[[dict[str, np.ndarray]], dict[str, float]] | None  # None: no labels (test)
    write: Callable[[dict[str, np.ndarray], Path], list[Path]] | None = None  # prediction files: their paths


@dataclass(frozen=True)
class Outputs:
    """How a head's outputs and labels are laid out."""
    keys: tuple[str, ...] = ("logits",)
    per_token: bool = False                     # one row per token: kept per feature, cut to its length
    label_inputs: tuple[str, ...] = ("labels",)  # the head arguments the collated labels (B,) or (B, k) become
    # the labels are start / end positions, trained on with `heads.span_loss` over the real tokens (the head's own
    # loss, transformers', runs its softmax over the padding too: a micro-batch's padding changed the gradient)
    spans: bool = False
    # per-token 0/1 masks the features carry (`Feature.extra[name]`), given to the head as (B, T) inputs of that
    # name; the padding is 1 (masked): SQuAD's p_mask
    masks: tuple[str, ...] = ()


SPANS = Outputs(("start_logits", "end_logits"), per_token=True, label_inputs=("start_positions", "end_positions"),
                spans=True)
# google's SQuAD v2.0 head (`heads.AlbertForSquadV2`): its beam and answer_class logits per window; trained on its
# own loss (masked by p_mask: the padding changes nothing) with the gold start, end and whether the window answers
SQUAD_BEAM = Outputs(("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits"),
                     label_inputs=("start_positions", "end_positions", "is_impossible"), masks=("p_mask",))


def task_collate(features: Sequence[Feature], pad_id: int, label_dtype=None, outputs: Outputs = Outputs()) -> dict:
    """`features.collate`, plus the masks `outputs` names (padded with 1, masked)."""
    batch = collate(features, pad_id, label_dtype)
    width = batch["input_ids"].shape[-1]
    for name in outputs.masks:
        mask = np.ones((len(features), width), dtype=np.int64)
        for i, f in enumerate(features):
            mask[i, : f.length] = f.extra[name]
        batch[name] = torch.from_numpy(mask)
    return batch


@dataclass
class TaskSpec:
    family: str                         # glue | squad | race | classify (see tasks.registry)
    model_class: type
    model_overrides: dict[str, Any]     # e.g. num_labels
    train: list[Feature]
    eval_sets: list[EvalSet]
    main_metric: str                    # key in the first eval set's metrics; higher is better
    label_dtype: Any = None
    info: dict[str, Any] = field(default_factory=dict)   # written to task.json
    problems: Problems = field(default_factory=Problems)
    outputs: Outputs = Outputs()
    warnings: list[str] = field(default_factory=list)   # said when fine-tuning starts (e.g. MRPC's own files)


def load_model(spec: TaskSpec, model_path: str | Path, cfg: FinetuneConfig):
    """The task head on a checkpoint (ours or a transformers ALBERT directory); dropout from the config. A checkpoint
    fine-tuned on another task (`other_task`) gives its backbone only: the head starts fresh, drawn once from the
    caller's random stream as from a pretrained checkpoint holding that backbone (`_fresh_as_pretrained`)."""
    from albertlm.model.io import init_fresh

    overrides = dict(spec.model_overrides)
    for name in ("hidden_dropout", "attention_dropout", "classifier_dropout"):
        if getattr(cfg, name) is not None:
            overrides[name] = getattr(cfg, name)
    # the loader draws the weights the checkpoint does not give (on the CPU; on a GPU under a CUDA default device)
    before = torch.random.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)
    model = spec.model_class.from_pretrained(model_path, **overrides)
    other = other_task(spec, model_path)
    if other is not None:
        # a head fine-tuned for another task starts fresh, drawn as from a pretrained checkpoint (the same seed gives
        # the same head): the loader drew those it did not take (another shape, another classifier class, a pooler
        # the checkpoint lacks) and took the rest; all of them are drawn again in one pass from the stream as it was
        # before loading, so neither the values nor what is drawn after depend on which task the checkpoint learned
        # (a head drawn twice, or in two passes, was another head than the same seed's from a pretrained model)
        kept = _kept_head(model, model_path)
        torch.random.set_rng_state(before[0])
        if before[1] is not None:
            torch.cuda.set_rng_state_all(before[1])
        init_fresh(model, _fresh_as_pretrained(model, model_path))
        if kept:   # the loader said the others (another shape, another class)
            logging.getLogger("albertlm.model").warning(
                "%s was fine-tuned on %s, not %s: its head (%s) starts fresh, as from a pretrained model (only a run "
                "of the same task goes on with the head it holds)", model_path, other,
                task_name(spec.family, spec.info), ", ".join(kept))
        return model
    order = class_order(spec, model_path)
    classifier = getattr(model, "classifier", None)
    if order is not None and isinstance(classifier, nn.Linear) and classifier.out_features == len(order):
        # a classifier whose classes are named (a transformers model's id2label) keeps each class's trained row:
        # read by index, its row for one class would have been trained as another (its predictions swapped)
        with torch.no_grad():
            classifier.weight.copy_(classifier.weight[order])
            classifier.bias.copy_(classifier.bias[order])
        logging.getLogger("albertlm.model").warning(
            "%s names its classes in another order than the task's (%s): its classifier rows are put in the "
            "task's order", model_path, ", ".join(str(label) for label in spec.info["labels"]))
    return model


def task_name(family: str, info: dict) -> str:
    """A fine-tuning's task as the user names it: GLUE's task (`glue sst2`), else the family."""
    task = info.get("task") if family == "glue" else None
    return f"{family} {task}" if task else family


def other_task(spec: TaskSpec, model_path: str | Path) -> str | None:
    """The task the checkpoint fine-tuning starts from was fine-tuned on (its task.json, or a step's run_config.json),
    where that is another task than `spec`'s: another family, another GLUE task, or for `classify` other labels or a
    regression where it classifies (or the reverse). None for a checkpoint without such a record (a pretrained
    model, a transformers directory) or one of the same task, whose head goes on training (more epochs, new data).
    Its head is then not this task's: an SST-2 head's rows, kept for MRPC as google's `run_classifier.py` and
    transformers' `run_glue.py` keep a head of the same shape, start MRPC from SST-2's classes (RTE's first row is
    `entailment`, WNLI's second), while a head of another shape (MNLI's 3 classes for RTE) starts fresh; every
    other task's head now starts fresh, so the run does not depend on which task the checkpoint last learned."""
    from albertlm.model.io import fine_tuning_record, resolve_checkpoint

    recorded = fine_tuning_record(resolve_checkpoint(model_path))
    family = recorded.get("family")
    if not isinstance(family, str):
        return None
    same = family == spec.family
    if same and family == "glue":
        same = recorded.get("task") == spec.info.get("task")
    elif same and family == "classify":
        labels = sorted(str(label).strip() for label in recorded.get("labels") or [])
        same = (bool(recorded.get("regression")) == bool(spec.info.get("regression"))
                and labels == sorted(str(label).strip() for label in spec.info.get("labels") or []))
    return None if same else task_name(family, recorded)


def _kept_head(model: nn.Module, model_path: str | Path) -> list[str]:
    """The head weights of `model` (outside its backbone) that `from_pretrained` took from the checkpoint: those it
    stores under the same name in the same shape (read from the headers; of another shape they were initialised
    fresh, and said), unless it was saved by another classifier class (`io.other_class_head`: drawn fresh, and said).
    The record `other_task` reads is ours, so are the weights' names."""
    from albertlm.model.io import CLASSIFIER_CLASSES, checkpoint_class, read_config, resolve_checkpoint, stored_shapes

    directory = resolve_checkpoint(model_path)
    stored = stored_shapes(directory)
    own = type(model).__name__
    saved = checkpoint_class(directory, read_config(directory)[1]) if own in CLASSIFIER_CLASSES else None
    other_class = saved is not None and saved != own and saved in CLASSIFIER_CLASSES
    return [name for name, tensor in model.state_dict().items()
            if not name.startswith(type(model).base_prefix) and stored.get(name) == tuple(tensor.shape)
            and not (other_class and name.startswith("classifier."))]


def _fresh_as_pretrained(model: nn.Module, model_path: str | Path) -> list[str]:
    """The weights a pretrained checkpoint with this checkpoint's backbone leaves `from_pretrained` to draw: every
    head weight (outside the backbone), and the backbone's pooler where the checkpoint has none (a SQuAD or RACE
    run's model for a GLUE task)."""
    from albertlm.model.io import resolve_checkpoint, state_keys

    prefix = type(model).base_prefix
    stored = {key.removeprefix("albert.") for key in state_keys(resolve_checkpoint(model_path))}
    return [name for name, _ in model.named_parameters()
            if not name.startswith(prefix) or (name.startswith(prefix + "pooler.")
                                               and name.removeprefix(prefix) not in stored)]


def class_order(spec: TaskSpec, model_path: str | Path) -> list[int] | None:
    """Where the checkpoint fine-tuning starts from keeps each of the task's classes, when it names them (a
    transformers classifier's id2label, our labels.json, a fine-tuning run's task.json) as the same classes in
    another order: `order[j]` is its classifier row for the task's label j. None otherwise (no names, other names
    or another number of them, the task's order already, a regression)."""
    from albertlm.interop.hf import read_labels
    from albertlm.model.io import resolve_checkpoint
    from albertlm.tasks import glue

    labels = [str(label).strip() for label in spec.info.get("labels") or []]
    if spec.family not in ("glue", "classify") or not labels or spec.info.get("regression"):
        return None
    id2label = read_labels(resolve_checkpoint(model_path)).get("id2label")
    if spec.family == "glue":
        return glue.model_class_order(glue.get_task(spec.info["task"]), id2label)
    if not isinstance(id2label, dict) or len(id2label) != len(labels):
        return None
    names = [str(id2label.get(str(i), "")).strip() for i in range(len(labels))]
    if sorted(names) != sorted(labels) or names == labels:
        return None
    return [names.index(label) for label in labels]


def model_inputs(batch: dict, outputs: Outputs) -> dict:
    """Rename the collated `labels` to what the head takes (spans: start/end positions)."""
    batch = dict(batch)
    labels = batch.pop("labels", None)
    if labels is not None:
        names = outputs.label_inputs
        batch.update({names[0]: labels} if len(names) == 1 else {n: labels[:, i] for i, n in enumerate(names)})
    return batch


class TaskObjective:
    """Each head's own mean loss (spans: `heads.span_loss` over the real tokens), turned into a sum over the global
    batch: a micro-batch of n examples contributes loss * n / (examples in the global batch), whatever the
    micro-batch and process layout and however far each micro-batch is padded."""

    def __init__(self, outputs: Outputs):
        self.outputs = outputs

    def denominators(self, batches: list[Batch]) -> torch.Tensor:
        ids = batches[0]["input_ids"]
        return ids.new_full((1,), float(sum(b["input_ids"].shape[0] for b in batches)), dtype=torch.float32)

    def forward(self, model: nn.Module, batch: Batch, denominators: torch.Tensor):
        inputs = model_inputs(batch, self.outputs)
        if self.outputs.spans and "labels" in batch and "attention_mask" in batch:  # padding-free span loss
            from albertlm.model.heads import span_loss

            positions = [inputs.pop(name) for name in self.outputs.label_inputs]
            out = model(**inputs)
            loss = span_loss(*(out[key] for key in self.outputs.keys), *positions, batch["attention_mask"])
        else:
            loss = model(**inputs)["loss"].float()
        n = denominators.new_full((), float(batch["input_ids"].shape[0]))   # a fill on the device, not a host copy
        return loss * n / denominators[0], torch.stack([loss.detach() * n, n])

    def summarize(self, stats: torch.Tensor) -> dict[str, float]:
        total, count = stats.tolist()
        return {"loss": total / max(count, 1.0)}

    def empty_stats(self, device: torch.device) -> torch.Tensor:
        return torch.zeros(2, device=device)


def bucketed_batches(lengths: Sequence[int], batch_size: int, seed: int) -> Callable[[int], list[np.ndarray]]:
    """Epoch -> length-bucketed global batches, re-drawn each epoch from (seed, epoch)."""
    return lambda epoch: bucket_batches(lengths, batch_size, np.random.default_rng([seed, epoch]))


def predict_windows(model, features, outputs: Outputs, pad_id: int, batch_size: int, device: torch.device,
                    precision: str = "fp32", progress: bool = False) -> Iterator[dict[str, Any]]:
    """The head's outputs a window of features at a time (`features.feature_windows`: slices of PREDICT_WINDOW of a
    list, or a `FeatureWindows`' windows as it reads them), each window's as soon as it is done, in feature order:
    stacked arrays, or for per-token outputs a list of per-feature arrays with the padding cut off. Each window is
    sorted by length and cut into batches on its own (`bucket_batches`), so memory holds one window, and a set of
    up to PREDICT_WINDOW features is batched as one sort of the whole set. `progress`: one bar (or a line at every
    tenth, in a log) over all the windows' batches."""
    from albertlm.tasks.features import feature_windows, window_batch_count

    was_training = model.training
    model.eval()
    ticks = None
    if progress:   # a bar on a terminal; in a log, a line at every tenth (a bar's carriage returns are noise there)
        from albertlm.training.evaluate import show_progress

        total = window_batch_count(len(features), batch_size) if not isinstance(features, _Windows) else sum(
            -(-len(window) // batch_size) for window in features.parts)
        ticks = show_progress(iter(range(total)), total, "predict", leave=False)
    windows = features.parts if isinstance(features, _Windows) else feature_windows(features)
    try:
        for window in windows:
            out: dict[str, list] = {k: [None] * len(window) for k in outputs.keys}
            for index in bucket_batches([f.length for f in window], batch_size, rng=None):
                if ticks is not None:
                    next(ticks, None)
                batch = task_collate([window[i] for i in index], pad_id, outputs=outputs)
                batch.pop("labels", None)
                # (no_grad around the forward pass only: a generator's `with` would leak it to the caller's code)
                with torch.no_grad(), autocast(precision, device):
                    result = model(**{k: v.to(device) for k, v in batch.items()})
                for key in outputs.keys:
                    values = result[key].float().cpu().numpy()
                    for row, i in zip(values, index):
                        out[key][i] = row[: window[i].length] if outputs.per_token else row
            yield {k: (v if outputs.per_token else np.stack(v)) for k, v in out.items()}
        if ticks is not None:
            next(ticks, None)   # the last batch's line (or the bar's end)
    finally:
        model.train(was_training)


@dataclass
class _Windows:
    """Windows given as they are (`shared_predict`: a rank's share of each window's batches): `predict` batches
    each on its own, as `feature_windows` does a list's slices."""
    parts: list[list[Feature]]

    def __len__(self) -> int:
        return sum(map(len, self.parts))


def predict(model, features, outputs: Outputs, pad_id: int, batch_size: int,
            device: torch.device, precision: str = "fp32", progress: bool = False) -> dict[str, Any]:
    """The head's outputs for every feature, in feature order (`predict_windows`' windows joined): stacked arrays,
    or for per-token outputs a list of per-feature arrays with the padding cut off."""
    done: dict[str, list] = {k: [] for k in outputs.keys}
    for window in predict_windows(model, features, outputs, pad_id, batch_size, device, precision, progress):
        for key, value in window.items():
            done[key].append(value)
    if outputs.per_token:
        return {k: [row for part in v for row in part] for k, v in done.items()}
    return {k: np.concatenate(v) if v else np.stack([]) for k, v in done.items()}


def shared_predict(model, features: Sequence[Feature], outputs: Outputs, pad_id: int, batch_size: int,
                   info: DistInfo, precision: str = "fp32", progress: bool = False) -> dict[str, Any] | None:
    """`predict` with the batches shared over the processes of a torchrun (every rank must call it, with the same
    features): rank r of W runs batches r, r + W, ... of the ones a single process runs (`distributed.my_share`, as
    pretraining's evaluation shares its batches), and rank 0 gets every feature's outputs in feature order (keyed
    by feature index: SQuAD's windows and RACE's choices as they are), the others None. Each batch holds the same
    features, padded to the same width, as alone, so each row comes from the same computation: the outputs are a
    single process's bit for bit at the same number of threads per process (torchrun sets OMP_NUM_THREADS=1;
    against a run on more threads the CPU's kernels round some values differently in their last bits, as two
    single-process runs on different thread counts do: 4e-9 in SQuAD null odds of 0.015 measured). A rank
    that the batches run out before (fewer batches than ranks) sends nothing and still joins the gather. Alone,
    `predict` itself; only rank 0 shows `progress`."""
    from albertlm.training.distributed import gather_to_main, my_share

    if not info.enabled:
        return predict(model, features, outputs, pad_id, batch_size, info.device, precision, progress)
    # `predict`'s batches: each window's (PREDICT_WINDOW) length-sorted order cut into batches, numbered through
    batches, window_of = [], []
    for start in range(0, len(features), PREDICT_WINDOW):
        window = bucket_batches([f.length for f in features[start:start + PREDICT_WINDOW]], batch_size, rng=None)
        batches += [batch + start for batch in window]
        window_of += [start] * len(window)
    parts: dict[int, list[np.ndarray]] = {}
    for j in my_share(len(batches), info):
        parts.setdefault(window_of[j], []).append(batches[j])
    # a window's share is whole batches of its length-sorted order, in that order: `predict`'s own (stable) sort of
    # it, given as a window of its own (`_Windows`), keeps it, and its cut into batches of `batch_size` gives back
    # the same batches (only a window's last can be short)
    mine = np.concatenate([np.concatenate(part) for part in parts.values()] or [np.zeros(0, dtype=np.int64)])
    done = predict(model, _Windows([[features[i] for i in np.concatenate(part)] for part in parts.values()]),
                   outputs, pad_id, batch_size, info.device, precision,
                   progress and info.is_main) if len(mine) else None
    gathered = gather_to_main((mine, done), info)
    if gathered is None:
        return None
    out: dict[str, list] = {key: [None] * len(features) for key in outputs.keys}
    for indices, values in gathered:
        for key in (outputs.keys if values is not None else ()):
            for k, i in enumerate(indices):
                out[key][i] = values[key][k]
    missing = sum(row is None for row in out[outputs.keys[0]])
    if missing:   # cannot be, unless the ranks were given different features: a bug, said rather than scored
        raise RuntimeError(f"shared prediction: {missing} of {len(features)} features came back without outputs")
    return {k: (v if outputs.per_token else np.stack(v)) for k, v in out.items()}


def json_safe(data: Any) -> Any:
    """`data` with every NaN or infinity (Python's or numpy's) replaced by None: `json.dumps` writes them as bare
    `NaN` / `Infinity`, which is not JSON (jq, JavaScript's JSON.parse, Go and most other readers refuse the file)."""
    if isinstance(data, dict):
        return {key: json_safe(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(value) for value in data]
    if isinstance(data, (float, np.floating)):
        return float(data) if np.isfinite(data) else None
    return data


def _write_json(path: Path, data: Any) -> None:
    """Written whole (a temporary file renamed into place), as valid JSON: a NaN or infinite number is `null`."""
    ckpt.write_text_atomic(path, json.dumps(json_safe(data), indent=2, sort_keys=True, allow_nan=False) + "\n")


# A replaced best/ that the newest checkpoint still records as the best is kept here until a checkpoint records
# its successor: a run killed (kill -9, the OOM killer) in between resumes from that checkpoint, whose best
# record names the kept model, not the newer one (`recover_best` puts it back).
KEPT = f"{ckpt.TMP_PREFIX}best-kept"


def _best_step(directory: Path) -> int | None:
    """The training step of a complete best model (task.json's `step`, written last); None for a half-written
    or half-removed copy, or one saved before best/ recorded its step."""
    step = json_object_or_empty(directory / TASK_FILE).get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _remove_best_copy(directory: Path) -> None:
    """Remove a best-model directory, its task.json first: a removal killed midway never leaves a copy that looks
    complete (`_best_step` None)."""
    import shutil

    with contextlib.suppress(OSError):
        (directory / TASK_FILE).unlink(missing_ok=True)
    shutil.rmtree(directory, ignore_errors=True)


def _checkpoint_step(out_dir: Path) -> int:
    """The step of the run's newest checkpoint (-1: none)."""
    last = ckpt.latest_checkpoint(out_dir)
    return int(last.name.split("_")[-1]) if last is not None else -1


def save_best(model, tokenizer, spec: TaskSpec, directory: Path, step: int | None = None,
              keep: bool = False) -> None:
    """Written beside `directory`, then swapped in by renames: OUT/best is always a complete model (the
    previous best until the new one is whole); a failed write is a UserError and leaves the previous best.
    `step` is recorded in task.json. `keep`: the previous best is the one the newest checkpoint records, and is
    kept (`KEPT`) until a checkpoint records the new one; otherwise it is removed. A kill at any instant leaves
    the model each checkpoint's record names in best/, `KEPT` or the `.tmp-best-*` copies (`recover_best`)."""
    import os
    import shutil

    tmp = directory.with_name(f"{ckpt.TMP_PREFIX}{directory.name}-{os.getpid()}")
    old = directory.with_name(f"{ckpt.TMP_PREFIX}{directory.name}-old-{os.getpid()}")
    _remove_best_copy(tmp)
    try:
        _write_best(model, tokenizer, spec, tmp, step)
    except Exception as exc:  # OSError, or the write errors safetensors / torch wrap
        shutil.rmtree(tmp, ignore_errors=True)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc   # not the .tmp-best path
        raise UserError(f"{directory.resolve()}: cannot write the best model ({reason}; is the disk full?); "
                        "the previous best is unchanged") from exc   # absolute, as pretraining's checkpoint errors
    if directory.exists():
        if keep:
            kept = directory.with_name(KEPT)
            _remove_best_copy(kept)        # an older kept copy: no checkpoint records it any more
            os.replace(directory, kept)
        else:
            os.replace(directory, old)
    os.replace(tmp, directory)
    _remove_best_copy(old)


def _write_best(model, tokenizer, spec: TaskSpec, directory: Path, step: int | None = None) -> None:
    model.save_pretrained(directory)
    tokenizer.save(directory)
    info = {"family": spec.family, **spec.info}
    if step is not None:
        info["step"] = step
    _write_json(directory / TASK_FILE, info)   # last: its `step` marks the copy complete


def recover_best(out_dir: Path, record: dict | None) -> str | None:
    """Make OUT/best the model that `record` (the best record of the checkpoint the run starts from; None: no
    evaluation yet) names, and remove the other best-model copies (`.tmp-best-*`). A run killed between
    save_best's renames had no best/ (the previous best lay in a copy that the next save removed); one killed
    after a new best but before the checkpoint recording it left best/ newer than the resumed run's record,
    so metrics.json named one step and best/ held another. Returns a line saying what was done, or None."""
    best = out_dir / "best"
    copies = sorted(p for p in out_dir.glob(f"{ckpt.TMP_PREFIX}best-*") if p.is_dir())
    want = None if record is None else record.get("step")
    said = None
    chosen = next((p for p in [best, *copies] if p.is_dir() and want is not None and _best_step(p) == want), None)
    if chosen is not None and chosen != best:
        import os

        _remove_best_copy(best)
        os.replace(chosen, best)
        said = (f"{best}: the model of step {want}, the best the checkpoint records, put back (a run stopped while "
                "replacing it left it aside)")
    elif chosen is None and best.is_dir() and _best_step(best) is not None:
        if want is None:     # no evaluation was checkpointed: this best/ is of steps the run trains again
            _remove_best_copy(best)
            said = f"{best}: removed (a model of a step after the checkpoint the run goes on from)"
        else:
            said = (f"{best}: holds the model of step {_best_step(best)}, but the checkpoint records step {want} as "
                    "the best and no copy of that model is left; it is replaced at the next better evaluation")
    for copy in copies:
        if copy != chosen:
            _remove_best_copy(copy)
    return said


# What a dev evaluation's scoring records in `spec.info` for predicting with the model it evaluated (SQuAD v2.0's
# tuned no-answer threshold, which best/task.json holds for the best model). The checkpoint of a step evaluated
# records it in its run_config.json too, where `predict` from RUN/checkpoints/step_N reads it (it applied 0.0 on new
# questions); the checkpoint of a step not evaluated (`--save-every`, a stop between evaluations) records none: the
# threshold of another step's model is not this one's.
TUNED_AT_EVALUATION = ("null_threshold",)


def _record_tuned(run_config: dict, out_dir: Path, step: int, tuned: dict[str, Any]) -> None:
    """The values an evaluation of `step` tuned (`TUNED_AT_EVALUATION`) go into the run config its checkpoint is saved
    with; where that checkpoint exists already (a resumed run evaluating again the step whose evaluation was
    interrupted, or a time-budget stop evaluating a step saved before), into its run_config.json (written whole)."""
    run_config.update(tuned)
    path = ckpt.step_dir(out_dir, step) / "run_config.json"
    if tuned and path.is_file():
        recorded = json_object_or_empty(path)
        if recorded and any(recorded.get(key) != value for key, value in tuned.items()):
            ckpt.write_text_atomic(path, json.dumps({**recorded, **tuned}, indent=2) + "\n")


def _forget_tuned(run_config: dict, started: dict) -> None:
    """A new step: the run config its checkpoint is saved with holds no evaluation's tuned values (those the run
    started with, `started`, stay: a threshold given for an unlabelled --dev)."""
    for key in TUNED_AT_EVALUATION:
        if key in started:
            run_config[key] = started[key]
        else:
            run_config.pop(key, None)


def dev_evaluator(spec: TaskSpec, tokenizer, cfg: FinetuneConfig, out_dir: Path, info: DistInfo,
                  run_config: dict | None = None):
    """Evaluation on the labelled eval sets with the raw model (every rank its share of the batches, rank 0 scores
    them, `shared_predict`): keeps the best model in OUT/best and the history and best record in rank 0's run state
    (so they survive a resume). `run_config`: the dict the loop saves beside each checkpoint (`Loop.saved_config`),
    given the values the evaluation tuned (`TUNED_AT_EVALUATION`) for the checkpoint of the step evaluated."""
    scored = [s for s in spec.eval_sets if s.score is not None]

    def main_value(record: dict) -> float:
        """The first metric of the first scored set; one the scorer did not report is an error naming those it did
        (a TaskSpec built in Python with a mistyped `main_metric` was a KeyError after the first steps)."""
        metrics = record[scored[0].name]
        if spec.main_metric not in metrics:
            raise UserError(f"the metric to keep the best model by, {spec.main_metric!r} (TaskSpec.main_metric), is "
                            f"not among {scored[0].name}'s: {', '.join(map(str, metrics)) or 'none'}")
        return float(metrics[spec.main_metric])

    def improves(record: dict, best: dict | None) -> bool:
        """Whether an evaluation replaces the best one: a higher main metric (a tie keeps the earlier). A NaN is
        never better and anything beats it (`NaN > x` is False: a first evaluation of NaN was kept to the end)."""
        new = main_value(record)
        if best is None:
            return True
        old = main_value(best)
        return not np.isnan(new) and (np.isnan(old) or new > old)

    def make(trained: nn.Module, raw: nn.Module, state: TrainState) -> Callable[[], dict]:
        def run_evaluation_now() -> dict[str, float]:
            # under torchrun every rank runs its share of the dev batches (`shared_predict`) and rank 0, which gets
            # all the outputs, scores them, keeps the best model and writes its files (the others go on to the
            # next step's collectives meanwhile)
            outputs = {}
            # a bar below the training bar on a terminal (SQuAD's dev set takes minutes); none in a log, where
            # the evaluation's metrics line follows anyway
            bar = cfg.train.progress and _terminal()
            for eval_set in scored:
                outputs[eval_set.name] = shared_predict(raw, eval_set.features, spec.outputs, tokenizer.pad_id,
                                                        cfg.eval_batch_size, info, cfg.train.precision, bar)
            if not info.is_main:
                return {}
            step = state.step
            # the best so far is kept aside when the newest checkpoint records it (see `save_best`)
            best = state.extra.get("best")
            keep = best is not None and best.get("step", step) <= _checkpoint_step(out_dir)
            if not scored:  # no dev data: the last model is the one kept
                save_best(raw, tokenizer, spec, out_dir / "best", step, keep)
                state.extra["best"] = {"step": step}
                return {}
            record: dict[str, Any] = {"step": step}
            for eval_set in scored:
                record[eval_set.name] = eval_set.score(outputs[eval_set.name])
            state.extra.setdefault("history", []).append(record)
            if run_config is not None:
                _record_tuned(run_config, out_dir, step,
                              {key: spec.info[key] for key in TUNED_AT_EVALUATION if key in spec.info})
            if improves(record, best):
                save_best(raw, tokenizer, spec, out_dir / "best", step, keep)
                state.extra["best"] = record     # at once: a Ctrl-C in the writes below saves best/'s own record
                for eval_set in scored:
                    if eval_set.write is not None:
                        eval_set.write(outputs[eval_set.name], out_dir)
            return {f"{name}/{key}": value for name, metrics in record.items() if name != "step"
                    for key, value in metrics.items() if isinstance(value, (int, float))}
        return run_evaluation_now
    return make


@contextlib.contextmanager
def _model_log_quiet():
    logger = logging.getLogger("albertlm.model")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def make_finetune_loop(spec: TaskSpec, model_path: str | Path, tokenizer, cfg: FinetuneConfig,
                       out_dir: str | Path, info: DistInfo, resume: bool = False) -> Loop:
    """The task head on the checkpoint, its data and dev evaluation, set up by the shared trainer."""
    if not spec.train:
        raise UserError("no training examples")
    out_dir = Path(out_dir)
    seed_everything(cfg.train.seed)  # the new head's initialisation is part of the run
    # resuming, the checkpoint restores the head: "freshly initialised weights" would be a false alarm
    restored = resume and ckpt.latest_checkpoint(out_dir) is not None
    with _model_log_quiet() if restored else contextlib.nullcontext():
        model = load_model(spec, model_path, cfg)
    train = cfg.train
    data = StepData(spec.train, functools.partial(task_collate, pad_id=tokenizer.pad_id, label_dtype=spec.label_dtype,
                                                  outputs=spec.outputs),
                    bucketed_batches([f.length for f in spec.train], train.batch_size, train.seed),
                    train.micro_batches(info.world_size), info.rank, info.world_size,
                    identity={"batch_size": train.batch_size, "seed": train.seed})
    # best/task.json and the steps' run_config.json say which precision the dev scores came from (a run is resumed in
    # the precision it started with: `train.precision` is not one of the settings --resume may change)
    spec.info[RECORDED_PRECISION] = cfg.train.precision
    saved = {"family": spec.family, **spec.info, "model": str(model_path), **cfg.to_dict()}
    started = {key: saved[key] for key in TUNED_AT_EVALUATION if key in saved}
    loop = build_loop(model, TaskObjective(spec.outputs), data, train, cfg.optim, info, out_dir, saved,
                      resume=resume, evaluator=dev_evaluator(spec, tokenizer, cfg, out_dir, info, saved))

    def on_step(step: int, metrics: dict) -> None:
        loop.state.extra.setdefault("losses", []).append(metrics["loss"])
        _forget_tuned(loop.saved_config, started)   # until this step is evaluated (`dev_evaluator`)

    loop.on_step = on_step
    if not train.save_every:
        # --save-every 0 (the default): a checkpoint at every dev evaluation (once per epoch by default), not only
        # at the end: a run killed outright (kill -9, the OOM killer, a preempted node) resumes from its last
        # evaluation instead of being lost whole. `train.keep_last` (1) bounds the disk it takes.
        loop.train = dataclasses.replace(train, save_every=loop.plan.eval_every)
    return loop


def best_on_every_rank(spec: TaskSpec, best: nn.Module | None, rewrite: bool, trained: nn.Module,
                       cfg: FinetuneConfig, info: DistInfo) -> tuple[nn.Module | None, bool]:
    """Under torchrun, after the run: rank 0's best model (`best`, read from best/) and whether its dev prediction
    files are written again (`rewrite`) on every rank, for `write_test_predictions` and `rewrite_dev_predictions`
    to share the batches. The others build a model like `trained` (their copy of the model as trained: its class
    and config), load rank 0's best weights sent to them, and prepare it as `inference_model` does, so each batch
    runs the kernels rank 0's would. Nothing is sent when there is nothing to predict. Alone: (best, rewrite)."""
    from albertlm.training.distributed import broadcast_from_main

    tests = any(s.score is None and s.write is not None for s in spec.eval_sets)
    if not info.enabled:
        return best, rewrite
    rewrite = bool(broadcast_from_main(rewrite, info))
    if not tests and not rewrite:
        return best, rewrite
    weights = best.state_dict() if best is not None else None
    layout = broadcast_from_main({name: (tuple(t.shape), t.dtype) for name, t in weights.items()}
                                 if weights is not None else None, info)
    if info.is_main:
        for tensor in weights.values():   # one tensor at a time, in rank 0's order: no pickled copy of the model
            broadcast_from_main(tensor.to(info.device).contiguous(), info, tensor=True)
        return best, rewrite
    received = {}
    for name, (shape, dtype) in layout.items():
        received[name] = broadcast_from_main(torch.empty(shape, dtype=dtype, device=info.device), info, tensor=True)
    model = type(trained)(trained.config)
    model.load_state_dict(received)
    model = prepare_model(model, precision=cfg.train.precision, device=info.device, warn=False).to(info.device)
    return model, rewrite


def write_test_predictions(spec: TaskSpec, model, tokenizer, cfg: FinetuneConfig, out_dir: Path,
                           info: DistInfo | None = None) -> dict[str, list[str]]:
    """Predictions of the (best) model for every unlabelled eval set; returns {eval set: the paths written}.
    Under torchrun (`info`) every rank calls it with the best model (`best_on_every_rank`) and runs its share of
    the batches (`shared_predict`); rank 0 writes the files (the others get {})."""
    info = info or DistInfo(device=pick_device(cfg.dist.device))
    model.to(info.device)
    written: dict[str, list[str]] = {}
    for eval_set in spec.eval_sets:
        if eval_set.score is None and eval_set.write is not None:
            outputs = shared_predict(model, eval_set.features, spec.outputs, tokenizer.pad_id, cfg.eval_batch_size,
                                     info, cfg.train.precision, cfg.train.progress)
            if outputs is not None:
                written[eval_set.name] = [str(path) for path in eval_set.write(outputs, out_dir)]
    return written


def rewrite_dev_predictions(spec: TaskSpec, model, tokenizer, cfg: FinetuneConfig, out_dir: Path,
                            info: DistInfo | None = None) -> None:
    """The dev prediction files of `model` (the best), scored first: scoring sets what they hold (SQuAD v2.0's
    tuned null threshold). Under torchrun (`info`), shared as `write_test_predictions` is."""
    info = info or DistInfo(device=pick_device(cfg.dist.device))
    model.to(info.device)
    for eval_set in spec.eval_sets:
        if eval_set.score is not None and eval_set.write is not None:
            outputs = shared_predict(model, eval_set.features, spec.outputs, tokenizer.pad_id, cfg.eval_batch_size,
                                     info, cfg.train.precision, cfg.train.progress)
            if outputs is not None:
                eval_set.score(outputs)
                eval_set.write(outputs, out_dir)


RUN_FILES = ("checkpoints", "best", "metrics.json", "metrics.jsonl", "train_log.json", "tensorboard")
# the prediction files a run writes beside them (specs.py): replaced with the run on --overwrite
PREDICTION_FILES = ("submission", "predictions.json", "null_odds.json", "nbest_predictions.json",
                    "*_predictions.tsv", "*_predictions.json", "*_metrics.json")


def prediction_files(out_dir: Path) -> list[Path]:
    """The prediction files (and GLUE's submission/) in a run directory."""
    return sorted({path for pattern in PREDICTION_FILES for path in out_dir.glob(pattern)})


def setup_warnings(spec: TaskSpec, loop: Loop, cfg: FinetuneConfig) -> list[str]:
    """What is legal but most likely a mistake: a warmup longer than the run (the learning rate never
    reaches its peak; it is kept as given, not capped), a classification training set of one class."""
    lines = list(spec.warnings)
    if loop.plan.warmup_steps > loop.plan.total_steps:
        lines.append(f"the warmup ({loop.plan.warmup_steps} steps) is longer than the run ({loop.plan.total_steps} "
                     f"steps): the learning rate never reaches {cfg.optim.lr:g}; set --warmup-steps or --warmup-ratio")
    classifies = spec.label_dtype == torch.long and "num_labels" in spec.model_overrides
    if classifies and len({f.label for f in spec.train}) == 1:
        lines.append(f"every one of the {len(spec.train)} training examples has the same label: the model can "
                     "only learn to predict that class (is the label column right?)")
    return lines


def check_positions(spec: TaskSpec, model_dir: str | Path, cfg: FinetuneConfig) -> None:
    """Refuse, before the model loads, examples longer than the checkpoint's position embeddings cover (the
    forward pass would stop at the first such batch, after the data and the model had loaded)."""
    from albertlm.model.io import read_config

    limit = read_config(model_dir)[0].max_position_embeddings

    def check(features) -> None:
        longest = max((f.length for f in features), default=0)
        if longest > limit:
            raise UserError(f"{model_dir}: its position embeddings cover {limit} tokens, but with max_seq_length "
                            f"{cfg.max_seq_length} examples here have up to {longest}: give --max-seq-length "
                            f"{limit} or less")

    check([*spec.train, *(f for s in spec.eval_sets if not isinstance(s.features, FeatureWindows)
                          for f in s.features)])
    for s in spec.eval_sets:
        if isinstance(s.features, FeatureWindows):   # read a window at a time: each window, before it is predicted
            s.features.check = check


def run_finetune(spec: TaskSpec, model_path: str | Path, tokenizer, cfg: FinetuneConfig, out_dir: str | Path,
                 log=print, resume: bool = False, overwrite: bool = False) -> dict:
    """Fine-tune (on every `torchrun` process), keep the best dev checkpoint, then write metrics.json,
    train_log.json and test predictions from the best model (rank 0 writes; every rank predicts its share).
    Returns the metrics (rank 0; other ranks and runs stopped by a signal get {"status": ...}). A run the time budget stopped writes them
    too, from the best model so far, with "status": "budget" and the step reached of "total_steps". An
    `out_dir` holding another run needs `resume` or `overwrite` (its files go once the model and the
    checkpoint to resume from have loaded); one that another run is still writing is refused (`run_dir_lock`)."""
    out_dir = Path(out_dir)
    # best/task.json records the length the model was fine-tuned at, which `predict` / `evaluate --model` then use
    # (the CLI set it; a run from Python left it out, and a later predict used the family's default)
    spec.info.setdefault("max_seq_length", cfg.max_seq_length)
    old_run = ckpt.check_run_dir(out_dir, resume, overwrite, RUN_FILES)
    check_positions(spec, model_path, cfg)
    if old_run:   # --overwrite: the old run's prediction files go with it
        old_run += prediction_files(out_dir)
    info = init_distributed(cfg.dist.backend, cfg.dist.device, cfg.dist.timeout_minutes)
    check_same_finetune(spec, cfg, info, out_dir, resume)
    said = None
    with contextlib.ExitStack() as held:
        held.enter_context(callers_rng_kept(info.device))   # the caller's random stream is as it was after the run
        # rank 0 holds OUT locked until the run ends, as pretraining does: the same command started twice, or an
        # --overwrite / --resume in another terminal, is refused instead of removing or writing the files of the
        # run still going there (checked before the old run's files go; a new directory once it is made)
        with failing_together(info, lambda: " while setting up"):
            check_shared_out(out_dir, info)   # several nodes: one --out they all see, before anything is written
            locked = info.is_main and out_dir.is_dir()
            if locked:
                held.enter_context(run_dir_lock(out_dir))
            loop = make_finetune_loop(spec, model_path, tokenizer, cfg, out_dir, info, resume)
            if info.is_main:
                out_dir.mkdir(parents=True, exist_ok=True)
                if not locked:
                    held.enter_context(run_dir_lock(out_dir))
                ckpt.clear_run_dir(old_run)
                said = recover_best(out_dir, loop.state.extra.get("best"))
                if said:
                    print(f"{program_name()}: note: {said}", file=sys.stderr)
        # best/ put back to an earlier model: its dev prediction files are the killed run's newer best's, and are
        # written again at the end unless a new best replaces them
        restored = loop.state.extra.get("best") if info.is_main and said else None
        return _train_and_write(spec, loop, tokenizer, cfg, out_dir, info, log, restored)


def run_dir_lock(out_dir: Path):
    """`checkpoint.directory_lock` on a fine-tuning run's --out, refusing in fine-tuning's words."""
    return ckpt.directory_lock(out_dir, f"--out {out_dir}: another run is writing there now (an `albertlm finetune` "
                                        "with this --out is still running); let it finish or stop it first, or "
                                        "pass another --out")


def _train_and_write(spec: TaskSpec, loop: Loop, tokenizer, cfg: FinetuneConfig, out_dir: Path, info: DistInfo,
                     log, restored: dict | None = None) -> dict:
    """`run_finetune` once the run is set up: train, then on rank 0 write the run's files. `restored`: the best
    record best/ was put back to (`recover_best`); if no evaluation replaced it, the dev prediction files are
    written again from best/."""
    log(f"finetune {spec.family}: {len(spec.train)} train features, {loop.plan.total_steps} steps "
        f"(batch {cfg.train.batch_size}, warmup {loop.plan.warmup_steps}), lr {cfg.optim.lr}, "
        f"device {info.device}, {info.world_size} process(es)")
    if not any(s.score is not None for s in spec.eval_sets):
        log("no labelled dev set: the last model is kept as best/")
    if info.is_main:
        for line in setup_warnings(spec, loop, cfg):
            print(warning_line(line), file=sys.stderr)
    open_logger(loop)
    status = loop.run()
    best = loop.state.extra.get("best")
    if info.is_main and best is not None and best.get("step", -1) <= _checkpoint_step(out_dir):
        _remove_best_copy(out_dir / KEPT)   # the newest checkpoint records best/: the copy of the one before goes
    if status not in ("done", "budget"):   # the same on every rank (a stop is agreed on by all of them)
        return {"status": status}
    # stopped by the time budget (`--train.max_minutes`), the run has evaluated and saved the step it reached:
    # its files are written from the best model so far, marked "budget" (a `--resume` finishes and replaces them)
    extra = loop.state.extra
    with failing_together(info, lambda: " while writing the test predictions"):
        best_model = None
        if info.is_main:
            _write_json(out_dir / "train_log.json",
                        {"losses": extra.get("losses", []), "history": extra.get("history", [])})
            best_model = inference_model(spec, out_dir / "best", cfg, pick_device(cfg.dist.device), warn=False)
        rewrite = info.is_main and restored is not None and extra.get("best") is restored
        # under torchrun the other ranks take their shares of the test (and rewritten dev) batches, with rank 0's
        # best model (`best_on_every_rank`: best/ is on rank 0's machine); alone, nothing changes
        best_model, rewrite = best_on_every_rank(spec, best_model, rewrite, unwrap(loop.raw_model), cfg, info)
        tests = {}
        if best_model is not None:   # None: a rank other than 0 with nothing to predict (no test set, no rewrite)
            tests = write_test_predictions(spec, best_model, tokenizer, cfg, out_dir, info)
            if rewrite:
                rewrite_dev_predictions(spec, best_model, tokenizer, cfg, out_dir, info)
    if not info.is_main:
        return {"status": status}
    losses = extra.get("losses") or [float("nan")]
    # the best model's task.json, not spec.info: what an evaluation records there (SQuAD v2.0's tuned null
    # threshold) is the best one's, not the last one's
    task_info = {**spec.info, **json_object_or_empty(out_dir / "best" / TASK_FILE)}
    task_info.pop("step", None)    # the best model's step: metrics.json has it as best.step
    metrics = {**task_info, "family": spec.family, "best": extra.get("best", {}), "config": cfg.to_dict(),
               "train_loss_first": losses[0], "train_loss_last": float(np.mean(losses[-5:])),
               "problems": spec.problems.to_dict(), "test_predictions": tests, "status": status,
               "step": loop.state.step, "total_steps": loop.plan.total_steps}
    _write_json(out_dir / "metrics.json", metrics)
    spec.problems.report(sys.stderr)
    return metrics


# the settings that are each process's own (how it shows progress and logs; its device, backend and patience)
PER_PROCESS = ("train.progress", "train.tensorboard", "train.log_every", "train.keep_last", "dist.device",
               "dist.backend", "dist.timeout_minutes")


def features_digest(features) -> str:
    """A short digest of what `features` feed the model (each one's token ids and types, and its label): the same
    on every node that built them from the same data with the same tokenizer and settings, whatever the paths.
    A `FeatureWindows` (read a window at a time, `predict` only) is not read again: its digest is its count's."""
    import hashlib

    digest = hashlib.blake2b(digest_size=8)
    if isinstance(features, FeatureWindows):
        digest.update(f"windows {len(features)}".encode())
        return digest.hexdigest()
    for feature in features:
        if not isinstance(feature, Feature):   # (a stand-in of tests: its repr)
            digest.update(repr(feature).encode())
            continue
        for part in (feature.input_ids, feature.token_type_ids):
            array = np.ascontiguousarray(part, dtype=np.int64)
            digest.update(repr(array.shape).encode())
            digest.update(array.tobytes())
        label = feature.label.tolist() if isinstance(feature.label, (np.ndarray, np.generic)) else feature.label
        digest.update(repr(label).encode())
    return digest.hexdigest()


def finetune_identity(spec: TaskSpec, cfg: FinetuneConfig, out_dir: str | Path | None = None,
                      resume: bool = False) -> dict:
    """What every process of one fine-tuning must agree on: its settings (but `PER_PROCESS`), the task, the number
    of training features and what they hold, the task's labels (`spec.info`), each eval set's features (their
    number and what they hold: `features_digest`), and on `resume` the checkpoint in `out_dir` it continues from
    (as pretraining's `run_identity`)."""
    from albertlm.config.overrides import flatten
    from albertlm.tasks.inference import RECORDED_TOKENIZER

    values = {key: value for key, value in flatten(cfg.to_dict()).items() if key not in PER_PROCESS}
    values.update({"the task": spec.family, "the training features": len(spec.train),
                   # what they hold, not only how many: a node whose copy of the training file (or tokenizer)
                   # differed trained its share of every batch on its own data without a word
                   "the training features' tokens and labels": features_digest(spec.train),
                   # (not the tokenizer path the CLI records there: nodes may reach the same files by other paths)
                   "the task's labels": json.dumps({k: v for k, v in spec.info.items() if k != RECORDED_TOKENIZER},
                                                   sort_keys=True, default=str)})
    # every eval set's features: rank r runs batches r, r + W, ... of its own copy and rank 0 puts the outputs at
    # its own features' places (`shared_predict`), so a node whose dev file or tokenizer differed gave rank 0
    # outputs of other texts, scored against rank 0's answers without a word (texts of other lengths: a traceback at
    # the first evaluation); a set one node lacks put the ranks in different collectives
    for eval_set in getattr(spec, "eval_sets", ()):
        features = eval_set.features
        values[f"the {eval_set.name} set's features"] = f"{len(features)}, {features_digest(features)}"
    if resume and out_dir is not None:
        last = ckpt.latest_checkpoint(out_dir) if Path(out_dir).is_dir() else None
        values["the checkpoint it resumes from"] = last.name if last is not None else None
    return values


def check_same_finetune(spec: TaskSpec, cfg: FinetuneConfig, info: DistInfo, out_dir: str | Path | None = None,
                        resume: bool = False) -> None:
    """Every torchrun process was given the same fine-tuning (`finetune_identity`): a node with another --lr
    trained its copy of the model at its own rate while only rank 0's was saved, and another --epochs or data
    left the ranks waiting in different collectives. With `resume`, every rank continues from the same checkpoint:
    a node whose --out was its own directory holding an older copy of the run (not the shared one rank 0 writes)
    resumed at another step, trained the steps in between on the others' gradients with its own optimizer state,
    and left rank 0 waiting for --dist.timeout_minutes at the end, then blamed a slow rank. Refused on every rank in
    one line (`distributed.refuse_differences`), as pretraining does."""
    from albertlm.training.distributed import SHARED_OUT, refuse_differences

    if info.enabled:
        refuse_differences(info, finetune_identity(spec, cfg, out_dir, resume),
                           f"start every node's torchrun with the same `albertlm finetune {spec.family}` options "
                           f"and --config files, on the same data{SHARED_OUT if resume else ''}")


def check_task_head(model_class: type, family: str, model_dir: str | Path, num_labels: int | None = None) -> None:
    """Refuse a checkpoint without the weights of the family's head (e.g. a pretraining checkpoint): loading it
    would attach a freshly initialised head and predict at random. So is a classifier saved by another classifier
    class (a RACE choice scorer for STS-B: `io.other_class_head` draws it fresh), and one of another number of outputs
    than the task's `num_labels` (an STS-B regression's one output for SST-2 put every row in class 0, scored 0.52,
    without a word; a 3-class head for a 2-class task predicted a class the task has not)."""
    from albertlm.model.io import CLASSIFIER_CLASSES, WEIGHTS, checkpoint_class, read_config, read_state

    model_dir = Path(model_dir)
    config, is_hf = read_config(model_dir)
    with torch.device("meta"):   # the head's weight names, without allocating the model
        names = model_class(config).state_dict().keys()
    head = [name for name in names if not name.startswith(model_class.base_prefix)]
    if (model_dir / WEIGHTS).is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(model_dir / WEIGHTS), framework="pt") as f:
                present = set(f.keys())
        except Exception:  # SafetensorError on a damaged file: read_state names it
            present = set(read_state(model_dir))
    else:
        present = set(read_state(model_dir))
    missing = [name for name in head if name not in present]
    fine_tune = f"fine-tune it with `albertlm finetune {family}` and give RUN/best"
    if missing:
        raise UserError(f"{model_dir}: not a fine-tuned checkpoint for this task (no {', '.join(missing)} in its "
                        f"weights; a pretraining checkpoint?): {fine_tune}")
    saved = checkpoint_class(model_dir, is_hf)
    if model_class.__name__ in CLASSIFIER_CLASSES and saved in CLASSIFIER_CLASSES and saved != model_class.__name__:
        raise UserError(f"{model_dir}: not a fine-tuned checkpoint for this task: its classifier was trained as "
                        f"{saved}'s, on other features than {model_class.__name__}'s, and would predict at random; "
                        f"{fine_tune}")
    if num_labels is not None and config.num_labels != num_labels:
        raise UserError(f"{model_dir}: not a fine-tuned checkpoint for this task: its classifier has "
                        f"{config.num_labels} output(s), the task {num_labels} (a model fine-tuned for another task?); "
                        f"{fine_tune}")


def inference_model(spec: TaskSpec, model_dir: str | Path, cfg: FinetuneConfig, device: torch.device,
                    warn: bool = True) -> nn.Module:
    """A fine-tuned checkpoint on `device`, prepared as fine-tuning prepared it (`prepare_model`: the CPU fast paths
    this CPU gets, the packed attention on a GPU; the bf16-emulation warning): predictions and scores then come
    from the same kernels as the run's dev evaluations. With the plain ops instead, bf16 rounds differently and a
    near tie flips (a SQuAD v2 run's recorded best exact 42.86 read 50.0 from `evaluate --model RUN/best`)."""
    return prepare_model(spec.model_class.from_pretrained(model_dir), precision=cfg.train.precision,
                         device=device, warn=warn).to(device)


def run_evaluation(spec: TaskSpec, model_dir: str | Path, tokenizer, cfg: FinetuneConfig,
                   out_dir: str | Path | None) -> dict:
    """Score a fine-tuned checkpoint on the labelled eval sets (and write prediction files if out_dir);
    on the GPU when there is one (`dist.device`), with a progress bar (`train.progress`)."""
    check_task_head(spec.model_class, spec.family, model_dir, spec.model_overrides.get("num_labels"))
    check_positions(spec, model_dir, cfg)
    if out_dir is None and not any(s.score is not None for s in spec.eval_sets):
        # `evaluate --model` on data without answers or labels (a test file) ran the model and printed {}
        raise UserError("nothing to score: the data given has no answers or labels (a test file?); write its "
                        f"predictions with `albertlm predict {spec.family} ... --out DIR`")
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():   # before the work, not after
        raise UserError(f"--out {out_dir} exists and is not a directory; give a directory for the prediction files")
    device = pick_device(cfg.dist.device)
    check_precision(cfg.train.precision, device, training=False)    # fp16 is CUDA's, as for finetune and evaluate on pretraining data
    model = inference_model(spec, model_dir, cfg, device)
    metrics: dict[str, Any] = {}
    # every set predicted and scored before any file is written: a set refused as it is predicted (a streamed
    # file's window longer than the model's positions: `check_positions`) or scored leaves no other set's
    # predictions behind (`predict --dev short.csv --test long.csv` wrote dev_predictions.tsv, then exited 2); only
    # the outputs (logits) are held, not the features
    predicted = [(eval_set, predict(model, eval_set.features, spec.outputs, tokenizer.pad_id, cfg.eval_batch_size,
                                    device, cfg.train.precision, cfg.train.progress)) for eval_set in spec.eval_sets]
    for eval_set, outputs in predicted:
        if eval_set.score is not None:   # (before the set's files: scoring sets what they hold, SQuAD's threshold)
            metrics[eval_set.name] = eval_set.score(outputs)
    for eval_set, outputs in predicted:
        if out_dir is not None and eval_set.write is not None:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            paths = eval_set.write(outputs, Path(out_dir))
            # the files to open, by eval set (`test:test_matched.tsv` -> submission/MNLI-m.tsv): not the names alone
            metrics.setdefault("predictions_written", {})[eval_set.name] = [str(path) for path in paths]
    if spec.problems.counts:
        metrics["problems"] = spec.problems.to_dict()
    return metrics
