"""Pretraining: MLM + SOP/NSP losses, the run's resolution, model and data, and `pretrain()` itself.

    run config -> resolve_run (the model follows the data / the starting checkpoint / a resumed run)
               -> process group -> model (scratch or --init-from) -> data (this rank's share)
               -> trainer.build_loop (prepare, device, optimizer, resume, DDP, compile) -> Loop.run()

Randomness, and what it depends on: the initial weights on the seed (the same on every rank); the data order
and dynamic masks on (seed, epoch, example) only (`loop.shuffled_batches`, `data.loader.example_rng`), so
not on the process layout; dropout on (seed, rank, step, micro-batch) (`SeededDropout`), so every rank
draws its own masks and a resumed run draws what an uninterrupted one would.
"""
from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from albertlm.config.run import RunConfig
from albertlm.errors import UserError, warning_line
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import (SHARED_OUT, DistInfo, check_shared_out, failing_together,
                                           init_distributed, refuse_differences, world_size_from_env)
from albertlm.training.loop import Batch, Loop, StepData, eval_micro_batches, evaluate, shuffled_batches
from albertlm.training.trainer import build_loop, callers_rng_kept, open_logger, seed_everything

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "masked_lm_positions", "masked_lm_weights",
                "token_index")
# compile modes that capture CUDA graphs, which want static shapes: the padding is not skipped under them
STATIC_SHAPE_COMPILE = ("reduce-overhead", "max-autotune")
STAT_NAMES = ("mlm_loss_sum", "mlm_correct", "mlm_count", "sop_loss_sum", "sop_correct", "sop_count")


