"""`evaluate_checkpoint`: MLM and sentence-task loss/accuracy of any checkpoint on any built pretraining data
(`albertlm evaluate CKPT --data DIR`, the demo, the paper's Table 5 cross-evaluations), on the GPU when
there is one."""
from __future__ import annotations

import contextlib
import logging
import math
import sys
import warnings
from pathlib import Path

import torch

from albertlm.errors import UserError

# the objective names the sentence head's numbers sop_* whatever the data's task; on NSP data they are NSP's
NSP_NAMES = {"sop_loss": "nsp_loss", "sop_acc": "nsp_acc"}


def evaluate_checkpoint(checkpoint: str | Path, data: str | Path, batch_size: int = 32, max_batches: int = 0,
                        precision: str = "fp32", device: str = "auto", progress: bool = False,
                        counts: dict | None = None) -> dict:
    """A model directory (ours or transformers') or a run directory (its newest checkpoint) on `data`;
    `device` auto picks CUDA when available; `progress` shows a bar over the batches on a terminal, and a line
    at every tenth of them elsewhere (a log: a bar's carriage returns are noise there).

    The numbers are named by the data's sentence task: `sop_*` on SOP data, `nsp_*` on NSP
    data, no sentence numbers on MLM-only data. A checkpoint without a masked-LM head (a fine-tuned classifier,
    QA, ... model) is refused: its MLM numbers would be those of a freshly initialised head. One with a masked-LM
    head but no sentence-order/NSP head (a transformers `AlbertForMaskedLM`) reports the MLM numbers only, as on
    data without a sentence task, and says so in a warning (not the loader's "freshly initialised" pooler and SOP
    head, which no number reads). A NaN loss (NaN outputs: diverged weights, an fp16 overflow) makes its accuracy
    NaN too, with a warning: an argmax over NaN logits counted as predictions (sop_acc 0.44, the share of label
    0). Data without any instance, or whose evaluated instances hold no masked token (built with
    --masked-lm-prob 0) have no MLM numbers: the first is refused, the second reports none (the loss of nothing
    was 0.0, as if perfect).

    The caller's random generators (torch's, on the CPU and the device used) are as they were after the call:
    the evaluation draws its own seeded numbers, and loading the model (whose modules initialise their weights
    before the checkpoint's are read) draws from a copy, so a program's or notebook's random stream does not
    depend on whether it evaluated a checkpoint.

    `counts`, a dict, is filled with what the numbers are of: `examples` (with `max_batches`, the first
    max_batches x batch_size), `masked_tokens` (the masked-LM targets scored: weighted, -100 ids left out) and
    `sentence_labels` (the examples with a SOP/NSP label scored)."""
    from albertlm.training.distributed import DistInfo, pick_device
    from albertlm.training.trainer import callers_rng_kept

    info = DistInfo(device=pick_device(device))
    with callers_rng_kept(info.device):
        return _evaluate_checkpoint(checkpoint, data, batch_size, max_batches, precision, info, progress, counts)


def evaluate_under_torchrun(checkpoint: str | Path, data: str | Path, batch_size: int = 32, max_batches: int = 0,
                            precision: str = "fp32", device: str = "auto", progress: bool = False,
                            counts: dict | None = None) -> dict | None:
    """`albertlm evaluate` launched by torchrun (WORLD_SIZE > 1): the processes form a group, each evaluates its
    share of the batches (batch j on rank j % W, `loop.eval_micro_batches`, as pretraining's evaluations), the
    sums are added up over the ranks, and rank 0 gets the numbers of the whole data (the others get None, and
    print nothing). Before, every process evaluated all of the data on its own and printed the numbers: W times
    the work, W copies of the result (with --json, W objects on stdout). `device` auto (and cuda) is each
    process's own GPU (cuda:LOCAL_RANK), else the CPU; an error on one rank stops every rank with its line
    (`distributed.failing_together`). Not for a program that runs under torchrun itself and evaluates on one
    rank: `evaluate_checkpoint` is, and meets no other process."""
    from albertlm.training.distributed import failing_together, init_distributed, launch_settings, shutdown
    from albertlm.training.trainer import callers_rng_kept

    if device == "cuda":                 # each process its own GPU, as auto picks (cuda alone is GPU 0 for all)
        device = f"cuda:{launch_settings()[2]}"
    try:
        info = init_distributed("auto", device)
        with failing_together(info, lambda: " while evaluating"), callers_rng_kept(info.device):
            metrics = _evaluate_checkpoint(checkpoint, data, batch_size, max_batches, precision, info,
                                           progress and info.is_main, counts)
    finally:
        shutdown()
    return metrics if info.is_main else None


