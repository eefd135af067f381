"""`evaluate_checkpoint`: MLM and sentence-task loss/accuracy of any checkpoint on any built pretraining data
(`albertlm evaluate CKPT --data DIR`, the demo, the paper's Table 5 cross-evaluations), on the GPU when
there is one."""
from __future__ import annotations

import math
from pathlib import Path

import torch

from albertlm.errors import UserError


def evaluate_checkpoint(checkpoint: str | Path, data: str | Path, batch_size: int = 32, max_batches: int = 0,
                        precision: str = "fp32", device: str = "auto", progress: bool = False) -> dict:
    """A model directory (ours or transformers') or a run directory (its newest checkpoint) on `data`;
    `device` auto picks CUDA when available; `progress` shows a bar over the batches.

    A checkpoint without a masked-LM head (a fine-tuned classifier, QA, ... model) is refused: its MLM numbers
    would be those of a freshly initialised head. One with a masked-LM head but no sentence-order/NSP head (a
    transformers `AlbertForMaskedLM`) reports the MLM numbers only, as on data without a sentence task."""
    from albertlm.data.loader import collate
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.io import resolve_checkpoint
    from albertlm.training.distributed import DistInfo, pick_device
    from albertlm.training.loop import eval_micro_batches, evaluate
    from albertlm.training.precision import check_precision, prepare_model
    from albertlm.training.pretrain import PretrainingObjective, open_dataset

    if batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {batch_size}")
    info = DistInfo(device=pick_device(device))
    check_precision(precision, info.device)
    source = resolve_checkpoint(checkpoint)
    has_mlm, has_sentence_head = pretraining_heads(source)
    if not has_mlm:
        raise UserError(f"{source} has no masked-LM head (a fine-tuned model?): evaluating it on pretraining data "
                        "would score a freshly initialised head; give a pretrained or masked-LM checkpoint")
    dataset = open_dataset(data)
    check_trained_tokenizer(source, dataset.meta, f"--data {data}")
    model = AlbertForPreTraining.from_pretrained(source)
    model = prepare_model(model, precision=precision, device=info.device).to(info.device)
    vocab = dataset.meta["tokenizer"]["vocab_size"]
    if vocab > model.config.vocab_size:
        raise UserError(f"{data} uses a {vocab}-token vocabulary, the model has {model.config.vocab_size}")
    length, positions = int(dataset.meta.get("max_seq_length") or 0), model.config.max_position_embeddings
    if length > positions:   # else the model's own words at the first long batch: "truncate them, or split them"
        raise UserError(f"--data {data}: its sequences have {length} tokens, more than the model's "
                        f"max_position_embeddings={positions}; build it with --max-seq-length {positions} or less")
    torch.manual_seed(0)
    batches = eval_micro_batches(dataset, collate, batch_size, info, max_batches)
    if progress:
        from tqdm.auto import tqdm

        total = math.ceil(len(dataset) / batch_size)
        batches = tqdm(batches, total=min(total, max_batches) if max_batches else total, unit="batch",
                       desc="evaluate", dynamic_ncols=True)
    metrics = evaluate(model, batches, PretrainingObjective(), precision, info)
    if not has_sentence_head and "sop_loss" in metrics:   # a random head's numbers: not the model's
        del metrics["sop_loss"], metrics["sop_acc"]
        metrics["loss"] = metrics["mlm_loss"]
    metrics["sentence_task"] = dataset.meta.get("sentence_task")
    return metrics


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
