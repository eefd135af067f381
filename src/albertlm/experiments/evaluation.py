"""How every pretrained model is measured, the same way for all runs of a suite:

- intrinsic: held-out MLM accuracy, and accuracy on BOTH sentence-order (SOP) and next-sentence (NSP)
  held-out data, whatever task the model was trained on (the paper's Table 5 cross-evaluation);
- Figure 1: for each layer, the L2 distance and the cosine similarity between its input and output
  embeddings (token vectors), averaged over the real tokens of held-out sequences;
- parameters: embeddings + encoder + pooler, not the MLM / SOP heads (the paper's shared rows count so; its
  not-shared rows leave out the pooler, H² + H: docs/model.md "Parameter counts");
- the unigram baseline of MLM accuracy: what predicting each masked token from token frequencies alone scores
  on the same held-out slots (a pretrained model near it has learned little beyond frequencies).
"""
from __future__ import annotations

from pathlib import Path

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
              precision: str = "fp32") -> dict[str, float]:
    """{mlm_acc, mlm_loss, sop_acc, nsp_acc} of a checkpoint: MLM on the held-out SOP data, each sentence
    task on its own held-out data (the SOP head answers "is this pair in order / consecutive?" on both)."""
    from albertlm.training.evaluate import evaluate_checkpoint

    out: dict[str, float] = {}
    for task, data in heldout.items():
        metrics = evaluate_checkpoint(checkpoint, data, batch_size=batch_size, precision=precision, device=device)
        out[f"{task}_acc"] = metrics.get(f"{task}_acc", float("nan"))    # evaluate names them by the data's task
        out[f"{task}_loss"] = metrics.get(f"{task}_loss", float("nan"))
        if task == "sop":
            out["mlm_acc"], out["mlm_loss"] = metrics["mlm_acc"], metrics["mlm_loss"]
    return out


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