def _evaluate_checkpoint(checkpoint: str | Path, data: str | Path, batch_size: int, max_batches: int,
                         precision: str, info, progress: bool, counts: dict | None = None) -> dict:
    from albertlm.data.loader import collate
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.io import resolve_checkpoint
    from albertlm.training.distributed import my_share
    from albertlm.training.loop import eval_micro_batches, evaluate
    from albertlm.training.precision import check_precision, prepare_model
    from albertlm.training.pretrain import open_dataset
    from albertlm.training.trainer import rng_devices

    if batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {batch_size}")
    check_precision(precision, info.device, training=False)
    source = resolve_checkpoint(checkpoint)
    has_mlm, has_sentence_head = pretraining_heads(source)
    if not has_mlm:
        raise UserError(f"{source} has no masked-LM head (a fine-tuned model?): evaluating it on pretraining data "
                        "would score a freshly initialised head; give a pretrained or masked-LM checkpoint")
    dataset = open_dataset(data)
    if len(dataset) == 0:
        raise UserError(f"--data {data} holds no instances: nothing to evaluate")
    check_trained_tokenizer(source, dataset.meta, f"--data {data}")
    check_tokenizer_beside(source, dataset.meta, f"--data {data}")
    if has_sentence_head:
        model = AlbertForPreTraining.from_pretrained(source)
    else:       # its pooler and SOP head are made up at load time, and no number is read from them
        with unused_heads_unsaid():
            model = AlbertForPreTraining.from_pretrained(source)
    model = prepare_model(model, precision=precision, device=info.device).to(info.device)
    vocab = dataset.meta["tokenizer"]["vocab_size"]
    if vocab > model.config.vocab_size:
        raise UserError(f"{data} uses a {vocab}-token vocabulary, the model has {model.config.vocab_size}")
    length, positions = int(dataset.meta.get("max_seq_length") or 0), model.config.max_position_embeddings
    if length > positions:   # else the model's own words at the first long batch: "truncate them, or split them"
        raise UserError(f"--data {data}: its sequences have {length} tokens, more than the model's "
                        f"max_position_embeddings={positions}; build it with --max-seq-length {positions} or less")
    # the evaluation's own seed, in the generators `evaluate_checkpoint` restores (torch.manual_seed would also
    # reseed every other GPU's, which nothing puts back)
    torch.default_generator.manual_seed(0)
    for index in rng_devices(info.device):
        torch.cuda.default_generators[index].manual_seed(0)
    batches = eval_micro_batches(dataset, collate, batch_size, info, max_batches)
    if progress:
        count = math.ceil(len(dataset) / batch_size)
        count = min(count, max_batches) if max_batches else count
        # this process's batches: under torchrun, those of rank r of W are r, r + W, ... (`eval_micro_batches`)
        batches = show_progress(batches, len(my_share(count, info)))
    objective = CountingObjective()
    metrics = evaluate(model, batches, objective, precision, info)
    task = dataset.meta.get("sentence_task")
    if not has_sentence_head and "sop_loss" in metrics:   # a random head's numbers: not the model's
        del metrics["sop_loss"], metrics["sop_acc"]
        metrics["loss"] = metrics["mlm_loss"]
        if info.is_main:      # said, where the loader said "freshly initialised: sop_head" and the numbers went
            warnings.warn(f"{source} has no sentence-order/NSP head: the {task} labels of --data "
                          f"{data} are not scored, and `loss` is the masked-LM loss alone")
    not_finite_accuracies(metrics, source, data, precision, info.is_main)
    if counts is not None:     # summed over the ranks under torchrun (`loop.evaluate`), as the numbers are
        size = min(len(dataset), max_batches * batch_size) if max_batches else len(dataset)
        counts.update(examples=size, masked_tokens=int(round(objective.counts["mlm_count"])),
                      sentence_labels=int(objective.counts["sop_count"]) if has_sentence_head else 0)
    if not objective.counts["mlm_count"]:     # no masked token: "loss 0.0" was the loss of nothing
        del metrics["mlm_loss"], metrics["mlm_acc"]
        if "sop_loss" not in metrics:
            raise UserError(f"--data {data}: the instances evaluated hold no masked token (built with "
                            "--masked-lm-prob 0?) and no sentence label the model has a head for: nothing to score")
    return {**{sentence_name(key, task): value for key, value in metrics.items()}, "sentence_task": task}


