"""How every pretrained model is measured, the same way for all runs of a suite:

- intrinsic: held-out MLM accuracy, and accuracy on BOTH sentence-order (SOP) and next-sentence (NSP)
  held-out data, whatever task the model was trained on (the paper's Table 5 cross-evaluation);
- Figure 1: for each layer, the L2 distance and the cosine similarity between its input and output
  embeddings (token vectors), averaged over the real tokens of held-out sequences;
- parameters: embeddings + encoder + pooler, not the MLM / SOP heads (the paper's shared rows count so; its
  not-shared rows leave out the pooler, H² + H: docs/model.md "Parameter counts");
- the unigram baseline of MLM accuracy: what predicting each masked token from token frequencies alone scores
  on the same held-out slots (a pretrained model near it has learned little beyond frequencies);
- the segment-length baseline of SOP and NSP accuracy: what the two segments' lengths alone (no token read)
  score on the held-out pairs. It is above the 50% of chance: a chunk gathers sentences until one crosses its
  target length, so the chunk's last sentence, always in B, tends to be the longest (google's builder has the
  same property), and "A longer than B" hints at a swapped SOP pair;
- the length-balanced accuracy of each sentence head (`length_rule_agreement`, part of `intrinsic`): how often its
  held-out answers are that rule's, its accuracy where the rule is right and where it is wrong, and their mean,
  the accuracy on pairs where the rule is at chance (a head that only follows the rule scores 50% on it, a head
  blind to lengths its plain accuracy).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albertlm.config.model import ModelConfig


def count_parameters(cfg: ModelConfig) -> int:
    """Embeddings + encoder + pooler, heads apart, on meta-device modules (the paper's Tables 3 and 4 count the
    pooler in their shared rows only: their not-shared rows are this less H² + H)."""
    from albertlm.model.albert import AlbertModel

    with torch.device("meta"):
        model = AlbertModel(cfg)
    return sum(p.numel() for p in model.parameters())


def intrinsic(checkpoint: str | Path, heldout: dict[str, Path], batch_size: int = 64, device: str = "auto",
              precision: str = "fp32") -> dict[str, Any]:
    """{mlm_acc, mlm_loss, sop_acc, sop_loss, nsp_acc, nsp_loss, length_rule} of a checkpoint: MLM on the held-out
    SOP data, each sentence task on its own held-out data (the SOP head answers "is this pair in order /
    consecutive?" on both), and `length_rule`: {task: `length_rule_agreement`'s numbers of the sentence head on
    that task's held-out data}, None for a task where the model has no sentence head or its outputs were NaN
    (its accuracy is NaN then)."""
    from albertlm.training.evaluate import evaluate_checkpoint

    out: dict[str, Any] = {}
    for task, data in heldout.items():
        metrics = evaluate_checkpoint(checkpoint, data, batch_size=batch_size, precision=precision, device=device)
        out[f"{task}_acc"] = metrics.get(f"{task}_acc", float("nan"))    # evaluate names them by the data's task
        out[f"{task}_loss"] = metrics.get(f"{task}_loss", float("nan"))
        if task == "sop":
            out["mlm_acc"], out["mlm_loss"] = metrics["mlm_acc"], metrics["mlm_loss"]
    # the head's answer to each pair is needed, and `evaluate_checkpoint` keeps only sums (its objective is made
    # inside it): one more pass, of the sentence head alone (no masked-LM head), over the same held-out data
    scored = {task: data for task, data in heldout.items() if not np.isnan(out[f"{task}_acc"])}
    rule = length_rule_agreement(checkpoint, scored, batch_size=batch_size, device=device,
                                 precision=precision) if scored else {}
    out["length_rule"] = {task: rule.get(task) for task in heldout}
    return out


def length_rule_numbers(table: np.ndarray) -> dict[str, Any]:
    """The numbers of a sentence head against the length rule ("label 1 when A is longer than B", equal lengths
    0: `length_baseline`'s `rule`) from `table`, a 2 x 2 count of held-out pairs: table[r, h] holds those where
    the rule is right (r = 1) or wrong (r = 0) and the head right (h = 1) or wrong (h = 0). With 0/1 labels the
    head gives the rule's answer exactly where both are right or both wrong.

    {instances, rule_acc (the rule's accuracy), acc (the head's), agree (the share of the head's answers equal
    to the rule's), acc_rule_right / acc_rule_wrong (the head's accuracy on the pairs where the rule is right /
    wrong), balanced_acc (their mean: the accuracy on a set where the rule is at chance, each half weighted 1/2;
    50% for a head that only follows the rule, its plain accuracy for a head blind to lengths), rule_right /
    rule_wrong (the counts)}; an accuracy over no pair is None, and so is balanced_acc then."""
    table = np.asarray(table, dtype=np.int64).reshape(2, 2)
    n, right, wrong = int(table.sum()), int(table[1].sum()), int(table[0].sum())

    def share(part: int, whole: int) -> float | None:
        return part / whole if whole else None

    on_right, on_wrong = share(int(table[1, 1]), right), share(int(table[0, 1]), wrong)
    return {"instances": n, "rule_acc": share(right, n), "acc": share(int(table[:, 1].sum()), n),
            "agree": share(int(table[1, 1] + table[0, 0]), n), "acc_rule_right": on_right,
            "acc_rule_wrong": on_wrong,
            "balanced_acc": None if on_right is None or on_wrong is None else (on_right + on_wrong) / 2,
            "rule_right": right, "rule_wrong": wrong}


def length_rule_table(predictions: np.ndarray, len_a: np.ndarray, len_b: np.ndarray,
                      labels: np.ndarray) -> np.ndarray:
    """`length_rule_numbers`'s 2 x 2 count from a head's 0/1 answers and the pairs' segment lengths and labels."""
    rule_right = ((len_a > len_b).astype(np.int64) == labels).astype(np.int64)
    head_right = (np.asarray(predictions, dtype=np.int64) == labels).astype(np.int64)
    return np.bincount(rule_right * 2 + head_right, minlength=4).reshape(2, 2)


@torch.no_grad()
def sentence_head_table(model: nn.Module, data: str | Path, batch_size: int = 64, precision: str = "fp32",
                        device: torch.device | None = None) -> np.ndarray:
    """`length_rule_table` of the sentence head of `model` (an AlbertForPreTraining, in eval mode, on `device`)
    on the SOP or NSP data `data`: the data in order, `batch_size` instances at a time, as `evaluate_checkpoint`
    feeds them (the same masked inputs, the padding skipped), the backbone's last layer computed at [CLS] only,
    its pooled output through the sentence head, under `precision`'s autocast. Memory: one batch and 4 counts."""
    from albertlm.data.loader import collate
    from albertlm.errors import UserError
    from albertlm.training.precision import autocast
    from albertlm.training.pretrain import open_dataset

    device = device or next(model.parameters()).device
    dataset = open_dataset(data)
    task = str(dataset.meta.get("sentence_task"))
    if task not in ("sop", "nsp"):
        raise UserError(f"{data} is {task!r} data: no sentence label to answer")
    table = np.zeros((2, 2), np.int64)
    for start in range(0, len(dataset), batch_size):
        rows = np.arange(start, min(len(dataset), start + batch_size), dtype=np.int64)
        len_a, len_b, labels = _pair_lengths(dataset, rows, data)
        batch = collate(dataset.__getitems__(rows.tolist()))
        if not np.array_equal(batch["sentence_order_label"].numpy(), labels):   # the same records, read twice
            raise UserError(f"{data} changed while it was read; evaluate it again")
        inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids", "token_index")}
        cls = torch.zeros(len(rows), 1, dtype=torch.long, device=device)      # [CLS], the row the pooler reads
        with autocast(precision, device):
            pooled = model.albert(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"], rows=cls,
                                  token_index=inputs["token_index"]).pooler_output
            answers = model.sop_head(pooled).float().argmax(-1).cpu().numpy()
        table += length_rule_table(answers, len_a, len_b, labels)
    return table


def length_rule_agreement(checkpoint: str | Path, heldout: dict[str, Path], batch_size: int = 64,
                          device: str = "auto", precision: str = "fp32") -> dict[str, dict | None]:
    """{task: `length_rule_numbers`} of a checkpoint's sentence head on each held-out SOP / NSP data set of
    `heldout` (`sentence_head_table`; the model loaded once, on `device`, under `precision`, as
    `evaluate_checkpoint` runs it), None for every task when the checkpoint has no sentence head (a masked-LM
    model). The caller's random generators are as they were (loading a model draws from them)."""
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.io import resolve_checkpoint
    from albertlm.training.distributed import pick_device
    from albertlm.training.evaluate import pretraining_heads
    from albertlm.training.precision import check_precision, prepare_model
    from albertlm.training.trainer import callers_rng_kept

    target = pick_device(device)
    check_precision(precision, target, training=False)
    source = resolve_checkpoint(checkpoint)
    if not pretraining_heads(source)[1]:
        return {task: None for task in heldout}
    with callers_rng_kept(target):
        model = AlbertForPreTraining.from_pretrained(source)
    # the bf16-on-this-CPU note, if any, was said by the evaluation before this pass
    model = prepare_model(model, precision=precision, device=target, warn=False).to(target).eval()
    return {task: length_rule_numbers(sentence_head_table(model, data, batch_size, precision, target))
            for task, data in heldout.items()}


def unigram_baseline(train_data: str | Path, heldout_data: str | Path, max_train: int = 100_000,
                     chunk: int = 4096) -> dict[str, float]:
    """{acc, loss, train_targets, heldout_targets}: a model that ignores the context and predicts every masked
    token from its frequency among the masked targets of (an evenly spaced sample of at most `max_train`
    instances of) the training data, scored on exactly the held-out slots the MLM accuracy is measured on:
    top-1 accuracy (always the most frequent token) and cross-entropy in nats (add-half smoothing)."""
    from albertlm.data.loader import PretrainingDataset

    def targets(dataset, indices):
        for start in range(0, len(indices), chunk):
            items = dataset.__getitems__([int(i) for i in indices[start:start + chunk]])
            ids = np.stack([item["masked_lm_ids"] for item in items])
            used = np.stack([item["masked_lm_weights"] for item in items]) > 0
            yield ids[used]

    train, heldout = PretrainingDataset(train_data), PretrainingDataset(heldout_data)
    picked = np.unique(np.linspace(0, len(train) - 1, min(max_train, len(train))).round().astype(np.int64))
    seen = np.concatenate([np.zeros(0, np.int64), *targets(train, picked)])
    held = np.concatenate([np.zeros(0, np.int64), *targets(heldout, np.arange(len(heldout)))])
    size = max(int(train.meta.get("tokenizer", {}).get("vocab_size") or 0), int(seen.max(initial=-1)) + 1,
               int(held.max(initial=-1)) + 1)
    counts = np.bincount(seen, minlength=size).astype(np.float64)
    probability = (counts + 0.5) / (counts + 0.5).sum()
    return {"acc": float(np.mean(held == int(np.argmax(counts)))) if held.size else float("nan"),
            "loss": float(-np.log(probability[held]).mean()) if held.size else float("nan"),
            "train_targets": int(seen.size), "heldout_targets": int(held.size)}


def segment_lengths(data: str | Path, indices: np.ndarray | None = None,
                    chunk: int = 65536) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(len A, len B, label, sentence task) of the instances at `indices` (all by default) of a built SOP or NSP
    data directory, from its records alone: an instance is ``[CLS] A [SEP] B [SEP]`` and its `type_boundary` the
    first position of B, so len A = type_boundary - 2 and len B = length - type_boundary - 1 (truncated segments,
    as the model sees them). A UserError for MLM-only data (no second segment, no label) and damaged records."""
    from albertlm.data.loader import PretrainingDataset
    from albertlm.errors import UserError

    dataset = PretrainingDataset(data)
    task = str(dataset.meta.get("sentence_task"))
    if task not in ("sop", "nsp"):
        raise UserError(f"{data} is {task!r} data: no second segment and no sentence label to predict from lengths")
    if indices is None:
        indices = np.arange(len(dataset), dtype=np.int64)
    parts = [np.stack(_pair_lengths(dataset, np.asarray(indices[start:start + chunk], dtype=np.int64), data))
             .astype(np.int32) for start in range(0, len(indices), chunk)]
    a, b, label = np.concatenate([np.zeros((3, 0), np.int32), *parts], axis=1).astype(np.int64)
    return a, b, label, task


def _pair_lengths(dataset, rows: np.ndarray, data: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(len A, len B, label) of the instances at `rows` of an open SOP / NSP dataset (`segment_lengths`)."""
    from albertlm.errors import UserError

    records = dataset.records(rows)
    dataset.check_records(records, rows)       # a damaged record is the loader's one-line error
    boundary, length = records["type_boundary"].astype(np.int64), records["length"].astype(np.int64)
    a, b, label = boundary - 2, length - boundary - 1, records["label"].astype(np.int64)
    if np.any((a < 1) | (b < 1) | ((label != 0) & (label != 1))):
        raise UserError(f"{data}: instances without two segments and a 0/1 label in "
                        f"{dataset.meta.get('sentence_task')} data; rebuild it")
    return a, b, label


def length_baseline(train_data: str | Path | None, heldout_data: str | Path, max_train: int = 1_000_000,
                    min_count: int = 20, share_bins: int = 20) -> dict:
    """How well the sentence label of held-out SOP or NSP pairs is predicted from the lengths of their two
    segments alone (`segment_lengths`), never reading a token. Labels (data/instances.py): SOP 1 = swapped
    (B came before A in the text), 0 = in order; NSP 1 = B from another document ("random next"), 0 = B
    follows A. Two predictors:

    - `rule`: label 1 when A is longer than B (in tokens), else 0 (equal lengths: 0); nothing fitted;
    - `fitted`: the best length-only predictor learned on `train_data` (the same task's training data; an
      evenly spaced, so deterministic, sample of at most `max_train` of its instances): P(label = 1 | len A,
      len B) tabulated per (len A, len B) cell, label 1 where it is above 0.5. A cell with fewer than
      `min_count` training pairs backs off to the pairs whose share len A / (len A + len B) falls in the same of
      `share_bins` equal bins, and a bin as thin to the training data's overall label-1 rate. Its table is at
      most T x T counts (T the sequence length), so time and memory are bounded by `max_train` and T (the
      lengths and labels of 1M pairs: 24 MB, read in chunks; about 4 s on a CPU core). None (and no training
      read) when `train_data` is None. Its held-out accuracy moves by about a point with the training sample
      (cells near 0.5 flip): within the interval it is given with.

    Returns {task, heldout_instances, heldout_label1 (the held-out share of label 1), rule_acc, rule_ci95,
    fitted_acc, fitted_ci95, fitted_backed_off (the share of held-out pairs whose cell was thin), train_instances
    (those fitted on), fitted_train_acc (its accuracy on them: what lengths tell a model about the labels it is
    trained on), min_count, share_bins}; the intervals are normal-approximation 95% intervals of a
    binomial proportion over the held-out pairs. Accuracies are None where there is nothing to score."""
    from albertlm.errors import UserError

    a, b, label, task = segment_lengths(heldout_data)
    n = int(label.size)

    def interval(acc: float) -> list[float]:
        half = 1.96 * float(np.sqrt(acc * (1 - acc) / n))
        return [max(0.0, acc - half), min(1.0, acc + half)]

    rule = float(np.mean((a > b) == (label == 1))) if n else None
    out = {"task": task, "heldout_instances": n, "heldout_label1": float(label.mean()) if n else None,
           "rule_acc": rule, "rule_ci95": interval(rule) if n else None, "fitted_acc": None, "fitted_ci95": None,
           "fitted_backed_off": None, "train_instances": 0, "fitted_train_acc": None, "min_count": min_count,
           "share_bins": share_bins}
    if train_data is None or not n:
        return out
    from albertlm.data.loader import PretrainingDataset

    size = len(PretrainingDataset(train_data))
    picked = np.unique(np.linspace(0, size - 1, min(max_train, size)).round().astype(np.int64)) if size else \
        np.zeros(0, np.int64)
    ta, tb, ty, train_task = segment_lengths(train_data, picked)
    if train_task != task:
        raise UserError(f"{train_data} is {train_task} data and {heldout_data} {task} data: the length baseline "
                        "is fitted on the held-out data's own task")
    if not ty.size:
        return out
    width = int(max(ta.max(), tb.max(), a.max(initial=0), b.max(initial=0))) + 1
    cells = np.bincount(ta * width + tb, minlength=width * width)
    ones = np.bincount(ta * width + tb, weights=ty, minlength=width * width)

    def share_bin(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.minimum((x * share_bins) // (x + y), share_bins - 1)

    bins = np.bincount(share_bin(ta, tb), minlength=share_bins)
    bin_ones = np.bincount(share_bin(ta, tb), weights=ty, minlength=share_bins)
    overall = float(ty.mean())
    by_bin = np.where(bins >= min_count, bin_ones / np.maximum(bins, 1), overall)

    def predicted(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cell = x * width + y
        thin = cells[cell] < min_count
        probability = np.where(thin, by_bin[share_bin(x, y)], ones[cell] / np.maximum(cells[cell], 1))
        return (probability > 0.5).astype(np.int64), thin

    guess, thin = predicted(a, b)
    fitted = float(np.mean(guess == label))
    out.update(fitted_acc=fitted, fitted_ci95=interval(fitted), fitted_backed_off=float(thin.mean()),
               train_instances=int(ty.size), fitted_train_acc=float(np.mean(predicted(ta, tb)[0] == ty)))
    return out


def unmasked_batches(data: str | Path, batch_size: int, max_batches: int):
    """Held-out sequences with the masked tokens put back (the original text), as model inputs."""
    from albertlm.data.loader import collate
    from albertlm.training.pretrain import open_dataset

    dataset = open_dataset(data)
    count = min(max_batches, -(-len(dataset) // batch_size)) if max_batches else -(-len(dataset) // batch_size)
    for j in range(count):
        batch = collate([dataset[i] for i in range(j * batch_size, min(len(dataset), (j + 1) * batch_size))])
        ids = batch["input_ids"].clone()
        keep = batch["masked_lm_weights"] > 0
        rows = torch.arange(ids.shape[0])[:, None].expand_as(keep)
        ids[rows[keep], batch["masked_lm_positions"][keep]] = batch["masked_lm_ids"][keep]
        yield {"input_ids": ids, "attention_mask": batch["attention_mask"], "token_type_ids": batch["token_type_ids"]}


@torch.no_grad()
def layer_transitions(model: nn.Module, batches) -> dict[str, list[float]]:
    """Per layer l (1..L): mean over real tokens of ||out_l - in_l||_2 and cos(in_l, out_l), where in_l
    is the token vector entering layer l (the projected embeddings for l = 1) and out_l the one leaving it.
    `model` is an AlbertModel or a model holding one as `.albert`."""
    from albertlm.model.albert import Encoder

    base = getattr(model, "albert", model)
    encoder = next(m for m in base.modules() if isinstance(m, Encoder))
    was_training = model.training
    model.eval()
    sums: list[np.ndarray] = []
    captured: list[tuple[torch.Tensor, torch.Tensor]] = []
    inner = encoder.run_block

    def recording_block(attention, ffn, x, mask, rows=None, packing=None):  # both None here: (B, T, H) in and out
        y = inner(attention, ffn, x, mask, rows, packing)
        captured.append((x, y))
        return y

    encoder.run_block = recording_block
    try:
        tokens = 0.0
        for batch in batches:
            captured.clear()
            device = next(base.parameters()).device
            batch = {k: v.to(device) for k, v in batch.items()}
            base(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            real = batch["attention_mask"].bool()                       # (B, T)
            per_layer = []
            for x, y in captured:
                x, y = x.float()[real], y.float()[real]                 # (N, H)
                per_layer.append([(y - x).norm(dim=-1).sum().item(),
                                  torch.nn.functional.cosine_similarity(x, y, dim=-1).sum().item()])
            sums.append(np.asarray(per_layer))
            tokens += float(real.sum())
    finally:
        encoder.run_block = inner
        model.train(was_training)
    total = np.sum(sums, axis=0) / max(tokens, 1.0)                     # (L, 2)
    return {"l2": total[:, 0].tolist(), "cosine": total[:, 1].tolist()}


def transitions_of_checkpoint(checkpoint: str | Path, data: str | Path, batch_size: int = 64,
                              max_batches: int = 8, device: str = "cpu") -> dict[str, list[float]]:
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.io import resolve_checkpoint
    from albertlm.training.distributed import pick_device

    model = AlbertForPreTraining.from_pretrained(resolve_checkpoint(checkpoint)).to(pick_device(device))
    return layer_transitions(model, unmasked_batches(data, batch_size, max_batches))