class PretrainingObjective:
    """Masked-LM cross entropy weighted by `masked_lm_weights`, plus sentence-order (or NSP) cross entropy,
    each averaged over the whole global batch (the MLM sum divided by the weights' sum + 1e-5, as google's
    `run_pretraining.py`). Examples labelled -100 have no sentence task.
    `skip_padding`: pass the batch's `token_index` to the model, whose per-token layers then run on the real
    tokens only (the same results; the padded slots' work is saved). Off under CUDA-graph compile modes."""

    def __init__(self, skip_padding: bool = True):
        self.inputs = MODEL_INPUTS if skip_padding else tuple(k for k in MODEL_INPUTS if k != "token_index")

    def denominators(self, batches: list[Batch]) -> torch.Tensor:
        masked = sum(_kept_weights(b["masked_lm_ids"], b["masked_lm_weights"]).sum() for b in batches)
        sentences = sum((b["sentence_order_label"] != -100).sum().float() for b in batches)
        return torch.stack([masked, sentences])

    def forward(self, model: nn.Module, batch: Batch, denominators: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = {k: batch[k] for k in self.inputs if k in batch}
        if is_full(batch):  # no padding: no mask (SDPA then takes its fastest kernel) and nothing to skip
            for key in ("attention_mask", "token_index"):
                inputs.pop(key, None)
        elif "token_index" in inputs:
            dynamic_length(inputs["token_index"])
        out = model(**inputs)
        mlm = _mlm_sums(out["prediction_logits"], batch["masked_lm_ids"], batch["masked_lm_weights"])
        sop = _sentence_sums(out["sop_logits"], batch["sentence_order_label"])
        # google's get_masked_lm_output: weighted sum / (sum of weights + 1e-5), over the whole global batch
        loss = mlm[0] / (denominators[0] + 1e-5) + sop[0] / denominators[1].clamp(min=1)
        return loss, torch.stack(list(mlm) + list(sop)).detach()

    def summarize(self, stats: torch.Tensor) -> dict[str, float]:
        s = dict(zip(STAT_NAMES, stats.tolist()))
        out = {"mlm_loss": s["mlm_loss_sum"] / max(s["mlm_count"], 1e-5),
               "mlm_acc": s["mlm_correct"] / max(s["mlm_count"], 1e-5)}
        out["loss"] = out["mlm_loss"]
        if s["sop_count"] > 0:
            out["sop_loss"] = s["sop_loss_sum"] / s["sop_count"]
            out["sop_acc"] = s["sop_correct"] / s["sop_count"]
            out["loss"] += out["sop_loss"]
        return out

    def empty_stats(self, device: torch.device) -> torch.Tensor:
        return torch.zeros(len(STAT_NAMES), device=device)


def is_full(batch: Batch) -> bool:
    """Whether the batch has no padding, from the length of the collate's `token_index` (a shape: no sync)."""
    index = batch.get("token_index")
    return index is not None and index.shape[0] == batch["input_ids"].numel()


def dynamic_length(token_index: torch.Tensor) -> None:
    """Tell torch.compile, when it is in use, that the number of real tokens changes from batch to batch: else
    it compiles the first batch's count as a constant and compiles again at the second batch (inside the timed,
    logged steps). Nothing is imported for it: without compile, torch._dynamo is not loaded and this is a no-op."""
    dynamo = sys.modules.get("torch._dynamo")
    mark = getattr(dynamo, "maybe_mark_dynamic", None)
    if mark is not None:
        mark(token_index, 0)


def _mlm_sums(logits: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor):
    """Weighted sums over the B*P masked-LM slots (the model's `prediction_logits`, in google's order):
    padding slots have weight 0 and count for nothing. No boolean indexing, so no host sync."""
    logits = logits.reshape(-1, logits.shape[-1]).float()  # (B*P, V)
    targets, w = ids.reshape(-1).clamp(min=0), _kept_weights(ids, weights).reshape(-1)  # (B*P,)
    ce = F.cross_entropy(logits, targets, reduction="none")
    correct = (logits.argmax(-1) == targets).float()
    return (ce * w).sum(), (correct * w).sum(), w.sum()


def _kept_weights(ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """`masked_lm_weights` as float, 0 where the id is -100 (transformers' "no label"; the builder never writes
    one, a caller's own batches may): such a slot counted as a miss of class 0, as the model's own loss no
    longer does (`model.albert.weighted_cross_entropy`)."""
    return weights.float() * (ids != -100)


def _sentence_sums(logits: torch.Tensor, labels: torch.Tensor):
    valid = labels != -100
    logits = logits.float()
    ce = F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
    correct = ((logits.argmax(-1) == labels) & valid).sum().float()
    return ce, correct, valid.sum().float()


# ----------------------------------------------------------------------------------------------- set-up
# the model settings a run started from a checkpoint may set itself (the rest is the checkpoint's architecture)
DROPOUTS = ("hidden_dropout", "attention_dropout", "classifier_dropout")


def resolve_run(run: RunConfig, run_dir: str | Path, resume: bool = False,
                follow_data_vocab: bool = False, dropout_from_checkpoint: tuple[str, ...] = ()) -> RunConfig:
    """The run as it will train, as a new config (the given one is not changed): `init_from`'s config replaces
    `run.model` (a run directory means its newest checkpoint), keeping `run.model`'s dropouts except those named
    in `dropout_from_checkpoint`, which are the checkpoint's (the CLI names the ones the user did not give); with
    `follow_data_vocab` the vocabulary follows the data's tokenizer. A resumed run that has a checkpoint continues
    from it: `init_from` stays as recorded (where the run started; it is not read again, and may be gone by now).
    Checks that the global batch splits over this launch's processes."""
    from albertlm.model.io import read_config, resolve_checkpoint

    if run.init_from and not resumes_checkpoint(run_dir, resume):
        if not Path(run.init_from).exists():     # a Hub name (`albert-base-v2`): said as every model reader says it
            from albertlm.model.io import DOWNLOADS_NOTHING

            raise UserError(f"--init-from {run.init_from}: no such model directory ({DOWNLOADS_NOTHING})")
        if not Path(run.init_from).is_dir():
            raise UserError(f"--init-from {run.init_from}: not a directory")
        source = str(resolve_checkpoint(run.init_from))     # a run directory means its newest checkpoint
        model = read_config(source)[0]
        dropout = {k: getattr(run.model, k) for k in DROPOUTS if k not in dropout_from_checkpoint}
        run = run.replace(init_from=source, model=model.replace(**dropout))
    elif follow_data_vocab and run.data.path and not run.init_from:
        vocab = open_dataset(run.data.path).meta["tokenizer"]["vocab_size"]
        if vocab != run.model.vocab_size:
            run = run.replace(model=run.model.replace(vocab_size=vocab))
    check_layout(run.train, world_size_from_env(), resume)
    return run


def resumes_checkpoint(run_dir: str | Path, resume: bool) -> bool:
    """Whether the run continues from a checkpoint of its own (then `init_from` is only the record of where it
    started): `resume` and a checkpoint in `run_dir` (a run that stopped before its first one starts again)."""
    return resume and Path(run_dir).is_dir() and ckpt.latest_checkpoint(run_dir) is not None


def init_from_note(run: RunConfig) -> str | None:
    """One line when the model settings a run started from `init_from` trains with differ from the checkpoint's
    (the dropouts it may set), so a user sees that e.g. the checkpoint's dropout 0.1 is not what this run uses;
    None when they are the same (or there is no `init_from`)."""
    from albertlm.model.io import read_config

    if not run.init_from:
        return None
    saved = read_config(run.init_from)[0]
    changed = [f"{k} {getattr(run.model, k):g} (the checkpoint's: {getattr(saved, k):g})" for k in DROPOUTS
               if getattr(run.model, k) != getattr(saved, k)]
    if not changed:
        return None
    return f"note: --init-from {run.init_from}: this run trains with {', '.join(changed)}"


def check_layout(train, world_size: int, resume: bool) -> None:
    """The global batch splits over the processes in equal micro-batches (`TrainConfig.check_equal_micro_batches`).
    A resumed run keeps its --batch-size, so its refusal names the process counts it can run on instead of
    asking for another --batch-size, which the resume would refuse in turn."""
    try:
        train.check_equal_micro_batches(world_size)
    except UserError as exc:
        if not resume:
            raise
        batch, micro = train.batch_size, train.micro_batch_size
        fits = [w for w in range(1, batch // max(micro, 1) + 1) if batch % (w * max(micro, 1)) == 0]
        if not fits:
            per = f" ({batch // world_size} here)" if batch % world_size == 0 else ""
            raise UserError(f"--resume: the run's --batch-size {batch} is not a multiple of --micro-batch-size "
                            f"{micro}, and a resumed run keeps its --batch-size: give a --micro-batch-size that "
                            f"divides {batch} / the number of processes{per}") from exc
        shown = fits if len(fits) <= 10 else fits[:9] + ["...", fits[-1]]
        counts = " or ".join(filter(None, (", ".join(map(str, shown[:-1])), str(shown[-1]))))
        layout = f" x --micro-batch-size {micro} = {world_size * micro}" if micro else ""
        raise UserError(f"--resume: the run's --batch-size {batch} does not split evenly over {world_size} "
                        f"process(es){layout}, and a resumed run keeps its --batch-size: run it on {counts} "
                        f"process(es) (torchrun's --nproc-per-node x nodes)"
                        f"{', or give another --micro-batch-size' if micro else ''}") from exc


def data_identity(meta: dict) -> dict:
    """What a resumed run's data must still be (with the batch size and the seed): its sequence length, sentence
    task and tokenizer, so data rebuilt in place since the run started is refused, not trained on; and what fixes
    which instance each example index is: the build's seed and --chunk-chars, and its --num-shards (the parts
    of a K-part build hold chunks i, i+K, ... each, so the same instances rebuilt with another K come in another
    order, and a resumed epoch would read some twice and skip others). --records-per-shard only cuts the same
    sequence into other files: it is not recorded."""
    tokenizer = meta.get("tokenizer") or {}
    found = {"max_seq_length": meta.get("max_seq_length"), "sentence_task": meta.get("sentence_task"),
             "vocab_size": tokenizer.get("vocab_size", meta.get("vocab_size")),
             "vocab_sha256": tokenizer.get("vocab_sha256"), "num_shards": meta.get("num_shards"),
             "build_seed": meta.get("seed"), "chunk_chars": meta.get("chunk_chars")}
    return {f"data_{k}": v for k, v in found.items() if v is not None}


def build_model(run: RunConfig, from_init: bool = True) -> nn.Module:
    """From scratch with `run.model`, or (`from_init`: not for a resumed run, whose own checkpoint's weights are
    loaded next) the weights of `run.init_from` (ours or a transformers directory); `resolve_run` has given
    `run.model` that checkpoint's architecture. A new run from scratch draws its weights as `run.initializer`
    says (`truncated_normal`: google-research's, `model.albert.init_truncated_normal`, drawn after the model's
    own normal ones, from the seeded generator)."""
    from albertlm.model.albert import AlbertForPreTraining, init_truncated_normal

    if not run.init_from:
        model = AlbertForPreTraining(run.model)
        if from_init and run.initializer == "truncated_normal":
            init_truncated_normal(model)
        return model
    if not from_init:
        return AlbertForPreTraining(run.model)
    dropout = {k: getattr(run.model, k) for k in DROPOUTS}
    return AlbertForPreTraining.from_pretrained(run.init_from, **dropout)


@dataclass
class Datasets:
    train: Any
    eval: Any | None
    collate: Callable[[list], Batch]
    meta: dict


def open_datasets(run: RunConfig) -> Datasets:
    """The data builder's output: `data.path` for training, `data.eval_path` (another build, e.g. of
    held-out documents) for evaluation; without it the run does not evaluate."""
    from albertlm.data import loader

    if not run.data.path:
        raise UserError("no training data: pass --data DIR (a directory written by `albertlm data build`)")
    train = open_dataset(run.data.path, run.data.dynamic_masking, run.train.seed)
    eval_ds = open_dataset(run.data.eval_path) if run.data.eval_path else None
    return Datasets(train=train, eval=eval_ds, collate=loader.collate, meta=dict(train.meta))


def open_dataset(path: str | Path, dynamic_masking: bool = False, seed: int = 0):
    from albertlm.data import loader

    # the loader reads `meta.json` or the part metas of a `--num-shards K` build, with its own clear errors
    return loader.PretrainingDataset(path, dynamic_masking=dynamic_masking, seed=seed)


def check_data_fits(run: RunConfig, meta: dict, which: str = "the data") -> None:
    vocab = meta.get("tokenizer", {}).get("vocab_size") or meta.get("vocab_size")
    if vocab and vocab > run.model.vocab_size:
        raise UserError(f"{which}'s vocabulary has {vocab} tokens but the model's vocab_size is "
                        f"{run.model.vocab_size}; pass --model.vocab_size={vocab}")
    length = meta.get("max_seq_length")
    if length and length > run.model.max_position_embeddings:
        raise UserError(f"{which}'s sequences have {length} tokens, more than the model's "
                        f"max_position_embeddings={run.model.max_position_embeddings}")


def check_datasets(run: RunConfig, datasets: Datasets, resumed: bool = False) -> None:
    """The training data holds at least one global batch, it and the evaluation data fit the model, and both
    were built with the same tokenizer (vocabulary size, special ids and, when recorded, the vocabulary itself):
    checked before anything runs (and by --dry-run), not found at the first evaluation. `init_from`'s training
    data is compared too, unless the run is `resumed` from a checkpoint of its own (`resumes_checkpoint`)."""
    from albertlm.data.shards import tokenizer_difference

    from albertlm.training.evaluate import check_trained_tokenizer

    check_data_fits(run, datasets.meta)
    if len(datasets.train) < run.train.batch_size:   # `loop.StepData`'s refusal, also said by --dry-run
        raise UserError(f"the data has {len(datasets.train)} examples, fewer than one global batch "
                        f"({run.train.batch_size}); lower --batch-size or build more data")
    # a checkpoint of ours trained on data of another tokenizer: its ids mean other pieces
    if run.init_from and not resumed:
        check_trained_tokenizer(run.init_from, datasets.meta, f"--data {run.data.path}")
    eval_meta = getattr(datasets.eval, "meta", None)
    if eval_meta is None:
        return
    which = f"--eval-data {run.data.eval_path}"
    difference = tokenizer_difference(eval_meta, datasets.meta)
    if difference:
        raise UserError(f"{which} was built with another tokenizer than --data {run.data.path} ({difference}); "
                        "build it with the training data's tokenizer")
    check_data_fits(run, eval_meta, which)


def make_loop(run: RunConfig, run_dir: Path, datasets: Datasets, info: DistInfo, resume: bool,
              model: nn.Module | None = None, objective=None, logger=None) -> Loop:
    """Everything `Loop.run()` needs; `model`/`objective` default to ALBERT pretraining (tests pass stand-ins).
    `run` must be resolved (`resolve_run`)."""
    resumed = resumes_checkpoint(run_dir, resume)
    check_datasets(run, datasets, resumed)
    check_layout(run.train, info.world_size, resume)       # fixed-length data: every forward pass alike
    seed_everything(run.train.seed)                         # the same initial weights on every rank
    model = model if model is not None else build_model(run, from_init=not resumed)
    objective = objective or PretrainingObjective(skip_padding=run.train.compile not in STATIC_SHAPE_COMPILE)
    train = datasets.train
    data = StepData(train, datasets.collate, shuffled_batches(len(train), run.train.batch_size, run.train.seed),
                    run.train.micro_batches(info.world_size), info.rank, info.world_size, run.data.num_workers,
                    epoch_keys=run.data.dynamic_masking,
                    identity={"batch_size": run.train.batch_size, "seed": run.train.seed,
                              **data_identity(datasets.meta)})
    micro = run.train.forward_batch(info.world_size)

    # `eval_batches` counts batches of --batch-size, read in forward passes of the training's size: the same
    # held-out examples whatever the accumulation or the number of processes (also across a --resume)
    eval_examples = run.train.eval_batches * run.train.batch_size

    def evaluator(trained, raw, state):
        if datasets.eval is None:
            return None
        return lambda: evaluate(trained, eval_micro_batches(datasets.eval, datasets.collate, micro, info, 0,
                                                            max_examples=eval_examples),
                                objective, run.train.precision, info)

    # without a sentence task the pooler and SOP head get no gradient, which DDP must be told
    loop = build_loop(model, objective, data, run.train, run.optim, info, run_dir, run.to_dict(), resume=resume,
                      evaluator=evaluator, find_unused_parameters=datasets.meta.get("sentence_task") == "none",
                      logger=logger)
    return loop


# the run settings that are each process's own: how it shows progress and logs (rank 0 alone logs and saves),
# where its machine holds the data and the starting checkpoint (the data itself is compared, `run_identity`),
# its device and backend (`auto` on one node, `gloo` on another: the group they formed has one) and how long it
# waits for the others
PER_PROCESS = ("train.progress", "train.tensorboard", "train.log_every", "train.keep_last", "data.num_workers",
               "data.path", "data.eval_path", "init_from", "dist.device", "dist.backend", "dist.timeout_minutes")


def run_identity(run: RunConfig, datasets: Datasets, run_dir: Path, resume: bool) -> dict:
    """What every process of one run must agree on: its settings (but `PER_PROCESS`), its training data as
    this process reads it (examples, sequence length, sentence task, tokenizer, the build's seed and shards),
    whether it evaluates and on how many examples, and on `resume` the checkpoint it continues from."""
    from albertlm.config.overrides import flatten

    values = {key: value for key, value in flatten(run.to_dict()).items() if key not in PER_PROCESS}
    meta = datasets.meta
    values["the training data's examples"] = len(datasets.train)
    values.update({f"the training data's {key[len('data_'):]}": value for key, value in data_identity(meta).items()})
    values["the training data's shards"] = [(s.get("file"), s.get("num_instances")) for s in meta.get("shards", [])
                                             if isinstance(s, dict)]
    values["the evaluation data's examples"] = len(datasets.eval) if datasets.eval is not None else None
    if resume:
        last = ckpt.latest_checkpoint(run_dir) if run_dir.is_dir() else None
        values["the checkpoint it resumes from"] = last.name if last is not None else None
    return values


def check_same_run(run: RunConfig, datasets: Datasets, run_dir: Path, resume: bool, info: DistInfo) -> None:
    """Every process of a launch was given the same run (torchrun on each node with its own command line): a
    node started with another --lr trained on silently, each rank updating its copy of the model with its own
    rate while only rank 0's was saved; another --max-steps left the ranks waiting in different collectives until
    --dist.timeout_minutes; another --model.* was a DDP traceback. Refused on every rank, in one line naming what
    differs and on which ranks (and hosts), before anything is read or written."""
    refuse_differences(info, run_identity(run, datasets, run_dir, resume),
                       "start every node's torchrun with the same `albertlm pretrain` options and --config files, "
                       f"on the same data (a shared path or a copy){SHARED_OUT if resume else ''}")


def long_warmup_warning(plan, resumed: bool = False) -> str | None:
    """A warmup as long as the run (the paper recipe's 3125 steps kept for a --max-steps 1000 run) means the
    learning rate never decays and may never reach --lr: said as the run starts (and as a `resumed` one goes on),
    with the run's notes on stdout (stderr is kept for errors); the run still goes as asked. A resumed run keeps
    its --warmup-steps (`--resume --warmup-steps` is refused), so it is told what it may do instead. The line is
    in every warning's form, `albertlm pretrain: warning: ...` (`errors.warning_line`)."""
    if 0 < plan.total_steps <= plan.warmup_steps:
        advice = (f"a resumed run keeps its warmup: a --max-steps above {plan.warmup_steps} lets it decay, or start "
                  "over with --overwrite and a smaller --warmup-steps" if resumed else
                  "pass a smaller --warmup-steps (e.g. a tenth of --max-steps)")
        return warning_line(f"the warmup ({plan.warmup_steps} steps) is not shorter than the run "
                            f"({plan.total_steps} steps), so the learning rate only rises, to "
                            f"{plan.lr_at(plan.total_steps - 1):g} at the last step (--lr {plan.lr:g}), and never "
                            f"decays; {advice}")
    return None


def pretrain(run: RunConfig, run_dir: str | Path, resume: bool = False, overwrite: bool = False,
             on_ready: Callable[[RunConfig], None] | None = None) -> str:
    """Train as configured; returns "done", "interrupted" or "budget". Rank 0 writes the run directory.

    Everything is checked before anything is written: the run directory (another run in it needs `resume`
    or `overwrite`; one holding only a run that stopped before its first record and checkpoint is taken over;
    rank 0 locks it until the run ends, so a process still writing there is refused), the data, the model and
    the checkpoint to resume from; then `on_ready(run)` (rank 0; the CLI prints the config there), then an
    overwritten run's old files go, then training starts."""
    run_dir = Path(run_dir)
    # every rank, before the process group forms
    old_run = ckpt.check_run_dir(run_dir, resume, overwrite, must_exist=True)
    run = resolve_run(run.absolute_paths(), run_dir, resume)   # run_config.json works from any directory
    info = init_distributed(run.dist.backend, run.dist.device, run.dist.timeout_minutes)
    with contextlib.ExitStack() as held:
        held.enter_context(callers_rng_kept(info.device))   # the caller's random stream is as it was after the run
        # a rank that fails here (its data unreadable) stops the others with its message, not a gloo traceback
        with failing_together(info, lambda: " while setting up"):
            # another run writing there is refused: before a resume clears what looks like a killed save's
            # leftovers (that run's checkpoint in the making); a new directory is locked once it is made
            locked = info.is_main and run_dir.is_dir()
            if locked:
                held.enter_context(ckpt.run_dir_lock(run_dir))
            datasets = open_datasets(run)
            check_same_run(run, datasets, run_dir, resume, info)
            check_shared_out(run_dir, info)   # several nodes: one --out they all see, before anything is written
            loop = make_loop(run, run_dir, datasets, info, resume)
            if info.is_main:
                run_dir.mkdir(parents=True, exist_ok=True)
                if not locked:
                    held.enter_context(ckpt.run_dir_lock(run_dir))
                if on_ready is not None:
                    on_ready(run)
                ckpt.clear_run_dir(old_run)
                ckpt.write_text_atomic(run_dir / "run_config.json", json.dumps(run.to_dict(), indent=2) + "\n")
            open_logger(loop)
            if loop.logger is not None:
                resumed = loop.state.step > 0
                notes = [long_warmup_warning(loop.plan, resumed), None if resumed else init_from_note(run)]
                for note in filter(None, notes):
                    loop.logger.note(note)
        return loop.run()