def not_finite_accuracies(metrics: dict, source, data, precision: str, say: bool) -> None:
    """A NaN loss means NaN outputs: an argmax over a NaN logit picks the NaN's index, so the accuracy counted
    them as predictions (a model whose every output was NaN scored sop_acc 0.44 on SOP data, the share of its
    label 0, and nsp_acc about 0.5, chance, as if measured). Such an accuracy is NaN too, and said (`say`)."""
    spoilt = [acc for loss, acc in (("mlm_loss", "mlm_acc"), ("sop_loss", "sop_acc"))
              if loss in metrics and math.isnan(metrics[loss])]
    for acc in spoilt:
        metrics[acc] = math.nan
    if spoilt and say:
        cause = "" if precision == "fp32" else f" (--precision {precision}: an overflow? try fp32)"
        which = " and ".join({"mlm_acc": "masked-LM", "sop_acc": "sentence-task"}[acc] for acc in spoilt)
        warnings.warn(f"{source} gave NaN outputs on --data {data}{cause}: its {which} loss and accuracy are nan, "
                      "not numbers to report")


class _UnusedHeadsNote(logging.Filter):
    """Drops the model loader's "freshly initialised weights" note when it names a pooler and SOP head alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        from albertlm.model.io import fresh_weights

        names = fresh_weights(record)
        return not (names and all(name.startswith(("albert.pooler.", "sop_head.")) for name in names))


@contextlib.contextmanager
def unused_heads_unsaid():
    """The model loader does not say "freshly initialised weights" for a pooler and SOP head alone inside: a
    masked-LM checkpoint evaluated reads neither, and `_evaluate_checkpoint` says so in its own words."""
    from albertlm.model.io import log

    note = _UnusedHeadsNote()
    log.addFilter(note)
    try:
        yield
    finally:
        log.removeFilter(note)


def sentence_name(key: str, task: str | None) -> str:
    """The name of a number of the objective's (`sop_loss`, whatever the data) for data of `task`: `nsp_loss`
    on NSP data; every other name as it is."""
    if task == "nsp" and key in NSP_NAMES:
        return NSP_NAMES[key]
    return key


class CountingObjective:
    """The pretraining objective, keeping the counts of its last summary (`counts`: the masked tokens and the
    sentence labels evaluated), to tell "no masked token" from a loss of 0."""

    def __init__(self):
        from albertlm.training.pretrain import PretrainingObjective

        self.objective, self.counts = PretrainingObjective(), {}

    def denominators(self, batches):
        return self.objective.denominators(batches)

    def forward(self, model, batch, denominators):
        return self.objective.forward(model, batch, denominators)

    def empty_stats(self, device):
        return self.objective.empty_stats(device)

    def summarize(self, stats: torch.Tensor) -> dict[str, float]:
        from albertlm.training.pretrain import STAT_NAMES

        self.counts = dict(zip(STAT_NAMES, stats.tolist()))
        return self.objective.summarize(stats)


def show_progress(batches, total: int, what: str = "evaluate", leave: bool = True):
    """`batches`, shown: a tqdm bar on a terminal (stderr); elsewhere (a log, a pipe, nohup) a line
    `evaluate: 12/120 batches` (`what`) on stderr at every tenth, without carriage returns."""
    from albertlm.training.metrics import _terminal

    if _terminal():
        from tqdm.auto import tqdm

        yield from tqdm(batches, total=total, unit="batch", desc=what, dynamic_ncols=True, leave=leave)
        return
    marks = {math.ceil(total * k / 10) for k in range(1, 11)}
    for done, batch in enumerate(batches, 1):
        yield batch
        if done in marks:       # the batch yielded has been evaluated when the next one is asked for
            print(f"{what}: {done}/{total} batches", file=sys.stderr, flush=True)


def pretraining_heads(checkpoint: Path) -> tuple[bool, bool]:
    """(has a masked-LM head, has a sentence-order/NSP head): by the weight names the checkpoint stores, ours
    (`mlm_head.`, `sop_head.`) or transformers' (`predictions.`, `sop_classifier.`)."""
    from albertlm.model.io import state_keys

    keys = state_keys(checkpoint)      # the names only: the weights are read once, by from_pretrained
    return (any(k.startswith(("mlm_head.", "predictions.")) for k in keys),
            any(k.startswith(("sop_head.", "sop_classifier.")) for k in keys))


def check_trained_tokenizer(checkpoint: str | Path, meta: dict, which: str) -> None:
    """Data to evaluate (or train) a checkpoint of ours on must have been built with the tokenizer of the data the
    checkpoint was trained on (recorded in its run_config.json), when that data is still there to compare with:
    ids of another vocabulary gave numbers that meant nothing, without a word. A transformers checkpoint, or one
    whose training data is gone, is not checked."""
    import json

    from albertlm.data.shards import tokenizer_difference
    from albertlm.training.pretrain import open_dataset

    saved = Path(checkpoint) / "run_config.json"
    try:
        trained_on = json.loads(saved.read_text(encoding="utf-8"))["data"]["path"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if not isinstance(trained_on, str) or not trained_on or not Path(trained_on, "meta.json").is_file():
        return
    try:
        trained_meta = open_dataset(trained_on).meta
    except UserError:
        return
    difference = tokenizer_difference(meta, trained_meta)
    if difference:
        raise UserError(f"{which} was built with another tokenizer than the data {checkpoint} was trained on "
                        f"({trained_on}: {difference}); build it with that tokenizer")


def check_tokenizer_beside(checkpoint: str | Path, meta: dict, which: str) -> None:
    """Data to evaluate a model directory on that holds its tokenizer (a transformers or exported directory:
    spiece.model, vocab.txt, tokenizer.json) must have been built with that vocabulary, when the data records
    its hash (`vocab_sha256`): albert-base-v2 on data of a 1,000-piece tokenizer read every id as another
    piece and printed numbers that meant nothing, without a word (the data's vocabulary fit in the model's).
    A tokenizer that cannot be read is not this check's to report: evaluation does not use it."""
    from albertlm.data.build import vocab_fingerprint
    from albertlm.tokenization import load_tokenizer
    from albertlm.tokenization.load import find_tokenizer

    built = meta.get("tokenizer") or {}
    if not built.get("vocab_sha256") or find_tokenizer(checkpoint) != Path(checkpoint):
        return        # no hash to compare with, or no tokenizer in the directory itself (checked by run instead)
    try:
        beside = load_tokenizer(checkpoint)
        fingerprint = vocab_fingerprint(beside)
    except (UserError, OSError, ValueError, RuntimeError):
        return
    if fingerprint != built["vocab_sha256"]:
        raise UserError(f"{which} was built with another tokenizer ({built.get('path', '?')}, "
                        f"{built.get('vocab_size', '?')} pieces) than the one in {checkpoint} "
                        f"({beside.vocab_size} pieces, another vocabulary); build it with the model's tokenizer")
